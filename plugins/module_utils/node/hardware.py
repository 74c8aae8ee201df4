# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read a node's NVIDIA hardware and kernel state from sysfs and procfs, with no driver needed.

Every function takes the root under which `sys/` and `proc/` are read ("/" on a server), so the
same code reads a server, an image being built, or the lab's simulated hardware tree.
"""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import (
    KernelState,
    ModuleFlavour,
    NodeState,
    OfedState,
    OsRelease,
    PciDevice,
    PciFacts,
    PciGpu,
    PciNic,
    PciSwitch,
    RdmaState,
    SecureBoot,
)
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.pci import CLASS_BRIDGE_OTHER, GPU_CLASSES, MELLANOX_VENDOR, NVIDIA_VENDOR
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hwdb import NICS, NVSWITCHES, lookup_gpu

SECURE_BOOT_VAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
NVIDIA_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem", "nvidia_fs")
# The RDMA core and ConnectX modules, and the GPUDirect ones (RDMA, Storage, GDRCopy) beside the driver.
RDMA_MODULES = ("mlx5_core", "mlx5_ib", "ib_core", "ib_uverbs", "ib_umad", "rdma_ucm", "nvidia_peermem", "nvidia_fs", "gdrdrv")
# `ofed_info -s` prints its release as the script holds it: 'MLNX_OFED_LINUX-5.8-1.0.1.1:', 'OFED-internal-24.10-1.1.4:'.
_OFED_RELEASE = re.compile(r"\b((?:MLNX_OFED_LINUX|MLNX_EN|OFED-internal|DOCA-OFED|OFED)-\d[\w.-]*?):")


def _read(path: str) -> str | None:
    """A sysfs or procfs value, stripped; None when the file is missing or cannot be read (a sysfs attribute
    can fail with EIO or EINVAL on a device in a bad state: that value is unknown, not a reason to stop)."""
    try:
        text = read_text(path, errors="replace")
    except OSError:
        return None
    return None if text is None else text.strip()


def _hex(value: str | None) -> str | None:
    """'0x10de\\n' -> '10de'."""
    if not value:
        return None
    value = value.lower()
    return value[2:] if value.startswith("0x") else value


def read_pci_device(device_dir: str) -> PciDevice | None:
    """One PCI function from its sysfs directory; None when it is not NVIDIA or Mellanox."""
    vendor = _hex(_read(os.path.join(device_dir, "vendor")))
    if vendor is None or vendor not in (NVIDIA_VENDOR, MELLANOX_VENDOR):
        return None
    pci_class = (_hex(_read(os.path.join(device_dir, "class"))) or "").rjust(6, "0")[:4]
    numa = _read(os.path.join(device_dir, "numa_node"))
    try:
        numa_node: int | None = int(numa) if numa is not None else None
    except ValueError:
        numa_node = None
    if numa_node is not None and numa_node < 0:
        numa_node = None
    driver_link = os.path.join(device_dir, "driver")
    driver = os.path.basename(os.readlink(driver_link)) if os.path.islink(driver_link) else None
    return {
        "bus_id": os.path.basename(device_dir),
        "vendor_id": vendor,
        "device_id": _hex(_read(os.path.join(device_dir, "device"))),
        "subsystem_vendor_id": _hex(_read(os.path.join(device_dir, "subsystem_vendor"))),
        "subsystem_device_id": _hex(_read(os.path.join(device_dir, "subsystem_device"))),
        "class": pci_class,
        "numa_node": numa_node,
        "driver": driver,
    }


def switch_managed(device_dir: str) -> bool:
    """Whether the function's VPD carries SW_MNG: the ConnectX bridge of an NVLink5 board's NVSwitches.

    The same test as NVIDIA's driver container and Fabric Manager start script (they grep the VPD for it).
    """
    try:
        with open(os.path.join(device_dir, "vpd"), "rb") as handle:
            return b"SW_MNG" in handle.read(65536)
    except OSError:
        return False


def read_pci(root: str) -> PciFacts:
    """NVIDIA GPUs, NVSwitches and NVIDIA networking devices on the PCI bus, in bus order."""
    devices_dir = os.path.join(root, "sys/bus/pci/devices")
    result: PciFacts = {"gpus": [], "nvswitches": [], "network": []}
    try:
        entries = sorted(os.listdir(devices_dir))
    except OSError:
        return result
    for entry in entries:
        dev = read_pci_device(os.path.join(devices_dir, entry))
        if dev is None:
            continue
        device_id = str(dev["device_id"])
        if dev["vendor_id"] == MELLANOX_VENDOR:
            nic: PciNic = {**dev, "family": NICS.get(device_id, "unknown"),
                           "switch_managed": switch_managed(os.path.join(devices_dir, entry))}
            result["network"].append(nic)
        elif dev["class"] in GPU_CLASSES:
            gpu: PciGpu = {**dev, **lookup_gpu(device_id)}
            result["gpus"].append(gpu)
        elif dev["class"] == CLASS_BRIDGE_OTHER or device_id in NVSWITCHES:
            switch: PciSwitch = {**dev, "name": NVSWITCHES.get(device_id, "unknown NVSwitch")}
            result["nvswitches"].append(switch)
        # Other NVIDIA functions (the GPU's HDMI audio, USB-C controller) are not reported.
    return result


def read_loaded_modules(root: str) -> list[str]:
    """Names of the loaded kernel modules, from proc/modules."""
    text = _read(os.path.join(root, "proc/modules")) or ""
    return [line.split()[0] for line in text.splitlines() if line.strip()]


def nvidia_module_version(root: str) -> str | None:
    """The loaded nvidia module's version ('580.178.04'), from proc/driver/nvidia/version; None when none is loaded.

    What Fabric Manager checks itself against: the kernel driver's version, which NVML's normally equals.
    """
    text = _read(os.path.join(root, "proc/driver/nvidia/version")) or ""
    found = re.search(r"\s(\d+\.\d+(?:\.\d+)?)\s", text.splitlines()[0] + " " if text else "")
    return found.group(1) if found else None


def nvidia_module_flavour(root: str) -> ModuleFlavour | None:
    """'open' or 'proprietary' for the loaded nvidia module, None when none is loaded."""
    text = _read(os.path.join(root, "proc/driver/nvidia/version"))
    if not text:
        return None
    return "open" if "Open Kernel Module" in text else "proprietary"


def secure_boot_state(root: str) -> SecureBoot:
    """'enabled', 'disabled', 'not_efi' (legacy boot), or 'unknown' (EFI, variable unreadable)."""
    if not os.path.isdir(os.path.join(root, "sys/firmware/efi")):
        return "not_efi"
    try:
        with open(os.path.join(root, SECURE_BOOT_VAR), "rb") as handle:
            data = handle.read()
    except OSError:
        return "unknown"
    # efivarfs: four bytes of attributes, then the value.
    if len(data) < 5:
        return "unknown"
    return "enabled" if data[4] == 1 else "disabled"


def kernel_state(root: str, filesystem_root: str = "/") -> KernelState:
    """The running kernel (procfs under root), the kernels installed, and whether the running one's headers are."""
    modules_dir = os.path.join(filesystem_root, "lib/modules")
    try:
        installed = sorted(os.listdir(modules_dir))
    except OSError:
        installed = []
    running = _read(os.path.join(root, "proc/sys/kernel/osrelease"))
    headers = bool(running) and os.path.isdir(os.path.join(modules_dir, str(running), "build"))
    return {"running": running, "installed": installed, "headers_installed": headers}


# The node modules' image_build option: auto detects an image build (is_image_build), true and false force the answer.
IMAGE_BUILD_ARG: dict[str, Any] = {"type": "str", "choices": ["auto", "true", "false"], "default": "auto"}


def image_build_setting(value: str) -> bool:
    """The image_build option's answer: detected for auto, else as given."""
    return is_image_build() if value == "auto" else value == "true"


def is_image_build(filesystem_root: str = "/") -> bool:
    """True in a chroot or an image build: / is not init's root, or systemd is not running."""
    try:
        own = os.stat(filesystem_root)
        init = os.stat("/proc/1/root/.")
    except OSError:
        # No procfs, or init's root cannot be read: not a booted host.
        return True
    if (own.st_dev, own.st_ino) != (init.st_dev, init.st_ino):
        return True
    return not os.path.isdir(os.path.join(filesystem_root, "run/systemd/system"))


def ofed_state(filesystem_root: str = "/") -> OfedState:
    """A host MLNX_OFED or DOCA-OFED: its ofed_info script (the release it prints, read from the script's text
    rather than run) and its kernel sources (/usr/src/ofa_kernel, what nvidia-peermem builds against)."""
    text = None
    for where in ("usr/bin/ofed_info", "usr/sbin/ofed_info"):
        try:
            with open(os.path.join(filesystem_root, where), "rb") as handle:
                text = handle.read(262144).decode("utf-8", "replace")
            break
        except OSError:
            continue
    found = _OFED_RELEASE.search(text or "")
    source = os.path.isdir(os.path.join(filesystem_root, "usr/src/ofa_kernel"))
    return {"present": text is not None or source, "version": found.group(1) if found else None, "kernel_source": source}


def rdma_state(loaded: list[str], filesystem_root: str = "/") -> RdmaState:
    """The RDMA and GPUDirect modules among those loaded, and a host OFED (on the file system)."""
    return {"modules": [m for m in RDMA_MODULES if m in loaded], "ofed": ofed_state(filesystem_root)}


def os_release(filesystem_root: str = "/") -> OsRelease:
    """ID and VERSION_ID of os-release (/etc/os-release, else /usr/lib/os-release), unquoted; None where missing."""
    text = read_text(os.path.join(filesystem_root, "etc/os-release")) or read_text(os.path.join(filesystem_root, "usr/lib/os-release")) or ""
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key in ("ID", "VERSION_ID"):
            values[key] = value.strip().strip("\"'")
    return {"id": values.get("ID") or None, "version_id": values.get("VERSION_ID") or None}


# NVIDIA's .run installer leaves its uninstaller here; no distribution or CUDA repository package ships it.
RUNFILE_UNINSTALLER = "usr/bin/nvidia-uninstall"


def runfile_driver(filesystem_root: str = "/") -> str | None:
    """The .run installer's uninstaller when a runfile driver is installed, else None."""
    path = os.path.join(filesystem_root, RUNFILE_UNINSTALLER)
    return path if os.path.lexists(path) else None


# The container runtimes the container_toolkit role configures (container_runtime_run looks each up with Ansible's
# get_bin_path: PATH, then the sbin directories, as container_runtimes below).
CONTAINER_RUNTIMES = ("containerd", "crio")
SBIN = ("/sbin", "/usr/sbin", "/usr/local/sbin")


def container_runtimes(sbin: tuple[str, ...] = SBIN) -> list[str]:
    """The container runtimes installed on the node: their executables in PATH or the sbin directories."""
    path = os.pathsep.join([os.environ.get("PATH", os.defpath), *sbin])
    return [name for name in CONTAINER_RUNTIMES if shutil.which(name, path=path)]


def node_state(root: str) -> NodeState:
    """Kernel modules, Secure Boot and kernel, as the rest of the collection needs them."""
    loaded = read_loaded_modules(root)
    return {
        "modules": {
            "nouveau": "nouveau" in loaded,
            "nvidia": [m for m in NVIDIA_MODULES if m in loaded],
            "flavour": nvidia_module_flavour(root),
            "version": nvidia_module_version(root),
        },
        "secure_boot": secure_boot_state(root),
        "kernel": kernel_state(root),
        "image_build": is_image_build(),
        "rdma": rdma_state(loaded),
        "os": os_release(),
        "runfile": runfile_driver(),
        "container_runtimes": container_runtimes(),
    }
