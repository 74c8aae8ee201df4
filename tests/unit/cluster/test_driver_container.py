"""The containerized driver's pools, images and names (module_utils/cluster/driver_container.py), and the two scripts its
objects carry (roles/driver_container/files), run with sh against a directory standing in for the node."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from ansible_collections.gpuops.nvidia.plugins.filter import cluster as cluster_filter
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import driver_container as dc

FILES = Path(__file__).resolve().parents[3] / "roles/driver_container/files"
REPO = "nvcr.io/nvidia/driver"


def row(os_id: str | None = "ubuntu", version: str | None = "24.04", kernel: str | None = "6.8.0-45-generic", *,
        method: str = "containerized", packages: tuple = (), gpus: int = 8, peermem: bool = False, host_ofed: bool = False,
        gds: bool = False, gdrcopy: bool = False, runtime: str = "") -> dict:
    """A cluster_nodes row, as the filter builds it from a host's facts and settings."""
    return {"gpuops_container_toolkit_runtime_found": runtime,
            "info": {"summary": {"gpu_count": gpus, "mig_capable": False}, "pci": {"gpus": []}, "nvml": {"gpus": []},
                     "node": {"os": {"id": os_id, "version_id": version}, "kernel": kernel}},
            "driver": {"method": method, "packages": list(packages)},
            "rdma": {"peermem": peermem, "host_ofed": host_ofed}, "gpudirect": {"gds": gds, "gdrcopy": gdrcopy}}


@pytest.mark.parametrize(("os_id", "version", "tag"), [
    ("ubuntu", "24.04", "ubuntu24.04"), ("ubuntu", "22.04", "ubuntu22.04"), ("debian", "12", "debian12"),
    ("rhel", "9.4", "rhel9"), ("rhel", "10.0", "rhel10"), ("rocky", "8.10", "rocky8"), ("ol", "9.2", "ol9"), ("sles", "15.6", "sles15.6"),
])
def test_the_os_tag_is_the_operators(os_id, version, tag):
    assert dc.os_tag(os_id, version) == tag


@pytest.mark.parametrize(("kernel", "cleaned"), [
    ("6.8.0-45-generic", "6.8.0-45-generic"),
    ("5.14.0-427.13.1.el9_4.x86_64", "5.14.0-427.13.1.el9.4"),
    ("6.8.0-1017-nvidia-64k", "6.8.0-1017-nvidia-64k"),
    ("5.14.0-503.el9.aarch64_64k", "5.14.0-503.el9"),
])
def test_a_kernel_in_a_name_loses_its_architecture_and_underscores(kernel, cleaned):
    assert dc.clean_kernel(kernel) == cleaned


def test_pools_group_by_os_and_take_the_image_of_each():
    nodes = {"a": row(), "b": row(kernel="6.8.0-50-generic"), "c": row("ubuntu", "22.04", "5.15.0-204-generic"),
             "d": row("debian", "12", "6.1.0-40-amd64"), "e": row(method="precompiled"), "cpu": row(gpus=0)}
    pools, left_out = dc.pools(nodes, REPO, "595.91.07", False)
    assert [(p["name"], p["image"], p["nodes"]) for p in pools] == [
        ("nvidia-driver-daemonset-debian12", f"{REPO}:595.91.07-debian12", ["d"]),
        ("nvidia-driver-daemonset-ubuntu22.04", f"{REPO}:595.91.07-ubuntu22.04", ["c"]),
        ("nvidia-driver-daemonset-ubuntu24.04", f"{REPO}:595.91.07-ubuntu24.04", ["a", "b"]),
    ]
    assert pools[2]["node_selector"] == {"nvidia.com/gpu.deploy.driver": "true",
                                         "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
                                         "feature.node.kubernetes.io/system-os_release.VERSION_ID": "24.04"}
    # A host driver's node is not set for the container: not even left out, it is simply not the container's.
    assert left_out == []


def test_rhel_and_sles_pools_that_build_modules_mount_the_hosts_subscriptions():
    # As the operator: RHEL's entitlement, redhat.repo and rhsm (not where CRI-O mounts them itself), SLES' zypp
    # credentials and SUSEConnect, read-only; none where the modules come precompiled or the OS has no subscriptions.
    nodes = {"r1": row("rhel", "9.4"), "r2": row("rhel", "9.4", runtime="crio"), "c": row("rhel", "8.10", runtime="crio"),
             "s": row("sles", "15.6"), "u": row()}
    pools = {p["os_tag"]: p for p in dc.pools(nodes, REPO, "595.91.07", False)[0]}
    assert pools["rhel9"]["subscriptions"] == [
        {"mountPath": "/run/secrets/etc-pki-entitlement", "hostPath": {"path": "/etc/pki/entitlement", "type": "Directory"}},
        {"mountPath": "/run/secrets/redhat.repo", "hostPath": {"path": "/etc/yum.repos.d/redhat.repo", "type": "File"}},
        {"mountPath": "/run/secrets/rhsm", "hostPath": {"path": "/etc/rhsm", "type": "Directory"}}]
    assert pools["rhel8"]["subscriptions"] == []  # CRI-O on every node of the pool
    assert pools["sles15.6"]["subscriptions"] == [
        {"mountPath": "/etc/SUSEConnect", "hostPath": {"path": "/etc/SUSEConnect", "type": "FileOrCreate"}},
        {"mountPath": "/etc/zypp/credentials.d", "hostPath": {"path": "/etc/zypp/credentials.d", "type": "Directory"}}]
    assert pools["ubuntu24.04"]["subscriptions"] == []
    precompiled = dc.pools({"r": row("rhel", "9.4")}, REPO, "595", True)[0]
    assert precompiled[0]["subscriptions"] == []


def test_precompiled_pools_are_per_kernel_and_selected_by_it():
    nodes = {"a": row(), "b": row(kernel="6.8.0-50-generic"), "c": row(kernel="6.8.0-50-generic"), "r": row("rhel", "9.4", "5.14.0-427.13.1.el9_4.x86_64")}
    pools, _left_out = dc.pools(nodes, REPO, "595", True)
    assert [(p["name"], p["image"], p["nodes"]) for p in pools] == [
        ("nvidia-driver-daemonset-5.14.0-427.13.1.el9.4-rhel9", f"{REPO}:595-5.14.0-427.13.1.el9_4.x86_64-rhel9", ["r"]),
        ("nvidia-driver-daemonset-6.8.0-45-generic-ubuntu24.04", f"{REPO}:595-6.8.0-45-generic-ubuntu24.04", ["a"]),
        ("nvidia-driver-daemonset-6.8.0-50-generic-ubuntu24.04", f"{REPO}:595-6.8.0-50-generic-ubuntu24.04", ["b", "c"]),
    ]
    assert pools[0]["node_selector"] == {"nvidia.com/gpu.deploy.driver": "true", "feature.node.kubernetes.io/system-os_release.ID": "rhel",
                                         "feature.node.kubernetes.io/system-os_release.VERSION_ID.major": "9",
                                         "feature.node.kubernetes.io/kernel-version.full": "5.14.0-427.13.1.el9_4.x86_64"}


def test_a_long_name_is_cut_to_a_label_value_and_stays_apart_from_another():
    one = dc.daemonset_name("ubuntu24.04", "6.8.0-1017-some-very-long-cloud-flavour-kernel-name-a")
    two = dc.daemonset_name("ubuntu24.04", "6.8.0-1017-some-very-long-cloud-flavour-kernel-name-b")
    assert len(one) <= 63 and len(two) <= 63 and one != two and one.startswith("nvidia-driver-daemonset-6.8.0-1017")


def test_nodes_without_what_their_pool_needs_are_named_and_host_drivers_are_pre_installed():
    nodes = {"old": row(None, None), "nokernel": row(kernel=None), "host": row(packages=("nvidia-driver-580-server",)),
             "plain": row(method="dkms"), "ok": row()}
    pools, left_out = dc.pools(nodes, REPO, "595", True)
    assert [p["nodes"] for p in pools] == [["ok"]]
    assert left_out == [
        "host: pre-installed, host driver packages are installed (nvidia-driver-580-server)",
        "nokernel: its facts name no running kernel for a precompiled image: run the preflight on it",
        "old: its facts name no operating system (os-release ID and VERSION_ID): run the preflight on it",
    ]
    assert {n: dc.deploy_label(r) for n, r in nodes.items()} == {
        "old": "true", "nokernel": "true", "host": "pre-installed", "plain": "pre-installed", "ok": "true"}
    assert dc.driver_container_nodes(nodes) == ["nokernel", "ok", "old"]


def test_gpudirect_follows_the_nodes_of_the_pool_and_precompiled_images_refuse_gds():
    nodes = {"a": row(peermem=True, host_ofed=True), "b": row(gdrcopy=True), "c": row("debian", "12", host_ofed=True)}
    pools, _left_out = dc.pools(nodes, REPO, "595.91.07", False)
    flags = {p["os_tag"]: (p["rdma"], p["host_mofed"], p["gds"], p["gdrcopy"]) for p in pools}
    assert flags == {"ubuntu24.04": (True, True, False, True), "debian12": (False, False, False, False)}
    pools, _left_out = dc.pools(nodes, REPO, "595", True)
    assert dc.check_pools(pools, True) == [
        "gpuops_driver_container_precompiled: true, but GDRCopy runs on b (gpuops_rdma_gds / gpuops_rdma_gdrcopy), which "
        "precompiled driver images do not build; accepted: gpuops_driver_container_precompiled: false there"]


@pytest.mark.parametrize(("settings", "errors"), [
    ({"version": "595.91.07", "drain_timeout": "0s"}, []),
    ({"version": "595", "drain_timeout": "0s"}, ["gpuops_driver_container_version: '595' is not a driver version such as 580.95.05"]),
    ({"version": "595.91.07", "precompiled": True, "branch": "r595", "drain_timeout": "5m"},
     ["gpuops_driver_container_branch: 'r595' is not a driver branch such as 580"]),
    ({"version": "595.91.07", "drain_timeout": "300"}, ["gpuops_driver_container_drain_timeout: '300' is not a Go duration"]),
    ({"version": "595.91.07", "drain_timeout": "0s", "fabric_manager_config": {"fabric_mode": 1, "LOG_LEVEL": [4]}},
     ["gpuops_driver_container_fabric_manager_config: key 'fabric_mode' is not a fabricmanager.cfg key",
      "gpuops_driver_container_fabric_manager_config['LOG_LEVEL']: [4] is not a value for fabricmanager.cfg"]),
])
def test_settings_are_checked_naming_the_variable(settings, errors):
    found = dc.check_settings(settings)
    assert len(found) == len(errors) and all(f.startswith(e) for f, e in zip(found, errors, strict=True)), found


def test_the_filter_takes_the_branch_of_the_version_for_precompiled_images():
    plan = cluster_filter.driver_container_pools({"a": row()}, {"image": REPO, "version": "595.91.07", "precompiled": True,
                                                                "drain_timeout": "0s"})
    assert plan["errors"] == [] and plan["pools"][0]["image"] == f"{REPO}:595-6.8.0-45-generic-ubuntu24.04"


def test_leftovers_are_the_daemonsets_of_gone_pools_and_the_rest_once_no_node_is_served():
    pools, _left_out = dc.pools({"a": row()}, REPO, "595.91.07", False)
    assert dc.leftovers(["nvidia-driver-daemonset-ubuntu24.04"], pools, "gpu-operator", True) == []
    gone = dc.leftovers(["nvidia-driver-daemonset-ubuntu22.04", "nvidia-driver-daemonset-ubuntu24.04"], pools, "gpu-operator", True)
    assert gone == [{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "nvidia-driver-daemonset-ubuntu22.04",
                                                                                "namespace": "gpu-operator"}}]
    gone = dc.leftovers(["nvidia-driver-daemonset-ubuntu24.04"], [], "gpu-operator", False)
    assert [(o["kind"], o["metadata"]["name"]) for o in gone] == [
        ("DaemonSet", "nvidia-driver-daemonset-ubuntu24.04"), ("ServiceAccount", "nvidia-driver"),
        ("ClusterRoleBinding", "gpuops-nvidia-driver"), ("ClusterRole", "gpuops-nvidia-driver"),
        ("ConfigMap", "nvidia-driver-startup-probe"), ("ConfigMap", "gpuops-driver-root")]


# --- the scripts, with sh ----------------------------------------------------------------------------------------------

def _bin(tmp_path: Path, smi_rc: int) -> str:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "nvidia-smi").write_text(f"#!/bin/sh\nexit {smi_rc}\n")
    (bindir / "nvidia-smi").chmod(0o755)
    return f"{bindir}{os.pathsep}{os.environ['PATH']}"


def _probe(tmp_path: Path, smi_rc: int = 0, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(FILES / "startup-probe.sh")], capture_output=True, text=True, check=False, timeout=30,
                          env={"PATH": _bin(tmp_path, smi_rc), "GPUOPS_PROBE_ROOT": str(tmp_path), **env})


def test_the_startup_probe_writes_the_marker_only_once_the_driver_answers(tmp_path):
    ready = tmp_path / "run/nvidia/validations/.driver-ctr-ready"
    assert _probe(tmp_path).returncode == 1 and not ready.exists()  # no module loaded
    (tmp_path / "sys/module/nvidia").mkdir(parents=True)
    (tmp_path / "sys/module/nvidia/refcnt").write_text("0\n")
    assert _probe(tmp_path, smi_rc=9).returncode == 1 and not ready.exists()
    status = tmp_path / "run/nvidia/validations/.driver-daemons-status"
    status.parent.mkdir(parents=True)
    status.write_text("NotReady")
    res = _probe(tmp_path)
    assert res.returncode == 1 and "not ready: NotReady" in res.stdout and not ready.exists()
    status.write_text("Ready")
    res = _probe(tmp_path, GPU_DIRECT_RDMA_ENABLED="true")
    assert res.returncode == 0, res.stdout
    assert ready.read_text() == "GPU_DIRECT_RDMA_ENABLED: true\nGDS_ENABLED: false\nGDRCOPY_ENABLED: false\n"
    assert not ready.with_name(".driver-ctr-ready.tmp").exists()


def _driver_root(host: Path, *command: str, timeout: float = 20, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(FILES / "driver-root.sh"), *command], capture_output=True, text=True, check=False,
                          timeout=timeout, env={"PATH": os.environ["PATH"], "HOST_ROOT": str(host), "GPUOPS_WAIT_SECONDS": "0.2", **env})


def _host_driver(host: Path) -> None:
    """A host driver under `host`: its nvidia-smi."""
    smi = host / "usr/bin/nvidia-smi"
    smi.parent.mkdir(parents=True)
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)


def _driver_container_ready(host: Path) -> None:
    """The driver container's marker under `host`, as its startup probe writes it."""
    marker = host / "run/nvidia/validations/.driver-ctr-ready"
    marker.parent.mkdir(parents=True)
    marker.write_text("GDS_ENABLED: false\n")


def test_driver_root_waits_for_a_driver_and_runs_with_its_root(tmp_path):
    host = tmp_path / "host"
    show = ("sh", "-c", 'echo "$NVIDIA_DRIVER_ROOT|$CONTAINER_DRIVER_ROOT|$DRIVER_ROOT_CTR_PATH"')
    with pytest.raises(subprocess.TimeoutExpired):
        _driver_root(host, *show, timeout=1.5)  # no driver yet: it waits
    _host_driver(host)
    assert _driver_root(host, *show).stdout.splitlines()[-1] == f"/|{host}|{host}"
    _driver_container_ready(host)
    assert _driver_root(host, *show).stdout.splitlines()[-1] == f"/run/nvidia/driver|{host}/run/nvidia/driver|{host}/run/nvidia/driver"
    # Without a command (the init container), it only waits.
    res = _driver_root(host)
    assert res.returncode == 0 and "NVIDIA_DRIVER_ROOT=/run/nvidia/driver" in res.stdout


def test_driver_root_tells_the_mig_manager_where_devices_are_and_whether_host_clients_stop(tmp_path):
    # The operator's driver validation (IS_HOST_DRIVER, NVIDIA_DEV_ROOT, DEV_ROOT_CTR_PATH) and its MIG manager
    # entrypoint (WITH_SHUTDOWN_HOST_GPU_CLIENTS=$IS_HOST_DRIVER): host clients are stopped only where the driver is
    # the host's; device nodes are under the driver root where the driver container made them there, else the host's.
    host = tmp_path / "host"
    show = ("sh", "-c", 'echo "$WITH_SHUTDOWN_HOST_GPU_CLIENTS|$NVIDIA_DEV_ROOT|$DEV_ROOT_CTR_PATH"')
    _host_driver(host)
    assert _driver_root(host, *show).stdout.splitlines()[-1] == f"true|/|{host}"
    _driver_container_ready(host)
    assert _driver_root(host, *show).stdout.splitlines()[-1] == f"false|/|{host}"
    ctl = host / "run/nvidia/driver/dev/nvidiactl"
    ctl.parent.mkdir(parents=True)
    ctl.write_text("")
    assert _driver_root(host, *show).stdout.splitlines()[-1] == f"false|/run/nvidia/driver|{host}/run/nvidia/driver"


def test_driver_root_finds_a_host_driver_at_the_root_it_is_given(tmp_path):
    # The device plugin passes HOST_DRIVER_ROOT where the hosts' driver is not at / (gpuops_device_plugin_driver_root).
    host = tmp_path / "host"
    show = ("sh", "-c", 'echo "$NVIDIA_DRIVER_ROOT|$DRIVER_ROOT_CTR_PATH|$WITH_SHUTDOWN_HOST_GPU_CLIENTS|$NVIDIA_DEV_ROOT"')
    _host_driver(host / "opt/nvidia/driver")
    with pytest.raises(subprocess.TimeoutExpired):
        _driver_root(host, *show, timeout=1.5)  # no driver at /: it waits
    res = _driver_root(host, *show, HOST_DRIVER_ROOT="/opt/nvidia/driver")
    assert res.stdout.splitlines()[-1] == f"/opt/nvidia/driver|{host}/opt/nvidia/driver|true|/"
    ctl = host / "opt/nvidia/driver/dev/nvidiactl"
    ctl.parent.mkdir(parents=True)
    ctl.write_text("")
    res = _driver_root(host, *show, HOST_DRIVER_ROOT="/opt/nvidia/driver")
    assert res.stdout.splitlines()[-1] == f"/opt/nvidia/driver|{host}/opt/nvidia/driver|true|/opt/nvidia/driver"
