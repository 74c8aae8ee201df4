# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common import run_report as report
else:
    report = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils._common.run_report")


def run_report(hosts: list[str], hostvars: Any, validation: Any = None, failed: list[str] | None = None) -> dict[str, Any]:
    return report.summary(list(hosts), hostvars, validation, list(failed or []))


class FilterModule:
    """The collection's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"run_report": run_report}
