"""The real-node lane (issue 61, `make lab-test-real-node`, marker real_node; `make lab-test` leaves it out).

One Ubuntu 24.04 lab machine with the hgx-h100 profile (no MIG devices) runs a real kubelet and containerd and joins
the lab control plane as a real Node (`lab up --real-node`, lab/realnode.py). Then the collection sets it up as a
site would: the preflight (report only) and container_toolkit roles (the toolkit from the lab's repository, CDI, on the
distribution's containerd), then playbooks/cluster.yml with the device plugin and GFD only (no MIG manager: MIG devices
and mig-parted stay simulated; no DCGM exporter: no libdcgm), their images built from NVIDIA's sources at v0.19.3 and
imported on the node. Everything is proven on the API server and on the machine, never by the playbooks' output: the
device plugin and GFD pods Running, nvidia.com/gpu allocatable 8, GFD's labels published by the real nfd-master (GFD
reached the API server through the `kubernetes` Service), the validation role's Job on runtimeClassName nvidia seeing
/dev/nvidia* through CDI; a second cluster.yml changes nothing; playbooks/uninstall.yml leaves no nvidia pod, label or
runtime handler. `lab down` removes the Node and the machine and what it left on the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from lab import realnode
from lab.machines import Lab
from lab.nodebuild import DEVICE_PLUGIN_VERSION, ensure_node_builds
from lab.sim.hardware import HW_PATH, load_profile
from tests.integration.test_cluster_roles import get, playbook, recap
from tests.integration.test_lab_cluster import kubectl, lab, wait_for

pytestmark = [pytest.mark.lab, pytest.mark.real_node]

NODE = "rn-h100"
PROFILE = "hgx-h100"
NS = "gpu-operator"
BASE_PORT = int(os.environ.get("GPUOPS_REAL_NODE_BASE_PORT", "2361"))
REPO_PORT = int(os.environ.get("GPUOPS_REAL_NODE_REPO_PORT", "8473"))
GPUS = len(load_profile(PROFILE)["gpus"]["bus_ids"])
REPO = Path(__file__).resolve().parents[2]


def machine_run(state: Path, script: str, check: bool = True) -> str:
    lab_ = Lab(state)
    machine = lab_.load()[NODE]
    res = subprocess.run(lab_.ssh_command(machine, "bash", "-c", f"'{script}'"), capture_output=True, text=True, timeout=120,
                         check=False, stdin=subprocess.DEVNULL)
    if check:
        assert res.returncode == 0, f"{script}: {res.stderr.strip()[-1000:]}"
    return res.stdout


def nvidia_labels(kubeconfig: Path) -> dict[str, str]:
    node = get(kubeconfig, "node", NODE)
    return {k: v for k, v in node["metadata"].get("labels", {}).items() if k.startswith("nvidia.com/")}


def running_pods(kubeconfig: Path, app: str) -> list[dict]:
    items = get(kubeconfig, "pods", "-n", NS, "-l", f"app={app}")["items"]
    return [p for p in items if p["spec"].get("nodeName") == NODE and p["status"].get("phase") == "Running"
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))]


def cluster_story(kubeconfig: Path) -> str:
    """What a failed step's message carries: the GPU namespace's pods and its events, newest last."""
    pods = kubectl(kubeconfig, "get", "pods", "-n", NS, "-o", "wide", check=False).stdout
    events = kubectl(kubeconfig, "get", "events", "-n", NS, "--sort-by=.lastTimestamp", check=False).stdout
    return f"\n--- pods in {NS}:\n{pods}\n--- events in {NS}:\n{events[-4000:]}"


class JobLogWatch(threading.Thread):
    """The validation role deletes its Jobs within the run: read the smoke test's log on the machine (the kubelet's
    /var/log/pods) while cluster.yml runs."""

    def __init__(self, state: Path) -> None:
        super().__init__(daemon=True)
        self.state, self.log, self.done = state, "", threading.Event()

    def run(self) -> None:
        while not self.done.is_set() and "injected" not in self.log:
            out = machine_run(self.state, f"cat /var/log/pods/{NS}_gpuops-validate-*/*/*.log 2>/dev/null || true", check=False)
            if out.strip():
                self.log = out
            time.sleep(0.5)


# The node's containerd: the archive's newest (2.2, noble-updates: CDI through the CRI, config migrated from version 2)
# and 1.7 (noble's release pocket, 1.7.12), the whole lane on each; and NRI mode (issue 63, docs/nri.md) on 2.2: the
# toolkit's NRI plugin (lab/nri-plugin, from the lab repository's tools/) gives the operands NVML from their pods'
# annotations, the device plugin's devices go through the CRI, and nothing runs on an nvidia runtime.
VARIANTS = {
    "containerd-2": {"containerd": "", "nri": False},
    "containerd-1.7": {"containerd": "1.7", "nri": False},
    "containerd-2-nri": {"containerd": "", "nri": True},
}


def variant(request) -> dict:
    return VARIANTS[request.node.callspec.id]


@pytest.fixture(scope="module", params=list(VARIANTS.values()), ids=list(VARIANTS))
def real_node(tmp_path_factory, request):
    realnode.check_lane_settings([BASE_PORT, REPO_PORT])
    state = tmp_path_factory.mktemp("real-node")
    builds = ensure_node_builds()
    assert builds.device_plugin_image.endswith(f":{DEVICE_PLUGIN_VERSION}")
    t0 = time.monotonic()
    try:
        lab(state, "cluster", "up", "--no-machines")
        lab(state, "repo", "up", "--port", str(REPO_PORT))
        inventory = state / "inventory" / "hosts.yml"
        lab(state, "up", "--inventory", str(inventory), "--base-port", str(BASE_PORT), f"--real-node={NODE}={PROFILE}",
            f"--real-node-containerd={request.param['containerd']}", timeout=900)
        print(f"real node joined in {time.monotonic() - t0:.0f}s")
        kubeconfig = state / "cluster/kubeconfig"
        repo_url = f"http://127.0.0.1:{REPO_PORT}"
        (inventory.parent / "group_vars").mkdir()
        (inventory.parent / "group_vars/all.yml").write_text(yaml.safe_dump({
            "gpuops_cluster_kubeconfig": str(kubeconfig),
            "gpuops_node_feature_discovery_crds_url": f"file://{state / 'cluster/nfd-api-crds.yaml'}",
            # The toolkit from the lab's signed repository (nvidia-container-toolkit-base only: CDI), pointed at the
            # simulated driver's root.
            "gpuops_container_toolkit_repo_url": repo_url, "gpuops_container_toolkit_repo_key_url": f"{repo_url}/gpgkey",
            "gpuops_container_toolkit_mode": "nri" if request.param["nri"] else "cdi",
            "gpuops_container_toolkit_driver_root": f"{HW_PATH}/driver",
            **({"gpuops_container_toolkit_nri_plugin_source": f"{repo_url}/tools/gpuops-nvidia-nri-plugin",
                "gpuops_cluster_nri": True} if request.param["nri"] else {}),
            # The images the node has (built from NVIDIA's sources, imported): v0.19.3, the newest the proxy serves.
            "gpuops_device_plugin_version": DEVICE_PLUGIN_VERSION, "gpuops_gpu_feature_discovery_version": DEVICE_PLUGIN_VERSION,
            # What runs real: the device plugin and GFD. No MIG manager (mig-parted needs /proc/modules, MIG devices
            # /proc/driver/nvidia/capabilities), no DCGM exporter (no libdcgm).
            "gpuops_cluster_prereqs_deploy_components": ["device-plugin", "gpu-feature-discovery"],
            # NFD is the lab's nfd-master process (its images are not built here): the role deploys none, checks it.
            "gpuops_node_feature_discovery_deploy": "false",
            # The smoke test: the lab's probe image lists the /dev/nvidia* the runtime injected (no nvidia-smi here).
            "gpuops_validation_image": builds.probe_image, "gpuops_validation_command": ["/devices-probe"],
            "gpuops_validation_timeout": 240,
        }))
        yield state, kubeconfig, inventory
    finally:
        for args in (("down", "--inventory", ""), ("cluster", "down"), ("repo", "down")):
            subprocess.run([sys.executable, "-m", "lab", "--state", str(state), *args], cwd=REPO, check=False, timeout=300)


def test_the_machine_is_a_real_node_of_the_cluster(real_node, request):
    state, kubeconfig, _inventory = real_node
    node = get(kubeconfig, "node", NODE)
    assert "kwok.x-k8s.io/node" not in node["metadata"].get("annotations", {})  # not a KWOK node
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.3"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    series = variant(request)["containerd"] or "2."
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith(f"containerd://{series}"), node["status"]["nodeInfo"]
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True", ready
    assert machine_run(state, "systemctl is-active kubelet containerd").split() == ["active", "active"]


def test_the_node_playbook_sets_containerd_up_with_cdi(real_node, request):
    state, _kubeconfig, inventory = real_node
    res = playbook(inventory, "--diff", play="../tests/integration/real_node/node.yml")
    assert res.returncode == 0, res.stdout[-4000:]
    spec = machine_run(state, "nvidia-ctk cdi list")
    assert "nvidia.com/gpu=all" in spec, spec
    dump = machine_run(state, "containerd config dump")
    # containerd 1.7's or 2.x's dump (noble-updates ships 2.2, which reads the lab's version 2 config migrated).
    assert "enable_cdi = true" in dump, dump
    if variant(request)["nri"]:
        # NRI on, no nvidia runtime; the plugin registered with containerd (its unit running).
        assert "containerd.runtimes.nvidia]" not in dump, dump
        nri = dump[dump.index("[plugins.'io.containerd.nri.v1.nri']"):][:600] if "[plugins.'io.containerd.nri.v1.nri']" in dump \
            else dump[dump.index('[plugins."io.containerd.nri.v1.nri"]'):][:600]
        assert "disable = false" in nri, nri
        assert machine_run(state, "systemctl is-active gpuops-nvidia-nri-plugin").split() == ["active"]
    else:
        assert "containerd.runtimes.nvidia]" in dump, dump


def test_cluster_yml_runs_the_device_plugin_and_gfd_on_the_real_node(real_node, request):
    state, kubeconfig, inventory = real_node
    watch = JobLogWatch(state)
    watch.start()
    t0 = time.monotonic()
    res = playbook(inventory, "--diff", timeout=1200)
    watch.done.set()
    watch.join(10)
    print(f"cluster.yml on the real node: {time.monotonic() - t0:.0f}s")
    assert res.returncode == 0, res.stdout[-6000:] + cluster_story(kubeconfig)
    assert running_pods(kubeconfig, "nvidia-device-plugin-daemonset"), "no device plugin pod Running on the real node"
    assert running_pods(kubeconfig, "gpu-feature-discovery"), "no GFD pod Running on the real node"
    node = get(kubeconfig, "node", NODE)
    assert node["status"]["allocatable"].get("nvidia.com/gpu") == str(GPUS)
    # GFD's labels, which only nfd-master writes from GFD's NodeFeature: GFD reached the API server from its pod.
    features = get(kubeconfig, "nodefeatures", "-n", NS)["items"]
    assert any(f["metadata"]["labels"].get("nfd.node.kubernetes.io/node-name") == NODE for f in features), features
    labels = nvidia_labels(kubeconfig)
    assert labels.get("nvidia.com/gpu.count") == str(GPUS) and labels.get("nvidia.com/gpu.product", "").startswith("NVIDIA-H100")
    assert "nvidia.com/mig.config" not in labels  # no MIG manager deployed: no config for it to apply
    # The smoke test saw the GPU that CDI gave it (through the nvidia RuntimeClass, or in NRI mode through the CRI).
    assert "NVIDIA device node(s) injected" in watch.log and "/dev/nvidia" in watch.log, watch.log or "no log read"
    if variant(request)["nri"]:
        # No RuntimeClass: the operands got NVML from their annotation through the NRI plugin, the smoke test its GPU
        # through the CRI (the device plugin's CDI devices).
        assert not get(kubeconfig, "runtimeclasses")["items"]
        plugin = running_pods(kubeconfig, "nvidia-device-plugin-daemonset")[0]
        assert "runtimeClassName" not in plugin["spec"]
        assert "nvidia.cdi.k8s.io/container.nvidia-device-plugin" in plugin["metadata"].get("annotations", {}), plugin["metadata"]
    pod_ips = [p["status"].get("podIP", "") for p in running_pods(kubeconfig, "gpu-feature-discovery")]
    assert all(ip.startswith("10.244.61.") for ip in pod_ips), pod_ips


def test_a_second_cluster_yml_changes_nothing(real_node):
    _state, _kubeconfig, inventory = real_node
    res = playbook(inventory, "--diff", timeout=900)
    assert res.returncode == 0, res.stdout[-4000:]
    rows = recap(res.stdout)
    assert "localhost" in rows and all(row["changed"] == 0 for row in rows.values()), res.stdout[-4000:]


def test_the_uninstall_leaves_no_nvidia_pod_label_or_runtime_handler(real_node, request):
    state, kubeconfig, inventory = real_node
    res = playbook(inventory, timeout=900, play="uninstall.yml")
    assert res.returncode == 0, res.stdout[-4000:]
    wait_for("the GPU components' pods gone", lambda: not get(kubeconfig, "pods", "-n", NS)["items"], timeout=120)
    wait_for("no nvidia.com label on the Node", lambda: not nvidia_labels(kubeconfig), timeout=120)
    assert not get(kubeconfig, "runtimeclasses")["items"]

    def handlers() -> list[str]:
        return [h.get("name", "") for h in get(kubeconfig, "node", NODE)["status"].get("runtimeHandlers", [])]

    if variant(request)["containerd"] == "1.7":
        # containerd 1.7's CRI reports no runtime handlers to the kubelet (2.0 began to): its config dump is the judge.
        assert handlers() == []
    else:
        wait_for("the kubelet reporting no nvidia runtime handler", lambda: handlers() and "nvidia" not in handlers(), timeout=120)
    assert "nvidia" not in machine_run(state, "containerd config dump")


def test_lab_down_removes_the_node_the_machine_and_what_it_left_on_the_host(real_node):
    state, kubeconfig, _inventory = real_node
    machine = Lab(state).load()[NODE]
    lab(state, "down", "--inventory", "")
    assert kubectl(kubeconfig, "get", "node", NODE, check=False).returncode != 0
    assert not Path(machine.directory).exists()
    assert not Path(f"/sys/class/net/{realnode.BRIDGE}").exists()
    assert realnode.host_cgroups(NODE) == []
