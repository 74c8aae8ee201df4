# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import preflight as node_preflight
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.preflight import Settings
else:
    node_preflight = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils.node.preflight")


def preflight(gpu_info: GpuInfo, distribution: str, major_version: str, settings: Settings, host: str) -> dict[str, Any]:
    try:
        found = node_preflight.findings(gpu_info, distribution, str(major_version), settings)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    return {
        "findings": found,
        "blockers": sum(1 for f in found if f["severity"] == "blocker"),
        "report": node_preflight.report_lines(host, gpu_info, found),
    }


class FilterModule:
    """The collection's filters."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"preflight": preflight}
