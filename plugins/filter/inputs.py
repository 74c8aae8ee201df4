# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common import inputs
else:
    inputs = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils._common.inputs")


def input_errors(checks: Any) -> list[str]:
    """The messages of the values that are not of their kind (module_utils/_common/inputs.py)."""
    return inputs.input_errors(checks)


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"input_errors": input_errors}
