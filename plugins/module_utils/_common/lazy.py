# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""A module imported at the first use of one of its names, for the collection's filter plugins.

Ansible resolves a collection's filter by loading every filter file of the collection, in the worker process
of each task that uses one, and compiles collection code from source each time (no bytecode cache). A filter
file that imported its module_utils at the top made every such task import (and compile) the module_utils of
all the filters: about 2 s of a no-op cluster.yml. The filter files name their module_utils through this, under
TYPE_CHECKING for mypy, so that a task imports only what the filter it calls uses.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any


class LazyModule:
    """Stands for the module `name` and imports it when one of its attributes is first read."""

    def __init__(self, name: str) -> None:
        self._lazy_name = name
        self._lazy_module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        # Reached only for names not set in __init__: the module's own.
        if self._lazy_module is None:
            self._lazy_module = importlib.import_module(self._lazy_name)
        return getattr(self._lazy_module, attr)

    def __repr__(self) -> str:
        return f"<LazyModule {self._lazy_name}{'' if self._lazy_module is None else ' (imported)'}>"
