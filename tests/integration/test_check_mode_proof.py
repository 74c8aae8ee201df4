"""The molecule check-mode proof (molecule/shared/check_*.yml) must be able to fail."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_lab_machines import REPO, free_base_port, lab

BIN = Path(sys.executable).parent


def playbook(inventory: Path, name: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "molecule/shared" / name)],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def machine(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("proof")
    state, inventory = tmp / "state", tmp / "hosts.yml"
    lab(state, "up", "--base-port", str(free_base_port(1)), "--inventory", str(inventory), "--machine", "proof=bookworm")
    yield state, inventory
    lab(state, "down", "--inventory", str(inventory))


def test_nothing_written_passes(machine):
    inventory = machine[1]
    assert playbook(inventory, "check_stamp.yml").returncode == 0
    res = playbook(inventory, "check_unchanged.yml")
    assert res.returncode == 0, res.stdout


def test_a_file_written_after_the_stamp_fails_and_is_named(machine):
    state, inventory = machine
    assert playbook(inventory, "check_stamp.yml").returncode == 0
    lab(state, "ssh", "proof", "sh", "-c", "'sleep 1; echo x > /etc/gpuops-written-in-check-mode'")
    res = playbook(inventory, "check_unchanged.yml")
    assert res.returncode != 0
    assert "/etc/gpuops-written-in-check-mode" in res.stdout
