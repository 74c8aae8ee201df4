# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""The structure gpu_info returns, declared once, tied to its schema version.

The module builds it (node/gpu_info.py from node/hardware.py and node/nvml.py), the host side reads
it (preflight, driver plan, CDI names) and the cluster side projects it (_common/slim.py). Every one
of them names these types, so mypy follows a key from where it is written to where it is read: a key
renamed here fails the type check at both ends instead of reading as 0 or None at run time.

A change to the structure's keys or types bumps SCHEMA_VERSION (and the Literal it is typed as).
Version 2: gpu_info reports hardware only; the GFD node labels (derived.labels, derived.labels_source)
moved to the cluster side.
Version 3: the fabric: network functions say whether they are NVLink5 switch management bridges
(pci.network[].switch_managed), each GPU its NVML fabric state (nvml.gpus[].fabric), the loaded
module its version (node.modules.version), and
derived.fabric_manager names what the node runs (mode: none, fabricmanager, nvlsm, imex).
Version 4: the node's RDMA stack (node.rdma): the RDMA and GPUDirect kernel modules loaded, and a host
MLNX_OFED or DOCA-OFED (ofed_info, /usr/src/ofa_kernel).
Version 5: the node's operating system as os-release names it (node.os: id, version_id), which the driver
container's image tag and its DaemonSets per OS are made of.
Version 6: a driver from NVIDIA's .run installer (node.runfile: its uninstaller's path), which packages must not be
installed over.
Version 7: the container runtimes installed (node.container_runtimes), which the container_toolkit role configures:
the preflight blocks where it would refuse. A reader of facts cached before (a fact cache) finds no such key.

Python 3.10 is the oldest target (Ubuntu 22.04): no typing.NotRequired, so optional parts are
`X | None` values of keys that are always present.
"""

from __future__ import annotations

from typing import Final, Literal, TypedDict

SchemaVersion = Literal[7]
SCHEMA_VERSION: Final = 7

NvmlStatus = Literal["ok", "binding_missing", "library_not_found", "driver_not_loaded", "error"]
SecureBoot = Literal["enabled", "disabled", "not_efi", "unknown"]
ModuleFlavour = Literal["open", "proprietary"]


# ---------------------------------------------------------------------------------------------------
# pci: sysfs, no driver needed
# ---------------------------------------------------------------------------------------------------

# Functional form: `class` is a key. pylint reads neither `X | None` inside it (a valid runtime union from
# Python 3.10) nor classes that extend it; mypy checks both.
# pylint: disable=unsupported-binary-operation
PciDevice = TypedDict("PciDevice", {
    "bus_id": str,  # sysfs form, '0000:18:00.0'
    "vendor_id": str,  # '10de' or '15b3'
    "device_id": str | None,
    "subsystem_vendor_id": str | None,
    "subsystem_device_id": str | None,
    "class": str,  # base class and subclass, '0302'
    "numa_node": int | None,
    "driver": str | None,  # the bound kernel driver
})
# pylint: enable=unsupported-binary-operation


class GpuIdentity(TypedDict):
    """What the collection's device table knows of a GPU's device id."""

    architecture: str  # 'unknown' for an id the table does not list
    name: str | None
    compute_capability: str | None
    grace: bool


class PciGpu(PciDevice, GpuIdentity):  # pylint: disable=inherit-non-class,inconsistent-mro
    """A GPU (class 0300 or 0302)."""


class PciSwitch(PciDevice):  # pylint: disable=inherit-non-class
    """An NVSwitch on the PCI bus."""

    name: str


class PciNic(PciDevice):  # pylint: disable=inherit-non-class
    """An NVIDIA (Mellanox) networking device."""

    family: str
    # Its VPD carries SW_MNG: a ConnectX bridge function through which an NVLink5 board's NVSwitches are managed.
    switch_managed: bool


class PciFacts(TypedDict):
    gpus: list[PciGpu]
    nvswitches: list[PciSwitch]
    network: list[PciNic]


# ---------------------------------------------------------------------------------------------------
# node: kernel state
# ---------------------------------------------------------------------------------------------------

class ModulesState(TypedDict):
    nouveau: bool
    nvidia: list[str]  # the NVIDIA kernel modules loaded
    flavour: ModuleFlavour | None  # of the loaded nvidia module; None when none is loaded
    version: str | None  # of the loaded nvidia module (proc/driver/nvidia/version); None when none is loaded


class KernelState(TypedDict):
    running: str | None
    installed: list[str]
    headers_installed: bool


class OfedState(TypedDict):
    present: bool  # a host MLNX_OFED or DOCA-OFED: ofed_info or /usr/src/ofa_kernel
    version: str | None  # as `ofed_info -s` prints it, without the colon ('OFED-internal-24.10-1.1.4'); None when unknown
    kernel_source: bool  # /usr/src/ofa_kernel: what nvidia-peermem builds against


class RdmaState(TypedDict):
    modules: list[str]  # the RDMA and GPUDirect modules loaded (mlx5_core, ib_core, nvidia_peermem, nvidia_fs, gdrdrv ...)
    ofed: OfedState


class OsRelease(TypedDict):
    """/etc/os-release's ID and VERSION_ID ('ubuntu', '24.04'; 'debian', '12'); None where the file lacks them."""

    id: str | None
    version_id: str | None


class NodeState(TypedDict):
    modules: ModulesState
    secure_boot: SecureBoot
    kernel: KernelState
    image_build: bool
    rdma: RdmaState
    os: OsRelease
    # /usr/bin/nvidia-uninstall where NVIDIA's .run installer put a driver on the node (no package ships it), else None.
    runfile: str | None
    # containerd and crio where their executables are installed (hardware.container_runtimes).
    container_runtimes: list[str]


# ---------------------------------------------------------------------------------------------------
# nvml: the driver's view
# ---------------------------------------------------------------------------------------------------

class Engines(TypedDict):
    copy: int
    decoder: int
    encoder: int
    jpeg: int
    ofa: int


class MigProfile(TypedDict):
    """A GPU-instance profile the GPU supports."""

    profile: int  # NVML's profile enum
    id: int
    name: str | None  # '1g.10gb'; None only when NVML reports no memory for the GPU
    instances: int
    slices: int
    memory_mib: int
    multiprocessors: int
    engines: Engines


class MigDevice(TypedDict):
    """A MIG device that exists on a GPU in MIG mode."""

    index: int
    uuid: str
    profile: str | None  # as GFD spells it; None when the GPU instance's profile is not in the GPU's table
    gpu_instance_id: int
    compute_instance_id: int
    memory_mib: int
    multiprocessors: int
    slices_gi: int
    slices_ci: int
    engines: Engines


class MigState(TypedDict):
    capable: bool
    current: bool
    pending: bool
    profiles: list[MigProfile]
    devices: list[MigDevice]


FabricState = Literal["not_supported", "not_started", "in_progress", "completed", "unknown"]


class GpuFabric(TypedDict):
    """nvmlDeviceGetGpuFabricInfo: whether the GPU has joined its NVLink fabric."""

    state: FabricState  # not_supported: no fabric (PCIe, no NVSwitch) or an NVML without the call
    status: str | None  # once completed: 'success' or NVML's error string
    clique_id: int | None


class NvmlGpu(TypedDict):
    index: int
    uuid: str
    name: str
    bus_id: str  # sysfs form, as in pci
    memory_mib: int
    compute_capability: str
    persistence_mode: bool
    mig: MigState
    fabric: GpuFabric


class NvmlFacts(TypedDict):
    status: NvmlStatus
    error: str | None
    library: str
    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None
    gpus: list[NvmlGpu]


# ---------------------------------------------------------------------------------------------------
# summary and derived
# ---------------------------------------------------------------------------------------------------

class SummaryFacts(TypedDict):
    gpu_count: int
    nvswitch_count: int
    network_count: int
    architectures: list[str]
    driver_loaded: bool
    mig_capable: bool | None  # None when NVML did not answer


class KernelModuleType(TypedDict):
    type: ModuleFlavour | None
    reason: str | None
    error: str | None


FabricMode = Literal["none", "fabricmanager", "nvlsm", "imex"]


class FabricManager(TypedDict):
    required: bool  # Fabric Manager must run (modes fabricmanager and nvlsm)
    reason: str
    nvlink5: bool
    # What the node runs for its NVLink fabric: nothing, Fabric Manager (NVLink4 and older), Fabric Manager
    # with the NVLink Subnet Manager (NVLink5), or IMEX (GB200/GB300 NVL compute trays).
    mode: FabricMode


class DerivedFacts(TypedDict):
    kernel_module_type: KernelModuleType
    fabric_manager: FabricManager


class GpuInfo(TypedDict):
    """gpu_info's return value (the gpuops_gpu_info fact)."""

    schema_version: SchemaVersion
    root: str
    pci: PciFacts
    node: NodeState
    nvml: NvmlFacts
    summary: SummaryFacts
    derived: DerivedFacts
