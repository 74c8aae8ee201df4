"""The playbooks as a user first meets them, on this machine and the ansible-core running the tests: `make unit` runs
them on requirements.txt's, `make min-ansible` on the lowest the collection claims (meta/runtime.yml). Every playbook
parses, and node.yml runs through in check mode against localhost (no GPU here: the roles' paths for a node with
nothing to do, where a template that gives None gave the string "None" before ansible-core 2.19)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from lab.interrupt import kill_group

REPO = Path(__file__).resolve().parents[2]
PLAYBOOKS = sorted(p.name for p in (REPO / "playbooks").glob("*.yml"))
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")


def env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build/collections"), "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}


def playbook(inventory: Path, name: str, *extra: str, check_mode: bool = True,
             extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """ansible-playbook on one of the collection's playbooks, in check mode unless told, each of `extra` an -e."""
    argv = [ANSIBLE_PLAYBOOK, *(["--check"] if check_mode else []), "-i", str(inventory), str(REPO / "playbooks" / name)]
    for value in extra:
        argv += ["-e", value]
    return run(argv, extra_env)


# A run here takes seconds. One whose results thread died waits without end (ansible-core 2.19.1 to 2.19.3 under load:
# tests/min-ansible/requirements.txt says why the floor is 2.19.4): it is stopped as soon as that traceback shows, and
# the test fails with what it printed, as does a run past RUN_TIMEOUT_S for any reason.
RUN_TIMEOUT_S = 240
RESULTS_THREAD_DIED = b"(results_thread_main):"


def run(argv: list[str], extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """ansible-playbook as given; stopped (its process group and the workers that left it, lab.interrupt.kill_group)
    where it hangs, as above, failing the test with what it printed."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env={**env(), **(extra_env or {})}, start_new_session=True)
        deadline, why = time.monotonic() + RUN_TIMEOUT_S, ""
        while proc.poll() is None:
            err.seek(0)
            if RESULTS_THREAD_DIED in err.read():
                why = "ansible-core's results thread died"
            elif time.monotonic() > deadline:
                why = f"it did not end in {RUN_TIMEOUT_S} s"
            if why:
                kill_group(proc.pid)
                proc.wait()
                break
            time.sleep(0.2)
        out.seek(0)
        err.seek(0)
        res = subprocess.CompletedProcess(argv, proc.returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace"))
    if why:
        pytest.fail(f"{' '.join(argv[1:])}: stopped, {why}\n--- stdout (end) ---\n{res.stdout[-3000:]}\n"
                    f"--- stderr ---\n{res.stderr[-6000:]}")
    return res


def test_a_run_whose_results_thread_died_is_stopped_at_once_and_fails(tmp_path):
    """The hang's traceback stops the run when it shows, not after RUN_TIMEOUT_S; a run that ends is returned as is."""
    script = tmp_path / "hangs"
    script.write_text("#!/bin/sh\necho 'Exception in thread Thread-3 (results_thread_main):' >&2\nexec sleep 600\n")
    script.chmod(0o755)
    started = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="results thread died"):
        run([str(script)])
    assert time.monotonic() - started < 60
    script.write_text("#!/bin/sh\necho ended\n")
    res = run([str(script)])
    assert (res.returncode, res.stdout) == (0, "ended\n")


@pytest.fixture
def localhost(tmp_path: Path) -> Path:
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    return inventory


def test_the_claimed_ansible_core_is_the_one_tested():
    """meta/runtime.yml's floor is the version tests/min-ansible/requirements.txt pins (what `make min-ansible` runs)."""
    claimed = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["requires_ansible"]
    pins = [line.split("==", 1)[1].strip() for line in (REPO / "tests/min-ansible/requirements.txt").read_text().splitlines()
            if line.startswith("ansible-core==")]
    assert claimed == f">={pins[0]}"


def test_every_role_claims_the_collections_ansible_core_floor():
    """Galaxy shows a role's min_ansible_version: it is the collection's floor, not an older one nothing tests."""
    floor = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["requires_ansible"].removeprefix(">=")
    claims = {meta.parent.parent.name: (yaml.safe_load(meta.read_text()).get("galaxy_info") or {}).get("min_ansible_version")
              for meta in sorted((REPO / "roles").glob("*/meta/main.yml"))}
    assert claims and {role: v for role, v in claims.items() if v != floor} == {}


@pytest.mark.parametrize("name", PLAYBOOKS)
def test_every_playbook_parses(name, localhost):
    res = run([ANSIBLE_PLAYBOOK, "--syntax-check", "-i", str(localhost), str(REPO / "playbooks" / name)])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]


def test_node_yml_runs_through_in_check_mode_on_a_node_without_gpus(localhost):
    # The driver container's method and no toolkit: nothing here depends on this machine's kernels or runtime.
    res = playbook(localhost, "node.yml", "gpuops_driver_method=containerized", "gpuops_node_container_toolkit=false")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-3000:]
    assert "failed=0" in res.stdout


KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "current-context": "x",
              "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}],
              "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}


def cluster_run(tmp_path: Path, user: dict, extra_env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """cluster.yml in check mode with no GPU node, against a server that refuses connections (port 1)."""
    kubeconfig, inventory = tmp_path / "kubeconfig", tmp_path / "empty.yml"
    kubeconfig.write_text(yaml.safe_dump({**KUBECONFIG, "users": [{"name": "u", "user": user}]}))
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {}}}}}))
    return playbook(inventory, "cluster.yml", f"gpuops_cluster_kubeconfig={kubeconfig}", extra_env=extra_env)


def test_a_refused_connection_names_the_server_and_no_empty_group_is_warned_of(tmp_path):
    res = cluster_run(tmp_path, {"token": "abc"})
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0
    assert "cannot reach the API server https://127.0.0.1:1 of gpuops_cluster_kubeconfig" in out, out[-3000:]
    assert "Could not match supplied host pattern" not in out


def test_a_missing_kubernetes_library_is_named_not_called_an_unreachable_server(tmp_path):
    # An exec user is a connection only the kubernetes client makes; here it cannot be imported.
    stub = tmp_path / "stub"
    (stub / "kubernetes").mkdir(parents=True)
    (stub / "kubernetes/__init__.py").write_text("raise ImportError('no kubernetes here')\n")
    res = cluster_run(tmp_path, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "true"}},
                      {"PYTHONPATH": str(stub)})
    out = " ".join((res.stdout + res.stderr).split())
    assert res.returncode != 0
    assert "the kubernetes Python library is not installed" in out, out[-3000:]
    assert "cannot reach the API server" not in out


HAS_KERNEL = any(Path("/lib/modules").glob("*/kernel"))
HAS_RUNTIME = bool(shutil.which("containerd") or shutil.which("crio"))
# What node.yml's roles would refuse on this machine, and the preflight names first: (skipped where, the settings, the
# blocker's line, the role's task that refused before).
REFUSALS = {
    # No kernel under /lib/modules (a container): the driver role would refuse its plan.
    "no kernel": (HAS_KERNEL, ["gpuops_node_container_toolkit=false"], "BLOCKER no_kernel_installed", "Plan the driver"),
    # Neither containerd nor CRI-O: the container_toolkit role would refuse at its settings check.
    "no runtime": (HAS_RUNTIME, ["gpuops_driver_method=containerized"],
                   "BLOCKER no_container_runtime: gpuops_container_toolkit_runtime: auto found neither containerd nor crio on this node",
                   "Check the runtime settings"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_what_a_role_would_refuse_is_a_preflight_blocker_not_a_refusal_after_it(localhost, case):
    """The preflight stops the run before the role that would refuse, naming why, and never says "Nothing blocks the
    install"."""
    skipped, extra, blocker, refused_at = REFUSALS[case]
    if skipped:
        pytest.skip(f"this machine is not one with {case}")
    res = playbook(localhost, "node.yml", *extra)
    out = " ".join(res.stdout.split())
    assert res.returncode != 0
    assert blocker in out, out[-3000:]
    assert "Nothing blocks the install" not in out
    assert refused_at not in out


def test_the_run_s_summary_is_written_to_gpuops_report_path(localhost, tmp_path):
    report = tmp_path / "report.json"
    res = playbook(localhost, "node.yml", "gpuops_driver_method=containerized", "gpuops_node_container_toolkit=false",
                   f"gpuops_report_path={report}")
    assert res.returncode == 0, res.stdout[-4000:]
    summary = json.loads(report.read_text())
    assert summary["hosts"] == 1 and summary["blocked_hosts"] == [] and summary["not_read_hosts"] == []
    assert summary["warnings"] == {"localhost": ["no_gpu"]}
    assert summary["ok"] is True and summary["validation"] is None


@pytest.mark.skipif(HAS_KERNEL, reason="this machine has a kernel under /lib/modules")
def test_a_preflight_s_blockers_are_in_the_summary(localhost, tmp_path):
    report = tmp_path / "report.json"
    res = playbook(localhost, "preflight.yml", "gpuops_preflight_report_only=true", f"gpuops_report_path={report}", check_mode=False)
    assert res.returncode == 0, res.stdout[-4000:]
    summary = json.loads(report.read_text())
    assert summary["ok"] is False and summary["blocked_hosts"] == ["localhost"]
    assert [b["id"] for b in summary["blockers"]["localhost"]] == (
        ["no_kernel_installed"] + ([] if HAS_RUNTIME else ["no_container_runtime"]))


@pytest.mark.skipif(HAS_RUNTIME, reason="this machine has a container runtime")
def test_uninstall_yml_on_a_node_without_a_runtime_skips_that_part(localhost):
    res = playbook(localhost, "uninstall.yml", "gpuops_uninstall_cluster=false")
    assert res.returncode == 0, res.stdout[-4000:]
    assert "found neither containerd nor crio" not in res.stdout


@pytest.mark.skipif(HAS_KERNEL, reason="this machine has a kernel under /lib/modules")
@pytest.mark.parametrize("name", ["node.yml", "preflight.yml", "site.yml"])
def test_a_run_stopped_on_every_node_by_the_preflight_still_publishes_its_summary(localhost, tmp_path, name):
    """Where the preflight blocks every node of the play, Ansible ends the whole run there, before report.yml: the
    summary (what blocks each node, the thing an AWX workflow branches on) is published before the stop."""
    report = tmp_path / "report.json"
    res = playbook(localhost, name, f"gpuops_report_path={report}", "gpuops_cluster_kubeconfig=/nonexistent")
    assert res.returncode != 0
    assert "blocker(s) on localhost" in " ".join(res.stdout.split()), res.stdout[-3000:]
    summary = json.loads(report.read_text())
    assert summary["ok"] is False and summary["blocked_hosts"] == ["localhost"]
    assert "no_kernel_installed" in [b["id"] for b in summary["blockers"]["localhost"]]


def test_an_uninstall_limited_to_hosts_without_localhost_stops_before_anything(tmp_path):
    """--limit node-a would skip the cluster's play (hosts: localhost) without a word while node-a loses the runtime."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": {"node-a": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}}}))
    argv = [ANSIBLE_PLAYBOOK, "--check", "-i", str(inventory), str(REPO / "playbooks/uninstall.yml"), "--limit", "node-a"]
    res = run(argv)
    said = " ".join(res.stdout.split())
    assert res.returncode != 0
    assert "--limit node-a leaves out localhost" in said and "--limit 'node-a,localhost'" in said, res.stdout[-3000:]
    assert "gpuops_uninstall_cluster: false" in said and "PLAY [Remove" not in said, res.stdout[-3000:]
    argv += ["-e", "gpuops_uninstall_cluster=false", "-e", "gpuops_uninstall_hosts=false"]
    res = run(argv)
    assert res.returncode == 0, res.stdout[-3000:]
