# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node labels GPU Feature Discovery sets, from a node's gpu_info and the cluster's policy (doc: gfd_labels.yml)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import gfd
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd import Sharing
else:
    gfd = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.gfd")


def gfd_labels(gpu_info: GpuInfo, sharing: Sharing | None = None, mig_strategy: str = "none") -> dict[str, str]:
    if not isinstance(gpu_info, Mapping) or not isinstance(gpu_info.get("pci"), Mapping) or not isinstance(gpu_info.get("nvml"), Mapping):
        raise AnsibleFilterError("gfd_labels: the input is not the gpu_info structure gpuops.nvidia.gpu_info returns "
                                 "(a mapping with pci and nvml)")
    if sharing is not None and not isinstance(sharing, Mapping):
        raise AnsibleFilterError(f"gfd_labels: sharing {sharing!r} is not a mapping of strategy, replicas, rename_by_default")
    try:
        labels, _source = gfd.node_gfd_labels(gpu_info, sharing, mig_strategy)
    except ValueError as exc:
        raise AnsibleFilterError(f"gfd_labels: {exc}") from exc
    except KeyError as exc:
        raise AnsibleFilterError(f"gfd_labels: the input lacks {exc}, which gpuops.nvidia.gpu_info returns") from exc
    return labels


class FilterModule:
    """GPU Feature Discovery's labels."""

    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"gfd_labels": gfd_labels}
