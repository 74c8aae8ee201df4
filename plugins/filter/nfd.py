# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import yaml
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why).
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import nfd
else:
    nfd = LazyModule("ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.nfd")

MANAGED_BY = ("app.kubernetes.io/managed-by", "gpuops.nvidia")


def _ours(deployment: dict) -> bool:
    return ((deployment.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY[0]) == MANAGED_BY[1]


def nfd_masters(deployments: list, ours: bool = False) -> list:
    """The Deployments that run nfd-master: the collection's own (ours=True) or the others."""
    return [d for d in deployments or [] if nfd.is_master(d) and _ours(d) == ours]


def nfd_blockers(deployments: list, configmaps: list, namespace_labels: dict) -> list:
    """Why the nfd-masters found (not the collection's) would drop GFD's labels; configmaps are the ConfigMaps of
    their namespaces, namespace_labels the labels of GFD's namespace."""
    by_ns: dict[str, dict[str, dict]] = {}
    for cm in configmaps or []:
        meta = cm.get("metadata") or {}
        by_ns.setdefault(str(meta.get("namespace", "")), {})[str(meta.get("name", ""))] = cm.get("data") or {}
    reasons: list[str] = []
    for dep in nfd_masters(deployments):
        found = nfd.master(dep, by_ns.get(str((dep.get("metadata") or {}).get("namespace", "")), {}), yaml.safe_load)
        reasons += nfd.drops_gfd_labels(found, dict(namespace_labels or {}))
    return reasons


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {"nfd_masters": nfd_masters, "nfd_blockers": nfd_blockers}
