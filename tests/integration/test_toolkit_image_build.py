"""The container_toolkit role in an image being built: a chroot of a lab image with containerd installed.

An image pipeline runs the host roles against the root file system it builds. The role must install the
toolkit from the (lab's signed) repository, write the runtime config, enable the CDI refresh unit - and
start nothing: no restart handler, no CDI spec (no driver runs in a build), no unit started.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lab import toolkit
from lab.distros import DISTROS
from lab.images import ensure_images
from tests.integration.test_lab_machines import REPO

BIN = Path(sys.executable).parent
# Apart from `lab repo up`'s default (8461) and the bench's (8471, kept up by `make bench --keep`; the real-node lane's is 8473), so that none, running,
# matters.
PORT = 8472

PLAYBOOK = """
- name: Build the toolkit into an image
  hosts: all
  gather_facts: false
  roles:
    - role: gpuops.nvidia.container_toolkit
"""


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    tarball = ensure_images([DISTROS["noble"]])["noble"]
    base = tmp_path_factory.mktemp("toolkit-image")
    root = base / "root"
    root.mkdir()
    subprocess.run(["tar", "--zstd", "-xpf", str(tarball), "-C", str(root)], check=True)
    # The build needs name resolution for the distribution's archive, as an image builder provides.
    shutil.copy2("/etc/resolv.conf", root / "etc/resolv.conf", follow_symlinks=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
    subprocess.run(["chroot", str(root), "apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(["chroot", str(root), "apt-get", "install", "-y", "-q", "--no-install-recommends", "containerd"],
                   check=True, env=env, capture_output=True)
    state = base / "state"
    server = toolkit.up(state, PORT)
    (base / "site.yml").write_text(PLAYBOOK)
    yield root, base, server
    toolkit.down(state)
    mounts = Path("/proc/self/mounts").read_text()
    assert f" {root}/" not in mounts, f"something is still mounted under {root}"
    shutil.rmtree(root)


def run_role(root: Path, base: Path, server: dict) -> dict:
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json"}
    res = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", f"{root},", "-c", "community.general.chroot",
         "-e", "ansible_python_interpreter=/usr/bin/python3",
         "-e", f"gpuops_container_toolkit_repo_url={server['url']}",
         "-e", f"gpuops_container_toolkit_repo_key_url={server['key_url']}",
         "-e", "gpuops_container_toolkit_mode=cdi", str(base / "site.yml")],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=600, check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    out = json.loads(res.stdout)
    # Task names come as "<role> : <name>".
    tasks = {t["task"]["name"].split(" : ")[-1]: t["hosts"][str(root)] for play in out["plays"] for t in play["tasks"]}
    return {"tasks": tasks, "stats": out["stats"][str(root)]}


def test_the_role_builds_the_toolkit_into_an_image_and_starts_nothing(image):
    root, base, server = image
    first = run_role(root, base, server)
    runtime = first["tasks"]["Add the nvidia runtime to the node's container runtime"]
    assert runtime["image_build"] is True and runtime["restart_required"] is True
    assert runtime["runtime_version"].startswith("2.") and runtime["cdi_enabled"] is True
    # Nothing restarted, no spec generated: neither a handler nor the CDI task ran.
    ran = [name for name, result in first["tasks"].items() if not result.get("skipped")]
    assert "Restart the container runtime" in first["tasks"], "the config changed, so the handler was notified"
    assert not [name for name in ran if name.startswith(("Restart", "Check that"))], ran
    spec = "Generate the CDI spec for the GPUs the driver sees, and have it regenerated when the driver changes"
    assert first["tasks"][spec].get("skipped") is True
    # The refresh units without the spec, in the image (enabled, started at boot).
    assert not first["tasks"]["Have the CDI spec regenerated when the driver changes"].get("skipped")
    # In the image: the toolkit from the lab repository, the drop-in imported, the refresh unit enabled.
    assert (root / "usr/bin/nvidia-ctk").exists()
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in (root / "etc/containerd/conf.d/99-nvidia.toml").read_text()
    assert 'imports = ["/etc/containerd/conf.d/*.toml"]' in (root / "etc/containerd/config.toml").read_text()
    assert (root / "etc/systemd/system/multi-user.target.wants/nvidia-cdi-refresh.path").is_symlink()
    assert 'mode = "cdi"' in (root / "etc/nvidia-container-runtime/config.toml").read_text()
    assert processes_in(root) == [], "a process runs inside the image"
    second = run_role(root, base, server)
    assert second["stats"]["changed"] == 0


def processes_in(root: Path) -> list[str]:
    """Command lines of the processes whose root directory is the image."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and os.readlink(proc / "root") == str(root):
                found.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return found
