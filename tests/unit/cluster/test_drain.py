"""Which Pods a drain evicts, keeps or refuses; which budgets hold a Pod back; the cordon record and its undoing.

Pods are the API's JSON as `kubectl get pod -o json` shows them (trimmed to the fields read)."""

from __future__ import annotations

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import drain
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import selector_matches

NAMES = {"force": "v_force", "delete_emptydir_data": "v_delete_emptydir_data"}


def pod(name: str, resources: dict | None = None, owner: str | None = "ReplicaSet", ns: str = "ml", **extra) -> dict:
    meta = {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": extra.pop("labels", {"app": name})}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner", "controller": True}]
    meta.update(extra.pop("meta", {}))
    spec = {"containers": [{"name": "c", "resources": resources or {}}], **extra.pop("spec", {})}
    return {"metadata": meta, "spec": spec, "status": {"phase": extra.pop("phase", "Running")}}


GPU = {"limits": {"nvidia.com/gpu": "1"}}
MIG = {"requests": {"nvidia.com/mig-1g.10gb": "1"}, "limits": {"nvidia.com/mig-1g.10gb": "1"}}


def test_gpu_pods_are_those_that_request_an_nvidia_resource_in_any_container():
    assert drain.requests_gpu(pod("a", GPU))
    assert drain.requests_gpu(pod("b", MIG))
    assert not drain.requests_gpu(pod("c", {"limits": {"cpu": "1", "memory": "1Gi"}}))
    init = pod("d", spec={"initContainers": [{"name": "i", "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}]})
    assert drain.requests_gpu(init)


def test_select_keeps_daemonsets_static_and_finished_pods_and_skips_cpu_pods():
    pods = [pod("train", GPU), pod("web", {"limits": {"cpu": "1"}}), pod("exporter", GPU, owner="DaemonSet"),
            pod("static", GPU, owner="Node", meta={"annotations": {"kubernetes.io/config.mirror": "x"}}),
            pod("done", GPU, owner="Job", phase="Succeeded"),
            pod("going", GPU, meta={"deletionTimestamp": "2026-11-24T00:00:00Z"})]
    sel = drain.select(pods, True, False, False, NAMES)
    assert [drain.key(p) for p in sel["evict"]] == ["ml/train"]
    assert [drain.key(p) for p in sel["terminating"]] == ["ml/going"]
    assert sorted(sel["kept"]) == ["ml/done", "ml/exporter", "ml/static"]
    assert "DaemonSet exporter-owner" in sel["kept"]["ml/exporter"]
    assert sel["refused"] == {}
    every = drain.select(pods, False, False, False, NAMES)
    assert [drain.key(p) for p in every["evict"]] == ["ml/train", "ml/web"]


def test_pods_that_would_be_lost_are_refused_naming_the_variable_that_allows_them():
    bare = pod("notebook", GPU, owner=None)
    scratch = pod("job", GPU, spec={"volumes": [{"name": "tmp", "emptyDir": {}}]})
    sel = drain.select([bare, scratch], True, False, False, NAMES)
    assert sel["evict"] == []
    assert "no controller would recreate it (set v_force" in sel["refused"]["ml/notebook"]
    assert "emptyDir data would be lost (set v_delete_emptydir_data" in sel["refused"]["ml/job"]
    allowed = drain.select([bare, scratch], True, True, True, NAMES)
    assert [drain.key(p) for p in allowed["evict"]] == ["ml/job", "ml/notebook"] and allowed["refused"] == {}


def test_label_selectors_match_as_the_api_server_does():
    labels = {"app": "train", "tier": "gpu"}
    assert selector_matches({}, labels)
    assert not selector_matches(None, labels, absent=False)
    assert selector_matches({"matchLabels": {"app": "train"}}, labels)
    assert not selector_matches({"matchLabels": {"app": "web"}}, labels)
    assert selector_matches({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "x"]}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gpu"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, labels)
    assert selector_matches({"matchExpressions": [{"key": "app", "operator": "Exists"}]}, labels)
    assert not selector_matches({"matchExpressions": [{"key": "app", "operator": "DoesNotExist"}]}, labels)


def test_the_budgets_that_hold_a_pod_are_those_of_its_namespace_that_select_it():
    pdb = {"metadata": {"name": "train-pdb", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "train"}}},
           "status": {"disruptionsAllowed": 0}}
    other_ns = {**pdb, "metadata": {"name": "train-pdb", "namespace": "other"}}
    other_app = {**pdb, "metadata": {"name": "web-pdb", "namespace": "ml"}, "spec": {"selector": {"matchLabels": {"app": "web"}}}}
    assert drain.blocking_pdbs(pod("train", GPU), [pdb, other_ns, other_app]) == ["ml/train-pdb (disruptions allowed: 0)"]


def node(unschedulable: bool | None = None, annotations: dict | None = None) -> dict:
    spec = {} if unschedulable is None else {"unschedulable": unschedulable}
    return {"metadata": {"name": "n1", "annotations": annotations or {}}, "spec": spec}


ANN = "example.com/initial.unschedulable"


def test_cordon_records_the_state_before_and_a_resumed_drain_keeps_the_first_record():
    assert drain.cordon_patch(node(), ANN) == {"metadata": {"annotations": {ANN: "false"}}, "spec": {"unschedulable": True}}
    assert drain.cordon_patch(node(True), ANN) == {"metadata": {"annotations": {ANN: "true"}}}
    # Resumed: cordoned by the first run, recorded schedulable: nothing to patch, the record stays "false".
    assert drain.cordon_patch(node(True, {ANN: "false"}), ANN) is None
    # Someone uncordoned it in between: cordoned again, the record kept.
    assert drain.cordon_patch(node(False, {ANN: "false"}), ANN) == {"spec": {"unschedulable": True}}


def test_restore_makes_schedulable_only_a_node_that_was():
    assert drain.uncordon_patch(node(True, {ANN: "false"}), ANN) == {"metadata": {"annotations": {ANN: None}}, "spec": {"unschedulable": None}}
    assert drain.uncordon_patch(node(True, {ANN: "true"}), ANN) == {"metadata": {"annotations": {ANN: None}}}
    assert drain.uncordon_patch(node(True), ANN) is None  # cordoned by someone else: not ours to undo
    assert drain.uncordon_patch(node(None, {ANN: "false"}), ANN) == {"metadata": {"annotations": {ANN: None}}}


def claim(name: str, driver: str | None = "gpu.nvidia.com", ns: str = "ml") -> dict:
    """A ResourceClaim as resource.k8s.io/v1 shows it: allocated (devices of `driver`) or not (driver None)."""
    status = {} if driver is None else {"allocation": {"devices": {"results": [
        {"request": "gpu", "driver": driver, "pool": "gpu-1", "device": "gpu-0"}]}}}
    return {"metadata": {"name": name, "namespace": ns}, "status": status}


def dra_pod(name: str, claim_name: str, from_template: bool = False) -> dict:
    """A Pod that holds a ResourceClaim: by its name, or made for it from a ResourceClaimTemplate (its status names it)."""
    ref = {"name": "gpu", "resourceClaimTemplateName": "one-gpu"} if from_template else {"name": "gpu", "resourceClaimName": claim_name}
    p = pod(name, spec={"resourceClaims": [ref]})
    if from_template:
        p["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return p


def test_pods_holding_a_claim_allocated_from_nvidias_dra_drivers_are_gpu_pods():
    claims = {"ml/a-gpu": claim("a-gpu"), "ml/b-gpu-x1": claim("b-gpu-x1"), "ml/nic": claim("nic", "rdma.example.com"),
              "ml/imex": claim("imex", "compute-domain.nvidia.com"), "ml/pending": claim("pending", None)}
    assert drain.holds_gpu_claim(dra_pod("a", "a-gpu"), claims)
    assert drain.holds_gpu_claim(dra_pod("b", "b-gpu-x1", from_template=True), claims)
    assert drain.holds_gpu_claim(dra_pod("c", "imex"), claims)
    assert not drain.holds_gpu_claim(dra_pod("d", "nic"), claims)  # another driver's device: not the GPU's
    assert not drain.holds_gpu_claim(dra_pod("e", "pending"), claims)  # not allocated
    assert not drain.holds_gpu_claim(pod("f"), claims)
    # Claims that could not be read: any Pod with a claim counts (its GPU would go with the driver).
    assert drain.holds_gpu_claim(dra_pod("g", "nic"), None)
    assert not drain.holds_gpu_claim(pod("h"), None)
    sel = drain.select([dra_pod("a", "a-gpu"), dra_pod("d", "nic"), pod("web")], True, False, False, NAMES, claims)
    assert [drain.key(p) for p in sel["evict"]] == ["ml/a"]
    assert drain.claimed([dra_pod("a", "a-gpu"), pod("web")]) == ["ml"]


def test_pods_still_running_are_those_in_phase_running():
    assert drain.running([pod("job"), pod("done", phase="Succeeded"), pod("new", phase="Pending"), pod("bad", phase="Failed")]) == ["ml/job"]
