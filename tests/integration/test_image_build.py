"""gpu_info in an image being built: a real chroot of a lab image, reached with Ansible's chroot connection.

This is how an image pipeline runs the collection against a root file system it is building. The
module must say it is an image build, with or without /proc and /sys mounted into the chroot (image
builders often mount them), so later roles install for the target and start nothing. The other
answer, a booted machine that is not an image build, is asserted on every machine of the molecule
`hardware` scenario.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.distros import DISTROS
from lab.images import ensure_images
from tests.integration.test_lab_machines import REPO

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def image_root(tmp_path_factory):
    tarball = ensure_images([DISTROS["noble"]])["noble"]
    root = tmp_path_factory.mktemp("image") / "root"
    root.mkdir()
    subprocess.run(["tar", "--zstd", "-xpf", str(tarball), "-C", str(root)], check=True)
    yield root
    # Never remove through a mount that is still there.
    mounts = Path("/proc/self/mounts").read_text()
    assert f" {root}/" not in mounts, f"something is still mounted under {root}"
    shutil.rmtree(root)


def gpu_info_in(root: Path) -> dict:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    res = subprocess.run(
        [str(BIN / "ansible"), "all", "-i", f"{root},", "-c", "community.general.chroot",
         "-e", "ansible_python_interpreter=/usr/bin/python3", "-m", "gpuops.nvidia.gpu_info"],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    result = json.loads(res.stdout)["plays"][0]["tasks"][0]["hosts"][str(root)]
    assert result.get("changed") is False
    return result["gpu_info"]


def test_a_chroot_is_an_image_build(image_root):
    info = gpu_info_in(image_root)
    assert info["node"]["image_build"] is True
    # Nothing mounted: no devices to read, and the binding is not in the bare image; both said, no failure.
    assert info["pci"]["gpus"] == []
    assert info["nvml"]["status"] == "binding_missing"


def test_a_chroot_with_proc_and_sys_mounted_is_still_an_image_build(image_root):
    mounted = []
    try:
        for fstype, target in (("proc", image_root / "proc"), ("sysfs", image_root / "sys")):
            subprocess.run(["mount", "-t", fstype, fstype, str(target)], check=True)
            mounted.append(target)
        info = gpu_info_in(image_root)
    finally:
        for target in reversed(mounted):
            subprocess.run(["umount", str(target)], check=True)
    assert info["node"]["image_build"] is True
    # The running kernel is the build host's, read through the mounted /proc.
    assert info["node"]["kernel"]["running"] == os.uname().release
