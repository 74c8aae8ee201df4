# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Assemble gpu_info's one structure from PCI, node state and NVML, and derive the host-side decisions.

The structure is declared in module_utils/_common/facts.py. It is hardware only: the GFD node labels,
which depend on cluster policy (sharing, MIG strategy), are computed on the cluster side (cluster/gfd.py).
"""

from __future__ import annotations

import os

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import SCHEMA_VERSION, GpuInfo
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.derive import fabric_manager_required, recommend_kernel_module_type
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import node_state, read_pci
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.nvml import read_nvml


def collect(root: str, nvml_library: str | None) -> GpuInfo:
    """Read the node once and return gpu_info's structure. Raises ValueError for bad input."""
    if not os.path.isdir(root):
        raise ValueError(f"root {root!r} is not a directory: give the directory holding sys/ and proc/ ('/' on a server)")
    if not os.path.isdir(os.path.join(root, "sys")):
        raise ValueError(f"root {root!r} has no sys/ directory to read PCI devices from")
    if nvml_library and not os.path.exists(nvml_library):
        raise ValueError(f"nvml_library {nvml_library!r} does not exist")

    pci = read_pci(root)
    node = node_state(root)
    nvml = read_nvml(nvml_library)
    mig_capable = any(g["mig"]["capable"] for g in nvml["gpus"]) if nvml["gpus"] else None
    return {
        "schema_version": SCHEMA_VERSION,
        "root": root,
        "pci": pci,
        "node": node,
        "nvml": nvml,
        "summary": {
            "gpu_count": len(pci["gpus"]),
            "nvswitch_count": len(pci["nvswitches"]),
            "network_count": len(pci["network"]),
            "architectures": sorted({g["architecture"] for g in pci["gpus"]}),
            "driver_loaded": nvml["status"] == "ok",
            "mig_capable": mig_capable,
        },
        "derived": {
            "kernel_module_type": recommend_kernel_module_type(pci["gpus"]),
            "fabric_manager": fabric_manager_required(pci),
        },
    }
