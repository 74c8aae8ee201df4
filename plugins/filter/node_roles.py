# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host roles' decisions on the controller (module_utils/node/role_rules.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import role_rules
else:
    role_rules = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils.node.role_rules")


def toolkit_installed(packages: Any, package: str, version: Any) -> bool:
    return role_rules.toolkit_installed(packages, package, str(version or ""))


def runtime_load_errors(lines: Any, runtime: str, handler: Any) -> list[str]:
    return role_rules.runtime_load_errors(lines, runtime, str(handler or ""))


def fabric_problems(gpus: Any, active: Any, service: Any) -> list[str]:
    return role_rules.fabric_problems(gpus, str(active), str(service))


def driver_changes(plan: Any, installed: Any, hold: Any) -> bool:
    return role_rules.driver_changes(plan, installed, bool(hold))


class FilterModule:
    """The collection's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"toolkit_installed": toolkit_installed, "runtime_load_errors": runtime_load_errors,
                "fabric_problems": fabric_problems, "driver_changes": driver_changes}
