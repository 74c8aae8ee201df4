"""What a lab machine's kernel does at boot, for the simulated hardware: which kernel boots, which modules load.

A lab machine runs on the lab host's kernel, so nothing of its own kernel, initramfs or modprobe
configuration takes effect by itself. This script stands in for that part of a boot. The lab copies
it into each machine with simulated hardware (BOOT_SCRIPT) and a systemd unit runs it early at every
boot, before sshd. It uses the machine's own tools and files: what a real boot would read.

- The kernel that boots is the newest one installed (/boot/vmlinuz-<release> with /lib/modules/<release>),
  as GRUB's default entry on Debian and Ubuntu; with none installed, the lab host's. It becomes the
  simulated running kernel (proc/sys/kernel/osrelease under the hardware root).
- A module the hardware asks for (the profile's `modules`, nouveau for GPUs nouveau binds) loads unless
  the machine's modprobe configuration blacklists it (`modprobe -c`), and also loads from the boot
  kernel's initramfs when that image holds the module and does not blacklist it. The loaded ones are
  written to proc/modules; a GPU planted as bound to a driver that did not load is left unbound.
- The NVLink fabric starts over: the fake NVML's fabric state goes back to the profile's (not_started on
  an NVSwitch board), until Fabric Manager (the lab's stand-in, lab/sim/fabric.py) sets it up again.
- MIG: where the fake NVML recorded MIG changes (nvml/migstate), a pending MIG mode takes effect and every
  GPU instance is gone, as after a GPU reset or reboot (MIG mode persists, instances do not). Without
  that file the profile's MIG devices stand for a layout the host's boot restored.
- The nvidia module is looked for in /lib/modules/<boot kernel> (a DKMS build, a precompiled package).
  What was found is recorded (BOOT_RECORD), for tests. On a machine whose profile has a loaded driver,
  a module found and not blacklisted becomes the loaded kernel module: its version and flavour go to
  proc/driver/nvidia/version (what Fabric Manager checks itself against), and the fake NVML reports that
  version (driver_version, nvml_version), as the real library reports the loaded module's. The stand-in driver
  root that nvidia-ctk reads (driver/usr/lib/...) follows too: libcuda.so.<version> and libnvidia-ml.so.<version>,
  the other versions' names gone and the .so.1 links pointing at the new ones, as a driver package swap leaves them. Its other answers stay the profile's: the
  real daemons that would talk to the module (nvidia-persistenced) cannot run here.

Run as `python3 /opt/gpuops-lab/boot.py [HARDWARE_ROOT]`; stdlib only, Python 3.10 or later (Ubuntu 22.04 has 3.10).
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable

HW_ROOT = "/opt/gpuops-lab/hw"
SPEC_NAME = "boot-spec.json"  # written by the lab: modules, gpus (bus ids), planted GPU driver, host kernel
RECORD_NAME = "boot.json"  # written here at every boot
BOOT_SCRIPT = "/opt/gpuops-lab/boot.py"
UNIT_NAME = "gpuops-lab-boot.service"
UNIT = f"""[Unit]
Description=gpuops lab: the kernel's part of the boot for the simulated hardware
DefaultDependencies=no
After=local-fs.target
Before=sysinit.target ssh.service

[Service]
Type=oneshot
ExecStart=/usr/bin/python3 {BOOT_SCRIPT}
RemainAfterExit=yes

[Install]
WantedBy=sysinit.target
"""
NVIDIA_NAMES = ("nvidia", "nvidia-current")
_MODULE_SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")
_BLACKLIST = re.compile(r"^\s*blacklist\s+(\S+)\s*$")
_INSTALL_FALSE = re.compile(r"^\s*install\s+(\S+)\s+/bin/(?:false|true)\s*$")

Runner = Callable[[list], tuple[int, str]]


def run(argv: list) -> tuple[int, str]:
    """Run a command; its exit status and stdout (a missing tool is exit 127)."""
    try:
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False)
    except OSError:
        return 127, ""
    return done.returncode, done.stdout


def kernel_key(release: str) -> tuple:
    """Sort key of a kernel release: its numbers in order (6.8.0-151-generic > 6.8.0-31-generic)."""
    return tuple(int(n) for n in re.findall(r"\d+", release))


def installed_kernels(root: str = "/") -> list:
    """Releases with both a kernel image in /boot and a module tree: what the boot loader can start."""
    found = []
    for image in glob.glob(os.path.join(root, "boot/vmlinuz-*")):
        release = os.path.basename(image)[len("vmlinuz-"):]
        if os.path.isdir(os.path.join(root, "lib/modules", release)):
            found.append(release)
    return sorted(found, key=kernel_key)


def boot_kernel(installed: list, fallback: str) -> str:
    """The newest installed kernel (GRUB's default on Debian and Ubuntu), else the fallback."""
    return max(installed, key=kernel_key) if installed else fallback


def blacklisted(config_text: str) -> set:
    """Modules the modprobe configuration keeps from loading by alias: blacklist, or install /bin/false."""
    names = set()
    for line in config_text.splitlines():
        m = _BLACKLIST.match(line) or _INSTALL_FALSE.match(line)
        if m:
            names.add(m.group(1).replace("-", "_"))
    return names


def conf_text(directory: str) -> str:
    """The modprobe configuration files under an unpacked initramfs, concatenated."""
    texts = []
    for sub in ("etc/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d", "run/modprobe.d"):
        for path in sorted(glob.glob(os.path.join(directory, sub, "*.conf"))):
            try:
                with open(path, errors="replace") as handle:
                    texts.append(handle.read())
            except OSError:
                continue
    return "\n".join(texts)


def module_files(directory: str) -> set:
    """Names of the kernel modules under a directory tree (nouveau for nouveau.ko.zst)."""
    names = set()
    for _dirpath, _dirs, files in os.walk(directory):
        for name in files:
            for suffix in _MODULE_SUFFIXES:
                if name.endswith(suffix):
                    names.add(name[: -len(suffix)].replace("-", "_"))
    return names


def read_initramfs(image: str, runner: Runner = run) -> dict | None:
    """What an initramfs holds that matters here: its modules and its modprobe blacklist; None when unreadable."""
    if not os.path.isfile(image):
        return None
    with tempfile.TemporaryDirectory(prefix="gpuops-lab-initrd-") as tmp:
        # initramfs-tools' own unpacker (a machine without it has no initramfs-tools image to read).
        rc, _out = runner(["unmkinitramfs", image, tmp])
        if rc != 0:
            return None
        # An image with early (microcode) archives unpacks into early*/ and main/.
        parts = [os.path.join(tmp, d) for d in os.listdir(tmp)] if os.path.isdir(os.path.join(tmp, "main")) else [tmp]
        return {
            "modules": sorted(set().union(*(module_files(p) for p in parts))),
            "blacklisted": sorted(set().union(*(blacklisted(conf_text(p)) for p in parts))),
        }


def decide_modules(wanted: list, root_blacklist: set, initramfs: dict | None) -> dict:
    """Each wanted module -> why it loads or not: by alias from the root file system, or from the initramfs."""
    result = {}
    for module in wanted:
        key = module.replace("-", "_")
        if initramfs and key in initramfs["modules"] and key not in initramfs["blacklisted"]:
            result[module] = {"loaded": True, "why": "loaded from the initramfs, which does not blacklist it"}
        elif key not in root_blacklist:
            result[module] = {"loaded": True, "why": "loaded for its devices: nothing blacklists it"}
        else:
            why = "blacklisted in the modprobe configuration"
            if initramfs is not None:
                why += " and " + ("in the initramfs" if key in initramfs["blacklisted"] else "absent from the initramfs")
            result[module] = {"loaded": False, "why": why}
    return result


def find_nvidia(root: str, kernel: str) -> str | None:
    """The nvidia module file installed for the kernel (DKMS or a package), None when there is none."""
    base = os.path.join(root, "lib/modules", kernel)
    for dirpath, _dirs, files in os.walk(base):
        for name in sorted(files):
            for suffix in _MODULE_SUFFIXES:
                if name.endswith(suffix) and name[: -len(suffix)] in NVIDIA_NAMES:
                    return os.path.join(dirpath, name)
    return None


def module_info(path: str, runner: Runner = run) -> dict:
    """modinfo's version and license of a module file."""
    info = {}
    for field in ("version", "license"):
        rc, out = runner(["modinfo", "-F", field, path])
        info[field] = out.strip() if rc == 0 else None
    return info


def write_proc(hw: str, kernel: str, loaded: list) -> None:
    """The simulated procfs: the running kernel and the loaded modules."""
    proc = os.path.join(hw, "proc")
    os.makedirs(os.path.join(proc, "sys/kernel"), exist_ok=True)
    with open(os.path.join(proc, "sys/kernel/osrelease"), "w") as handle:
        handle.write(kernel + "\n")
    with open(os.path.join(proc, "modules"), "w") as handle:
        handle.write("".join(f"{m} 65536 0 - Live 0x0000000000000000\n" for m in loaded))


def driver_version_line(version: str, open_modules: bool) -> str:
    """/proc/driver/nvidia/version's first line, as the open or the proprietary module writes it."""
    kind = "Open Kernel Module for x86_64" if open_modules else "x86_64 Kernel Module"
    return f"NVRM version: NVIDIA UNIX {kind}  {version}  Release Build\n"


def load_driver(hw: str, info: dict) -> bool:
    """The found module becomes the loaded kernel module, where the profile simulates one (procfs only)."""
    version_file = os.path.join(hw, "proc/driver/nvidia/version")
    version = info.get("version")
    if not version or not os.path.isfile(version_file):
        return False
    with open(version_file, "w") as handle:
        handle.write(driver_version_line(version, "GPL" in (info.get("license") or "")))
    conf = os.path.join(hw, "nvml/nvml.conf")
    if os.path.isfile(conf):
        with open(conf) as handle:
            lines = handle.read().splitlines()
        prefix = {"driver_version": version, "nvml_version": nvml_version(version, lines)}
        lines = [f"{k}={prefix[k]}" if k in prefix else line for line, k in ((x, x.split("=", 1)[0]) for x in lines)]
        with open(conf + ".tmp", "w") as handle:
            handle.write("\n".join(lines) + "\n")
        os.replace(conf + ".tmp", conf)
    follow_driver_root(os.path.join(hw, "driver/usr/lib/x86_64-linux-gnu"), version)
    return True


def follow_driver_root(lib: str, version: str) -> None:
    """The stand-in driver root's versioned libraries at `version` (nvidia-ctk looks for libcuda.so.<driver version>)."""
    if not os.path.isdir(lib):
        return
    for name in os.listdir(lib):
        if re.fullmatch(r"lib(cuda|nvidia-ml)\.so\.\d+\.\d+(\.\d+)?", name) and not name.endswith("." + version):
            os.unlink(os.path.join(lib, name))
    cuda = os.path.join(lib, f"libcuda.so.{version}")
    if not os.path.lexists(cuda):
        open(cuda, "wb").close()
    nvml = os.path.join(lib, f"libnvidia-ml.so.{version}")
    if not os.path.lexists(nvml):
        os.symlink("../../../../nvml/libnvidia-ml.so.1", nvml)
    for name in ("libcuda", "libnvidia-ml"):
        link = os.path.join(lib, f"{name}.so.1")
        if os.path.lexists(link):
            os.unlink(link)
        os.symlink(f"{name}.so.{version}", link)


def nvml_version(driver: str, conf_lines: list) -> str:
    """NVML's version for a driver: the CUDA major of the profile's NVML version, then the driver's ('12.580.126.20')."""
    for line in conf_lines:
        if line.startswith("nvml_version=") and "." in line:
            return line[len("nvml_version="):].split(".")[0] + "." + driver
    return driver


def unbind(hw: str, bus_ids: list, driver: str) -> list:
    """Remove the sysfs driver link of the GPUs bound to a driver that did not load; the bus ids unbound."""
    done = []
    for bdf in bus_ids:
        link = os.path.join(hw, "sys/bus/pci/devices", bdf, "driver")
        if os.path.islink(link) and os.path.basename(os.readlink(link)) == driver:
            os.unlink(link)
            done.append(bdf)
    return done


def reset_mig(hw: str) -> bool:
    """Apply pending MIG modes and drop the GPU instances in the fake NVML's MIG state; False when there is none."""
    path = os.path.join(hw, "nvml/migstate")
    if not os.path.isfile(path):
        return False
    lines = []
    with open(path) as handle:
        for line in handle:
            if line.startswith("mode="):
                index, _current, pending = line.strip()[len("mode="):].split("|")
                lines.append(f"mode={index}|{pending}|{pending}\n")
    with open(path + ".tmp", "w") as handle:
        handle.writelines(lines)
    os.replace(path + ".tmp", path)
    return True


def boot(hw: str = HW_ROOT, root: str = "/", runner: Runner = run) -> dict:
    """One boot: decide the kernel and the modules, write the simulated procfs and sysfs, return the record."""
    with open(os.path.join(hw, SPEC_NAME)) as handle:
        spec = json.load(handle)
    kernel = boot_kernel(installed_kernels(root), spec["host_kernel"])
    rc, config = runner(["modprobe", "-c"])
    root_blacklist = blacklisted(config) if rc == 0 else set()
    image = os.path.join(root, "boot", "initrd.img-" + kernel)
    initramfs = read_initramfs(image, runner) if os.path.isfile(image) else None
    modules = decide_modules(spec.get("modules", []), root_blacklist, initramfs)
    loaded = [m for m, d in modules.items() if d["loaded"]]
    write_proc(hw, kernel, loaded)
    unbound = []
    driver = spec.get("gpu_driver")
    if driver and driver in modules and not modules[driver]["loaded"]:
        unbound = unbind(hw, spec.get("gpu_bus_ids", []), driver)
    if spec.get("fabric") and os.path.isdir(os.path.join(hw, "nvml")):
        with open(os.path.join(hw, "nvml/fabric"), "w") as handle:
            handle.write(spec["fabric"] + "\n")
    mig_reset = reset_mig(hw)
    nvidia = find_nvidia(root, kernel)
    nvidia_info = {"path": nvidia, **module_info(nvidia, runner)} if nvidia else None
    loads = bool(nvidia_info) and modules.get("nvidia", {}).get("loaded", False)
    record = {
        "kernel": kernel,
        "modules": modules,
        "modprobe_config_read": rc == 0,
        "initramfs": {"path": image, "read": initramfs is not None, **(initramfs or {})} if os.path.isfile(image) else None,
        "unbound": unbound,
        "mig_reset": mig_reset,
        "nvidia": nvidia_info,
        "driver_loaded": load_driver(hw, nvidia_info) if loads and nvidia_info else False,
    }
    with open(os.path.join(hw, RECORD_NAME + ".tmp"), "w") as handle:
        json.dump(record, handle, indent=2, sort_keys=True)
    os.replace(os.path.join(hw, RECORD_NAME + ".tmp"), os.path.join(hw, RECORD_NAME))
    return record


def main(argv: list) -> int:
    hw = argv[1] if len(argv) > 1 else HW_ROOT
    if not os.path.isfile(os.path.join(hw, SPEC_NAME)):
        print(f"gpuops-lab boot: no {SPEC_NAME} under {hw}: nothing to simulate")
        return 0
    record = boot(hw)
    loaded = [m for m, d in record["modules"].items() if d["loaded"]]
    nvidia = record["nvidia"]["path"] if record["nvidia"] else "none"
    print("gpuops-lab boot: kernel {}; modules loaded: {}; nvidia module: {}".format(record["kernel"], ", ".join(loaded) or "none", nvidia))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
