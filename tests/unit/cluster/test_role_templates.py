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
    templar = role_templar(ROOT / "roles/dra", **COMMON, __gpuops_cluster_common_nodes={}, **overrides)
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
    assert mounts["sysfs"] == {"name": "sysfs", "mountPath": "/sys/", "mountPropagation": "Bidirectional"}
    assert mounts["procfs"] == {"name": "procfs", "mountPath": "/proc/", "mountPropagation": "Bidirectional"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert {n: volumes[n]["hostPath"] for n in ("host-root", "sysfs", "procfs")} == {
        "host-root": {"path": "/", "type": "Directory"}, "sysfs": {"path": "/sys/", "type": "Directory"},
        "procfs": {"path": "/proc/", "type": "Directory"}}


def test_without_passthrough_the_plugin_mounts_none_of_them():
    for gates in ({}, {"PassthroughSupport": False}):
        pod = plugin_pod(render(gpuops_dra_feature_gates=gates))
        names = {m["name"] for c in pod["containers"] for m in c["volumeMounts"]} | {v["name"] for v in pod["volumes"]}
        assert not names & {"host-root", "sysfs", "procfs"}, gates


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
