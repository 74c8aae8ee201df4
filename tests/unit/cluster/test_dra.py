"""NVIDIA's DRA driver from the cluster side (module_utils/cluster/dra.py and its filters), and the lab's stand-in for its
kubelet plugin (lab/sim/dra.py), whose ResourceSlices validation counts."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.filter import cluster as cluster_filter
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import dra
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import validation as val

from lab.sim import dra as lab_dra
from lab.sim.hardware import load_profile

from .test_driver_container import row


@pytest.mark.parametrize(("gates", "errors"), [
    ({}, []),
    ({"MPSSupport": True, "TimeSlicingSettings": False}, []),
    ({"MPSsupport": True}, ["gpuops_dra_feature_gates: 'MPSsupport' is not a feature gate of the DRA driver"]),
    ({"MPSSupport": "yes"}, ["gpuops_dra_feature_gates['MPSSupport']: 'yes' is not true or false"]),
    ({"DynamicMIG": True, "MPSSupport": True, "NVMLDeviceHealthCheck": True},
     ["gpuops_dra_feature_gates: DynamicMIG cannot be on with NVMLDeviceHealthCheck, MPSSupport"]),
    (["MPSSupport"], ["gpuops_dra_feature_gates: ['MPSSupport'] is not a mapping"]),
    # What the v0.5.0 driver refuses besides (its featuregates.go): gates it needs together or apart.
    ({"PassthroughSupport": True, "NVMLDeviceHealthCheck": True},
     ["gpuops_dra_feature_gates: PassthroughSupport cannot be on with NVMLDeviceHealthCheck"]),
    ({"DeviceMetadata": True}, ["gpuops_dra_feature_gates: DeviceMetadata is on and needs PassthroughSupport, which is off"]),
    ({"DeviceMetadata": True, "PassthroughSupport": True, "FabricManagerPartitioning": True, "ConsumableShares": True}, []),
    ({"IMEXDaemonsWithDNSNames": False},
     ["gpuops_dra_feature_gates: ComputeDomainCliques is on (its default) and needs IMEXDaemonsWithDNSNames, which is off"]),
    ({"IMEXDaemonsWithDNSNames": False, "ComputeDomainCliques": False, "HostManagedIMEXDaemon": True}, []),
])
def test_feature_gates_are_checked_as_the_driver_checks_them(gates, errors):
    found = dra.check_feature_gates(gates)
    assert len(found) == len(errors) and all(f.startswith(e) for f, e in zip(found, errors, strict=True)), found


def test_feature_gates_are_passed_as_the_driver_reads_them():
    assert dra.feature_gates_env({"TimeSlicingSettings": True, "MPSSupport": False}) == "MPSSupport=false,TimeSlicingSettings=true"


def test_a_cluster_without_resource_v1_is_refused_naming_its_version():
    # kubernetes.core.k8s_cluster_info's shape: apis by group/version, the server's version under version.server.
    old = {"apis": {"v1": {}, "apps/v1": {}, "resource.k8s.io/v1beta1": {}, "resource.k8s.io/v1beta2": {}},
           "version": {"server": {"kubernetes": {"gitVersion": "v1.33.4"}}}}
    assert cluster_filter.dra_api_errors(old) == [
        "gpuops_gpu_scheduling: dra needs the resource.k8s.io/v1 API (Kubernetes 1.34 and later); the cluster runs v1.33.4 and "
        "serves resource.k8s.io/v1beta1, resource.k8s.io/v1beta2; accepted: device-plugin on this cluster"]
    new = {"apis": {"v1": {}, "resource.k8s.io/v1": {}}, "version": {"server": {"kubernetes": {"gitVersion": "v1.36.3"}}}}
    assert cluster_filter.dra_api_errors(new) == []


def test_compute_domain_crds_are_not_required_of_the_cluster():
    # The dra role applies them itself (the kubernetes-sigs driver leaves them to the deployer): a cluster without
    # resource.nvidia.com passes.
    apis = {"v1": {}, "resource.k8s.io/v1": {"DeviceClass": {}}}
    assert cluster_filter.dra_api_errors({"apis": apis, "version": {"server": {"kubernetes": {"gitVersion": "v1.36.3"}}}}) == []


def test_the_driver_root_follows_the_driver_container_and_one_root_is_needed():
    host, served = row(method="precompiled"), row()
    assert dra.driver_root({"a": host, "b": host}, "") == ("/", [])
    assert dra.driver_root({"a": served, "b": served, "cpu": row(gpus=0)}, "") == ("/run/nvidia/driver", [])
    _root, errors = dra.driver_root({"a": served, "b": host}, "")
    assert errors and "the driver container serves a and the host's own driver b" in errors[0]
    assert dra.driver_root({"a": served, "b": host}, "/opt/driver") == ("/opt/driver", [])
    # Host drivers at the root their toolkit names (gpuops_container_toolkit_driver_root), one for every GPU host.
    elsewhere = {**host, "gpuops_container_toolkit_driver_root": "/opt/driver"}
    assert dra.driver_root({"a": elsewhere, "b": elsewhere, "cpu": row(gpus=0)}, "") == ("/opt/driver", [])
    _root, errors = dra.driver_root({"a": elsewhere, "b": host}, "")
    assert errors and "(gpuops_container_toolkit_driver_root: / on b; /opt/driver on a)" in errors[0]


def test_validation_counts_the_devices_the_plugin_publishes_as_the_facts_expect(info_of):
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import slim

    expected = {p: dra.devices(slim(info_of(p))) for p in ("hgx-h100", "a100-pcie-mig", "no-gpu")}
    assert expected["hgx-h100"] == {"gpu.nvidia.com/gpu": 8}
    assert expected["a100-pcie-mig"] == {"gpu.nvidia.com/gpu": 1, "gpu.nvidia.com/mig-3g.40gb": 1, "gpu.nvidia.com/mig-2g.20gb": 1,
                                         "gpu.nvidia.com/mig-1g.10gb": 2}
    assert expected["no-gpu"] == {}
    # What the lab's plugin stand-in publishes for the same profiles counts the same.
    published = dra.slice_devices([lab_dra.resource_slice(p, load_profile(p)) for p in ("hgx-h100", "a100-pcie-mig")]
                                  + [{"spec": {"driver": "other.example.com", "nodeName": "x", "devices": [{"name": "d"}]}}])
    assert published == {"hgx-h100": expected["hgx-h100"], "a100-pcie-mig": expected["a100-pcie-mig"]}
    assert lab_dra.resource_slice("n", load_profile("no-gpu")) is None


def test_the_plugin_stand_in_describes_a_device_as_the_driver_does():
    device = lab_dra.devices("n", load_profile("hgx-h100"))[0]
    assert device["name"] == "gpu-0"
    attrs = device["attributes"]
    assert attrs["type"] == {"string": "gpu"} and attrs["productName"] == {"string": "NVIDIA H100 80GB HBM3"}
    assert attrs["architecture"] == {"string": "Hopper"} and attrs["cudaComputeCapability"] == {"version": "9.0.0"}
    # Leading zeros dropped, as the driver normalises its version.
    assert attrs["driverVersion"] == {"version": "550.54.15"} and lab_dra.semver("570.124.06") == "570.124.6"
    assert attrs["resource.kubernetes.io/pciBusID"] == {"string": "0000:18:00.0"}
    assert device["capacity"] == {"memory": {"value": "81559Mi"}}


def test_the_smoke_test_claims_its_device_through_the_templates():
    settings = val.Settings(namespace="gpu-operator", dra=True)
    assert val.request_for({dra.MIG_PREFIX + "1g.10gb": 2, dra.GPU: 1}) == dra.GPU
    pod = val.job_manifest("n1", dra.GPU, settings, "r")["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "gpuops-validation-gpu"}]
    assert pod["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
    pod = val.job_manifest("n1", dra.MIG_PREFIX + "1g.10gb", settings, "r")["spec"]["template"]["spec"]
    assert pod["resourceClaims"][0]["resourceClaimTemplateName"] == "gpuops-validation-mig"
    # The device plugin's resources are still limits.
    pod = val.job_manifest("n1", "nvidia.com/gpu", settings, "r")["spec"]["template"]["spec"]
    assert "resourceClaims" not in pod and pod["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": "1"}}


def test_expected_devices_follow_a_mig_config_applied_in_this_run(info_of):
    from ansible_collections.gpuops.nvidia.plugins.filter.cluster import cluster_nodes

    hosts = {"a100": {"gpuops_gpu_info": info_of("a100-pcie-mig")}, "cpu": {"gpuops_gpu_info": info_of("no-gpu")}}
    nodes = cluster_nodes(list(hosts), hosts, {})
    whole = [{"devices": "all", "mig-enabled": False}]
    assert cluster_filter.dra_expected_devices(nodes) == {"a100": {"gpu.nvidia.com/gpu": 1, "gpu.nvidia.com/mig-3g.40gb": 1,
                                                                   "gpu.nvidia.com/mig-2g.20gb": 1, "gpu.nvidia.com/mig-1g.10gb": 2}}
    assert cluster_filter.dra_expected_devices(nodes, {"a100": whole}) == {"a100": {"gpu.nvidia.com/gpu": 2}}
