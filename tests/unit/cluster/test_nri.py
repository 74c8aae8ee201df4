"""NRI mode on the cluster side (issue 63, docs/nri.md): with gpuops_cluster_nri no RuntimeClass is created and no
operand's pod names one; each operand's pod is annotated nvidia.cdi.k8s.io/container.<its main container> with the CDI
device the node's NRI plugin injects (as the GPU Operator's setNRIPluginAnnotation does), and the device plugin's
DEVICE_LIST_STRATEGY is CDI's (the operator's with CDI on, which NRI mode needs). Rendered over the roles' defaults and
cluster_common's variables, as a run renders them."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import trust_as_template
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import inputs

from tests.unit.harness import role_templar

ROOT = Path(__file__).parents[3]
LOADER = DataLoader()
COMMON = {**LOADER.load_from_file(str(ROOT / "roles/cluster_common/defaults/main.yml"), trusted_as_template=True),
          **LOADER.load_from_file(str(ROOT / "roles/cluster_common/vars/main.yml"), trusted_as_template=True)}
# The operands' DaemonSets (with the settings that deploy them) and the main container the GPU Operator annotates.
OPERANDS = {
    "device_plugin": ({}, {"nvidia-device-plugin-daemonset": "nvidia-device-plugin"}),
    "device_plugin/mps": ({"gpuops_device_plugin_configs": {"mps": {"version": "v1", "sharing": {"mps": {"resources": [
        {"name": "nvidia.com/gpu", "replicas": 2}]}}}}},
        {"nvidia-device-plugin-daemonset": "nvidia-device-plugin",
         "nvidia-device-plugin-mps-control-daemon": "mps-control-daemon-ctr"}),
    "gpu_feature_discovery": ({}, {"gpu-feature-discovery": "gpu-feature-discovery"}),
    "dcgm_exporter": ({"gpuops_dcgm_exporter_standalone_dcgm": True},
                      {"nvidia-dcgm-exporter": "nvidia-dcgm-exporter", "nvidia-dcgm": "nvidia-dcgm-ctr"}),
    "mig_manager": ({}, {"nvidia-mig-manager": "nvidia-mig-manager"}),
}
# A GPU host as cluster_common's read leaves it (the rows of gpuops.nvidia.cluster_nodes), its toolkit reporting CDI.
NODE = {"info": {"summary": {"gpu_count": 1, "mig_capable": False}, "pci": {"gpus": []}, "nvml": {"gpus": []}},
        "driver": {"method": "precompiled", "packages": []}, "rdma": {"peermem": False, "host_ofed": False},
        "gpudirect": {"gds": False, "gdrcopy": False}, "gpuops_container_toolkit_cdi": True,
        "gpuops_container_toolkit_runtime_handler": "nvidia"}
NODES = {"n1": NODE}


def render(role: str, **overrides) -> list[dict]:
    role_dir = ROOT / "roles" / role
    templar = role_templar(role_dir, **{**COMMON, **_own(role_dir), "__gpuops_cluster_common_nodes": NODES,
                                        "__gpuops_cluster_common_seen": {"resources": {}},
                                        "__gpuops_cluster_common_run_hosts": ["n1"],
                                        # Set by the roles' deploy tasks before they render.
                                        "__gpuops_dcgm_exporter_with_monitor": False,
                                        "__gpuops_mig_manager_config": {"version": "v1", "mig-configs": {}}, **overrides})
    return yaml.safe_load(templar.template(trust_as_template((role_dir / "templates/objects.yml.j2").read_text())))


def _own(role_dir: Path) -> dict:
    out = {}
    for part in ("defaults/main.yml", "vars/main.yml"):
        if (role_dir / part).exists():
            out.update(LOADER.load_from_file(str(role_dir / part), trusted_as_template=True) or {})
    return out


def daemonsets(objects: list[dict]) -> dict[str, dict]:
    return {o["metadata"]["name"]: o["spec"]["template"] for o in objects if o["kind"] == "DaemonSet"}


@pytest.mark.parametrize("operand", OPERANDS)
def test_in_nri_mode_each_operand_is_annotated_for_the_plugin_and_names_no_runtime_class(operand):
    settings, mains = OPERANDS[operand]
    role = operand.split("/")[0]
    nri = daemonsets(render(role, gpuops_cluster_nri=True, **settings))
    assert set(mains) <= set(nri)
    for name, container in mains.items():
        pod = nri[name]
        assert "runtimeClassName" not in pod["spec"], name
        assert pod["metadata"]["annotations"] == {f"nvidia.cdi.k8s.io/container.{container}": "nvidia.com/gpu=all"}, name
        assert container in [c["name"] for c in pod["spec"]["containers"]], name
    # The device the annotations name is the setting's (the GPU Operator's, where the nodes have a management spec).
    other = daemonsets(render(role, gpuops_cluster_nri=True, gpuops_cluster_nri_cdi_device="management.nvidia.com/gpu=all",
                              **settings))
    assert {n: other[n]["metadata"]["annotations"] for n in mains} == {
        n: {f"nvidia.cdi.k8s.io/container.{c}": "management.nvidia.com/gpu=all"} for n, c in mains.items()}
    # Without NRI mode: the RuntimeClass, no annotation.
    plain = daemonsets(render(role, **settings))
    for name in mains:
        assert plain[name]["spec"]["runtimeClassName"] == "nvidia"
        assert "annotations" not in plain[name]["metadata"]


def test_no_runtime_class_is_created_in_nri_mode():
    def runtime_classes(**overrides):
        return [o for o in render("cluster_prereqs", gpuops_cluster_prereqs_runtime_handler="nvidia", **overrides)
                if o["kind"] == "RuntimeClass"]
    assert [o["metadata"]["name"] for o in runtime_classes()] == ["nvidia"]
    assert runtime_classes(gpuops_cluster_nri=True) == []


def _env(template: dict, container: str) -> dict[str, str]:
    (main,) = [c for c in template["spec"]["containers"] if c["name"] == container]
    return {e["name"]: e.get("value") for e in main.get("env", [])}


@pytest.mark.parametrize("cdi", ["auto", "true"])
def test_the_device_plugin_s_device_list_strategy_follows_nri_mode(cdi):
    # Hosts that report no CDI: the device plugin would take envvar, but NRI mode's devices are CDI devices.
    nodes = {"n1": {**NODE, "gpuops_container_toolkit_cdi": False}}
    nri = daemonsets(render("device_plugin", gpuops_cluster_nri=True, gpuops_device_plugin_cdi=cdi,
                            __gpuops_cluster_common_nodes=nodes))
    assert _env(nri["nvidia-device-plugin-daemonset"], "nvidia-device-plugin")["DEVICE_LIST_STRATEGY"] == "cdi-annotations,cdi-cri"
    plain = daemonsets(render("device_plugin", gpuops_device_plugin_cdi="auto", __gpuops_cluster_common_nodes=nodes))
    assert _env(plain["nvidia-device-plugin-daemonset"], "nvidia-device-plugin")["DEVICE_LIST_STRATEGY"] == "envvar"
    # The MIG manager refreshes the CDI spec after a MIG change there too.
    mig = daemonsets(render("mig_manager", gpuops_cluster_nri=True, __gpuops_cluster_common_nodes=nodes))
    assert _env(mig["nvidia-mig-manager"], "nvidia-mig-manager").get("CDI_ENABLED") == "true"


def test_nri_mode_with_cdi_off_is_refused_naming_both_variables():
    assert inputs.nri(True, "false") == [
        'gpuops_device_plugin_cdi: "false" turns CDI off, and NRI mode (gpuops_cluster_nri: true) injects CDI devices: '
        "use auto or true"]
    for cdi in ("auto", "true"):
        assert inputs.nri(True, cdi) == []
    assert inputs.nri(False, "false") == []
    declaration = yaml.safe_load((ROOT / "roles/cluster_common/meta/inputs.yml").read_text())
    assert {"rule": "cluster.nri", "args": {"nri": "gpuops_cluster_nri", "cdi": "gpuops_device_plugin_cdi"}} in declaration["rules"]


@pytest.mark.parametrize(("hosts_root", "setting", "expected"), [
    ("", "", {"NVIDIA_DRIVER_ROOT": "/"}),
    # The hosts' toolkit root, which their CDI spec is made from (the lab's simulated driver, a custom install).
    ("/opt/nvidia/driver/", "", {"NVIDIA_DRIVER_ROOT": "/opt/nvidia/driver/", "DRIVER_ROOT_CTR_PATH": "/driver-root/opt/nvidia/driver"}),
    ("/opt/nvidia/driver", "/", {"NVIDIA_DRIVER_ROOT": "/"}),
])
def test_the_device_plugin_makes_its_cdi_devices_from_the_hosts_driver_root(hosts_root, setting, expected):
    # With CDI on (NRI mode) the plugin generates CDI devices from NVIDIA_DRIVER_ROOT, looking for the driver's
    # libraries under the host's / at /driver-root: a root other than / found nothing before (issue 63, the real node).
    nodes = {"n1": {**NODE, "gpuops_container_toolkit_driver_root": hosts_root}}
    plugin = daemonsets(render("device_plugin", gpuops_cluster_nri=True, gpuops_device_plugin_driver_root=setting,
                               __gpuops_cluster_common_nodes=nodes))["nvidia-device-plugin-daemonset"]
    env = _env(plugin, "nvidia-device-plugin")
    assert {k: env[k] for k in ("NVIDIA_DRIVER_ROOT", "DRIVER_ROOT_CTR_PATH", "HOST_DRIVER_ROOT") if k in env} == expected
    mounts = {m["name"]: m["mountPath"] for c in plugin["spec"]["containers"] for m in c["volumeMounts"]}
    assert mounts["host-root"] == "/driver-root"
    assert {"name": "host-root", "hostPath": {"path": "/"}} in plugin["spec"]["volumes"]
