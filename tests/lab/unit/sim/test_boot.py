"""The lab's simulated boot: which kernel runs and which modules load, from the machine's own files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.sim import boot, fabric
from lab.sim.hardware import install_boot_simulation, load_profile, write_hardware

GA, HWE = "5.15.0-204-generic", "6.8.0-149-generic"
BUS_IDS = ["0000:4a:00.0", "0000:61:00.0", "0000:ca:00.0", "0000:e1:00.0"]


def kernel(root: Path, release: str, nvidia: str | None = None) -> None:
    (root / "boot").mkdir(parents=True, exist_ok=True)
    (root / "boot" / f"vmlinuz-{release}").write_bytes(b"")
    (root / "lib/modules" / release / "kernel").mkdir(parents=True, exist_ok=True)
    if nvidia:
        path = root / "lib/modules" / release / nvidia
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"")


class Runner:
    """modprobe -c, modinfo and unmkinitramfs as the machine would answer them."""

    def __init__(self, config: str = "", initramfs: dict | None = None) -> None:
        self.config = config
        self.initramfs = initramfs  # relative path -> text, unpacked into main/
        self.calls: list[list[str]] = []

    def __call__(self, argv: list) -> tuple[int, str]:
        self.calls.append(list(argv))
        if argv[:2] == ["modprobe", "-c"]:
            return 0, self.config
        if argv[0] == "modinfo":
            return 0, {"version": "580.126.20\n", "license": "NVIDIA\n"}[argv[2]]
        if argv[0].endswith("unmkinitramfs"):
            if self.initramfs is None:
                return 1, ""
            for rel, text in self.initramfs.items():
                path = Path(argv[2]) / "main" / rel
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
            (Path(argv[2]) / "early").mkdir()
            return 0, ""
        raise AssertionError(argv)


@pytest.fixture
def machine(tmp_path):
    """A machine root with the l40s profile's hardware and its boot spec, as the lab makes it."""
    root = tmp_path / "root"
    (root / "etc/systemd/system").mkdir(parents=True)
    hw = root / "opt/gpuops-lab/hw"
    profile = load_profile("l40s")
    write_hardware(profile, hw, "m", "6.99.0-host", None)
    install_boot_simulation(profile, root, "6.99.0-host")
    return root, hw


def proc_modules(hw: Path) -> list[str]:
    return [line.split()[0] for line in (hw / "proc/modules").read_text().splitlines()]


def test_the_lab_installs_the_script_its_unit_and_the_spec(machine):
    root, hw = machine
    spec = json.loads((hw / boot.SPEC_NAME).read_text())
    assert spec == {"modules": ["nouveau", "drm_kms_helper", "ttm"], "gpu_bus_ids": BUS_IDS, "gpu_driver": "nouveau",
                    "host_kernel": "6.99.0-host", "fabric": None}
    assert (root / boot.BOOT_SCRIPT.lstrip("/")).read_text() == Path(boot.__file__).read_text()
    unit = (root / "etc/systemd/system" / boot.UNIT_NAME).read_text()
    assert f"ExecStart=/usr/bin/python3 {boot.BOOT_SCRIPT}" in unit and "Before=sysinit.target ssh.service" in unit
    link = root / "etc/systemd/system/sysinit.target.wants" / boot.UNIT_NAME
    assert os.readlink(link) == f"/etc/systemd/system/{boot.UNIT_NAME}"


def test_without_a_blacklist_nouveau_loads_again_on_the_host_kernel(machine):
    root, hw = machine
    record = boot.boot(str(hw), str(root), Runner("options snd_hda_intel power_save=1\n"))
    assert record["kernel"] == "6.99.0-host"  # no kernel installed: the lab host's
    assert record["modules"]["nouveau"]["loaded"] and proc_modules(hw)[0] == "nouveau"
    assert record["unbound"] == [] and (hw / "sys/bus/pci/devices" / BUS_IDS[0] / "driver").is_symlink()
    assert record["nvidia"] is None and record["initramfs"] is None


def test_a_blacklist_keeps_nouveau_off_and_unbinds_the_gpus(machine):
    root, hw = machine
    kernel(root, "6.1.0-56-amd64")
    record = boot.boot(str(hw), str(root), Runner("blacklist nouveau\noptions nouveau modeset=0\n"))
    assert record["kernel"] == "6.1.0-56-amd64"
    assert (hw / "proc/sys/kernel/osrelease").read_text() == "6.1.0-56-amd64\n"
    assert not record["modules"]["nouveau"]["loaded"]
    assert proc_modules(hw) == ["drm_kms_helper", "ttm"]
    assert record["unbound"] == BUS_IDS
    assert not any((hw / "sys/bus/pci/devices" / b / "driver").is_symlink() for b in BUS_IDS)
    assert json.loads((hw / boot.RECORD_NAME).read_text()) == record


def test_an_initramfs_made_before_the_blacklist_loads_nouveau_anyway(machine):
    root, hw = machine
    kernel(root, "6.1.0-56-amd64")
    (root / "boot/initrd.img-6.1.0-56-amd64").write_bytes(b"")
    stale = {"usr/lib/modules/6.1.0-56-amd64/kernel/drivers/gpu/drm/nouveau/nouveau.ko.xz": ""}
    record = boot.boot(str(hw), str(root), Runner("blacklist nouveau\n", stale))
    assert record["modules"]["nouveau"] == {"loaded": True, "why": "loaded from the initramfs, which does not blacklist it"}
    assert record["initramfs"]["modules"] == ["nouveau"]
    fresh = {**stale, "etc/modprobe.d/gpuops-blacklist-nouveau.conf": "blacklist nouveau\n"}
    record = boot.boot(str(hw), str(root), Runner("blacklist nouveau\n", fresh))
    assert not record["modules"]["nouveau"]["loaded"]
    assert record["modules"]["nouveau"]["why"] == "blacklisted in the modprobe configuration and in the initramfs"


def test_the_newest_kernel_boots_and_its_nvidia_module_is_found(machine):
    root, hw = machine
    kernel(root, GA, "updates/dkms/nvidia.ko")
    kernel(root, HWE)
    record = boot.boot(str(hw), str(root), Runner())
    assert record["kernel"] == HWE and record["nvidia"] is None  # the update without its module
    kernel(root, HWE, "updates/dkms/nvidia.ko.zst")
    record = boot.boot(str(hw), str(root), Runner())
    assert record["nvidia"] == {"path": str(root / "lib/modules" / HWE / "updates/dkms/nvidia.ko.zst"), "version": "580.126.20",
                                "license": "NVIDIA"}


def test_kernels_sort_by_their_numbers_and_need_an_image():
    assert boot.boot_kernel(["6.8.0-9-generic", "6.8.0-10-generic"], "host") == "6.8.0-10-generic"
    assert boot.boot_kernel([], "host") == "host"


def test_a_module_tree_without_a_kernel_image_does_not_boot(tmp_path):
    kernel(tmp_path, GA)
    (tmp_path / "lib/modules/6.8.0-149-generic").mkdir(parents=True)  # headers or leftovers, no vmlinuz
    assert boot.installed_kernels(str(tmp_path)) == [GA]


def test_blacklist_parsing():
    text = "blacklist nouveau\ninstall rivafb /bin/false\nblacklist   nvidia-drm \noptions nouveau modeset=0\n# blacklist ttm\n"
    assert boot.blacklisted(text) == {"nouveau", "rivafb", "nvidia_drm"}


def test_a_machine_without_a_spec_is_left_alone(tmp_path, capsys):
    assert boot.main(["boot.py", str(tmp_path)]) == 0
    assert "nothing to simulate" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.fixture
def hgx(tmp_path):
    """An HGX H100 machine root: a loaded driver (550.54.15) in the profile, the fake NVML's conf, the fabric stand-in."""
    root = tmp_path / "hgx"
    (root / "etc/systemd/system").mkdir(parents=True)
    hw = root / "opt/gpuops-lab/hw"
    lib = tmp_path / "libnvidia-ml.so.1"
    lib.write_bytes(b"")
    profile = load_profile("hgx-h100")
    write_hardware(profile, hw, "m", "6.99.0-host", lib)
    install_boot_simulation(profile, root, "6.99.0-host")
    return root, hw


def test_the_module_found_becomes_the_loaded_driver(hgx):
    root, hw = hgx
    assert "550.54.15" in (hw / "proc/driver/nvidia/version").read_text()
    kernel(root, HWE, "updates/dkms/nvidia.ko.zst")
    record = boot.boot(str(hw), str(root), Runner())
    assert record["driver_loaded"] is True
    assert (hw / "proc/driver/nvidia/version").read_text() == "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.126.20  Release Build\n"
    # NVML reports the loaded module's version, as the real library does; its other answers stay the profile's.
    conf = (hw / "nvml/nvml.conf").read_text().splitlines()
    assert "driver_version=580.126.20" in conf and "nvml_version=12.580.126.20" in conf
    assert "driver_loaded=1" in conf
    # nvidia-ctk's driver root follows (it looks for libcuda.so.<NVML's driver version>): a driver upgrade's CDI
    # refresh failed on the profile's stand-in libraries before.
    lib = hw / "driver/usr/lib/x86_64-linux-gnu"
    names = ["libcuda.so.1", "libcuda.so.580.126.20", "libnvidia-ml.so.1", "libnvidia-ml.so.580.126.20"]
    assert sorted(p.name for p in lib.iterdir()) == names
    assert (lib / "libcuda.so.1").resolve() == (lib / "libcuda.so.580.126.20").resolve()
    assert (lib / "libnvidia-ml.so.580.126.20").resolve() == (hw / "nvml/libnvidia-ml.so.1").resolve()
    # The .so.1 name links to the versioned one beside it, as a driver package has it: nvidia-ctk's CDI spec
    # recreates that link inside a container, where a link out of the driver root would dangle.
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.580.126.20"
    assert os.readlink(lib / "libcuda.so.1") == "libcuda.so.580.126.20"


def test_a_blacklisted_nvidia_module_leaves_the_profiles_driver(hgx):
    root, hw = hgx
    kernel(root, HWE, "updates/dkms/nvidia.ko")
    record = boot.boot(str(hw), str(root), Runner(config="blacklist nvidia\n"))
    assert record["driver_loaded"] is False
    assert "550.54.15" in (hw / "proc/driver/nvidia/version").read_text()
    assert "driver_version=550.54.15" in (hw / "nvml/nvml.conf").read_text().splitlines()


def test_a_machine_without_a_loaded_driver_gets_none_from_the_module(machine):
    root, hw = machine  # l40s: no driver loaded, no NVML conf
    kernel(root, HWE, "updates/dkms/nvidia.ko")
    assert boot.boot(str(hw), str(root), Runner())["driver_loaded"] is False
    assert not (hw / "proc/driver/nvidia/version").exists()


def test_the_fabric_stand_in_is_installed_only_where_the_profile_has_a_fabric(hgx, machine):
    root, hw = hgx
    dropin = root / "etc/systemd/system/nvidia-fabricmanager.service.d/gpuops-lab.conf"
    assert "LAB ONLY" in dropin.read_text() and "ExecStart=/usr/bin/python3 /opt/gpuops-lab/fabric.py start fabricmanager" in dropin.read_text()
    assert (root / "etc/systemd/system/nvidia-imex.service.d/gpuops-lab.conf").is_file()
    assert (root / "opt/gpuops-lab/fabric.py").is_file()
    assert (hw / "nvml/fabric").read_text() == "not_started\n"
    # A Fabric Manager run completed the fabric; the next boot starts it over.
    (hw / "nvml/fabric").write_text("completed 0\n")
    boot.boot(str(hw), str(root), Runner())
    assert (hw / "nvml/fabric").read_text() == "not_started\n"
    l40s_root, _hw = machine
    assert not (l40s_root / "etc/systemd/system/nvidia-fabricmanager.service.d").exists()


@pytest.mark.parametrize(("module", "args", "said"), [(boot, ["hw"], "nothing to simulate"), (fabric, ["stop", "fabricmanager"], "")])
def test_the_scripts_copied_onto_the_machines_run_alone(module, args, said, tmp_path):
    """boot.py and fabric.py are copied onto the machines by path and run there by the machine's Python: they import
    nothing of the lab (run here isolated, out of the repository)."""
    script = tmp_path / Path(module.__file__).name
    shutil.copyfile(module.__file__, script)
    res = subprocess.run([sys.executable, "-I", str(script), *args], cwd=tmp_path, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert said in res.stdout
