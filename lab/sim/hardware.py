"""The lab's simulated GPU hardware: a sysfs/procfs tree and an NVML library made from a profile.

These are the only fakes in the lab, at the hardware boundary. A profile (profiles/*.yml) names
real device ids; `write_hardware` writes, under a directory the module is told to read:

  sys/bus/pci/devices/<bdf>  -> sys/devices/pci<domain>:<bus>/<bdf>/{vendor,device,class,...,driver}
  sys/firmware/efi/efivars/SecureBoot-...   (when the profile boots with EFI)
  proc/modules, proc/sys/kernel/osrelease, proc/driver/nvidia/version (when a driver is "loaded")
  nvml/libnvidia-ml.so.1 + nvml/nvml.conf   (the fake NVML, when the profile has GPUs)
  nvml/fabric                               (the GPUs' NVLink fabric state, when the profile has `fabric`)
  sys/.../<bdf>/vpd                          (SW_MNG for the NVLink5 switch bridges, `switch_bridges`)
  driver/                                   (a driver root for nvidia-ctk, when a driver is "loaded"):
      usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<version> -> the fake NVML, and libnvidia-ml.so.1 ->
      libnvidia-ml.so.<version> beside it (relative, as a driver package lays it out: nvidia-ctk's CDI
      spec recreates that link in a container, where a link out of the driver root would dangle),
      usr/lib/x86_64-linux-gnu/libcuda.so.<version> and usr/bin/nvidia-smi (empty stand-ins: nvidia-ctk
      only locates them), dev/nvidia<N>, dev/nvidiactl, dev/nvidia-uvm (character devices, made as root)

Inside a lab machine the tree lives at HW_PATH, apart from the machine's real /sys, /proc and
library paths, so real driver packages installed later coexist with it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import uuid
from pathlib import Path

import yaml

from ..errors import LabError
from . import boot, fabric

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
FAKE_NVML_SOURCE = Path(__file__).resolve().parent / "fake_nvml.c"
HW_PATH = "/opt/gpuops-lab/hw"
NVML_LIBRARY = f"{HW_PATH}/nvml/libnvidia-ml.so.1"
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
_CLASS = {"gpu": "0x030200", "nvswitch": "0x068000", "nic": "0x020700"}


def profile_names() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yml"))


def load_profile(name: str) -> dict:
    """A profile by name; an unknown name is an error listing the known ones."""
    path = PROFILE_DIR / f"{name}.yml"
    if not path.is_file():
        raise LabError(f"unknown hardware profile {name!r} (known: {', '.join(profile_names())})")
    data = yaml.safe_load(path.read_text())
    data["name"] = name
    gpus = data.get("gpus")
    if gpus and len(gpus.get("numa", gpus["bus_ids"])) != len(gpus["bus_ids"]):
        raise LabError(f"profile {name}: gpus.numa must have one entry per bus id")
    if gpus:
        mig_layout(gpus, name)
    if data.get("fabric") is not None and data["fabric"] not in FABRIC_STATES:
        raise LabError(f"profile {name}: fabric {data['fabric']!r} is not one of {', '.join(FABRIC_STATES)}")
    return data


def _placements(gpus: dict, name: str, slices: int) -> tuple[list[int], int]:
    """(starts, size) of a MIG profile's placements: the profile's `mig_placements`, else size = slices at its multiples."""
    given = (gpus.get("mig_placements") or {}).get(name)
    if given:
        starts, _sep, size = str(given).partition("/")
        return [int(x) for x in starts.split(",")], int(size)
    size = max(slices, 1)
    return list(range(0, 8 - size + 1, size)), size


def _mig_profile_table(gpus: dict) -> dict[str, dict]:
    """The profile's MIG profile lines by name: index, id, slices, instances, placements, as fake_nvml.c reads them."""
    table = {}
    for entry in gpus.get("mig_profiles") or []:
        fields = entry.split()
        starts, size = _placements(gpus, fields[-1], int(fields[2]))
        table[fields[-1]] = {"index": int(fields[0]), "id": int(fields[1]), "slices": int(fields[2]),
                             "instances": int(fields[3]), "starts": starts, "size": size}
    return table


def place(sizes_starts: list[tuple[list[int], int]]) -> list[int] | None:
    """A start for each GPU instance (its possible starts, its size) such that none overlap, or None."""
    order = sorted(range(len(sizes_starts)), key=lambda i: -sizes_starts[i][1])
    chosen: dict[int, int] = {}

    def fits(i: int, start: int) -> bool:
        size = sizes_starts[i][1]
        return all(start + size <= s or s + sizes_starts[j][1] <= start for j, s in chosen.items())

    def search(k: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        for start in sizes_starts[i][0]:
            if fits(i, start):
                chosen[i] = start
                if search(k + 1):
                    return True
                del chosen[i]
        return False

    return [chosen[i] for i in range(len(sizes_starts))] if search(0) else None


def mig_layout(gpus: dict, profile_name: str = "?") -> list[list[dict]]:
    """The MIG devices of each GPU, checked as the hardware would check them.

    `mig_devices` holds, per GPU, the GPU-instance profile names of its MIG devices, each with an
    optional "<n>c." prefix for a compute instance of n slices (GFD's "1c.3g.40gb").
    """
    table = _mig_profile_table(gpus)
    enabled = gpus.get("mig_enabled") or []
    layout = []
    for i, names in enumerate(gpus.get("mig_devices") or []):
        where = f"profile {profile_name}: gpus.mig_devices[{i}]"
        if names and not (i < len(enabled) and enabled[i]):
            raise LabError(f"{where}: GPU {i} does not have MIG enabled (gpus.mig_enabled)")
        devices, used = [], {}
        for name in names:
            ci, gi_name = re.fullmatch(r"(?:(\d+)c\.)?(.*)", str(name)).groups()
            if gi_name not in table:
                raise LabError(f"{where}: {name!r} is not one of this GPU's MIG profiles ({', '.join(table)})")
            entry = table[gi_name]
            ci_slices = int(ci) if ci else entry["slices"]
            if not 1 <= ci_slices <= entry["slices"]:
                raise LabError(f"{where}: {name!r} has a compute instance larger than its GPU instance")
            used[gi_name] = used.get(gi_name, 0) + 1
            if used[gi_name] > entry["instances"]:
                raise LabError(f"{where}: more than {entry['instances']} instances of {gi_name}")
            devices.append({"profile_index": entry["index"], "slices": entry["slices"], "ci_slices": ci_slices,
                            "placements": (entry["starts"], entry["size"])})
        starts = place([d.pop("placements") for d in devices])
        if starts is None:
            raise LabError(f"{where}: the MIG devices do not fit the GPU's slices together (no placement holds them all)")
        for dev, start in zip(devices, starts, strict=True):
            dev["start"] = start
        layout.append(devices)
    return layout


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


# The VPD of a ConnectX bridge function of an NVLink5 board: an identifier string, then a read-only section
# whose vendor keyword carries SW_MNG (what the driver container and the Fabric Manager start script grep for).
def switch_bridge_vpd() -> bytes:
    ident = b"NVIDIA ConnectX-7 NVLink switch management bridge"
    fields = b"PN" + bytes([10]) + b"MCX750500B" + b"V3" + bytes([6]) + b"SW_MNG" + b"RV" + bytes([1]) + b"\x00"
    return (b"\x82" + len(ident).to_bytes(2, "little") + ident
            + b"\x90" + len(fields).to_bytes(2, "little") + fields + b"\x78")


FABRIC_STATES = {"not_started": "not_started", "in_progress": "in_progress", "completed": "completed 0",
                 "failed": "completed 999"}


def _pci_device(sys_dir: Path, bdf: str, vendor: str, device: str, kind: str, subsystem: str | None,
                numa: int, driver: str | None, vpd: bytes | None = None) -> None:
    domain, bus = bdf.split(":")[:2]
    real = sys_dir / f"devices/pci{domain}:{bus}" / bdf
    sub_vendor, _sep, sub_device = (subsystem or f"{vendor}:0000").partition(":")
    for name, value in (
        ("vendor", f"0x{vendor}"),
        ("device", f"0x{device}"),
        ("class", _CLASS[kind]),
        ("subsystem_vendor", f"0x{sub_vendor}"),
        ("subsystem_device", f"0x{sub_device}"),
        ("numa_node", str(numa)),
    ):
        _write(real / name, value + "\n")
    if vpd is not None:
        (real / "vpd").write_bytes(vpd)
    if driver:
        (sys_dir / "bus/pci/drivers" / driver).mkdir(parents=True, exist_ok=True)
        (real / "driver").symlink_to(f"../../../bus/pci/drivers/{driver}")
    link = sys_dir / "bus/pci/devices" / bdf
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"../../../devices/pci{domain}:{bus}/{bdf}")


def gpu_uuid(machine: str, index: int) -> str:
    """A stable, distinct GPU UUID per machine and index, in NVML's format."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{machine}.gpu{index}.gpuops-lab"))


def nvml_conf(profile: dict, machine: str) -> str:
    """The fake NVML's answers for this profile (format: see fake_nvml.c)."""
    driver = profile.get("driver") or {}
    cuda_major, _sep, cuda_minor = str(driver.get("cuda", "0.0")).partition(".")
    lines = [
        f"driver_loaded={1 if driver.get('loaded') else 0}",
        f"driver_version={driver.get('version', '')}",
        f"nvml_version={driver.get('nvml_version', '')}",
        f"cuda_version={int(cuda_major) * 1000 + int(cuda_minor or 0) * 10}",
    ]
    gpus = profile.get("gpus")
    if gpus:
        cc_major, _sep, cc_minor = str(gpus["compute_capability"]).partition(".")
        sub_vendor, _sep, sub_device = gpus.get("subsystem", "10de:0000").partition(":")
        mig_enabled = gpus.get("mig_enabled") or []
        numa = gpus.get("numa") or [0] * len(gpus["bus_ids"])
        for i, bdf in enumerate(gpus["bus_ids"]):
            domain, rest = bdf.split(":", 1)
            enabled = 1 if i < len(mig_enabled) and mig_enabled[i] else 0
            fields = [
                # NVML writes the bus id with an eight-digit domain, in upper case.
                i, gpu_uuid(machine, i), gpus["name"], f"{int(domain, 16):08X}:{rest.upper()}",
                f"{gpus['device_id']}10de", f"{sub_device}{sub_vendor}", gpus["memory_mib"], cc_major, cc_minor or 0,
                1, 1 if gpus.get("mig_capable") else 0, enabled, enabled, numa[i],
            ]
            lines.append("gpu=" + "|".join(str(f) for f in fields))
            for entry in gpus.get("mig_profiles") or []:
                fields = entry.split()
                starts, size = _placements(gpus, fields[-1], int(fields[2]))
                lines.append(f"profile={i}|" + "|".join(fields) + f"|{','.join(map(str, starts))}/{size}")
        for i, devices in enumerate(mig_layout(gpus)):
            for slot, dev in enumerate(devices):
                # GPU-instance ids start at 1 here, so a slot is never mistaken for an id; the first
                # compute instance of a GPU instance has id 0, as in NVML.
                mig_uuid = "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{machine}.gpu{i}.mig{slot}.gpuops-lab"))
                lines.append(f"mig={i}|{slot}|{dev['profile_index']}|{dev['ci_slices']}|{slot + 1}|0|{mig_uuid}|{dev['start']}")
    return "\n".join(lines) + "\n"


def c_string(text: str) -> str:
    """text as a C string literal, one literal a line (C joins them): every byte that is not printable ASCII,
    and the quote, backslash and question mark (trigraphs), as an octal escape."""
    lines = text.encode().splitlines(keepends=True) or [b""]
    safe = set(range(0x20, 0x7F)) - set(b'"\\?')
    return "\n".join('"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in line) + '"' for line in lines)


# NVIDIA's libnvidia-ml.so.<version> names itself libnvidia-ml.so.1: a container runtime mounts the versioned file
# alone and ldconfig (the CDI spec's update-ldcache hook) makes the link dlopen looks for from this name.
FAKE_NVML_LINK = ("-Wl,-soname,libnvidia-ml.so.1",)


def build_fake_nvml(cache: Path, builtin_conf: str = "") -> Path:
    """Compile the fake NVML once per source version (and compiled-in configuration); return the cached library.

    builtin_conf, an nvml.conf's text, is compiled in: what a copy of the library with no nvml.conf beside it
    answers from (a container runtime injects the library file alone)."""
    digest = hashlib.sha256(FAKE_NVML_SOURCE.read_bytes() + b"\0" + builtin_conf.encode() + b"\0"
                            + " ".join(FAKE_NVML_LINK).encode()).hexdigest()[:12]
    lib = cache / f"fake-nvml-{digest}" / "libnvidia-ml.so.1"
    if lib.exists():
        return lib
    if shutil.which("gcc") is None:
        raise LabError("gcc not found: the lab builds its simulated NVML library with it ('make lab-deps')")
    lib.parent.mkdir(parents=True, exist_ok=True)
    tmp = lib.with_suffix(".tmp")
    define = []
    if builtin_conf:
        header = lib.with_name("builtin_conf.h")
        header.write_text(f"static const char builtin_conf[] =\n{c_string(builtin_conf)};\n")
        define = [f'-DFAKE_NVML_BUILTIN_CONF="{header}"']
    res = subprocess.run(
        ["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", *define, *FAKE_NVML_LINK, "-o", str(tmp), str(FAKE_NVML_SOURCE), "-ldl"],
        capture_output=True, text=True, check=False,
    )
    if res.returncode != 0:
        raise LabError(f"building the simulated NVML failed: {res.stderr.strip().splitlines()[-1] if res.stderr else res.returncode}")
    tmp.replace(lib)
    return lib


def write_hardware(profile: dict, dest: Path, machine: str, kernel_release: str, nvml_library: Path | None) -> None:
    """Write the profile's hardware tree under dest (replacing what was there)."""
    shutil.rmtree(dest, ignore_errors=True)
    sys_dir, proc_dir = dest / "sys", dest / "proc"
    (sys_dir / "bus/pci/devices").mkdir(parents=True)
    gpus = profile.get("gpus")
    if gpus:
        numa = gpus.get("numa") or [0] * len(gpus["bus_ids"])
        # Every GPU of a profile is bound to the same driver: the one planted, or nvidia when loaded.
        driver = gpus.get("driver") or ("nvidia" if (profile.get("driver") or {}).get("loaded") else None)
        for bdf, node in zip(gpus["bus_ids"], numa, strict=True):
            _pci_device(sys_dir, bdf, "10de", gpus["device_id"], "gpu", gpus.get("subsystem"), node, driver)
    for key, kind, vendor in (("nvswitches", "nvswitch", "10de"), ("nics", "nic", "15b3"), ("switch_bridges", "nic", "15b3")):
        group = profile.get(key)
        if group:
            vpd = switch_bridge_vpd() if key == "switch_bridges" else None
            for bdf in group["bus_ids"]:
                driver = "mlx5_core" if kind == "nic" else None
                _pci_device(sys_dir, bdf, vendor, group["device_id"], kind, None, 0, driver, vpd)
    secure_boot = profile.get("secure_boot", "disabled")
    if secure_boot != "not_efi":
        value = b"\x06\x00\x00\x00" + (b"\x01" if secure_boot == "enabled" else b"\x00")
        var = sys_dir / "firmware/efi/efivars" / SECURE_BOOT_VAR
        var.parent.mkdir(parents=True)
        var.write_bytes(value)
    modules = profile.get("modules") or []
    _write(proc_dir / "modules", "".join(f"{m} 65536 0 - Live 0x0000000000000000\n" for m in modules))
    _write(proc_dir / "sys/kernel/osrelease", kernel_release + "\n")
    driver = profile.get("driver") or {}
    if driver.get("loaded"):
        _write(proc_dir / "driver/nvidia/version", boot.driver_version_line(driver["version"], driver.get("flavour") == "open"))
    if gpus and nvml_library is not None:
        (dest / "nvml").mkdir()
        shutil.copy2(nvml_library, dest / "nvml/libnvidia-ml.so.1")
        _write(dest / "nvml/nvml.conf", nvml_conf(profile, machine))
        if profile.get("fabric"):
            _write(dest / "nvml/fabric", FABRIC_STATES[profile["fabric"]] + "\n")
        if driver.get("loaded"):
            write_driver_root(dest / "driver", driver["version"], len(gpus["bus_ids"]))


# Character device numbers of the NVIDIA driver's nodes (major 195; nvidia-uvm's major is dynamic, 510 here).
NVIDIA_MAJOR, NVIDIACTL_MINOR, UVM_MAJOR = 195, 255, 510


def write_driver_root(root: Path, version: str, gpu_count: int) -> None:
    """What `nvidia-ctk cdi generate --driver-root --dev-root` needs to find of a driver, for the fake NVML."""
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / f"libnvidia-ml.so.{version}").symlink_to("../../../../nvml/libnvidia-ml.so.1")
    (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")
    (lib / f"libcuda.so.{version}").write_bytes(b"")
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
    smi = root / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_bytes(b"")
    smi.chmod(0o755)
    dev = root / "dev"
    dev.mkdir()
    nodes = [(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(gpu_count)]
    nodes += [("nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR), ("nvidia-uvm", UVM_MAJOR, 0)]
    for name, major, minor in nodes:
        try:
            os.mknod(dev / name, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        except PermissionError:  # not root (a unit test as a user): nvidia-ctk will report the missing nodes
            return


# LAB ONLY: the package that tells dpkg the fake NVML is this machine's libnvidia-ml.so.1. Without it, the
# preflight's `apt install python3-pynvml` (which depends on a libnvidia-ml.so.1 provider) pulls in the newest
# branch's libnvidia-compute, nvidia-kernel-common and firmware: minutes of downloads, unpacking and initramfs
# triggers per machine, and NVIDIA packages no real node would have before its driver (where the binding is
# installed, a real node's NVML library comes from its driver's package). It ships no library, only a note:
# the fake one stays at HW_PATH, so a driver package installed later coexists with it.
NVML_PACKAGE = "gpuops-lab-fake-nvml"
NVML_PACKAGE_CONTROL = f"""Package: {NVML_PACKAGE}
Version: 1
Architecture: all
Maintainer: gpuops lab <lab@gpuops.invalid>
Provides: libnvidia-ml.so.1, libnvidia-ml1
Section: misc
Priority: optional
Description: gpuops lab: the simulated NVML library of this machine's GPU profile
 LAB ONLY. The library itself is {NVML_LIBRARY}, outside the linker's paths.
"""


def register_nvml_package(root: Path) -> None:
    """Build and install NVML_PACKAGE in the machine's root, with the machine's own dpkg (before it boots)."""
    build = root / "tmp" / NVML_PACKAGE
    shutil.rmtree(build, ignore_errors=True)
    _write(build / "DEBIAN/control", NVML_PACKAGE_CONTROL)
    _write(build / "usr/share/doc" / NVML_PACKAGE / "README",
           f"LAB ONLY: this machine's NVML is the gpuops lab's fake one, {NVML_LIBRARY}.\n")
    inside = f"/tmp/{NVML_PACKAGE}"
    for argv in (["dpkg-deb", "--root-owner-group", "--build", inside, f"{inside}.deb"], ["dpkg", "--install", f"{inside}.deb"]):
        res = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, check=False,
                             stdin=subprocess.DEVNULL, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"})
        if res.returncode != 0:
            raise LabError(f"registering the fake NVML with dpkg ({' '.join(argv)}): {res.stderr.strip()[-500:] or res.returncode}")
    shutil.rmtree(build)
    (root / "tmp" / f"{NVML_PACKAGE}.deb").unlink()


def install_boot_simulation(profile: dict, root: Path, host_kernel: str) -> None:
    """The machine's stand-in for its kernel's boot (lab/sim/boot.py): the script, its unit and what the hardware asks for.

    At every boot the unit decides, from the machine's own kernels, modprobe configuration and initramfs,
    which kernel runs and which of the profile's modules load (see boot.py's docstring).
    """
    hw = root / HW_PATH.lstrip("/")
    gpus = profile.get("gpus") or {}
    spec = {
        "modules": list(profile.get("modules") or []),
        "gpu_bus_ids": list(gpus.get("bus_ids") or []),
        "gpu_driver": gpus.get("driver"),
        "host_kernel": host_kernel,
        # The NVLink fabric as the boot leaves it, before any Fabric Manager runs (fake NVML's "fabric" file).
        "fabric": FABRIC_STATES[profile["fabric"]] if profile.get("fabric") else None,
    }
    _write(hw / boot.SPEC_NAME, json.dumps(spec, indent=2, sort_keys=True) + "\n")
    script = root / boot.BOOT_SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(boot.__file__), script)
    units = root / "etc/systemd/system"
    (units / boot.UNIT_NAME).write_text(boot.UNIT)
    if profile.get("fabric"):
        install_fabric_standin(root)
    wants = units / "sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    link = wants / boot.UNIT_NAME
    if not link.is_symlink():
        link.symlink_to(f"/etc/systemd/system/{boot.UNIT_NAME}")


def install_fabric_standin(root: Path) -> None:
    """LAB ONLY: the Fabric Manager and IMEX stand-in (lab/sim/fabric.py) and the drop-ins that run it.

    The drop-ins wait in /etc/systemd/system/<unit>.d for the real packages, whose units they amend.
    """
    script = root / fabric.SCRIPT.lstrip("/")
    script.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(Path(fabric.__file__), script)
    for unit, text in fabric.DROPINS.items():
        _write(root / "etc/systemd/system" / f"{unit}.d" / fabric.DROPIN_NAME, text)
