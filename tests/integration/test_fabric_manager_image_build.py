"""The rdma and fabric_manager roles in an image being built: a chroot of a lab image, Ubuntu 24.04's real packages.

An image pipeline builds the driver and the fabric daemon into the image and boots it later. The roles
have no hardware to read in a chroot, so the pipeline names the fabric mode and the driver version, and
says the nodes have ConnectX NICs. Fabric Manager must be installed at exactly that version from
Canonical's archive, held, its unit enabled, fabricmanager.cfg edited in place; the distribution's RDMA
stack installed for DMA-BUF - and nothing started or loaded. A check-mode run first must leave the image
as it was.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab.distros import DISTROS
from lab.images import ensure_images
from tests.integration.test_lab_machines import REPO
from tests.integration.test_toolkit_image_build import processes_in

BIN = Path(sys.executable).parent
# Fabric Manager 550 of Ubuntu 24.04's release pocket, which never changes (the default scenario plants it too).
OTHER_VERSION = "550.54.15"
PLAYBOOK = """
- name: Build the fabric manager into an image
  hosts: all
  gather_facts: false
  roles:
    - role: gpuops.nvidia.rdma
    - role: gpuops.nvidia.fabric_manager
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    tarball = ensure_images([DISTROS["noble"]])["noble"]
    base = tmp_path_factory.mktemp("fm-image")
    root = base / "root"
    root.mkdir()
    subprocess.run(["tar", "--zstd", "-xpf", str(tarball), "-C", str(root)], check=True)
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf", follow_symlinks=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    subprocess.run(["chroot", str(root), "apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    # Ansible's apt module needs python3-apt for check mode (a normal run installs it itself).
    subprocess.run(["chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", "python3-apt"],
                   check=True, env=env, capture_output=True)
    (base / "site.yml").write_text(PLAYBOOK)
    # The driver version the image is built for: the archive's newest branch (lab/newest_branch.sh, as the default
    # scenario's rollout reads it) and its Fabric Manager's version today (an upload replaces them: on 2026-12-03
    # 580.178.04 by 580.196.07, whose restricted packages, Fabric Manager's dependency, the lab's network answers 404 for,
    # and 615 by 620), so they are read, not written here; the plan must find the exact package version for it.
    branch = subprocess.run(["chroot", str(root), "sh", "-s"], input=(REPO / "lab/newest_branch.sh").read_text(),
                            check=True, env=env, capture_output=True, text=True).stdout.strip()
    assert re.fullmatch(r"\d{3}", branch), branch
    policy = subprocess.run(["chroot", str(root), "apt-cache", "policy", f"nvidia-fabricmanager-{branch}"],
                            check=True, env=env, capture_output=True, text=True).stdout
    candidate = re.search(r"Candidate: (\d+\.\d+\.\d+)-", policy)
    assert candidate, policy
    yield root, base, candidate.group(1), branch
    mounts = Path("/proc/self/mounts").read_text()
    assert f" {root}/" not in mounts, f"something is still mounted under {root}"
    shutil.rmtree(root)


def run_role(root: Path, base: Path, version: str, *extra: str, fail: bool = False) -> dict:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    res = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", f"{root},", "-c", "community.general.chroot",
         "-e", "ansible_python_interpreter=/usr/bin/python3",
         "-e", "gpuops_fabric_manager_mode=fabricmanager",
         "-e", f"gpuops_fabric_manager_driver_version={version}",
         "-e", '{"gpuops_fabric_manager_config": {"FABRIC_MODE": 1}}',
         # The image's nodes: ConnectX NICs, open modules, the kernel the image will boot.
         "-e", "gpuops_rdma_nics=present", "-e", "gpuops_driver_kernel_module_type=open",
         "-e", "gpuops_driver_kernel_release=6.8.0-31-generic",
         *extra, str(base / "site.yml")],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=900, check=False,
    )
    out = json.loads(res.stdout) if res.stdout.startswith("{") else {}
    failed = [(t["task"]["name"], t["hosts"][str(root)].get("msg")) for play in out.get("plays", []) for t in play["tasks"]
              if t["hosts"].get(str(root), {}).get("failed")]
    if fail:
        assert res.returncode != 0 and failed, res.stdout[-3000:] + res.stderr[-2000:]
        return {"failed": failed}
    assert res.returncode == 0, failed or (res.stdout[-3000:] + res.stderr[-2000:])
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"][str(root)] for play in out["plays"] for t in play["tasks"]}
    return {"tasks": tasks, "stats": out["stats"][str(root)]}


def dpkg(root: Path) -> dict[str, str]:
    out = subprocess.run(["chroot", str(root), "dpkg-query", "-W", "-f", "${binary:Package} ${db:Status-Abbrev}${Version}\n"],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[0]: " ".join(line.split()[1:]) for line in out.splitlines()}


def test_check_mode_then_the_build_installs_holds_enables_and_starts_nothing(image):
    """Fabric Manager pinned, held, enabled and configured; the RDMA stack installed; nothing started or loaded."""
    root, base, version, branch = image
    before = dpkg(root)
    check = run_role(root, base, version, "--check")
    assert check["tasks"]["Plan the fabric's daemon at the driver's version (refuses what cannot work, before any change)"][
        "plan"]["install"] is True
    assert dpkg(root) == before, "check mode installed something"
    assert not (root / "usr/sbin/policy-rc.d").exists()
    rdma = check["tasks"]["Plan the RDMA stack and the GPUDirect path (refuses what cannot work, before any change)"]["plan"]
    assert (rdma["path"], rdma["stack"], rdma["install"]) == ("dmabuf", "inbox", ["rdma-core", "ibverbs-utils"]), rdma

    first = run_role(root, base, version)
    plan = first["tasks"]["Plan the fabric's daemon at the driver's version (refuses what cannot work, before any change)"]
    assert plan["start"] is False and "image build" in plan["start_reason"]
    packages = dpkg(root)
    for name in (f"nvidia-fabricmanager-{branch}", f"libnvidia-nscq-{branch}"):
        assert packages[name].startswith("hi ") and packages[name].split()[-1].startswith(version + "-"), packages[name]
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-fabricmanager.service").is_symlink()
    cfg = (root / "usr/share/nvidia/nvswitch/fabricmanager.cfg").read_text()
    # Changed in place: the one line, the package's comments and other settings kept.
    assert cfg.splitlines().count("FABRIC_MODE=1") == 1 and "FABRIC_MODE=0" not in cfg.splitlines()
    assert sum(line.startswith("#") for line in cfg.splitlines()) > 50 and "LOG_LEVEL=4" in cfg.splitlines()
    assert not (root / "usr/sbin/policy-rc.d").exists(), "the install's policy-rc.d was left behind"
    assert processes_in(root) == [], "a process runs inside the image"
    assert packages["rdma-core"].startswith("ii ") and packages["ibverbs-utils"].startswith("ii ")
    assert not (root / "etc/modules-load.d/gpuops-rdma.conf").exists()  # DMA-BUF: no module of its own
    assert first["tasks"]["Load the GPUDirect modules now"].get("skipped"), "a module load was tried in the image"
    service = first["tasks"]["Enable the service, and start or stop it"]
    actions = [action for unit in service["units"] for action in unit["actions"]]
    assert not {"start", "restart", "stop"} & set(actions), f"systemd was asked to {actions} in the image"

    second = run_role(root, base, version)
    assert second["stats"]["changed"] == 0


def test_a_change_waits_for_dpkg_before_it_releases_a_hold(image):
    """While another package run holds dpkg's lock, a change to another version stops before it touches the holds.

    It releases the holds of the packages it replaces only after the wait for dpkg's lock: released first, they
    would fail on dpkg's own lock error, or be left released by a run that then stops at the wait. Runs on the
    image the test above built (the newest branch held).
    """
    root, base, _version, branch = image
    before = dpkg(root)
    assert before.get(f"nvidia-fabricmanager-{branch}", "").startswith("hi "), f"the test above did not leave {branch} held"
    # A process of ours holds dpkg's frontend lock as apt does (a POSIX lock on the file), until it is stopped.
    holder = subprocess.Popen(  # pylint: disable=consider-using-with
        [sys.executable, "-c", "import fcntl, sys, time\n"
         "f = open(sys.argv[1], 'w')\nfcntl.lockf(f, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(900)",
         str(root / "var/lib/dpkg/lock-frontend")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        refused = run_role(root, base, OTHER_VERSION, "-e", "gpuops_fabric_manager_lock_wait=0", fail=True)
    finally:
        holder.kill()
        holder.wait()
    assert [name.split(" : ")[-1] for name, _msg in refused["failed"]] == ["Stop while another package run still holds dpkg's lock"], refused
    msg = refused["failed"][0][1]
    assert "gpuops_fabric_manager_lock_wait (seconds, now 0)" in msg, msg
    assert dpkg(root) == before, "the refused run changed the packages or their holds"
    assert not (root / "usr/sbin/policy-rc.d").exists(), "the refused run left its policy-rc.d"
