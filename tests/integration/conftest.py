from __future__ import annotations

import configparser
import os
import shutil
from pathlib import Path

import pytest

from lab.distros import DISTROS
from lab.images import ensure_images

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def lab_host():
    """These tests boot real machines: they need root and the lab's host tools, and fail (not skip) without."""
    if os.geteuid() != 0:
        pytest.fail("the lab tests boot systemd-nspawn machines and must run as root")
    missing = [t for t in ("systemd-nspawn", "debootstrap", "ssh", "zstd") if shutil.which(t) is None]
    if missing:
        pytest.fail(f"missing host tools {missing}: run 'make lab-deps'")
    # Build or reuse the images before anything is timed.
    ensure_images(list(DISTROS.values()))


@pytest.fixture(scope="session", autouse=True)
def ansible_config(tmp_path_factory):
    """The repository's ansible.cfg for every ansible-playbook these tests start, with its main process looking for
    its workers' results every 20 ms instead of every 1 ms, which spins it at about 5 % of a core while it waits
    (molecule/default/molecule.yml, where the scenarios set the same). A copy, elsewhere: its relative paths made
    absolute."""
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    for key in ("collections_path", "roles_path"):
        if cfg.has_option("defaults", key):
            cfg.set("defaults", key, os.pathsep.join(str(REPO / p) for p in cfg.get("defaults", key).split(os.pathsep)))
    cfg.set("defaults", "internal_poll_interval", "0.02")
    path = tmp_path_factory.mktemp("ansible") / "ansible.cfg"
    with path.open("w", encoding="utf-8") as f:
        cfg.write(f)
    patch = pytest.MonkeyPatch()
    patch.setenv("ANSIBLE_CONFIG", str(path))
    yield path
    patch.undo()
