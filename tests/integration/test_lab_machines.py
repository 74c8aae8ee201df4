"""End to end: the lab CLI boots real machines, Ansible-style SSH reaches them, `down` leaves nothing."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lab.machines import Lab, port_in_use

REPO = Path(__file__).resolve().parents[2]
MACHINES = {"t-noble-a": "noble", "t-noble-b": "noble", "t-jammy": "jammy", "t-bookworm": "bookworm"}
# One machine with GPUs: its fake NVML is registered with dpkg (lab/sim/hardware.py, register_nvml_package).
PROFILES = {"t-noble-b": "l40s"}


def lab(state: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "lab", "--state", str(state), *args]
    res = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900, check=False)
    if check and res.returncode != 0:
        pytest.fail(f"{' '.join(args)} failed ({res.returncode}): {res.stderr.strip()}")
    return res


def free_base_port(count: int) -> int:
    for base in range(2300, 2900, 10):
        if not any(port_in_use(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free port range")


def processes_rooted_under(path: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                target = os.readlink(proc / "root")
            except OSError:
                continue
            if target.startswith(str(path)):
                found.append(int(proc.name))
    return found


def test_four_machines_boot_answer_over_ssh_and_go_away(tmp_path):
    state = tmp_path / "state"
    inventory = tmp_path / "hosts.yml"
    base = free_base_port(len(MACHINES))
    args = [f"--machine={n}={d}" + (f":{PROFILES[n]}" if n in PROFILES else "") for n, d in MACHINES.items()]
    t0 = time.monotonic()
    lab(state, "up", "--base-port", str(base), "--inventory", str(inventory), *args)
    elapsed = time.monotonic() - t0
    try:
        print(f"lab up of {len(MACHINES)} machines took {elapsed:.1f}s")  # measured, not asserted
        rows = {r["name"]: r for r in json.loads(lab(state, "status", "--json").stdout)}
        assert set(rows) == set(MACHINES)
        assert all(r["running"] for r in rows.values())
        assert sorted(r["port"] for r in rows.values()) == list(range(base, base + len(MACHINES)))

        hosts = yaml.safe_load(inventory.read_text())["all"]["children"]["gpu_nodes"]["hosts"]
        assert set(hosts) == set(MACHINES)

        # Machines booted side by side must not share a cgroup tree: on a cgroup v1 host their
        # systemd instances would remove each other's unit cgroups (units fail with 219/CGROUP).
        time.sleep(3)
        for name, distro in MACHINES.items():
            out = lab(state, "ssh", name, "sh", "-c", "'hostname; . /etc/os-release; echo $VERSION_CODENAME; systemctl is-system-running'", check=False)
            if out.stdout.split() != [name, distro, "running"]:
                diagnose = "'systemctl --failed --no-legend --plain; journalctl -b -p warning --no-pager | tail -n 20'"
                why = lab(state, "ssh", name, "sh", "-c", diagnose, check=False)
                pytest.fail(f"{name}: {out.stdout.split()} ({out.stderr.strip()}); failed units and warnings:\n{why.stdout}")
        # Each machine has its own host keys and machine id.
        ids = {lab(state, "ssh", n, "cat", "/etc/machine-id").stdout.strip() for n in MACHINES}
        assert len(ids) == len(MACHINES)
        # dpkg on a lab machine does not sync each file it unpacks (lab/machines.py), and says so.
        forced = lab(state, "ssh", "t-bookworm", "sh", "-c", "'dpkg --audit; cat /etc/dpkg/dpkg.cfg.d/gpuops-lab-unsafe-io'")
        assert "force-unsafe-io" in forced.stdout.splitlines(), forced.stdout
        # Real apt works on a machine: the package lists in the image are signed and current enough.
        apt = lab(state, "ssh", "t-jammy", "apt-get", "-q", "-s", "install", "kmod", check=False)
        assert apt.returncode == 0, apt.stderr
        # The NVML binding's dependency (a libnvidia-ml.so.1 provider) is the fake NVML on the machine with GPUs,
        # so the binding comes alone; on the machine without, apt would pick an NVIDIA branch's libraries.
        for name, alone in (("t-noble-b", True), ("t-noble-a", False)):
            sim = lab(state, "ssh", name, "apt-get", "-q", "-s", "install", "python3-pynvml", check=False)
            assert sim.returncode == 0, sim.stderr
            installs = [line.split()[1] for line in sim.stdout.splitlines() if line.startswith("Inst ")]
            assert (installs == ["python3-pynvml"]) == alone, (name, installs)
    finally:
        pids = [r["pid"] for r in json.loads(lab(state, "status", "--json").stdout)]
        lab(state, "down", "--inventory", str(inventory))
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/cmdline").read_bytes() == b"", pid
    assert processes_rooted_under(state) == []
    assert not state.exists()
    assert not inventory.exists()


def test_a_port_in_use_is_a_one_line_error_and_leaves_nothing(tmp_path):
    state = tmp_path / "state"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        res = lab(state, "up", "--base-port", str(port), "--inventory", "", "--machine", "x=noble", check=False)
    assert res.returncode == 2
    assert res.stderr == f"lab: error: port {port} on 127.0.0.1 is already in use (wanted for x): pick another --base-port\n"
    assert Lab(state).load() == {}
