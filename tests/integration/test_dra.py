"""GPUs scheduled with NVIDIA's DRA driver (issue 22, `gpuops_gpu_scheduling: dra`) on the lab cluster, judged on the
API server and by its real scheduler.

The lab's stand-in for the DRA driver's kubelet plugin (lab/dra_sim.py) publishes a node's ResourceSlice from its
hardware profile while the dra role's plugin pod runs there, so the real kube-scheduler allocates ResourceClaims from
the devices a node of that profile has. In order: a run deploys the DRA driver in place of the device plugin and
validates every node's devices (the smoke test claims one through the scheduler); a second run changes nothing; a claim
of two GPUs of a product, chosen with a CEL selector, lands on the node that has them; a claim no node can satisfy stays
pending with the scheduler's reason; switching back to the device plugin leaves no DRA object, and switching to DRA
again leaves no device plugin object.
"""

from __future__ import annotations

import json
import time

import pytest
import yaml

from lab.facts import A100_PROFILE_MIG_CONFIG, cluster_inventory
from tests.integration.test_cluster_roles import NS, get, nfd_crds, nvidia_labels, playbook, recap
from tests.integration.test_lab_cluster import kubectl, lab, wait_for

NODES = (("x-h100", "hgx-h100"), ("x-a100", "a100-pcie-mig"), ("x-v100", "v100"), ("x-cpu", "no-gpu"))
DRA = {"gpuops_gpu_scheduling": "dra"}
DRA_OBJECTS = (("daemonset", NS, "nvidia-dra-driver-gpu-kubelet-plugin"), ("deviceclass", "", "gpu.nvidia.com"),
               ("deviceclass", "", "mig.nvidia.com"), ("clusterrole", "", "gpuops-nvidia-dra-driver-kubeletplugin"),
               ("serviceaccount", NS, "nvidia-dra-driver-gpu-service-account-kubeletplugin"),
               ("resourceclaimtemplate", NS, "gpuops-validation-gpu"))
PLUGIN_OBJECTS = (("daemonset", NS, "nvidia-device-plugin-daemonset"), ("clusterrole", "", "gpuops-nvidia-device-plugin"),
                  ("serviceaccount", NS, "nvidia-device-plugin"))


def exists(kubeconfig, kind: str, namespace: str, name: str) -> bool:
    args = (kind, name) if not namespace else (kind, "-n", namespace, name)
    return kubectl(kubeconfig, "get", *args, check=False).returncode == 0


def slices(kubeconfig) -> dict[str, list[str]]:
    """Node -> the device names its gpu.nvidia.com ResourceSlice holds."""
    items = get(kubeconfig, "resourceslices")["items"]
    return {s["spec"]["nodeName"]: sorted(d["name"] for d in s["spec"].get("devices") or [])
            for s in items if s["spec"]["driver"] == "gpu.nvidia.com"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("dra")
    lab(state, "cluster", "up", "--no-machines", *[f"--node={name}={profile}" for name, profile in NODES])
    kubeconfig = state / "cluster/kubeconfig"
    inventory = state / "inventory.json"
    inventory.write_text(json.dumps(cluster_inventory(
        list(NODES), {"gpuops_cluster_kubeconfig": str(kubeconfig), "gpuops_mig_manager_configs": A100_PROFILE_MIG_CONFIG,
                      "gpuops_validation_timeout": 120, **nfd_crds(state)},
        {"x-a100": {"gpuops_mig_manager_config": "lab-a100-gpu0-balanced"}})))
    yield kubeconfig, inventory, state
    lab(state, "cluster", "down")


def test_the_dra_driver_replaces_the_device_plugin_and_every_node_publishes_its_devices(cluster):
    kubeconfig, inventory, _state = cluster
    res = playbook(inventory, extra=DRA)
    assert res.returncode == 0, res.stdout[-4000:]
    assert all(exists(kubeconfig, *o) for o in DRA_OBJECTS)
    assert not any(exists(kubeconfig, *o) for o in PLUGIN_OBJECTS)
    labels = nvidia_labels(kubeconfig)
    assert labels["x-h100"]["nvidia.com/gpu.deploy.dra-driver"] == "true" and "nvidia.com/gpu.deploy.device-plugin" not in labels["x-h100"]
    gpu_class = get(kubeconfig, "deviceclass", "gpu.nvidia.com")["spec"]
    assert gpu_class["extendedResourceName"] == "nvidia.com/gpu"
    assert "device.attributes['gpu.nvidia.com'].type == 'gpu'" in gpu_class["selectors"][0]["cel"]["expression"]
    # The plugin's devices, as its stand-in publishes them for each profile: the A100's first GPU is in MIG mode (four
    # devices), its second is whole; the validation (smoke test included, through a claim) passed on each.
    published = slices(kubeconfig)
    assert published["x-h100"] == [f"gpu-{i}" for i in range(8)]
    assert len(published["x-v100"]) == 4 and "x-cpu" not in published
    assert sorted(published["x-a100"]) == ["gpu-0-mig-1g10gb-19-2", "gpu-0-mig-1g10gb-19-3", "gpu-0-mig-2g20gb-14-0",
                                           "gpu-0-mig-3g40gb-9-4", "gpu-1"]
    assert "4 GPU node(s) valid" in res.stdout or "3 GPU node(s) valid" in res.stdout, res.stdout[-3000:]

    again = playbook(inventory, extra=DRA)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]


def _claim_and_pod(name: str, selector: str, count: int) -> str:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": "default"},
             "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                 "deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": count,
                 "selectors": [{"cel": {"expression": selector}}]}}]}}}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"resourceClaims": [{"name": "gpus", "resourceClaimName": name}],
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "cuda", "image": "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04",
                                    "resources": {"claims": [{"name": "gpus"}]}}]}}
    return yaml.safe_dump_all([claim, pod])


def test_a_claim_of_two_gpus_of_a_product_lands_where_they_are(cluster):
    kubeconfig, _inventory, _state = cluster
    selector = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
    kubectl(kubeconfig, "apply", "-f", "-", stdin=_claim_and_pod("two-h100", selector, 2))
    wait_for("the pod scheduled", lambda: get(kubeconfig, "pod", "-n", "default", "two-h100")["spec"].get("nodeName"), timeout=60)
    assert get(kubeconfig, "pod", "-n", "default", "two-h100")["spec"]["nodeName"] == "x-h100"
    allocation = get(kubeconfig, "resourceclaim", "-n", "default", "two-h100")["status"]["allocation"]["devices"]["results"]
    assert len(allocation) == 2 and {r["driver"] for r in allocation} == {"gpu.nvidia.com"} and {r["pool"] for r in allocation} == {"x-h100"}
    kubectl(kubeconfig, "delete", "pod,resourceclaim", "-n", "default", "two-h100", "--wait=false")


def test_a_claim_no_node_can_satisfy_stays_pending_with_the_schedulers_reason(cluster):
    kubeconfig, _inventory, _state = cluster
    # Nine H100 GPUs: the H100 node has eight.
    selector = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
    kubectl(kubeconfig, "apply", "-f", "-", stdin=_claim_and_pod("nine-h100", selector, 9))

    def reason() -> str:
        conditions = get(kubeconfig, "pod", "-n", "default", "nine-h100")["status"].get("conditions") or []
        return next((c.get("message") or "" for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), "")

    message = wait_for("the scheduler's reason", reason, timeout=60)
    assert "cannot allocate all claims" in message, message
    time.sleep(3)
    pod = get(kubeconfig, "pod", "-n", "default", "nine-h100")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    assert not (get(kubeconfig, "resourceclaim", "-n", "default", "nine-h100").get("status") or {}).get("allocation")
    kubectl(kubeconfig, "delete", "pod,resourceclaim", "-n", "default", "nine-h100", "--wait=false")


def test_switching_back_and_forth_leaves_nothing_of_the_other_way(cluster):
    kubeconfig, inventory, _state = cluster
    res = playbook(inventory)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not any(exists(kubeconfig, *o) for o in (*DRA_OBJECTS, ("deviceclass", "", "vfio.gpu.nvidia.com")))
    assert all(exists(kubeconfig, *o) for o in PLUGIN_OBJECTS)
    labels = nvidia_labels(kubeconfig)
    assert "nvidia.com/gpu.deploy.dra-driver" not in labels["x-h100"] and labels["x-h100"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    wait_for("the plugin's ResourceSlices gone with its pods", lambda: slices(kubeconfig) == {}, timeout=60)

    res = playbook(inventory, extra=DRA)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not any(exists(kubeconfig, *o) for o in PLUGIN_OBJECTS)
    assert all(exists(kubeconfig, *o) for o in DRA_OBJECTS)
