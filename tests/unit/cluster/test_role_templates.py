"""Cluster roles' objects templates, rendered over the roles' defaults as a run renders them: what the DRA driver's chart
puts in the kubelet plugin's pod for a feature gate (read against the chart's kubeletplugin.yaml), and what the GPU
Operator mounts in a RHEL driver container (its SubscriptionPathMap), are there too. The lab cluster tests apply the
same templates to a real API server."""

from __future__ import annotations

from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import trust_as_template

from tests.unit.harness import role_templar

ROOT = Path(__file__).parents[3]
COMMON = DataLoader().load_from_file(str(ROOT / "roles/cluster_common/defaults/main.yml"), trusted_as_template=True)


def render(**overrides) -> list[dict]:
    templar = role_templar(ROOT / "roles/dra", **{**COMMON, "__gpuops_cluster_common_nodes": {}, **overrides})
    text = trust_as_template((ROOT / "roles/dra/templates/objects.yml.j2").read_text())
    return yaml.safe_load(templar.template(text))


def plugin_pod(objects: list[dict]) -> dict:
    [plugin] = [o for o in objects if o["kind"] == "DaemonSet"]
    return plugin["spec"]["template"]["spec"]


def test_passthrough_gives_the_gpu_plugin_the_hosts_root_sysfs_and_procfs():
    pod = plugin_pod(render(gpuops_dra_feature_gates={"PassthroughSupport": True}))
    gpus = {c["name"]: c for c in pod["containers"]}["gpus"]
    mounts = {m["name"]: m for m in gpus["volumeMounts"]}
    assert mounts["host-root"] == {"name": "host-root", "mountPath": "/host-root", "mountPropagation": "HostToContainer", "readOnly": True}
    # Since v0.5.0 the host's kernel modules too (which vfio-pci variant fits the GPU), and HOST_ROOT names the mount.
    assert mounts["lib-modules"] == {"name": "lib-modules", "mountPath": "/lib/modules/", "mountPropagation": "HostToContainer", "readOnly": True}
    assert {"name": "HOST_ROOT", "value": "/host-root"} in gpus["env"]
    assert mounts["sysfs"] == {"name": "sysfs", "mountPath": "/sys/", "mountPropagation": "Bidirectional"}
    assert mounts["procfs"] == {"name": "procfs", "mountPath": "/proc/", "mountPropagation": "Bidirectional"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {n: volumes[n]["hostPath"] for n in ("host-root", "lib-modules", "sysfs", "procfs")} == {
        "host-root": {"path": "/", "type": "Directory"}, "lib-modules": {"path": "/lib/modules/", "type": "Directory"},
        "sysfs": {"path": "/sys/", "type": "Directory"},
        "procfs": {"path": "/proc/", "type": "Directory"}}


def test_without_passthrough_the_plugin_mounts_none_of_them():
    for gates in ({}, {"PassthroughSupport": False}):
        pod = plugin_pod(render(gpuops_dra_feature_gates=gates))
        names = {m["name"] for c in pod["containers"] for m in c["volumeMounts"]} | {v["name"] for v in pod["volumes"]}
        assert not names & {"host-root", "lib-modules", "sysfs", "procfs"}, gates


def test_the_driver_containers_of_a_rhel_pool_mount_the_subscriptions_read_only():
    rhel = {"info": {"summary": {"gpu_count": 8, "mig_capable": False}, "pci": {"gpus": []}, "nvml": {"gpus": []},
                     "node": {"os": {"id": "rhel", "version_id": "9.4"}, "kernel": "5.14.0-427.el9.x86_64"}},
            "driver": {"method": "containerized", "packages": []}, "rdma": {"peermem": False, "host_ofed": False},
            "gpudirect": {"gds": False, "gdrcopy": False}, "gpuops_container_toolkit_runtime_found": "containerd"}
    # The service account and scripts part (driver_container false) reads files with a lookup, which needs a play.
    templar = role_templar(ROOT / "roles/driver_container", **COMMON, __gpuops_cluster_common_nodes={"r": rhel},
                           __gpuops_cluster_common_driver_container=False)
    text = trust_as_template((ROOT / "roles/driver_container/templates/objects.yml.j2").read_text())
    [daemonset] = [o for o in yaml.safe_load(templar.template(text)) if o["kind"] == "DaemonSet"]
    pod = daemonset["spec"]["template"]["spec"]
    mounts = {m["name"]: m for m in {c["name"]: c for c in pod["containers"]}["nvidia-driver-ctr"]["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert [(mounts[f"subscription-config-{i}"]["mountPath"], mounts[f"subscription-config-{i}"]["readOnly"],
             volumes[f"subscription-config-{i}"]["hostPath"]["path"]) for i in range(3)] == [
        ("/run/secrets/etc-pki-entitlement", True, "/etc/pki/entitlement"),
        ("/run/secrets/redhat.repo", True, "/etc/yum.repos.d/redhat.repo"), ("/run/secrets/rhsm", True, "/etc/rhsm")]


# The DRA driver as the kubernetes-sigs chart deploys it (v0.5.0, deployments/helm/dra-driver-nvidia-gpu): the image
# and object names it renamed, and the ComputeDomain CRDs the deployer applies, ahead of what uses them.
def by_kind(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_the_plugin_runs_the_kubernetes_sigs_image_under_the_charts_new_names():
    objects = render(__gpuops_dra_with_compute_domains=True)
    image = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0"
    [plugin] = by_kind(objects, "DaemonSet").values()
    [controller] = by_kind(objects, "Deployment").values()
    assert plugin["metadata"]["name"] == "dra-driver-nvidia-gpu-kubelet-plugin"
    assert controller["metadata"]["name"] == "dra-driver-nvidia-gpu-controller"
    pod, controller_pod = plugin["spec"]["template"]["spec"], controller["spec"]["template"]["spec"]
    assert {c["image"] for c in pod["initContainers"] + pod["containers"] + controller_pod["containers"]} == {image}
    assert pod["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-kubeletplugin"
    assert controller_pod["serviceAccountName"] == "dra-driver-nvidia-gpu-service-account-controller"
    assert set(by_kind(objects, "ServiceAccount")) == {"dra-driver-nvidia-gpu-service-account-kubeletplugin",
                                                       "dra-driver-nvidia-gpu-service-account-controller",
                                                       "compute-domain-daemon-service-account"}
    gpus = {c["name"]: c for c in pod["containers"]}["gpus"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in gpus["env"]}
    assert env["IMAGE_NAME"] == image and env["SERVICE_ACCOUNT_NAME"] == {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}
    assert not any("nvidia-dra-driver-gpu" in yaml.safe_dump(o) for o in objects)


def test_the_compute_domain_crds_come_first_and_only_with_compute_domains():
    objects = render(__gpuops_dra_with_compute_domains=True)
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    assert objects[:2] == crds
    assert [c["metadata"]["name"] for c in crds] == ["computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com"]
    for crd, kind in zip(crds, ("ComputeDomain", "ComputeDomainClique"), strict=True):
        spec = crd["spec"]
        assert (spec["group"], spec["scope"], spec["names"]["kind"]) == ("resource.nvidia.com", "Namespaced", kind)
        assert [(v["name"], v["served"], v["storage"]) for v in spec["versions"]] == [("v1beta1", True, True)]
    schema = crds[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    assert schema["spec"]["required"] == ["channel"] and schema["spec"]["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert schema["status"]["properties"]["nodes"]["items"]["required"] == ["cliqueID", "ipAddress", "name"]
    assert crds[0]["spec"]["versions"][0]["subresources"] == {"status": {}}
    daemons = crds[1]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["daemons"]
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"] and daemons["items"]["properties"]["status"]["enum"] == ["Ready", "NotReady"]
    assert not [o for o in render() if o["kind"] == "CustomResourceDefinition"]


def test_the_plugin_may_patch_its_node_and_the_imex_daemons_are_the_drivers_own():
    objects = render(__gpuops_dra_with_compute_domains=True)
    rules = by_kind(objects, "ClusterRole")["gpuops-nvidia-dra-driver-kubeletplugin"]["rules"]
    assert {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "update", "patch"]} in rules
    [plugin] = by_kind(objects, "DaemonSet").values()
    cd = {c["name"]: c for c in plugin["spec"]["template"]["spec"]["containers"]}["compute-domains"]
    env = {e["name"]: e.get("value") for e in cd["env"]}
    assert (env["IMEX_MODE"], env["IMEX_ISOLATION"]) == ("driverManaged", "domain")
    assert (cd["startupProbe"]["failureThreshold"], cd["startupProbe"]["periodSeconds"]) == (600, 1)


def test_pull_secrets_reach_the_pods_the_driver_starts():
    objects = render(__gpuops_dra_with_compute_domains=True, gpuops_cluster_image_pull_secrets=["a", "b"])
    [plugin] = by_kind(objects, "DaemonSet").values()
    [controller] = by_kind(objects, "Deployment").values()
    gpus = {c["name"]: c for c in plugin["spec"]["template"]["spec"]["containers"]}["gpus"]
    assert {"name": "IMAGE_PULL_SECRETS", "value": "a,b"} in gpus["env"]
    assert {"name": "CD_DAEMON_IMAGE_PULL_SECRET_NAMES", "value": "a,b"} in controller["spec"]["template"]["spec"]["containers"][0]["env"]
