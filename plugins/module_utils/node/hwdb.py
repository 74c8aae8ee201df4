# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A curated table of NVIDIA PCI device ids: architecture, marketing name, compute capability.

Used when no driver is loaded (NVML cannot answer), to choose kernel modules and to plan. An id that
is not in the table is reported as unknown; nothing is guessed from id ranges, which overlap between
generations. Names are the ones NVML reports for the part, so labels computed from the table match
the labels GPU Feature Discovery computes once the driver runs.
"""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuIdentity

ARCHITECTURES = ("maxwell", "pascal", "volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell")

# Open GPU kernel modules support Turing and later; Grace Hopper and Blackwell support only them.
OPEN_CAPABLE = frozenset(("turing", "ampere", "ada-lovelace", "hopper", "blackwell"))
OPEN_ONLY = frozenset(("blackwell",))

# device id (lower-case hex) -> (architecture, NVML name, compute capability, flags)
# flags: "grace" for Grace Hopper / Grace Blackwell superchips (open modules only, NVLink-C2C).
GPUS: dict[str, tuple[str, str, str, tuple[str, ...]]] = {
    # Maxwell
    "13ba": ("maxwell", "Quadro K2200", "5.0", ()),
    "13bd": ("maxwell", "Tesla M10", "5.0", ()),
    "13f2": ("maxwell", "Tesla M60", "5.2", ()),
    "17f0": ("maxwell", "Quadro M6000", "5.2", ()),
    "17fd": ("maxwell", "Tesla M40 24GB", "5.2", ()),
    # Pascal
    "15f0": ("pascal", "Quadro GP100", "6.0", ()),
    "15f7": ("pascal", "Tesla P100-PCIE-12GB", "6.0", ()),
    "15f8": ("pascal", "Tesla P100-PCIE-16GB", "6.0", ()),
    "15f9": ("pascal", "Tesla P100-SXM2-16GB", "6.0", ()),
    "1b30": ("pascal", "Quadro P6000", "6.1", ()),
    "1b38": ("pascal", "Tesla P40", "6.1", ()),
    "1bb3": ("pascal", "Tesla P4", "6.1", ()),
    # Volta
    "1db1": ("volta", "Tesla V100-SXM2-16GB", "7.0", ()),
    "1db4": ("volta", "Tesla V100-PCIE-16GB", "7.0", ()),
    "1db5": ("volta", "Tesla V100-SXM2-32GB", "7.0", ()),
    "1db6": ("volta", "Tesla V100-PCIE-32GB", "7.0", ()),
    "1db8": ("volta", "Tesla V100-SXM3-32GB", "7.0", ()),
    "1dba": ("volta", "Quadro GV100", "7.0", ()),
    "1df6": ("volta", "Tesla V100S-PCIE-32GB", "7.0", ()),
    # Turing
    "1e30": ("turing", "Quadro RTX 6000", "7.5", ()),
    "1e78": ("turing", "Quadro RTX 6000", "7.5", ()),
    "1eb8": ("turing", "Tesla T4", "7.5", ()),
    # Ampere
    "20b0": ("ampere", "NVIDIA A100-SXM4-40GB", "8.0", ()),
    "20b2": ("ampere", "NVIDIA A100-SXM4-80GB", "8.0", ()),
    "20b5": ("ampere", "NVIDIA A100 80GB PCIe", "8.0", ()),
    "20b7": ("ampere", "NVIDIA A30", "8.0", ()),
    "20f1": ("ampere", "NVIDIA A100-PCIE-40GB", "8.0", ()),
    "2230": ("ampere", "NVIDIA RTX A6000", "8.6", ()),
    "2235": ("ampere", "NVIDIA A40", "8.6", ()),
    "2236": ("ampere", "NVIDIA A10", "8.6", ()),
    "2237": ("ampere", "NVIDIA A10G", "8.6", ()),
    "25b6": ("ampere", "NVIDIA A16", "8.6", ()),
    # Ada Lovelace
    "26b1": ("ada-lovelace", "NVIDIA RTX 6000 Ada Generation", "8.9", ()),
    "26b5": ("ada-lovelace", "NVIDIA L40", "8.9", ()),
    "26b9": ("ada-lovelace", "NVIDIA L40S", "8.9", ()),
    "27b8": ("ada-lovelace", "NVIDIA L4", "8.9", ()),
    # Hopper
    "2321": ("hopper", "NVIDIA H100 NVL", "9.0", ()),
    "2330": ("hopper", "NVIDIA H100 80GB HBM3", "9.0", ()),
    "2331": ("hopper", "NVIDIA H100 PCIe", "9.0", ()),
    "2335": ("hopper", "NVIDIA H200", "9.0", ()),
    "233b": ("hopper", "NVIDIA H200 NVL", "9.0", ()),
    "2342": ("hopper", "NVIDIA GH200 480GB", "9.0", ("grace",)),
    "2348": ("hopper", "NVIDIA GH200 144G HBM3e", "9.0", ("grace",)),
    # Blackwell
    "2901": ("blackwell", "NVIDIA B200", "10.0", ()),
    "2941": ("blackwell", "NVIDIA GB200", "10.0", ("grace",)),
    "2bb1": ("blackwell", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", ()),
    "2bb5": ("blackwell", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0", ()),
}

# NVSwitch ASICs: device id -> generation name.
NVSWITCHES: dict[str, str] = {
    "1ac1": "GV100 NVSwitch",
    "1ac2": "GV100 NVSwitch",
    "1af1": "GA100 NVSwitch",
    "22a3": "GH100 NVSwitch",
}

# Mellanox / NVIDIA networking: device id -> family.
NICS: dict[str, str] = {
    "101b": "ConnectX-6",
    "101d": "ConnectX-6 Dx",
    "101f": "ConnectX-6 Lx",
    "1021": "ConnectX-7",
    "1023": "ConnectX-8",
    "a2d6": "BlueField-2",
    "a2dc": "BlueField-3",
}


def lookup_gpu(device_id: str) -> GpuIdentity:
    """What the table knows of a GPU device id; architecture 'unknown' when it knows nothing."""
    entry = GPUS.get(device_id.lower())
    if entry is None:
        return {"architecture": "unknown", "name": None, "compute_capability": None, "grace": False}
    arch, name, cc, flags = entry
    return {"architecture": arch, "name": name, "compute_capability": cc, "grace": "grace" in flags}
