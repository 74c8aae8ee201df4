"""playbooks/cluster.yml against the lab cluster, checked on the API server, never on the playbook's output.

The GPU hosts are KWOK nodes without machines: each host's gpuops_gpu_info is what gpu_info reads from its
profile's simulated hardware (lab/facts.py), so every task on the hosts is skipped and the roles run
from the controller as they do in production. In order, on one fresh cluster: check mode creates nothing;
bad input fails before anything is applied, naming the variable; a run deploys everything where it belongs
(the device plugin with GDS and GDRCopy turned on from the rdma role's facts), the simulated device plugin
brings each node's capacity (16 on the L40S node with time-slicing x4, 32 on the H100 one) and the lab's GFD
stand-in writes NodeFeature objects that the lab's real nfd-master publishes as Node labels, which the
validation role checks; a second run changes nothing; a Node whose GFD labels are wrong fails validation, named
with the label, the value expected and the one found; GFD's labels follow a node's sharing config; an NFD that
would drop them is refused before anything is applied; MPS needs its control daemon. cluster.yml on a thousand
nodes (first and no-op, every node labelled) is `make bench`'s (lab/bench.py): no timed test here.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from lab.facts import A100_PROFILE_MIG_CONFIG, cluster_inventory
from lab.interrupt import kill_group
from tests.integration.test_lab_cluster import BIN, REPO, kubectl, lab, wait_for

NODES = (("r-h100", "hgx-h100"), ("r-a100", "a100-pcie-mig"), ("r-l40s", "l40s"), ("r-cpu", "no-gpu"))
TS4 = {"sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
NS = "gpu-operator"


def playbook_command(inventory: Path, *args: str, play: str = "cluster.yml") -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build/collections"), "ANSIBLE_STDOUT_CALLBACK": "default",
           "ANSIBLE_CALLBACK_RESULT_FORMAT": "yaml", "ANSIBLE_FORKS": "50", "ANSIBLE_HOST_KEY_CHECKING": "false"}
    return [str(BIN / "ansible-playbook"), "-i", str(inventory), str(REPO / "playbooks" / play), *args], env


def playbook(inventory: Path, *args: str, extra: dict | None = None, timeout: float = 900,
             play: str = "cluster.yml") -> subprocess.CompletedProcess[str]:
    cmd, env = playbook_command(inventory, *args, play=play)
    if extra:
        extra_file = inventory.with_name(f"extra-{abs(hash(json.dumps(extra, sort_keys=True)))}.json")
        extra_file.write_text(json.dumps(extra))
        cmd += ["-e", f"@{extra_file}"]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env, check=False)


def recap(out: str) -> dict[str, dict[str, int]]:
    rows = re.findall(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    return {h: {"ok": int(o), "changed": int(c), "failed": int(f)} for h, o, c, _u, f in rows}


def get(kubeconfig: Path, *args: str) -> dict:
    return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json").stdout)


def nvidia_labels(kubeconfig: Path) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: {k: v for k, v in n["metadata"].get("labels", {}).items() if k.startswith("nvidia.com/")}
            for n in get(kubeconfig, "nodes")["items"]}


def node_labels(kubeconfig: Path) -> dict[str, dict[str, str]]:
    return {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in get(kubeconfig, "nodes")["items"]}


BEFORE: dict[str, dict] = {}


def nfd_crds(state: Path) -> dict:
    """The lab's copy of NFD's CRD manifest (from the Go module), as the role reads it on an air-gapped site."""
    return {"gpuops_node_feature_discovery_crds_url": f"file://{state / 'cluster/nfd-api-crds.yaml'}"}


@pytest.fixture(scope="module")
def lab_cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("roles")
    lab(state, "cluster", "up", "--no-machines", *[f"--node={name}={profile}" for name, profile in NODES])
    kubeconfig = state / "cluster/kubeconfig"
    # The Nodes as the cluster made them, before any run: what an uninstall must leave (the last test). Once the node
    # lifecycle controller has copied kubernetes.io/os and arch to their beta labels, which it does a while after the
    # Nodes are Ready (taken before, they made the uninstall test fail on a loaded machine).
    wait_for("the beta os and arch labels on every Node",
             lambda: all({"beta.kubernetes.io/os", "beta.kubernetes.io/arch"} <= set(labels) for labels in node_labels(kubeconfig).values()),
             timeout=120)
    BEFORE["labels"] = node_labels(kubeconfig)
    inventory = state / "inventory.json"
    inventory.write_text(json.dumps(cluster_inventory(
        list(NODES),
        {"gpuops_cluster_kubeconfig": str(kubeconfig), "gpuops_device_plugin_configs": {"ts-4": TS4},
         "gpuops_mig_manager_configs": A100_PROFILE_MIG_CONFIG, "gpuops_validation_timeout": 120, **nfd_crds(state)},
        # What the rdma role tells the cluster side: GDS set up on the H100 host, GDRCopy on the L40S one.
        {"r-l40s": {"gpuops_device_plugin_config": "ts-4", "gpuops_rdma": {"path": "none", "gds": False, "gdrcopy": True}},
         "r-a100": {"gpuops_mig_manager_config": "lab-a100-gpu0-balanced"},
         "r-h100": {"gpuops_rdma": {"path": "dmabuf", "gds": True, "gdrcopy": False}, "gpuops_device_plugin_config": "ts-4"}})))
    yield kubeconfig, inventory
    lab(state, "cluster", "down")


def test_check_mode_on_a_fresh_cluster_creates_nothing(lab_cluster):
    kubeconfig, inventory = lab_cluster
    res = playbook(inventory, "--check", "--diff")
    assert res.returncode == 0, res.stdout[-3000:]
    assert "would create with namespace gpu-operator" in res.stdout
    assert kubectl(kubeconfig, "get", "namespace", NS, check=False).returncode != 0
    assert get(kubeconfig, "runtimeclasses")["items"] == []
    assert all(labels == {} for labels in nvidia_labels(kubeconfig).values())


def _sharing(kind: str, replicas: int) -> dict:
    return {"sharing": {kind: {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}}}


def _mig(devices: dict, **entry) -> dict:
    return {"gpuops_mig_manager_configs": {"custom": [{**entry, "devices": "all", "mig-enabled": True, "mig-devices": devices}]}}


BAD_INPUT = {
    "replicas 1": (
        {"gpuops_device_plugin_configs": {"ts-1": _sharing("timeSlicing", 1)}},
        "gpuops_device_plugin_configs['ts-1'].sharing.timeSlicing.resources[0].replicas"),
    "MPS with mixed MIG": (
        {"gpuops_device_plugin_mig_strategy": "mixed", "gpuops_device_plugin_configs": {"mps-2": _sharing("mps", 2)}},
        "MPS is not supported with MIG strategy mixed"),
    "1g.12gb on A100 80GB": (
        _mig({"1g.12gb": 7}),
        "gpuops_mig_manager_configs['custom'][0].mig-devices: 1g.12gb is not a MIG profile NVIDIA A100 80GB PCIe"),
    "8 x 1g.10gb": (_mig({"1g.10gb": 8}, **{"device-filter": "0x20B510DE"}), "8 x 1g.10gb (at most 7)"),
    "unknown config in a node label": (
        {"gpuops_device_plugin_config": "no-such-config"},
        "gpuops_device_plugin_config on r-a100: 'no-such-config' names no config"),
    "ServiceMonitor interval not a duration": (
        {"gpuops_dcgm_exporter_service_monitor_interval": "15 seconds"},
        "gpuops_dcgm_exporter_service_monitor_interval: 15 seconds is not a Prometheus duration such as 15s or 1m"),
    "single strategy on a partly-MIG node": (
        {"gpuops_device_plugin_mig_strategy": "single"},
        "gpuops_device_plugin_mig_strategy: single advertises no GPU on r-a100, whose MIG config lab-a100-gpu0-balanced "
        "leaves 1 of its 2 GPUs in MIG mode"),
    "relative kubelet root": (
        {"gpuops_cluster_kubelet_root": "var/lib/kubelet"},
        "gpuops_cluster_kubelet_root: var/lib/kubelet is not an absolute path"),
    "NFD deploy not a choice": (
        {"gpuops_node_feature_discovery_deploy": "maybe"},
        "gpuops_node_feature_discovery_deploy must be one of: auto, true, false, got: maybe"),
    # Values the API server takes (or refuses with a 422 once some objects are in) but nodes cannot use (issue 25).
    # One run, four messages: the shared settings are checked together.
    "shared settings a user mistypes": (
        {"gpuops_cluster_namespace": "GPU-Operator", "gpuops_cluster_runtime_class": "Nvidia",
         "gpuops_cluster_registry": "nvcr.io/nvidia ", "gpuops_cluster_context": "prod"},
        ('gpuops_cluster_namespace: "GPU-Operator" is not a DNS-1123 label',
         'gpuops_cluster_runtime_class: "Nvidia" is not a DNS-1123 subdomain',
         'gpuops_cluster_registry: "nvcr.io/nvidia " is not a registry',
         'gpuops_cluster_context: "prod" is not a context of')),
    "an image that carries a tag": (
        {"gpuops_device_plugin_image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.0", "gpuops_device_plugin_version": "v0.20.0 "},
        ('gpuops_device_plugin_image: "nvcr.io/nvidia/k8s-device-plugin:v0.17.0" carries a tag or digest',
         'gpuops_device_plugin_version: "v0.20.0 " is not an image tag')),
    "a port out of range": ({"gpuops_dcgm_exporter_port": 94000}, "gpuops_dcgm_exporter_port: 94000 is not a port"),
    "a smoke test image without a tag": (
        {"gpuops_validation_image": "nvcr.io/nvidia/cuda"}, 'gpuops_validation_image: "nvcr.io/nvidia/cuda" has no tag or digest'),
    "the smoke test's when, old and new": (
        {"gpuops_validation_smoke": "sometimes", "gpuops_validation_smoke_test": False},
        ('gpuops_validation_smoke: "sometimes" is not one of changed',
         "gpuops_validation_smoke_test was replaced by gpuops_validation_smoke")),
    "a kubeconfig that is a directory": ({"gpuops_cluster_kubeconfig": "/tmp"}, 'gpuops_cluster_kubeconfig: "/tmp" is a directory'),
    "a typo in the default MIG config": (
        {"gpuops_mig_manager_default_config": "all-balancd"},
        "gpuops_mig_manager_default_config: 'all-balancd' is not a MIG config"),
    # A role's checks are one task: every error of its inputs comes in one run.
    "a role's errors together": (
        {"gpuops_dcgm_exporter_port": 94000, "gpuops_dcgm_exporter_service_monitor_interval": "15 seconds"},
        ("gpuops_dcgm_exporter_port: 94000 is not a port",
         "gpuops_dcgm_exporter_service_monitor_interval: 15 seconds is not a Prometheus duration")),
    "sharing configs with DRA": (
        {"gpuops_gpu_scheduling": "dra", "gpuops_device_plugin_configs": {"ts-2": _sharing("timeSlicing", 2)}},
        "are the device plugin's sharing configs, which nothing reads with gpuops_gpu_scheduling: dra"),
    "unknown DCGM field": (
        {"gpuops_dcgm_exporter_metrics": "DCGM_FI_DEV_GPU_UTIL, gauge, GPU utilization.\nDCGM_FI_DEV_NO_SUCH_FIELD, gauge, Nothing.\n"},
        "gpuops_dcgm_exporter_metrics line 2: 'DCGM_FI_DEV_NO_SUCH_FIELD' is not a DCGM field name"),
}


def _kubeconfig_variant(kubeconfig: Path, name: str, change) -> str:
    """A copy of the lab's kubeconfig with change(config) applied, beside it."""
    config = yaml.safe_load(kubeconfig.read_text())
    change(config)
    path = kubeconfig.with_name(f"kubeconfig-{name}")
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _unreachable(config: dict) -> None:
    config["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:9"


def _stranger(config: dict) -> None:
    config["users"][0]["user"] = {"token": "not-a-token-of-this-cluster"}


# The connection itself (issue 23): each named with where the settings came from, before any role talks to the server.
CONNECTION = {
    "a kubeconfig that does not exist": (lambda _k: "/nonexistent/kubeconfig", 'gpuops_cluster_kubeconfig: "/nonexistent/kubeconfig" does not exist'),
    "an API server that does not answer": (lambda k: _kubeconfig_variant(k, "unreachable", _unreachable),
                                           "cannot reach the API server https://127.0.0.1:9 of gpuops_cluster_kubeconfig"),
    "credentials the API server refuses": (lambda k: _kubeconfig_variant(k, "stranger", _stranger),
                                           "the API server refused the credentials of gpuops_cluster_kubeconfig"),
}


@pytest.mark.parametrize("case", list(CONNECTION))
def test_bad_connection_fails_before_anything_is_applied(lab_cluster, case):
    kubeconfig, inventory = lab_cluster
    path, message = CONNECTION[case]
    res = playbook(inventory, extra={"gpuops_cluster_kubeconfig": path(kubeconfig)})
    assert res.returncode != 0
    assert message in " ".join(res.stdout.split()), res.stdout[-3000:]
    assert "Apply them" not in res.stdout
    assert kubectl(kubeconfig, "get", "namespace", NS, check=False).returncode != 0
    assert all(labels == {} for labels in nvidia_labels(kubeconfig).values())


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_fails_before_anything_is_applied(lab_cluster, case):
    kubeconfig, inventory = lab_cluster
    extra, messages = BAD_INPUT[case]
    res = playbook(inventory, extra=extra)
    assert res.returncode != 0
    out = " ".join(res.stdout.split())  # the callback folds long messages
    for message in (messages,) if isinstance(messages, str) else messages:
        assert message in out, res.stdout[-3000:]
    assert kubectl(kubeconfig, "get", "namespace", NS, check=False).returncode != 0
    assert all(labels == {} for labels in nvidia_labels(kubeconfig).values())


def test_converge_deploys_where_it_belongs_and_validates(lab_cluster):
    kubeconfig, inventory = lab_cluster
    res = playbook(inventory)
    assert res.returncode == 0, res.stdout[-4000:]

    labels = nvidia_labels(kubeconfig)
    assert labels["r-cpu"] == {"nvidia.com/gpu.present": "false"}
    for node in ("r-h100", "r-a100", "r-l40s"):
        assert labels[node]["nvidia.com/gpu.present"] == "true"
        for component in ("device-plugin", "gpu-feature-discovery", "dcgm-exporter"):
            assert labels[node][f"nvidia.com/gpu.deploy.{component}"] == "true"
    assert labels["r-l40s"]["nvidia.com/mig.capable"] == "false" and "nvidia.com/gpu.deploy.mig-manager" not in labels["r-l40s"]
    assert labels["r-a100"]["nvidia.com/mig.config"] == "lab-a100-gpu0-balanced"
    assert labels["r-h100"]["nvidia.com/mig.config"] == "all-disabled"
    # The lab's MIG manager applied each node's config (the layout r-a100's facts show).
    assert {n: get(kubeconfig, "node", n)["metadata"]["labels"].get("nvidia.com/mig.config.state") for n in ("r-a100", "r-h100")} \
        == {"r-a100": "success", "r-h100": "success"}
    assert labels["r-l40s"]["nvidia.com/device-plugin.config"] == "ts-4"
    assert "nvidia.com/mig.config" not in labels["r-l40s"]

    ns = get(kubeconfig, "namespace", NS)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert get(kubeconfig, "runtimeclass", "nvidia")["handler"] == "nvidia"

    want = {"nvidia-device-plugin-daemonset": ("device-plugin", {"r-h100", "r-a100", "r-l40s"}),
            "gpu-feature-discovery": ("gpu-feature-discovery", {"r-h100", "r-a100", "r-l40s"}),
            "nvidia-dcgm-exporter": ("dcgm-exporter", {"r-h100", "r-a100", "r-l40s"}),
            "nvidia-mig-manager": ("mig-manager", {"r-h100", "r-a100"})}
    pods = get(kubeconfig, "pods", "-n", NS)["items"]
    for name, (component, nodes) in want.items():
        ds = get(kubeconfig, "daemonset", "-n", NS, name)
        assert ds["spec"]["selector"]["matchLabels"] == {"app": name}
        assert ds["spec"]["template"]["spec"]["nodeSelector"] == {f"nvidia.com/gpu.deploy.{component}": "true"}
        running = {p["spec"]["nodeName"] for p in pods if p["metadata"]["labels"].get("app") == name
                   and p["status"].get("phase") == "Running"}
        assert running == nodes, name

    # No nfd-master Deployment in the cluster (the lab's nfd-master is a process): the role deploys NFD.
    master = get(kubeconfig, "deployment", "-n", NS, "nfd-master")
    assert master["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuops.nvidia"
    assert yaml.safe_load(get(kubeconfig, "configmap", "-n", NS, "nfd-master-conf")["data"]["nfd-master.conf"]) == {
        "extraLabelNs": ["nvidia.com"]}
    assert get(kubeconfig, "daemonset", "-n", NS, "nfd-worker")["spec"]["template"]["spec"]["containers"][0]["command"] == ["nfd-worker"]
    assert "Deploying Node Feature Discovery v0.19.0 in gpu-operator" in " ".join(res.stdout.split())

    plugin_volumes = {v["name"]: v.get("hostPath", {}).get("path") for v in
                      get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-daemonset")["spec"]["template"]["spec"]["volumes"]}
    assert plugin_volumes["device-plugin"] == "/var/lib/kubelet/device-plugins"
    mig_env = {e["name"]: e.get("value") for e in get(kubeconfig, "daemonset", "-n", NS, "nvidia-mig-manager")["spec"]["template"]
               ["spec"]["containers"][0]["env"]}
    assert "CDI_ENABLED" not in mig_env  # no host reports CDI here
    # Host drivers only: the host's GPU clients are stopped around a change, the driver and its devices at the host's /.
    assert {k: mig_env[k] for k in ("WITH_SHUTDOWN_HOST_GPU_CLIENTS", "NVIDIA_DRIVER_ROOT", "DRIVER_ROOT_CTR_PATH", "NVIDIA_DEV_ROOT",
                                    "DEV_ROOT_CTR_PATH")} == {"WITH_SHUTDOWN_HOST_GPU_CLIENTS": "true", "NVIDIA_DRIVER_ROOT": "/",
                                                              "DRIVER_ROOT_CTR_PATH": "/host", "NVIDIA_DEV_ROOT": "/", "DEV_ROOT_CTR_PATH": "/host"}

    # GDS (with MOFED, as the operator pairs them) and GDRCopy, from the rdma role's facts.
    plugin = get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-daemonset")["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in plugin["containers"][0]["env"]}
    assert {k: env.get(k) for k in ("GDS_ENABLED", "MOFED_ENABLED", "GDRCOPY_ENABLED")} == dict.fromkeys(
        ("GDS_ENABLED", "MOFED_ENABLED", "GDRCOPY_ENABLED"), "true")

    # With sharing configs, GFD runs the device plugin's config manager, so its labels tell each node's sharing.
    gfd_pod = get(kubeconfig, "daemonset", "-n", NS, "gpu-feature-discovery")["spec"]["template"]["spec"]
    assert [c["name"] for c in gfd_pod["initContainers"]] == ["config-manager-init"]
    assert [c["name"] for c in gfd_pod["containers"]] == ["gpu-feature-discovery", "config-manager"]
    assert [v["configMap"]["name"] for v in gfd_pod["volumes"] if v["name"] == "available-configs"] == ["nvidia-device-plugin-configs"]

    data = get(kubeconfig, "configmap", "-n", NS, "nvidia-device-plugin-configs")["data"]
    assert yaml.safe_load(data["ts-4"]) == {"version": "v1", **TS4}
    mig = yaml.safe_load(get(kubeconfig, "configmap", "-n", NS, "default-mig-parted-config")["data"]["config.yaml"])
    assert mig["version"] == "v1"
    assert {"all-disabled", "all-enabled", "all-balanced", "all-1g.10gb", "all-7g.80gb"} <= set(mig["mig-configs"])
    assert mig["mig-configs"]["all-balanced"][0]["mig-devices"] == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    metrics = get(kubeconfig, "configmap", "-n", NS, "nvidia-dcgm-exporter-metrics")["data"]["dcgm-metrics.csv"]
    rows = [r for r in csv.reader(io.StringIO(metrics)) if r and not r[0].startswith("#")]
    assert rows and all(len(r) == 3 for r in rows)
    service = get(kubeconfig, "service", "-n", NS, "nvidia-dcgm-exporter")
    assert service["spec"]["ports"][0]["name"] == "gpu-metrics" and service["spec"]["ports"][0]["port"] == 9400

    def gpus(node):
        alloc = get(kubeconfig, "node", node)["status"].get("allocatable", {})
        return {k: v for k, v in alloc.items() if k.startswith("nvidia.com/")}
    assert gpus("r-l40s") == {"nvidia.com/gpu": "16"}
    assert gpus("r-h100") == {"nvidia.com/gpu": "32"}
    assert gpus("r-a100") == {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1",
                              "nvidia.com/mig-3g.40gb": "1"}
    assert "r-l40s: nvidia.com/gpu=16, smoke test succeeded" in res.stdout
    # The first run set the MIG configs, so it waited for the MIG manager and left GFD's labels of those
    # nodes to the next run (the facts show the layout before a change).
    out = " ".join(res.stdout.split())
    assert "r-h100: nvidia.com/gpu=32, smoke test succeeded, GFD labels not checked" in out, out[-3000:]
    labels = get(kubeconfig, "node", "r-h100")["metadata"]
    sharing_keys = ("nvidia.com/gpu.product", "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy")
    assert {k: labels["labels"].get(k) for k in sharing_keys} == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-SHARED", "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    assert "nvidia.com/gpu.product" in labels["annotations"]["nfd.node.kubernetes.io/feature-labels"].split(",")
    assert get(kubeconfig, "node", "r-a100")["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] == "2"
    assert get(kubeconfig, "jobs", "-n", NS)["items"] == []  # the smoke tests leave nothing behind

    again = playbook(inventory)
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]
    # GFD's labels (the lab's GFD stand-in writes its NodeFeature, the real nfd-master publishes it) carry
    # r-h100's sharing and r-a100's MIG devices, and validation found them right.
    # Nothing changed on the nodes or in the cluster: no smoke-test Job (gpuops_validation_smoke: changed).
    out = " ".join(again.stdout.split())
    assert "r-h100: nvidia.com/gpu=32, smoke test not run: nothing changed, GFD labels right" in out, out[-3000:]
    assert re.search(r"r-a100: nvidia\.com/gpu=1, [^']*smoke test not run: nothing changed, GFD labels right", out), out[-3000:]
    assert ", 0.0s for the smoke tests" in out, out[-3000:]


def node_labels_when(kubeconfig: Path, node: str, check, timeout: float = 60) -> dict:
    """The Node's labels once check(labels) holds (nfd-master publishes a NodeFeature's labels within seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        labels = get(kubeconfig, "node", node)["metadata"]["labels"]
        if check(labels) or time.monotonic() > deadline:
            return labels
        time.sleep(1)


def test_a_wrong_gfd_label_fails_validation_naming_it(lab_cluster):
    # A GFD misreading the hardware (or a wrong fact) looks like this: its NodeFeature says another product.
    kubeconfig, inventory = lab_cluster
    name = ["nodefeature", "-n", NS, "nvidia-features-for-r-h100"]
    right = get(kubeconfig, *name)
    wrong = json.loads(json.dumps(right))
    wrong["spec"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-H100-PCIe-SHARED"
    del wrong["spec"]["labels"]["nvidia.com/gpu.count"]
    kubectl(kubeconfig, "replace", "-f", "-", stdin=json.dumps(wrong))
    try:
        node_labels_when(kubeconfig, "r-h100", lambda lb: lb.get("nvidia.com/gpu.product") == "NVIDIA-H100-PCIe-SHARED")
        res = playbook(inventory, extra={"gpuops_validation_timeout": 10, "gpuops_validation_smoke": "never"})
    finally:
        fixed = get(kubeconfig, *name)
        fixed["spec"] = right["spec"]
        kubectl(kubeconfig, "replace", "-f", "-", stdin=json.dumps(fixed))
    out = " ".join(res.stdout.split())  # the result callback folds long messages
    assert res.returncode != 0
    assert "1 of 3 GPU node(s) failed validation" in out, res.stdout[-3000:]
    assert "r-h100: GFD label nvidia.com/gpu.product expected NVIDIA-H100-80GB-HBM3-SHARED, actual NVIDIA-H100-PCIe-SHARED" in out
    assert "r-h100: GFD label nvidia.com/gpu.count expected 8, actual absent" in out
    assert get(kubeconfig, "jobs", "-n", NS)["items"] == []
    labels = node_labels_when(kubeconfig, "r-h100", lambda lb: lb.get("nvidia.com/gpu.count") == "8")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"


def test_gfds_labels_follow_the_nodes_sharing_config(lab_cluster):
    # The config manager reads the node's label; a label changed by hand changes GFD's labels (and the
    # resources), and the next run puts the inventory's config back, validated.
    kubeconfig, inventory = lab_cluster
    kubectl(kubeconfig, "label", "node", "r-h100", "nvidia.com/device-plugin.config-")
    labels = node_labels_when(kubeconfig, "r-h100", lambda lb: lb.get("nvidia.com/gpu.replicas") == "1")
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "none"
    # Putting the label back is a change to the cluster: the default (changed) runs every node's smoke test.
    res = playbook(inventory)
    out = " ".join(res.stdout.split())
    assert res.returncode == 0, res.stdout[-3000:]
    assert "r-h100: nvidia.com/gpu=32, smoke test succeeded, GFD labels right" in out, out[-3000:]
    assert "r-l40s: nvidia.com/gpu=16, smoke test succeeded" in out, out[-3000:]
    assert get(kubeconfig, "node", "r-h100")["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"


def test_a_run_killed_in_the_middle_of_its_apply_is_finished_by_the_next(lab_cluster):
    """A run that changes GFD's DaemonSet, killed (SIGKILL, its whole process group and the workers that left it, as
    a cancelled AWX job's container goes) as cluster.yml's one apply starts: the node labels are in, the apply got as
    far as it got. The next run, with the inventory's settings, converges and validates; the one after it changes
    nothing. (Killing the group alone left Ansible's worker, which calls setsid(), asleep on a pipe after the test.)"""
    kubeconfig, inventory = lab_cluster
    cmd, env = playbook_command(inventory, "-e", "gpuops_gpu_feature_discovery_sleep_interval=45s")
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    seen: list[str] = []
    killed = False
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if "TASK [gpuops.nvidia.cluster_common : Apply them]" in line:
                kill_group(proc.pid)
                killed = True
                break
    finally:
        if proc.poll() is None and not killed:
            kill_group(proc.pid)
        proc.wait(timeout=60)
    assert killed and proc.returncode == -signal.SIGKILL, "".join(seen)[-3000:]
    res = playbook(inventory)
    assert res.returncode == 0, res.stdout[-3000:]
    assert "3 GPU node(s) valid" in " ".join(res.stdout.split()), res.stdout[-3000:]
    env = get(kubeconfig, "daemonset", "-n", NS, "gpu-feature-discovery")["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {e["name"]: e.get("value") for e in env}["GFD_SLEEP_INTERVAL"] == "60s"
    again = playbook(inventory)
    assert again.returncode == 0, again.stdout[-3000:]
    assert {h: r["changed"] for h, r in recap(again.stdout).items()} == dict.fromkeys(recap(again.stdout), 0), again.stdout[-3000:]


def _cdi_env(kubeconfig: Path) -> dict[str, bool]:
    out = {}
    for name in ("nvidia-device-plugin-daemonset", "nvidia-mig-manager"):
        env = get(kubeconfig, "daemonset", "-n", NS, name)["spec"]["template"]["spec"]["containers"][0]["env"]
        out[name] = {"name": "CDI_ENABLED", "value": "true"} in env
    return out


def test_a_run_that_knows_no_hosts_toolkit_keeps_the_cdi_mode_and_handler_deployed(lab_cluster):
    """cluster.yml on its own (AWX, a day-2 run, no fact cache) reads the hosts' GPUs again but nothing of their
    toolkit, whose facts a site.yml run set. It took that for "no CDI, handler nvidia": it rolled the device plugin
    and the MIG manager on every node, the next site.yml rolled them back, and a RuntimeClass made with another handler
    (which cannot change in place) failed the apply."""
    kubeconfig, inventory = lab_cluster
    kubectl(kubeconfig, "delete", "runtimeclass", "nvidia")
    site = {"gpuops_container_toolkit_cdi": True, "gpuops_container_toolkit_runtime_handler": "nvidia-cdi", "gpuops_cluster_validate": False}
    res = playbook(inventory, extra=site)
    assert res.returncode == 0, res.stdout[-3000:]
    assert _cdi_env(kubeconfig) == {"nvidia-device-plugin-daemonset": True, "nvidia-mig-manager": True}
    assert get(kubeconfig, "runtimeclass", "nvidia")["handler"] == "nvidia-cdi"
    alone = playbook(inventory, extra={"gpuops_cluster_validate": False})
    assert alone.returncode == 0, alone.stdout[-3000:]
    assert recap(alone.stdout)["localhost"]["changed"] == 0, alone.stdout[-3000:]
    assert _cdi_env(kubeconfig) == {"nvidia-device-plugin-daemonset": True, "nvidia-mig-manager": True}
    assert get(kubeconfig, "runtimeclass", "nvidia")["handler"] == "nvidia-cdi"
    # Hosts known without CDI turn it off; the RuntimeClass back as the other tests found it.
    kubectl(kubeconfig, "delete", "runtimeclass", "nvidia")
    back = playbook(inventory, extra={"gpuops_container_toolkit_cdi": False, "gpuops_container_toolkit_runtime_handler": "nvidia"})
    assert back.returncode == 0, back.stdout[-3000:]
    assert _cdi_env(kubeconfig) == {"nvidia-device-plugin-daemonset": False, "nvidia-mig-manager": False}
    assert get(kubeconfig, "runtimeclass", "nvidia")["handler"] == "nvidia"


def test_a_mig_config_set_on_the_node_is_kept_unless_the_inventory_names_one(lab_cluster):
    # r-h100's host names no MIG config (the default applies where the label is absent); r-a100's names its
    # own. The lab's MIG manager applies both changes made by hand; this run is not validated: the lab's
    # facts do not follow the hardware's new layout (a real host's would, read again by the next run).
    kubeconfig, inventory = lab_cluster
    kubectl(kubeconfig, "label", "node", "r-h100", "nvidia.com/mig.config=all-1g.10gb", "--overwrite")
    kubectl(kubeconfig, "label", "node", "r-a100", "nvidia.com/mig.config=all-disabled", "--overwrite")
    try:
        res = playbook(inventory, extra={"gpuops_validation_smoke": "never", "gpuops_cluster_validate": False})
        assert res.returncode == 0, res.stdout[-3000:]
        labels = nvidia_labels(kubeconfig)
        assert labels["r-h100"]["nvidia.com/mig.config"] == "all-1g.10gb"
        assert labels["r-a100"]["nvidia.com/mig.config"] == "lab-a100-gpu0-balanced"
    finally:
        kubectl(kubeconfig, "label", "node", "r-h100", "nvidia.com/mig.config=all-disabled", "--overwrite")
    # Back as the facts say: the next run validates both (r-a100's layout is its config's again). Asked for, every
    # node gets its smoke-test Job, whatever changed.
    res = playbook(inventory, extra={"gpuops_validation_smoke": "always"})
    assert res.returncode == 0, res.stdout[-3000:]
    out = " ".join(res.stdout.split())
    assert re.search(r"r-h100: nvidia\.com/gpu=32, [^']*smoke test succeeded", out), out[-3000:]
    assert "r-l40s: nvidia.com/gpu=16, smoke test succeeded" in out, out[-3000:]


def test_a_mig_change_is_validated_once_the_mig_manager_has_applied_it(lab_cluster):
    kubeconfig, inventory = lab_cluster
    changed = json.loads(inventory.read_text())
    r_a100 = changed["all"]["children"]["gpu_nodes"]["hosts"]["r-a100"]
    r_a100["gpuops_mig_manager_config"] = "all-1g.10gb"
    other = inventory.with_name("inventory-mig.json")
    other.write_text(json.dumps(changed))
    res = playbook(other, extra={"gpuops_validation_smoke": "never"})
    out = " ".join(res.stdout.split())
    assert res.returncode == 0, res.stdout[-3000:]
    # Two GPUs of 7 x 1g.10gb: the layout the config gives, not the one the facts were read in.
    assert re.search(r"r-a100: [^']*nvidia\.com/mig-1g\.10gb=14, [^']*smoke test not run, GFD labels not checked", out), out[-3000:]
    assert "nvidia.com/mig-3g.40gb=0" in out  # what it advertised before, dropped
    # A change the MIG manager fails (the lab's annotation stands for a GPU in use): named, at once.
    kubectl(kubeconfig, "annotate", "node", "r-a100", "gpuops-lab/mig-fail=true", "--overwrite")
    r_a100["gpuops_mig_manager_config"] = "all-disabled"
    other.write_text(json.dumps(changed))
    try:
        res = playbook(other, extra={"gpuops_validation_smoke": "never"})
    finally:
        kubectl(kubeconfig, "annotate", "node", "r-a100", "gpuops-lab/mig-fail-")
    out = " ".join(res.stdout.split())
    assert res.returncode != 0
    assert "r-a100: the MIG manager failed to apply all-disabled (nvidia.com/mig.config.state=failed)" in out, out[-3000:]
    # The roles in a playbook of one's own (no cluster.yml, so no batching): the MIG manager role labels at once and
    # records what it set, and the validation role after it waits for that config.
    own = inventory.with_name("mig-alone.yml")
    own.write_text(yaml.safe_dump([{
        "name": "The MIG manager alone", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "module_defaults": {f"group/{group}": {"kubeconfig": "{{ gpuops_cluster_kubeconfig }}"}
                            for group in ("gpuops.nvidia.cluster",)},
        "roles": ["gpuops.nvidia.mig_manager", "gpuops.nvidia.validation"]}]))
    r_a100["gpuops_mig_manager_config"] = "all-1g.10gb"
    other.write_text(json.dumps(changed))
    res = playbook(other, extra={"gpuops_validation_smoke": "never"}, play=str(own))
    out = " ".join(res.stdout.split())
    assert res.returncode == 0, res.stdout[-3000:]
    # The role's own apply (its main's), the label with it, and the record before the validation.
    assert "TASK [gpuops.nvidia.cluster_common : Apply them]" in out, out[-3000:]
    assert get(kubeconfig, "node", "r-a100")["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    assert re.search(r"r-a100: [^']*nvidia\.com/mig-1g\.10gb=14, ", out), out[-3000:]
    # The inventory's config again: applied and validated.
    res = playbook(inventory, extra={"gpuops_validation_smoke": "never"})
    assert res.returncode == 0, res.stdout[-3000:]
    assert "r-a100: nvidia.com/gpu=1, nvidia.com/mig-1g.10gb=2" in " ".join(res.stdout.split())


def _deployment(app: str, limits: dict | None = None) -> dict:
    """One replica of busybox on r-a100 (KWOK runs no container)."""
    container = {"name": "c", "image": "busybox", **({"resources": {"limits": limits}} if limits else {})}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": app, "namespace": "ml"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": app}}, "template": {
                "metadata": {"labels": {"app": app}},
                "spec": {"nodeSelector": {"kubernetes.io/hostname": "r-a100"}, "containers": [container]}}}}


# Two GPU workloads (one whose PodDisruptionBudget allows no disruption) and a CPU one on the A100 node.
WORKLOAD = [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ml"}},
    _deployment("train", {"nvidia.com/mig-1g.10gb": "1"}),
    _deployment("guarded", {"nvidia.com/mig-1g.10gb": "1"}),
    {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "guarded", "namespace": "ml"},
     "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "guarded"}}}},
    _deployment("web"),
]
DRAINED = "gpuops.nvidia/mig-reconfigure.node-initial-state.unschedulable"
FAILURE = "gpuops.nvidia/mig-reconfigure.failure"


def _running(kubeconfig: Path, node: str) -> dict[str, str]:
    """app -> uid of the ml namespace's running pods on the node."""
    return {p["metadata"]["labels"]["app"]: p["metadata"]["uid"] for p in get(kubeconfig, "pods", "-n", "ml")["items"]
            if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}


def _wait_running(kubeconfig: Path, node: str, apps: set[str], timeout: float = 60) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        running = _running(kubeconfig, node)
        if apps <= set(running) or time.monotonic() > deadline:
            return running
        time.sleep(1)


def test_mig_reconfigure_drains_the_gpu_pods_and_has_the_mig_manager_apply_the_config(lab_cluster):
    """playbooks/mig_reconfigure.yml, cluster path, on r-a100 (in lab-a100-gpu0-balanced, two 1g.10gb): check mode,
    a config the MIG manager lacks, a PDB that allows no disruption, the change, a second run, a node cordoned
    before and a config the MIG manager fails, each checked on the API server."""
    kubeconfig, inventory = lab_cluster
    manifest = inventory.with_name("mig-workload.yaml")
    manifest.write_text(yaml.safe_dump_all(WORKLOAD))
    kubectl(kubeconfig, "apply", "-f", str(manifest))

    def run(config: str, *args: str, limit: str = "r-a100", **extra) -> subprocess.CompletedProcess[str]:
        return playbook(inventory, "--limit", limit, *args, play="mig_reconfigure.yml",
                        extra={"gpuops_mig_reconfigure_config": config, "gpuops_mig_reconfigure_smoke_test": False,
                               "gpuops_mig_reconfigure_timeout": 90, **extra})

    def node() -> dict:
        return get(kubeconfig, "node", "r-a100")

    try:
        before = _wait_running(kubeconfig, "r-a100", {"train", "guarded", "web"})
        assert set(before) == {"train", "guarded", "web"}, before
        labels = node()["metadata"]["labels"]
        assert (labels["nvidia.com/mig.config"], labels["nvidia.com/mig.config.state"]) == ("lab-a100-gpu0-balanced", "success")

        # Check mode: says what would change, changes nothing; a node without MIG is left alone.
        res = run("all-1g.10gb", "--check", limit="r-a100,r-l40s")
        out = " ".join(res.stdout.split())
        assert res.returncode == 0, res.stdout[-3000:]
        assert "r-l40s: no GPU here can do MIG (NVIDIA L40S); left alone" in out, out[-3000:]
        assert ("r-a100: lab-a100-gpu0-balanced (success) -> all-1g.10gb: "
                "GPU 0 2x1g.10gb+1x2g.20gb+1x3g.40gb -> 7x1g.10gb, GPU 1 MIG off -> 7x1g.10gb") in out, out[-3000:]
        assert node()["metadata"]["labels"]["nvidia.com/mig.config"] == "lab-a100-gpu0-balanced"
        assert not node()["spec"].get("unschedulable") and DRAINED not in node()["metadata"].get("annotations", {})
        assert _running(kubeconfig, "r-a100") == before

        # A config the MIG manager's ConfigMap lacks: named with what it has, before anything changes.
        res = run("all-9g.90gb")
        out = " ".join(res.stdout.split())
        assert res.returncode != 0
        assert ("gpuops_mig_reconfigure_config: 'all-9g.90gb' is not a config of the MIG manager "
                "(ConfigMap gpu-operator/default-mig-parted-config has") in out, out[-3000:]
        assert not node()["spec"].get("unschedulable") and _running(kubeconfig, "r-a100") == before

        # A GPU pod no controller would recreate: refused before the cordon, nothing changed.
        kubectl(kubeconfig, "run", "-n", "ml", "notebook", "--image=busybox", "--restart=Never",
                "--overrides", json.dumps({"spec": {"nodeName": "r-a100", "containers": [
                    {"name": "notebook", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}))
        res = run("all-1g.10gb")
        out = " ".join(res.stdout.split())
        assert res.returncode != 0
        assert re.search(r"node r-a100: not drained, nothing changed: ml/notebook: no controller would recreate it "
                         r"\(set gpuops_mig_reconfigure_drain_force to evict it anyway\)\. Nothing changed on r-a100", out), out[-3000:]
        assert not node()["spec"].get("unschedulable") and not {DRAINED, FAILURE} & set(node()["metadata"].get("annotations", {}))
        kubectl(kubeconfig, "delete", "pod", "-n", "ml", "notebook", "--wait=true")

        # A PDB that allows no disruption: the other GPU pod is evicted, this one waits, then the node fails
        # with the budget named and stays cordoned, its label untouched; the CPU pod stays.
        res = run("all-1g.10gb", gpuops_mig_reconfigure_drain_timeout=8)
        out = " ".join(res.stdout.split())
        assert res.returncode != 0
        assert re.search(r"node r-a100: 1 Pod\(s\) not evicted in 8s: ml/guarded-\S+ "
                         r"\(PodDisruptionBudget ml/guarded \(disruptions allowed: 0\)\)", out), out[-3000:]
        assert "r-a100 is left cordoned" in out
        assert node()["spec"]["unschedulable"] is True and node()["metadata"]["annotations"][DRAINED] == "false"
        assert node()["metadata"]["annotations"][FAILURE].startswith("all-1g.10gb: node r-a100: 1 Pod(s) not evicted in 8s")
        assert node()["metadata"]["labels"]["nvidia.com/mig.config"] == "lab-a100-gpu0-balanced"
        running = _running(kubeconfig, "r-a100")
        assert "train" not in running and running["guarded"] == before["guarded"] and running["web"] == before["web"]

        # The budget relaxed, a re-run finishes: the MIG manager applied the config, the node advertises it and
        # is schedulable again, the record gone; the GPU pods come back onto it.
        kubectl(kubeconfig, "patch", "pdb", "-n", "ml", "guarded", "--type=merge", "-p", '{"spec":{"maxUnavailable":1}}')
        res = run("all-1g.10gb", gpuops_mig_reconfigure_smoke_test=True)
        out = " ".join(res.stdout.split())
        assert res.returncode == 0, res.stdout[-3000:]
        labels, allocatable = node()["metadata"]["labels"], node()["status"]["allocatable"]
        assert (labels["nvidia.com/mig.config"], labels["nvidia.com/mig.config.state"]) == ("all-1g.10gb", "success")
        assert allocatable.get("nvidia.com/mig-1g.10gb") == "14" and allocatable.get("nvidia.com/mig-3g.40gb", "0") == "0"
        assert not node()["spec"].get("unschedulable") and not {DRAINED, FAILURE} & set(node()["metadata"].get("annotations", {}))
        after = _wait_running(kubeconfig, "r-a100", {"train", "guarded", "web"})
        assert set(after) == {"train", "guarded", "web"} and after["guarded"] != before["guarded"] and after["web"] == before["web"]

        # A second run changes nothing.
        res = run("all-1g.10gb")
        assert res.returncode == 0, res.stdout[-3000:]
        assert recap(res.stdout)["r-a100"]["changed"] == 0, res.stdout[-3000:]
        assert "r-a100: in all-1g.10gb already" in " ".join(res.stdout.split())
        assert _running(kubeconfig, "r-a100") == after

        # Cordoned before, and a config the MIG manager fails: the node stays cordoned with the reason; once the
        # cause is gone a re-run asks the MIG manager again (the label taken off and set), and the node, cordoned
        # before the first run, stays cordoned.
        kubectl(kubeconfig, "cordon", "r-a100")
        kubectl(kubeconfig, "annotate", "node", "r-a100", "gpuops-lab/mig-fail=true", "--overwrite")
        try:
            res = run("lab-a100-gpu0-balanced")
        finally:
            kubectl(kubeconfig, "annotate", "node", "r-a100", "gpuops-lab/mig-fail-")
        out = " ".join(res.stdout.split())
        assert res.returncode != 0
        assert "r-a100: the MIG manager failed to apply lab-a100-gpu0-balanced (nvidia.com/mig.config.state=failed)" in out, out[-3000:]
        assert "r-a100 is left cordoned" in out
        assert node()["spec"]["unschedulable"] is True and node()["metadata"]["annotations"][DRAINED] == "true"
        assert "the MIG manager failed to apply" in node()["metadata"]["annotations"][FAILURE]
        assert _running(kubeconfig, "r-a100") == {"web": before["web"]}
        res = run("lab-a100-gpu0-balanced")
        assert res.returncode == 0, res.stdout[-3000:]
        labels = node()["metadata"]["labels"]
        assert (labels["nvidia.com/mig.config"], labels["nvidia.com/mig.config.state"]) == ("lab-a100-gpu0-balanced", "success")
        assert node()["status"]["allocatable"].get("nvidia.com/mig-1g.10gb") == "2"
        assert node()["spec"]["unschedulable"] is True and not {DRAINED, FAILURE} & set(node()["metadata"].get("annotations", {}))
    finally:
        kubectl(kubeconfig, "uncordon", "r-a100")
        kubectl(kubeconfig, "delete", "namespace", "ml", "--wait=true")


# A stand-in for the Prometheus Operator's CRD (its schema is not the subject: the role's fields are).
SERVICEMONITOR_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"kind": "ServiceMonitor", "plural": "servicemonitors", "singular": "servicemonitor", "listKind": "ServiceMonitorList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}


def alone(inventory: Path, role: str) -> Path:
    """A playbook of one's own with one cluster role (no cluster.yml: no batching, no shared read of the cluster)."""
    own = inventory.with_name(f"{role}-alone.yml")
    own.write_text(yaml.safe_dump([{
        "name": f"{role} alone", "hosts": "localhost", "connection": "local", "gather_facts": False,
        "module_defaults": {f"group/{group}": {"kubeconfig": "{{ gpuops_cluster_kubeconfig }}"}
                            for group in ("gpuops.nvidia.cluster",)},
        "roles": [f"gpuops.nvidia.{role}"]}]))
    return own


def test_the_servicemonitor_carries_the_prometheus_settings(lab_cluster):
    kubeconfig, inventory = lab_cluster
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(SERVICEMONITOR_CRD))
    kubectl(kubeconfig, "wait", "--for", "condition=Established", "crd/servicemonitors.monitoring.coreos.com")
    relabel = {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node", "action": "replace"}
    settings = {"gpuops_dcgm_exporter_service_monitor_interval": "30s", "gpuops_dcgm_exporter_service_monitor_scrape_timeout": "20s",
                "gpuops_dcgm_exporter_service_monitor_labels": {"release": "kube-prometheus-stack"},
                "gpuops_dcgm_exporter_service_monitor_honor_labels": True,
                "gpuops_dcgm_exporter_service_monitor_relabelings": [relabel]}
    try:
        res = playbook(inventory, extra={"gpuops_validation_smoke": "never", **settings})
        assert res.returncode == 0, res.stdout[-3000:]
        monitor = get(kubeconfig, "servicemonitor", "-n", NS, "nvidia-dcgm-exporter")
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        assert monitor["spec"]["endpoints"] == [{"port": "gpu-metrics", "path": "/metrics", "interval": "30s",
                                                 "scrapeTimeout": "20s", "honorLabels": True, "relabelings": [relabel]}]
        # The role alone (no cluster.yml, so no batch and no shared read): it looks for the CRD itself, finds it and
        # keeps the ServiceMonitor as it is.
        res = playbook(inventory, extra={**settings, "gpuops_validation_smoke": "never"}, play=str(alone(inventory, "dcgm_exporter")))
        assert res.returncode == 0, res.stdout[-3000:]
        assert recap(res.stdout)["localhost"]["changed"] == 0, res.stdout[-3000:]
        assert "No ServiceMonitor" not in res.stdout
        assert get(kubeconfig, "servicemonitor", "-n", NS, "nvidia-dcgm-exporter")["spec"]["endpoints"] == monitor["spec"]["endpoints"]
    finally:
        kubectl(kubeconfig, "delete", "servicemonitor", "-n", NS, "nvidia-dcgm-exporter", "--ignore-not-found")
        kubectl(kubeconfig, "delete", "crd", "servicemonitors.monitoring.coreos.com")


def test_an_nfd_that_would_drop_gfds_labels_is_refused_before_anything_is_applied(lab_cluster):
    kubeconfig, inventory = lab_cluster
    other = {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "nfd-master", "namespace": "kube-system"},
             "spec": {"selector": {"matchLabels": {"app": "other-nfd"}}, "template": {
                 "metadata": {"labels": {"app": "other-nfd"}},
                 "spec": {"containers": [{"name": "master", "image": "registry.example/nfd/node-feature-discovery:v0.17.3",
                                          "command": ["nfd-master"], "args": ["-deny-label-ns=*.com"]}]}}}}
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(other))
    try:
        before = get(kubeconfig, "daemonset", "-n", NS, "gpu-feature-discovery")["metadata"]["resourceVersion"]
        res = playbook(inventory, extra={"gpuops_gpu_feature_discovery_sleep_interval": "30s"})
        out = " ".join(res.stdout.split())
        assert res.returncode != 0
        assert ("nfd-master kube-system/nfd-master denies the nvidia.com label namespace (denyLabelNs ['*.com']) and "
                "extraLabelNs does not allow it back; add nvidia.com to its extraLabelNs") in out, out[-3000:]
        assert "Apply them" not in out
        assert get(kubeconfig, "daemonset", "-n", NS, "gpu-feature-discovery")["metadata"]["resourceVersion"] == before
        # The role alone reads the cluster itself (cluster.yml's shared read is not there) and refuses the same.
        res = playbook(inventory, play=str(alone(inventory, "node_feature_discovery")))
        assert res.returncode != 0
        assert "nfd-master kube-system/nfd-master denies the nvidia.com label namespace" in " ".join(res.stdout.split()), res.stdout[-3000:]
        assert get(kubeconfig, "daemonset", "-n", NS, "gpu-feature-discovery")["metadata"]["resourceVersion"] == before
    finally:
        kubectl(kubeconfig, "delete", "deployment", "-n", "kube-system", "nfd-master")


def ours_in_cluster(kubeconfig: Path) -> list[str]:
    """Every object of every type that carries the collection's mark or its field manager (kubectl's own reading)."""
    types = kubectl(kubeconfig, "api-resources", "--verbs=list", "-o", "name").stdout.split()
    found = []
    listed = get(kubeconfig, ",".join(t for t in types if t not in ("events", "events.events.k8s.io")), "-A", "--show-managed-fields")
    for obj in listed["items"]:
        meta = obj["metadata"]
        managers = {(m.get("manager"), m.get("operation")) for m in meta.get("managedFields") or []}
        if (meta.get("labels") or {}).get("app.kubernetes.io/managed-by") == "gpuops.nvidia" or ("gpuops-nvidia", "Apply") in managers:
            found.append(f"{obj['kind']} {meta.get('namespace', '')}/{meta['name']}")
    return sorted(found)


def test_uninstall_refuses_while_a_users_gpu_pod_runs_and_changes_nothing(lab_cluster):
    """Issue 62: a user's pod holding a GPU on r-l40s; the uninstall names it and the override, and the objects and Node
    labels stay as they were; a --limit without localhost stops before anything too."""
    kubeconfig, inventory = lab_cluster
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "user-train", "namespace": "default"},
           "spec": {"nodeSelector": {"kubernetes.io/hostname": "r-l40s"}, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}
    ours, labels = ours_in_cluster(kubeconfig), node_labels(kubeconfig)
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump(pod))
    try:
        wait_for("the user's GPU pod Running",
                 lambda: get(kubeconfig, "pod", "-n", "default", "user-train").get("status", {}).get("phase") == "Running", timeout=120)
        res = playbook(inventory, "-e", "gpuops_uninstall_hosts=false", play="uninstall.yml")
        out = " ".join(res.stdout.split())
        assert res.returncode != 0, out[-3000:]
        assert "pod(s) of users run on the nvidia runtime or hold a GPU" in out and "default/user-train on r-l40s" in out, out[-3000:]
        assert "gpuops_uninstall_allow_gpu_pods: true" in out and "nothing changed" in out, out[-3000:]
        limited = playbook(inventory, "--limit", "r-l40s", "-e", "gpuops_uninstall_hosts=false", play="uninstall.yml")
        out = " ".join(limited.stdout.split())
        assert limited.returncode != 0 and "--limit r-l40s leaves out localhost" in out, out[-3000:]
        assert ours_in_cluster(kubeconfig) == ours
        assert node_labels(kubeconfig) == labels
    finally:
        kubectl(kubeconfig, "delete", "pod", "-n", "default", "user-train", "--wait=true", "--timeout=60s", check=False)


def test_uninstall_removes_every_object_and_label_of_ours_and_a_second_run_changes_nothing(lab_cluster):
    """playbooks/uninstall.yml on the converged cluster: check mode changes nothing; the run removes every object the
    collection applied and the namespace; the Nodes carry the labels they had before the first run (GFD's, published by
    nfd-master, go with GFD's NodeFeature objects, which the garbage collector removes with GFD's DaemonSet); the
    next run changes nothing."""
    kubeconfig, inventory = lab_cluster
    ours = ours_in_cluster(kubeconfig)
    assert any(o.startswith("DaemonSet gpu-operator/") for o in ours) and "Namespace /gpu-operator" in ours, ours
    assert node_labels(kubeconfig) != BEFORE["labels"]

    # The hosts here are KWOK nodes without machines: the cluster part only.
    hosts_off = ("-e", "gpuops_uninstall_hosts=false")
    check = playbook(inventory, "--check", "--diff", *hosts_off, play="uninstall.yml")
    assert check.returncode == 0, check.stdout[-3000:]
    assert "DaemonSet gpu-operator/nvidia-device-plugin-daemonset" in check.stdout, check.stdout[-3000:]
    assert ours_in_cluster(kubeconfig) == ours

    res = playbook(inventory, *hosts_off, play="uninstall.yml")
    assert res.returncode == 0, res.stdout[-3000:]
    assert ours_in_cluster(kubeconfig) == []
    # The MIG test above set r-h100's nvidia.com/mig.config by hand (kubectl): someone else's label, which stays.
    expected = {**BEFORE["labels"], "r-h100": {**BEFORE["labels"]["r-h100"], "nvidia.com/mig.config": "all-disabled"}}
    try:
        wait_for("the Nodes' labels as they were before the first run", lambda: node_labels(kubeconfig) == expected, timeout=90)
    except BaseException:
        now = node_labels(kubeconfig)
        diff = {}
        for node in set(now) | set(expected):
            was, has = expected.get(node, {}), now.get(node, {})
            diff[node] = {k: (was.get(k), has.get(k)) for k in set(was) | set(has) if was.get(k) != has.get(k)}
        raise AssertionError(f"labels (before, now) that differ: {diff}") from None
    again = playbook(inventory, *hosts_off, play="uninstall.yml")
    assert again.returncode == 0, again.stdout[-3000:]
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]


MPS2 = {"sharing": {"mps": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}}


def test_an_mps_config_is_advertised_only_with_the_mps_control_daemon(tmp_path):
    # MPS is refused with MIG strategy mixed (the device plugin's rule), so this cluster runs `none`. The
    # simulated device plugin advertises nothing for an MPS config while no MPS control daemon pod runs on
    # the node, as the real one fails its health check.
    nodes = (("m-mps", "hgx-h100"), ("m-plain", "hgx-h100"))
    lab(tmp_path, "cluster", "up", "--no-machines", *[f"--node={name}={profile}" for name, profile in nodes])
    try:
        kubeconfig = tmp_path / "cluster/kubeconfig"
        inventory = tmp_path / "inventory.json"
        inventory.write_text(json.dumps(cluster_inventory(
            list(nodes), {"gpuops_cluster_kubeconfig": str(kubeconfig), "gpuops_device_plugin_configs": {"mps-2": MPS2},
                          "gpuops_device_plugin_mig_strategy": "none", "gpuops_validation_timeout": 120,
                          "gpuops_validation_smoke": "never", "gpuops_device_plugin_cdi": "true",
                          "gpuops_cluster_kubelet_root": "/var/lib/k0s/kubelet", **nfd_crds(tmp_path)},
            {"m-mps": {"gpuops_device_plugin_config": "mps-2"}})))
        res = playbook(inventory)
        assert res.returncode == 0, res.stdout[-4000:]
        labels = nvidia_labels(kubeconfig)
        assert labels["m-mps"]["nvidia.com/mps.capable"] == "true" and labels["m-mps"]["nvidia.com/device-plugin.config"] == "mps-2"
        assert labels["m-plain"]["nvidia.com/mps.capable"] == "false" and "nvidia.com/device-plugin.config" not in labels["m-plain"]
        ds = get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-mps-control-daemon")["spec"]["template"]["spec"]
        assert ds["nodeSelector"] == {"nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/mps.capable": "true"}
        assert ds["hostPID"] is True
        assert [c["name"] for c in ds["initContainers"]] == ["mps-control-daemon-mounts", "config-manager-init"]
        assert [c["name"] for c in ds["containers"]] == ["mps-control-daemon-ctr", "config-manager"]
        sidecar = {e["name"]: e.get("value") for e in ds["containers"][1]["env"]}
        assert sidecar["PROCESS_TO_SIGNAL"] == "/usr/bin/mps-control-daemon"
        # CDI on (this cluster asks for it): the device plugin's CDI strategy, and the MIG manager refreshes the spec.
        plugin_env = {e["name"]: e.get("value") for e in get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-daemonset")
                      ["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert plugin_env["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
        mig_env = {e["name"]: e.get("value") for e in get(kubeconfig, "daemonset", "-n", NS, "nvidia-mig-manager")
                   ["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert mig_env["CDI_ENABLED"] == "true" and mig_env["NVIDIA_CDI_HOOK_PATH"] == "/usr/bin/nvidia-cdi-hook"
        # The kubelet's root elsewhere (k0s): the host paths follow, the paths in the containers do not.
        plugin = get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-daemonset")["spec"]["template"]["spec"]
        assert {v["name"]: v.get("hostPath", {}).get("path") for v in plugin["volumes"]}["device-plugin"] == "/var/lib/k0s/kubelet/device-plugins"
        assert {m["name"]: m["mountPath"] for m in plugin["containers"][0]["volumeMounts"]}["device-plugin"] == "/var/lib/kubelet/device-plugins"
        exporter = get(kubeconfig, "daemonset", "-n", NS, "nvidia-dcgm-exporter")["spec"]["template"]["spec"]
        assert {v["name"]: v.get("hostPath", {}).get("path") for v in exporter["volumes"]}["pod-gpu-resources"] == "/var/lib/k0s/kubelet/pod-resources"
        pods = get(kubeconfig, "pods", "-n", NS, "-l", "app=nvidia-device-plugin-mps-control-daemon")["items"]
        assert [p["spec"]["nodeName"] for p in pods if p["status"].get("phase") == "Running"] == ["m-mps"]

        def gpus(node):
            return get(kubeconfig, "node", node)["status"].get("allocatable", {}).get("nvidia.com/gpu")
        assert gpus("m-mps") == "16" and gpus("m-plain") == "8"
        # GFD's labels (through the lab's real nfd-master) say MPS.
        mps_labels = get(kubeconfig, "node", "m-mps")["metadata"]["labels"]
        assert mps_labels["nvidia.com/gpu.sharing-strategy"] == "mps" and mps_labels["nvidia.com/gpu.replicas"] == "2"

        # Without the daemon, the node advertises no GPU; the next run puts the DaemonSet back and validates.
        kubectl(kubeconfig, "delete", "daemonset", "-n", NS, "nvidia-device-plugin-mps-control-daemon", "--wait=true")
        deadline = time.monotonic() + 60
        while gpus("m-mps") != "0" and time.monotonic() < deadline:
            time.sleep(1)
        assert gpus("m-mps") == "0" and gpus("m-plain") == "8"
        again = playbook(inventory)
        assert again.returncode == 0, again.stdout[-4000:]
        assert gpus("m-mps") == "16"
        assert "m-mps: nvidia.com/gpu=16, smoke test not run, GFD labels right" in " ".join(again.stdout.split())
    finally:
        lab(tmp_path, "cluster", "down")
