"""The lab cluster against its acceptance: a real API server, scheduler and controllers with KWOK nodes.

Checked on the cluster itself with kubectl, never on the lab's own output: nodes answer, a DaemonSet lands
on exactly the selected nodes, GPU capacity appears only with a device plugin pod, a Job completes, a
drain evicts and honours a PodDisruptionBudget, a thousand nodes come up Ready, and `down` stops
exactly the processes the cluster started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lab.toolchain import KUBERNETES_VERSION, ensure_toolchain
from tests.integration.test_lab_machines import REPO

BIN = Path(sys.executable).parent
NODES = ("c-h100=hgx-h100:noble", "c-a100=a100-pcie-mig:jammy", "c-cpu=no-gpu:bookworm")


def lab(state: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([sys.executable, "-m", "lab", "--state", str(state), *args], cwd=REPO,
                         capture_output=True, text=True, timeout=timeout, check=False)
    assert res.returncode == 0, f"lab {' '.join(args)}: {res.stderr.strip()[-2000:]}"
    return res


@pytest.fixture(scope="module")
def toolchain():
    # Built (or found) before anything is timed: the cold build is measured by the CI run as a whole.
    return ensure_toolchain(lambda msg: print(msg, file=sys.stderr))


@pytest.fixture(scope="module")
def cluster(toolchain, tmp_path_factory):
    state = tmp_path_factory.mktemp("cluster")
    t0 = time.monotonic()
    lab(state, "cluster", "up", *[f"--node={n}" for n in NODES])
    kubeconfig = state / "cluster/kubeconfig"
    kubectl_args = ["--kubeconfig", str(kubeconfig)]
    nodes = subprocess.run([str(BIN / "kubectl"), *kubectl_args, "get", "nodes", "-o", "name"],
                           capture_output=True, text=True, check=True).stdout.split()
    took = time.monotonic() - t0
    yield state, kubeconfig, took, nodes
    if (state / "cluster/cluster.json").exists():
        lab(state, "cluster", "down")


def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(BIN / "kubectl"), "--kubeconfig", str(kubeconfig), *args], input=stdin,
                         capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert res.returncode == 0, f"kubectl {' '.join(args)}: {res.stderr}"
    return res


def wait_for(what: str, check, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def pods(kubeconfig: Path, selector: str, namespace: str = "default") -> list[dict]:
    out = kubectl(kubeconfig, "get", "pods", "-n", namespace, "-l", selector, "-o", "json").stdout
    return json.loads(out)["items"]


def on_node(kubeconfig: Path, selector: str, node: str) -> list[dict]:
    return [p for p in pods(kubeconfig, selector) if p["spec"].get("nodeName") == node]


def running_on(kubeconfig: Path, selector: str, node: str) -> list[dict]:
    return [p for p in on_node(kubeconfig, selector, node)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")]


def allocatable(kubeconfig: Path, node: str) -> dict[str, str]:
    out = kubectl(kubeconfig, "get", "node", node, "-o", "json").stdout
    return {k: v for k, v in json.loads(out)["status"]["allocatable"].items() if k.startswith("nvidia.com/")}


def test_nodes_answer_with_the_real_server(cluster):
    _state, kubeconfig, took, nodes = cluster
    assert sorted(nodes) == ["node/c-a100", "node/c-cpu", "node/c-h100"]
    print(f"lab cluster up took {took:.1f}s")  # measured, not asserted: make test holds no timed assertion
    version = json.loads(kubectl(kubeconfig, "version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
    assert version == KUBERNETES_VERSION


def test_nodes_carry_nfd_labels_and_no_gpu_capacity_until_a_plugin_runs(cluster):
    _state, kubeconfig, _took, _nodes = cluster
    labels = json.loads(kubectl(kubeconfig, "get", "node", "c-h100", "-o", "json").stdout)["metadata"]["labels"]
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert labels["feature.node.kubernetes.io/system-os_release.VERSION_ID"] == "24.04"
    assert allocatable(kubeconfig, "c-h100") == {}


DAEMONSET = """
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: nvidia-device-plugin-daemonset, namespace: default}
spec:
  selector: {matchLabels: {app: nvidia-device-plugin-daemonset}}
  template:
    metadata: {labels: {app: nvidia-device-plugin-daemonset}}
    spec:
      nodeSelector: {feature.node.kubernetes.io/pci-10de.present: "true"}
      containers:
        - name: plugin
          image: registry.invalid/k8s-device-plugin:lab
          env: [{name: MIG_STRATEGY, value: mixed}]
"""


def test_a_daemonset_runs_on_exactly_the_selected_nodes_and_brings_gpu_capacity(cluster):
    _state, kubeconfig, _took, _nodes = cluster
    kubectl(kubeconfig, "apply", "-f", "-", stdin=DAEMONSET)
    selector = "app=nvidia-device-plugin-daemonset"

    def running_nodes():
        found = pods(kubeconfig, selector)
        if len(found) == 2 and all(p["status"].get("phase") == "Running" for p in found):
            return sorted(p["spec"]["nodeName"] for p in found)
        return None

    assert wait_for("device plugin pods Running", running_nodes) == ["c-a100", "c-h100"]
    assert wait_for("H100 capacity", lambda: allocatable(kubeconfig, "c-h100")) == {"nvidia.com/gpu": "8"}
    assert wait_for("A100 MIG capacity", lambda: allocatable(kubeconfig, "c-a100")) == {
        "nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1",
    }
    assert allocatable(kubeconfig, "c-cpu") == {}

    kubectl(kubeconfig, "delete", "daemonset", "nvidia-device-plugin-daemonset", "--wait=true")
    wait_for("capacity to drop", lambda: allocatable(kubeconfig, "c-h100") == {"nvidia.com/gpu": "0"})


def test_a_job_completes(cluster):
    _state, kubeconfig, _took, _nodes = cluster
    kubectl(kubeconfig, "create", "job", "smoke", "--image=registry.invalid/busybox:lab", "--", "true")
    kubectl(kubeconfig, "wait", "--for=condition=Complete", "job/smoke", "--timeout=60s")


def test_drain_evicts_and_a_disruption_budget_blocks_without_force(cluster):
    _state, kubeconfig, _took, _nodes = cluster
    # Both workloads on the CPU node: one guarded by a budget that allows no disruption, one not.
    for name in ("guarded", "free"):
        kubectl(kubeconfig, "create", "deployment", name, "--image=registry.invalid/app:lab", "--replicas=1")
        kubectl(kubeconfig, "patch", "deployment", name, "--type=merge", "-p",
                json.dumps({"spec": {"template": {"spec": {"nodeSelector": {"kubernetes.io/hostname": "c-cpu"}}}}}))
    kubectl(kubeconfig, "create", "pdb", "guarded", "--selector=app=guarded", "--min-available=1")
    for name in ("guarded", "free"):
        wait_for(f"{name} Running", lambda n=name: running_on(kubeconfig, f"app={n}", "c-cpu"))
    guarded = pods(kubeconfig, "app=guarded")[0]["metadata"]["name"]

    drain = kubectl(kubeconfig, "drain", "c-cpu", "--ignore-daemonsets", "--timeout=15s", check=False)
    assert drain.returncode != 0
    assert "disruption budget" in drain.stdout + drain.stderr
    # The guarded pod was not forced out; the free one was evicted, and its replacement cannot land here.
    names = [p["metadata"]["name"] for p in pods(kubeconfig, "app=guarded")]
    assert guarded in names
    node = json.loads(kubectl(kubeconfig, "get", "node", "c-cpu", "-o", "json").stdout)
    assert node["spec"].get("unschedulable") is True
    assert wait_for("the free pod to leave c-cpu", lambda: not on_node(kubeconfig, "app=free", "c-cpu"))


def test_down_stops_exactly_the_cluster_processes(cluster):
    state, _kubeconfig, _took, _nodes = cluster
    recorded = json.loads((state / "cluster/cluster.json").read_text())["pids"]
    assert set(recorded) >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller",
                             "devplugin-sim"}
    # The lab's etcd runs with the settings that keep a busy host's disk out of its request deadline.
    etcd_args = Path(f"/proc/{recorded['etcd']}/cmdline").read_bytes().split(b"\0")
    assert b"--unsafe-no-fsync=true" in etcd_args and b"--election-timeout=5000" in etcd_args, etcd_args
    # A process that looks like a component by name, and that a kill by name would take down.
    decoy = subprocess.Popen(["bash", "-c", "exec -a kube-apiserver sleep 300"])
    try:
        lab(state, "cluster", "down")
        for name, pid in recorded.items():
            assert not Path(f"/proc/{pid}").exists() or _zombie(pid), f"{name} ({pid}) still running"
        assert decoy.poll() is None, "down stopped a process it did not start"
        assert not (state / "cluster").exists()
    finally:
        os.kill(decoy.pid, signal.SIGTERM)
        decoy.wait()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True


def test_a_thousand_nodes_come_up_ready(toolchain, tmp_path):
    # How long it takes is `make bench`'s to say; the wait below is only a limit.
    lab(tmp_path, "cluster", "up", "--nodes", "1000", "--timeout", "300")
    try:
        out = kubectl(tmp_path / "cluster/kubeconfig", "get", "nodes", "--no-headers").stdout.splitlines()
        assert len(out) == 1000 and all(" Ready " in line for line in out)
    finally:
        lab(tmp_path, "cluster", "down")
