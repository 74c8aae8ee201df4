"""GPUs scheduled with NVIDIA's DRA driver (issue 22, `gpuops_gpu_scheduling: dra`) on the lab cluster, judged on the
API server and by its real scheduler.

The lab's stand-in for the DRA driver's kubelet plugin (lab/sim/dra.py) publishes a node's ResourceSlice from its
hardware profile while the dra role's plugin pod runs there, so the real kube-scheduler allocates ResourceClaims from
the devices a node of that profile has. In order: a run deploys the DRA driver in place of the device plugin and
validates every node's devices (the smoke test claims one through the scheduler); a second run changes nothing; a claim
of two GPUs of a product, chosen with a CEL selector, lands on the node that has them; a claim no node can satisfy stays
pending with the scheduler's reason; ComputeDomains come with their CRDs, which the role applies (the kubernetes-sigs
driver leaves them to the deployer) and the API server enforces, their RBAC judged by the API server; an upgrade from
the driver under NVIDIA's former names leaves one kubelet plugin, the renamed one; switching back to the device plugin
leaves no DRA object (ComputeDomains included, their CRDs kept), and switching to DRA again leaves no device plugin
object; turned off, ComputeDomains go.
"""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest
import yaml

from lab.cluster import Cluster
from lab.facts import A100_PROFILE_MIG_CONFIG, cluster_inventory
from tests.integration.test_cluster_roles import NS, get, nfd_crds, nvidia_labels, playbook, recap
from tests.integration.test_lab_cluster import BIN, REPO, kubectl, lab, wait_for

NODES = (("x-h100", "hgx-h100"), ("x-a100", "a100-pcie-mig"), ("x-v100", "v100"), ("x-cpu", "no-gpu"))
DRA = {"gpuops_gpu_scheduling": "dra"}
DRA_OBJECTS = (("daemonset", NS, "dra-driver-nvidia-gpu-kubelet-plugin"), ("deviceclass", "", "gpu.nvidia.com"),
               ("deviceclass", "", "mig.nvidia.com"), ("clusterrole", "", "gpuops-nvidia-dra-driver-kubeletplugin"),
               ("serviceaccount", NS, "dra-driver-nvidia-gpu-service-account-kubeletplugin"),
               ("resourceclaimtemplate", NS, "gpuops-validation-gpu"))
# The ComputeDomain CRDs the role applies; never removed (that would delete every ComputeDomain).
CRDS = (("crd", "", "computedomains.resource.nvidia.com"), ("crd", "", "computedomaincliques.resource.nvidia.com"))
# What the role deployed under NVIDIA's names, up to the v25.12.0 driver.
OLD_OBJECTS = (("daemonset", NS, "nvidia-dra-driver-gpu-kubelet-plugin"), ("deployment", NS, "nvidia-dra-driver-gpu-controller"),
               ("serviceaccount", NS, "nvidia-dra-driver-gpu-service-account-kubeletplugin"),
               ("serviceaccount", NS, "nvidia-dra-driver-gpu-service-account-controller"))
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
    # The playbooks run as a ServiceAccount with the deployer RBAC only; the tests read the API as the admin.
    deployer = Cluster(state).deployer_kubeconfig(dra=True)
    inventory = state / "inventory.json"
    inventory.write_text(json.dumps(cluster_inventory(
        list(NODES), {"gpuops_cluster_kubeconfig": str(deployer), "gpuops_mig_manager_configs": A100_PROFILE_MIG_CONFIG,
                      "gpuops_validation_timeout": 120, **nfd_crds(state)},
        {"x-a100": {"gpuops_mig_manager_config": "lab-a100-gpu0-balanced"}})))
    yield kubeconfig, inventory, state
    lab(state, "cluster", "down")


def test_the_dra_driver_replaces_the_device_plugin_and_every_node_publishes_its_devices(cluster):
    kubeconfig, inventory, _state = cluster
    res = playbook(inventory, extra=DRA)
    assert res.returncode == 0, res.stdout[-4000:]
    # ComputeDomains too (auto), with the CRDs the role applies.
    assert all(exists(kubeconfig, *o) for o in (*DRA_OBJECTS, *CRDS, *CD_OBJECTS))
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


def _old_driver() -> str:
    """The kubelet plugin, controller and accounts as the role applied them under NVIDIA's names (the labels it set)."""
    labels = {"app.kubernetes.io/managed-by": "gpuops.nvidia", "app.kubernetes.io/part-of": "nvidia-gpu"}

    def workload(kind: str, name: str) -> dict:
        return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name, "namespace": NS, "labels": labels},
                "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {"nodeSelector": {"nvidia.com/gpu.deploy.dra-driver": "true"},
                             "containers": [{"name": "gpus", "image": "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.12.0"}]}}}}

    accounts = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NS, "labels": labels}}
                for name in ("nvidia-dra-driver-gpu-service-account-kubeletplugin", "nvidia-dra-driver-gpu-service-account-controller")]
    return yaml.safe_dump_all([workload("DaemonSet", "nvidia-dra-driver-gpu-kubelet-plugin"),
                               workload("Deployment", "nvidia-dra-driver-gpu-controller"), *accounts])


def test_an_upgrade_from_nvidias_names_leaves_one_plugin(cluster):
    """The driver the role deployed under NVIDIA's names (up to v25.12.0) goes in the run that applies the renamed one:
    two kubelet plugins would both register gpu.nvidia.com on a node. A second run changes nothing."""
    kubeconfig, inventory, _state = cluster
    kubectl(kubeconfig, "apply", "-f", "-", stdin=_old_driver())
    assert all(exists(kubeconfig, *o) for o in OLD_OBJECTS)
    res = playbook(inventory, extra=DRA)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not any(exists(kubeconfig, *o) for o in OLD_OBJECTS)
    assert all(exists(kubeconfig, *o) for o in DRA_OBJECTS)
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


def _drain(kubeconfig, node: str, state: str = "drained") -> dict:
    """The day-2 playbooks' drain (gpuops.nvidia.node_drain, pods: gpu) on one Node, as ansible runs it."""
    args = {"name": node, "state": state, "pods": "gpu", "timeout": 60, "kubeconfig": str(kubeconfig)}
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build/collections"), "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_LOCALHOST_WARNING": "false"}
    run = subprocess.run([str(BIN / "ansible"), "localhost", "-m", "gpuops.nvidia.node_drain", "-a", json.dumps(args)],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(run.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_a_pod_holding_a_gpu_claim_is_evicted_by_the_day2_drain(cluster):
    """Issue 62: a Deployment's pod whose ResourceClaim (from a template) is allocated from gpu.nvidia.com on x-v100 is
    a GPU pod to the day-2 drain: evicted through the Eviction API, its replacement waits for the node, which runs it
    again once uncordoned."""
    kubeconfig, _inventory, _state = cluster
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu", "namespace": "default"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}}
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "claimer", "namespace": "default"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "claimer"}}, "template": {
                      "metadata": {"labels": {"app": "claimer"}},
                      "spec": {"nodeSelector": {"kubernetes.io/hostname": "x-v100"}, "terminationGracePeriodSeconds": 0,
                               "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                               "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                               "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}]}}}}
    kubectl(kubeconfig, "apply", "-f", "-", stdin=yaml.safe_dump_all([template, deployment]))

    def running() -> list[dict]:
        pods = get(kubeconfig, "pods", "-n", "default", "-l", "app=claimer")["items"]
        return [p for p in pods if p["status"].get("phase") == "Running" and p["spec"].get("nodeName") == "x-v100"]

    try:
        first = wait_for("the claiming pod running on x-v100", running, timeout=120)[0]
        assert first["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        drained = _drain(kubeconfig, "x-v100")
        assert drained["evicted"] == [f"default/{first['metadata']['name']}"], drained
        wait_for("the evicted pod gone", lambda: first["metadata"]["uid"] not in
                 [p["metadata"]["uid"] for p in get(kubeconfig, "pods", "-n", "default", "-l", "app=claimer")["items"]], timeout=60)
        assert get(kubeconfig, "node", "x-v100")["spec"].get("unschedulable") is True
        restored = _drain(kubeconfig, "x-v100", "restored")
        assert restored["uncordoned"] is True, restored
        again = wait_for("the replacement running on x-v100", running, timeout=120)[0]
        assert again["metadata"]["uid"] != first["metadata"]["uid"]
    finally:
        kubectl(kubeconfig, "uncordon", "x-v100", check=False)
        kubectl(kubeconfig, "delete", "-n", "default", "deployment/claimer", "resourceclaimtemplate/one-gpu", "--wait=false", check=False)


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


CD_OBJECTS = (("deployment", NS, "dra-driver-nvidia-gpu-controller"), ("deviceclass", "", "compute-domain-daemon.nvidia.com"),
              ("deviceclass", "", "compute-domain-default-channel.nvidia.com"),
              ("clusterrole", "", "gpuops-nvidia-dra-driver-controller"), ("role", NS, "gpuops-nvidia-dra-driver-controller"),
              ("serviceaccount", NS, "dra-driver-nvidia-gpu-service-account-controller"),
              ("clusterrole", "", "gpuops-nvidia-dra-compute-domain-daemon"),
              ("serviceaccount", NS, "compute-domain-daemon-service-account"), ("role", NS, "gpuops-nvidia-dra-driver-kubeletplugin"))


def can(kubeconfig, account: str, verb: str, resource: str, *args: str) -> bool:
    """The API server's own answer (a SubjectAccessReview) for a service account of the namespace."""
    out = kubectl(kubeconfig, "auth", "can-i", verb, resource, *args, f"--as=system:serviceaccount:{NS}:{account}", check=False)
    return out.stdout.strip() == "yes"


def _compute_domain(name: str, template: str) -> str:
    return yaml.safe_dump({"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
                           "metadata": {"name": name, "namespace": "default"},
                           "spec": {"channel": {"resourceClaimTemplate": {"name": template}}}})


def test_compute_domains_come_with_their_crds(cluster):
    """ComputeDomains come with their CRDs, which the role applies (auto, the default): the API server serves the kind
    and enforces the schema (defaults, an immutable spec); the controller, its RBAC and the plugin's compute-domains
    container are there. The RBAC is judged by the API server, for what each account must and must not do. MPSSupport
    rides along: with it the GPU plugin runs each claim's MPS control daemon as a Deployment in the namespace (the
    chart's plugin Role)."""
    kubeconfig, inventory, _state = cluster
    assert all(exists(kubeconfig, *o) for o in CRDS)
    kubectl(kubeconfig, "apply", "-f", "-", stdin=_compute_domain("cd-lab", "cd-lab-channel"))
    domain = get(kubeconfig, "computedomain", "-n", "default", "cd-lab")
    assert domain["spec"] == {"channel": {"allocationMode": "Single", "resourceClaimTemplate": {"name": "cd-lab-channel"}}, "numNodes": 0}
    refused = kubectl(kubeconfig, "apply", "-f", "-", stdin=_compute_domain("cd-lab", "another"), check=False)
    assert refused.returncode != 0 and "spec cannot change" in refused.stderr, refused.stderr
    kubectl(kubeconfig, "delete", "computedomain", "-n", "default", "cd-lab")

    with_mps = {**DRA, "gpuops_dra_feature_gates": {"MPSSupport": True}}
    res = playbook(inventory, extra=with_mps)
    assert res.returncode == 0, res.stdout[-4000:]
    assert all(exists(kubeconfig, *o) for o in CD_OBJECTS)
    plugin = get(kubeconfig, "daemonset", "-n", NS, "dra-driver-nvidia-gpu-kubelet-plugin")["spec"]["template"]["spec"]
    assert [c["name"] for c in plugin["containers"]] == ["compute-domains", "gpus"]
    cd_container = plugin["containers"][0]
    assert cd_container["command"] == ["compute-domain-kubelet-plugin"] and cd_container["startupProbe"]["grpc"]["port"] == 51515
    controller = get(kubeconfig, "deployment", "-n", NS, "dra-driver-nvidia-gpu-controller")["spec"]["template"]["spec"]
    (container,) = controller["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert container["command"] == ["compute-domain-controller"] and env["IMAGE_NAME"] == plugin["containers"][1]["image"]
    assert env["NVIDIA_VISIBLE_DEVICES"] == "void" and controller["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-controller"
    channel = get(kubeconfig, "deviceclass", "compute-domain-default-channel.nvidia.com")["spec"]["selectors"][0]["cel"]["expression"]
    assert channel == ("device.driver == 'compute-domain.nvidia.com' && device.attributes['compute-domain.nvidia.com'].type == 'channel'"
                       " && device.attributes['compute-domain.nvidia.com'].id == 0")

    controller_sa, daemon_sa, plugin_sa = ("dra-driver-nvidia-gpu-service-account-controller", "compute-domain-daemon-service-account",
                                           "dra-driver-nvidia-gpu-service-account-kubeletplugin")
    allowed = [(controller_sa, "update", "computedomains.resource.nvidia.com", "--subresource=status", "-n", "default"),
               (controller_sa, "create", "resourceclaimtemplates.resource.k8s.io", "-n", "default"),
               (controller_sa, "create", "daemonsets.apps", "-n", NS),
               (controller_sa, "update", "computedomaincliques.resource.nvidia.com", "-n", NS),
               (controller_sa, "update", "nodes"),
               (daemon_sa, "patch", "computedomaincliques.resource.nvidia.com", "-n", NS),
               (daemon_sa, "patch", "pods", "-n", NS),
               (plugin_sa, "get", "computedomaincliques.resource.nvidia.com", "-n", NS),
               (plugin_sa, "watch", "computedomains.resource.nvidia.com", "-n", "default"),
               (plugin_sa, "create", "deployments.apps", "-n", NS)]
    denied = [(controller_sa, "create", "daemonsets.apps", "-n", "default"), (controller_sa, "delete", "nodes"),
              (controller_sa, "get", "secrets", "-n", NS), (controller_sa, "create", "computedomains.resource.nvidia.com", "-n", "default"),
              (daemon_sa, "create", "pods", "-n", NS), (daemon_sa, "delete", "computedomains.resource.nvidia.com", "-n", "default"),
              (plugin_sa, "update", "computedomaincliques.resource.nvidia.com", "-n", NS),
              (plugin_sa, "create", "deployments.apps", "-n", "default")]
    assert [a for a in allowed if not can(kubeconfig, *a)] == []
    assert [d for d in denied if can(kubeconfig, *d)] == []

    again = playbook(inventory, extra=with_mps)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]


def test_switching_back_and_forth_leaves_nothing_of_the_other_way(cluster):
    kubeconfig, inventory, _state = cluster
    res = playbook(inventory)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not any(exists(kubeconfig, *o) for o in (*DRA_OBJECTS, *CD_OBJECTS, ("deviceclass", "", "vfio.gpu.nvidia.com")))
    assert all(exists(kubeconfig, *o) for o in (*PLUGIN_OBJECTS, *CRDS))
    labels = nvidia_labels(kubeconfig)
    assert "nvidia.com/gpu.deploy.dra-driver" not in labels["x-h100"] and labels["x-h100"]["nvidia.com/gpu.deploy.device-plugin"] == "true"
    wait_for("the plugin's ResourceSlices gone with its pods", lambda: slices(kubeconfig) == {}, timeout=60)

    res = playbook(inventory, extra=DRA)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not any(exists(kubeconfig, *o) for o in PLUGIN_OBJECTS)
    assert all(exists(kubeconfig, *o) for o in DRA_OBJECTS)
    assert all(exists(kubeconfig, *o) for o in CD_OBJECTS)


def test_compute_domains_go_when_turned_off(cluster):
    """gpuops_dra_compute_domains false (and no MPSSupport) removes what an earlier run deployed: the controller, its
    RBAC, the compute-domains container, the plugin's Role; the CRDs stay. A second run changes nothing."""
    kubeconfig, inventory, _state = cluster
    assert all(exists(kubeconfig, *o) for o in CD_OBJECTS)
    plugin_sa = "dra-driver-nvidia-gpu-service-account-kubeletplugin"
    off = {**DRA, "gpuops_dra_compute_domains": "false"}
    res = playbook(inventory, extra=off)
    assert res.returncode == 0, res.stdout[-4000:]
    assert not any(exists(kubeconfig, *o) for o in CD_OBJECTS)
    assert all(exists(kubeconfig, *o) for o in CRDS)
    plugin = get(kubeconfig, "daemonset", "-n", NS, "dra-driver-nvidia-gpu-kubelet-plugin")["spec"]["template"]["spec"]
    assert [c["name"] for c in plugin["containers"]] == ["gpus"]
    assert all(exists(kubeconfig, *o) for o in DRA_OBJECTS)
    assert not can(kubeconfig, plugin_sa, "create", "deployments.apps", "-n", NS)
    again = playbook(inventory, extra=off)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]
