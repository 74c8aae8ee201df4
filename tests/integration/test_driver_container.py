"""The containerized driver (issue 22) on the lab cluster: playbooks/cluster.yml with GPU hosts set to
`gpuops_driver_method: containerized`, judged on the API server.

The KWOK nodes carry the OS and kernel labels Node Feature Discovery puts on a node (lab/cluster.py), and each host's
facts name the same OS and kernel (lab/facts.py): Ubuntu 24.04 on two kernels, Ubuntu 22.04 and Debian 12, a host whose
driver is the host's (pre-installed), and a node without GPUs. The real scheduler and DaemonSet controller place the
driver pods; KWOK runs them. In order: check mode creates nothing; bad input fails before anything changes; a run makes
one DaemonSet per OS, with the operator's image tags, whose pods run on the labelled nodes only, and makes the other GPU
components wait for each node's driver; a second run changes nothing; precompiled images make one DaemonSet per kernel
and OS and remove the per-OS ones; every host back to a host driver removes every object of the driver container.
"""

from __future__ import annotations

import json

import pytest

from lab.cluster import Cluster
from lab.facts import cluster_inventory
from tests.integration.test_cluster_roles import NS, get, nfd_crds, nvidia_labels, playbook, recap
from tests.integration.test_lab_cluster import kubectl, lab, wait_for

K1, K2, K3 = "6.8.0-45-generic", "6.8.0-50-generic", "6.1.0-40-amd64"
J1 = "5.15.0-204-generic"
# (name, profile, distribution, kernel): the KWOK node and the facts its host reports agree.
NODES = (("d-noble-a", "hgx-h100", "noble", K1), ("d-noble-b", "l40s", "noble", K2), ("d-jammy", "a100-pcie-mig", "jammy", J1),
         ("d-bookworm", "l40s", "bookworm", K3), ("d-host", "l40s", "noble", K1), ("d-cpu", "no-gpu", "noble", K1))
CONTAINERIZED = ("d-noble-a", "d-noble-b", "d-jammy", "d-bookworm")
IMAGE = "nvcr.io/nvidia/driver"


def driver_daemonsets(kubeconfig) -> dict[str, dict]:
    items = get(kubeconfig, "daemonsets", "-n", NS, "-l", "app.kubernetes.io/component=nvidia-driver")["items"]
    return {d["metadata"]["name"]: d for d in items}


def driver_pods(kubeconfig) -> dict[str, str]:
    """Node -> the driver DaemonSet whose pod runs there."""
    items = get(kubeconfig, "pods", "-n", NS, "-l", "app.kubernetes.io/component=nvidia-driver")["items"]
    return {p["spec"]["nodeName"]: p["metadata"]["labels"]["app"] for p in items
            if p["status"].get("phase") == "Running" and p["spec"].get("nodeName")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    state = tmp_path_factory.mktemp("driver-container")
    lab(state, "cluster", "up", "--no-machines", *[f"--node={n}={p}:{d}:{k}" for n, p, d, k in NODES])
    kubeconfig = state / "cluster/kubeconfig"
    # The playbooks run as a ServiceAccount with the deployer RBAC only; the tests read the API as the admin.
    deployer = Cluster(state).deployer_kubeconfig(dra=False)
    inventory = state / "inventory.json"
    hosts = {n: {"gpuops_driver_method": "containerized"} for n in CONTAINERIZED}
    # The driver role ran on this one and installed the host's driver.
    hosts["d-host"] = {"gpuops_driver": {"method": "precompiled", "packages": ["nvidia-driver-580-server"]}}
    # The rdma role set up nvidia-peermem with DOCA-OFED on one node, GDRCopy on another.
    hosts["d-noble-a"]["gpuops_rdma"] = {"path": "peermem", "stack": "doca", "peermem": True, "gds": False, "gdrcopy": False}
    hosts["d-noble-b"]["gpuops_rdma"] = {"path": "dmabuf", "peermem": False, "gds": False, "gdrcopy": True}
    inventory.write_text(json.dumps(cluster_inventory(
        list(NODES), {"gpuops_cluster_kubeconfig": str(deployer), "gpuops_cluster_validate": False,
                      "gpuops_driver_container_fabric_manager_config": {"FABRIC_MODE": 0}, **nfd_crds(state)}, hosts)))
    yield kubeconfig, inventory
    lab(state, "cluster", "down")


def test_check_mode_creates_nothing(cluster):
    kubeconfig, inventory = cluster
    res = playbook(inventory, "--check", "--diff")
    assert res.returncode == 0, res.stdout[-3000:]
    # The namespace is there (made for the deployer's RoleBinding, as docs/cluster.md says), untouched.
    labels = get(kubeconfig, "namespace", NS)["metadata"].get("labels") or {}
    assert not [k for k in labels if k.startswith("pod-security.kubernetes.io/")], labels
    assert get(kubeconfig, "daemonsets", "-n", NS)["items"] == []
    assert all(labels == {} for labels in nvidia_labels(kubeconfig).values())


@pytest.mark.parametrize(("extra", "message"), [
    ({"gpuops_driver_container_version": "595"}, "gpuops_driver_container_version: '595' is not a driver version such as 580.95.05"),
    ({"gpuops_driver_container_drain_timeout": "300"}, "gpuops_driver_container_drain_timeout: '300' is not a Go duration"),
    ({"gpuops_driver_container_image": "nvcr.io/nvidia/driver:595.91.07"},
     'gpuops_driver_container_image: "nvcr.io/nvidia/driver:595.91.07" carries a tag or digest'),
    ({"gpuops_driver_container_kernel_module_type": "nvidia-open"},
     "gpuops_driver_container_kernel_module_type must be one of: auto, open, proprietary"),
    # GDRCopy is set up on d-noble-b: precompiled images have no GDRCopy build.
    ({"gpuops_driver_container_precompiled": True}, "gpuops_driver_container_precompiled: true, but GDRCopy runs on d-noble-b"),
])
def test_bad_input_fails_before_anything_is_applied(cluster, extra, message):
    kubeconfig, inventory = cluster
    res = playbook(inventory, extra=extra)
    assert res.returncode != 0
    assert message in " ".join(res.stdout.split()), res.stdout[-3000:]
    assert get(kubeconfig, "daemonsets", "-n", NS)["items"] == []


def test_a_daemonset_per_os_runs_where_labelled_and_the_components_wait_for_the_driver(cluster):
    kubeconfig, inventory = cluster
    res = playbook(inventory)
    assert res.returncode == 0, res.stdout[-4000:]

    labels = nvidia_labels(kubeconfig)
    assert {n: labels[n].get("nvidia.com/gpu.deploy.driver") for n, *_rest in NODES} == {
        **dict.fromkeys(CONTAINERIZED, "true"), "d-host": "pre-installed", "d-cpu": None}

    sets = driver_daemonsets(kubeconfig)
    assert sorted(sets) == ["nvidia-driver-daemonset-debian12", "nvidia-driver-daemonset-ubuntu22.04", "nvidia-driver-daemonset-ubuntu24.04"]
    noble = sets["nvidia-driver-daemonset-ubuntu24.04"]["spec"]
    pod = noble["template"]["spec"]
    assert noble["updateStrategy"] == {"type": "OnDelete"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.deploy.driver": "true", "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                                   "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04"}
    containers = {c["name"]: c for c in pod["containers"]}
    assert containers["nvidia-driver-ctr"]["image"] == f"{IMAGE}:595.91.07-ubuntu24.04"
    env = {e["name"]: e.get("value") for e in containers["nvidia-driver-ctr"]["env"]}
    # nvidia-peermem with the host's OFED (d-noble-a), GDRCopy (d-noble-b), Fabric Manager's setting.
    assert env["GPU_DIRECT_RDMA_ENABLED"] == "true" and env["USE_HOST_MOFED"] == "true" and env["GDRCOPY_ENABLED"] == "true"
    assert env["NVFM_CONFIG_FABRIC_MODE"] == "0" and env["KERNEL_MODULE_TYPE"] == "auto" and "GDS_ENABLED" not in env
    assert sorted(containers) == ["nvidia-driver-ctr", "nvidia-gdrcopy-ctr", "nvidia-peermem-ctr"]
    assert containers["nvidia-gdrcopy-ctr"]["image"] == "nvcr.io/nvidia/cloud-native/gdrdrv:v2.6-ubuntu24.04"
    manager = pod["initContainers"][0]
    assert manager["name"] == "k8s-driver-manager" and manager["args"] == ["uninstall_driver"]
    assert {e["name"]: e.get("value") for e in manager["env"]}["ENABLE_GPU_POD_EVICTION"] == "true"
    jammy = sets["nvidia-driver-daemonset-ubuntu22.04"]["spec"]["template"]["spec"]
    assert [c["image"] for c in jammy["containers"]] == [f"{IMAGE}:595.91.07-ubuntu22.04"]
    assert sets["nvidia-driver-daemonset-debian12"]["spec"]["template"]["spec"]["containers"][0]["image"] == f"{IMAGE}:595.91.07-debian12"

    # The real DaemonSet controller and scheduler put one driver pod on each labelled node of the right OS, none elsewhere.
    expected = {"d-noble-a": "nvidia-driver-daemonset-ubuntu24.04", "d-noble-b": "nvidia-driver-daemonset-ubuntu24.04",
                "d-jammy": "nvidia-driver-daemonset-ubuntu22.04", "d-bookworm": "nvidia-driver-daemonset-debian12"}
    wait_for("a driver pod on each node set for it", lambda: driver_pods(kubeconfig) == expected, timeout=90)

    # The other GPU components wait for their node's driver; the device plugin runs with the driver's root.
    plugin = get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-daemonset")["spec"]["template"]["spec"]
    assert plugin["initContainers"][0]["name"] == "driver-wait"
    assert plugin["containers"][0]["command"] == ["sh", "/gpuops/driver-root.sh", "nvidia-device-plugin"]
    for name in ("gpu-feature-discovery", "nvidia-dcgm-exporter", "nvidia-mig-manager"):
        spec = get(kubeconfig, "daemonset", "-n", NS, name)["spec"]["template"]["spec"]
        assert spec["initContainers"][0]["name"] == "driver-wait", name
    # The MIG manager takes the driver's roots and whether to stop host GPU clients from the script (per node), not
    # from fixed values that would stop host clients on a node served by the driver container.
    migr = get(kubeconfig, "daemonset", "-n", NS, "nvidia-mig-manager")["spec"]["template"]["spec"]["containers"][0]
    assert migr["command"] == ["sh", "/gpuops/driver-root.sh", "nvidia-mig-manager"]
    fixed = {e["name"] for e in migr["env"]}
    assert not fixed & {"WITH_SHUTDOWN_HOST_GPU_CLIENTS", "NVIDIA_DRIVER_ROOT", "DRIVER_ROOT_CTR_PATH", "NVIDIA_DEV_ROOT", "DEV_ROOT_CTR_PATH"}
    scripts = get(kubeconfig, "configmap", "-n", NS, "gpuops-driver-root")["data"]
    assert "/run/nvidia/validations/.driver-ctr-ready" in scripts["driver-root.sh"]

    again = playbook(inventory)
    assert again.returncode == 0 and recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]


def test_precompiled_images_make_a_daemonset_per_kernel_and_remove_the_per_os_ones(cluster):
    kubeconfig, inventory = cluster
    # GDRCopy has no precompiled build: d-noble-b's is set up no more.
    inventory.write_text(inventory.read_text().replace('"gdrcopy": true', '"gdrcopy": false'))
    res = playbook(inventory, extra={"gpuops_driver_container_precompiled": True})
    assert res.returncode == 0, res.stdout[-4000:]
    sets = driver_daemonsets(kubeconfig)
    assert {n: d["spec"]["template"]["spec"]["containers"][0]["image"] for n, d in sets.items()} == {
        f"nvidia-driver-daemonset-{K1}-ubuntu24.04": f"{IMAGE}:595-{K1}-ubuntu24.04",
        f"nvidia-driver-daemonset-{K2}-ubuntu24.04": f"{IMAGE}:595-{K2}-ubuntu24.04",
        f"nvidia-driver-daemonset-{J1}-ubuntu22.04": f"{IMAGE}:595-{J1}-ubuntu22.04",
        f"nvidia-driver-daemonset-{K3}-debian12": f"{IMAGE}:595-{K3}-debian12",
    }
    selector = sets[f"nvidia-driver-daemonset-{K2}-ubuntu24.04"]["spec"]["template"]["spec"]["nodeSelector"]
    assert selector["feature.node.kubernetes.io/kernel-version.full"] == K2
    expected = {"d-noble-a": f"nvidia-driver-daemonset-{K1}-ubuntu24.04", "d-noble-b": f"nvidia-driver-daemonset-{K2}-ubuntu24.04",
                "d-jammy": f"nvidia-driver-daemonset-{J1}-ubuntu22.04", "d-bookworm": f"nvidia-driver-daemonset-{K3}-debian12"}
    wait_for("a driver pod per node, from its kernel's DaemonSet", lambda: driver_pods(kubeconfig) == expected, timeout=90)


def test_every_host_back_to_a_host_driver_removes_the_driver_container(cluster):
    kubeconfig, inventory = cluster
    inventory.write_text(inventory.read_text().replace('"gpuops_driver_method": "containerized"', '"gpuops_driver_method": "dkms"'))
    res = playbook(inventory)
    assert res.returncode == 0, res.stdout[-4000:]
    assert driver_daemonsets(kubeconfig) == {}
    for kind, name in (("serviceaccount", "nvidia-driver"), ("configmap", "gpuops-driver-root"), ("clusterrole", "gpuops-nvidia-driver")):
        args = (kind, name) if kind == "clusterrole" else (kind, "-n", NS, name)
        assert kubectl(kubeconfig, "get", *args, check=False).returncode != 0, name
    labels = nvidia_labels(kubeconfig)
    assert {n: labels[n].get("nvidia.com/gpu.deploy.driver") for n in CONTAINERIZED} == dict.fromkeys(CONTAINERIZED, "pre-installed")
    plugin = get(kubeconfig, "daemonset", "-n", NS, "nvidia-device-plugin-daemonset")["spec"]["template"]["spec"]
    assert "initContainers" not in plugin and plugin["containers"][0]["command"] == ["nvidia-device-plugin"]
