# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The containerized driver's decisions, from the GPU hosts' facts: pure functions, no I/O.

The GPU Operator runs the driver in a container per node: an image per operating system
(`<version>-<os tag>`) or, with precompiled modules, per kernel too (`<branch>-<kernel>-<os tag>`).
Here the nodes set for it (`gpuops_driver_method: containerized`) are grouped into pools, one DaemonSet
each, selected by the labels Node Feature Discovery puts on the Nodes (os_release ID and VERSION_ID,
kernel-version.full), so a node whose kernel changed since its facts were read gets no image built for
another kernel: it waits for the next run, which makes its pool.

A GPU node carries `nvidia.com/gpu.deploy.driver`: `true` where the driver container should run,
`pre-installed` where the node has a host driver (installed by the driver role, or found in its facts),
as the operator's driver manager labels such a node.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any, TypedDict

CONTAINERIZED = "containerized"
LABEL_DEPLOY_DRIVER = "nvidia.com/gpu.deploy.driver"
NFD = "feature.node.kubernetes.io/"
LABEL_OS_ID = NFD + "system-os_release.ID"
LABEL_OS_VERSION = NFD + "system-os_release.VERSION_ID"
LABEL_OS_MAJOR = NFD + "system-os_release.VERSION_ID.major"
LABEL_KERNEL = NFD + "kernel-version.full"
DAEMONSET_PREFIX = "nvidia-driver-daemonset"
# The operator tags the images of these distributions with the major version only (rhel9, not rhel9.4).
MAJOR_ONLY = ("rhel", "rocky", "ol")
_VERSION = re.compile(r"^[0-9]+[.][0-9]+([.][0-9]+)?$")
_BRANCH = re.compile(r"^[0-9]+$")
_NAME = re.compile(r"[^a-z0-9.-]+")


class Pool(TypedDict):
    """The nodes one driver DaemonSet serves."""

    name: str  # the DaemonSet's name, and its pods' `app` label
    os_tag: str  # ubuntu24.04, debian12, rhel9
    os_id: str
    version_id: str
    kernel: str | None  # precompiled only
    image: str
    node_selector: dict[str, str]
    nodes: list[str]
    rdma: bool  # nvidia-peermem (GPUDirect RDMA) on some node of the pool
    host_mofed: bool  # ... with the host's MLNX_OFED / DOCA-OFED
    gds: bool
    gdrcopy: bool
    gpudirect_nodes: dict[str, list[str]]  # GDS, GDRCopy -> the nodes of the pool that have it
    subscriptions: list[dict[str, Any]]  # the host's subscription files mounted (mountPath, hostPath)


# The host's subscription files a driver container that builds its modules needs for the distribution's packages, as
# the GPU Operator mounts them (read-only): mount path -> (host path, hostPath type). RHEL's are left out where CRI-O
# runs, which mounts them itself.
SUBSCRIPTIONS: dict[str, dict[str, tuple[str, str]]] = {
    "rhel": {"/run/secrets/etc-pki-entitlement": ("/etc/pki/entitlement", "Directory"),
             "/run/secrets/redhat.repo": ("/etc/yum.repos.d/redhat.repo", "File"),
             "/run/secrets/rhsm": ("/etc/rhsm", "Directory")},
    "sles": {"/etc/zypp/credentials.d": ("/etc/zypp/credentials.d", "Directory"),
             "/etc/SUSEConnect": ("/etc/SUSEConnect", "FileOrCreate")},
}
SUBSCRIPTIONS["sl-micro"] = SUBSCRIPTIONS["sles"]


def subscriptions(os_id: str, precompiled: bool, runtimes: list[str]) -> list[dict[str, Any]]:
    """The subscription mounts of a pool (sorted by mount path): none with precompiled modules, nor for RHEL where
    every node of the pool runs CRI-O."""
    if precompiled or (os_id == "rhel" and runtimes and all(r == "crio" for r in runtimes)):
        return []
    return [{"mountPath": path, "hostPath": {"path": host, "type": kind}}
            for path, (host, kind) in sorted(SUBSCRIPTIONS.get(os_id, {}).items())]


def os_tag(os_id: str, version_id: str) -> str:
    """The operator's OS tag: ID and VERSION_ID, the major version only for the RHEL family."""
    version = version_id.split(".", maxsplit=1)[0] if os_id in MAJOR_ONLY else version_id
    return f"{os_id}{version}"


def clean_kernel(kernel: str) -> str:
    """A kernel release as a name part: no architecture suffix, `_` as `.`, lower case (the operator's rule)."""
    cleaned = re.sub(r"[.](x86_64|aarch64)(_64k)?$", "", kernel).replace("_", ".").rstrip(".").lower()
    return _NAME.sub("-", cleaned)


def daemonset_name(tag: str, kernel: str | None) -> str:
    """`nvidia-driver-daemonset-<os tag>`, or `-<kernel>-<os tag>` with precompiled modules; cut to 63 characters
    (a label value, as the pods' `app` label) with a digest of the whole so two long kernels stay apart."""
    name = "-".join([DAEMONSET_PREFIX, *([clean_kernel(kernel)] if kernel else []), tag.lower()])
    if len(name) <= 63:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return name[:54].rstrip(".-") + "-" + digest


def image(repository: str, version: str, tag: str, kernel: str | None) -> str:
    """`<repository>:<version>-<os tag>`, or `<repository>:<branch>-<kernel>-<os tag>` with precompiled modules."""
    return f"{repository}:{version}-{kernel}-{tag}" if kernel else f"{repository}:{version}-{tag}"


def check_version(var: str, version: str, precompiled: bool) -> list[str]:
    """The driver version (a branch with precompiled modules), as the image tags are made of it."""
    if precompiled:
        if not _BRANCH.match(version):
            return [f"{var}: {version!r} is not a driver branch such as 580 (precompiled images are tagged by branch)"]
        return []
    if not _VERSION.match(version):
        return [f"{var}: {version!r} is not a driver version such as 580.95.05 (the image tag is <version>-<os tag>)"]
    return []


def _method(row: Mapping[str, Any]) -> str:
    return str((row.get("driver") or {}).get("method") or "auto")


def host_driver(row: Mapping[str, Any]) -> str | None:
    """Why the node runs a host driver, or None: its method is not containerized, or its facts name driver packages."""
    method = _method(row)
    if method != CONTAINERIZED:
        return f"its driver method is {method!r}"
    packages = (row.get("driver") or {}).get("packages") or []
    if packages:
        return f"host driver packages are installed ({', '.join(map(str, list(packages)[:4]))})"
    return None


def deploy_label(row: Mapping[str, Any]) -> str:
    """The node's nvidia.com/gpu.deploy.driver: true for the driver container, pre-installed for a host driver."""
    return "pre-installed" if host_driver(row) else "true"


def containerized(nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The GPU nodes set for the driver container (whatever their facts say)."""
    return sorted(name for name, row in nodes.items() if _gpus(row) and _method(row) == CONTAINERIZED)


def driver_container_nodes(nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The GPU nodes the driver container serves: set for it, without a host driver. While there is one, the driver
    container's shared objects exist and the other GPU components wait for each node's driver."""
    return [name for name in containerized(nodes) if not host_driver(nodes[name])]


TOOLKIT_DRIVER_ROOT = "gpuops_container_toolkit_driver_root"


def host_driver_root(nodes: Mapping[str, Mapping[str, Any]], setting: str, variable: str, component: str) -> tuple[str, list[str]]:
    """The root of the host driver for a cluster component that takes one (`component`, its setting `variable`): the one
    set, else the one the GPU nodes' hosts give their toolkit (gpuops_container_toolkit_driver_root, from which their
    CDI spec is made; unset is /), nodes the driver container serves left out; and the error where those differ."""
    if setting:
        return setting, []
    served = set(driver_container_nodes(nodes))
    roots: dict[str, list[str]] = {}
    for name, row in nodes.items():
        if _gpus(row) and name not in served:
            roots.setdefault(str(row.get(TOOLKIT_DRIVER_ROOT) or "/"), []).append(name)
    if len(roots) <= 1:
        return next(iter(roots), "/"), []
    found = "; ".join(f"{root} on {', '.join(sorted(names)[:5])}" for root, names in sorted(roots.items()))
    return "/", [f"{variable}: the GPU nodes' hosts put their driver at different roots ({TOOLKIT_DRIVER_ROOT}: {found}), and "
                 f"{component} has one; accepted: the same {TOOLKIT_DRIVER_ROOT} on every GPU host, or {variable} set"]


def device_plugin_driver_root(nodes: Mapping[str, Mapping[str, Any]], setting: str) -> tuple[str, list[str]]:
    """The device plugin's host driver root (gpuops_device_plugin_driver_root, else the hosts'), and its error."""
    return host_driver_root(nodes, setting, "gpuops_device_plugin_driver_root", "the device plugin")


def _gpus(row: Mapping[str, Any]) -> int:
    return int(((row.get("info") or {}).get("summary") or {}).get("gpu_count") or 0)


def pools(nodes: Mapping[str, Mapping[str, Any]], repository: str, version: str, precompiled: bool) -> tuple[list[Pool], list[str]]:
    """The driver DaemonSets for the nodes set for the driver container, and the nodes left out (with why).

    Each node row is cluster_nodes' (the slim facts under `info`, the per-host settings beside them). A node's
    pool is its OS tag, and with precompiled modules its running kernel too; a node whose facts name no OS
    (gathered before gpu_info's schema 5) or no kernel is left out and named.
    """
    grouped: dict[tuple[str, str, str | None], Pool] = {}
    left_out: list[str] = []
    for name in containerized(nodes):
        row = nodes[name]
        why = host_driver(row)
        if why:
            left_out.append(f"{name}: pre-installed, {why}")
            continue
        node = (row.get("info") or {}).get("node") or {}
        found = node.get("os") or {}
        os_id, version_id = found.get("id"), found.get("version_id")
        kernel = node.get("kernel") if precompiled else None
        if not os_id or not version_id:
            left_out.append(f"{name}: its facts name no operating system (os-release ID and VERSION_ID): run the preflight on it")
            continue
        if precompiled and not kernel:
            left_out.append(f"{name}: its facts name no running kernel for a precompiled image: run the preflight on it")
            continue
        tag = os_tag(str(os_id), str(version_id))
        key = (str(os_id), str(version_id), kernel)
        if key not in grouped:
            selector = {LABEL_DEPLOY_DRIVER: "true", LABEL_OS_ID: str(os_id)}
            if os_id in MAJOR_ONLY:
                selector[LABEL_OS_MAJOR] = str(version_id).split(".", maxsplit=1)[0]
            else:
                selector[LABEL_OS_VERSION] = str(version_id)
            if kernel:
                selector[LABEL_KERNEL] = str(kernel)
            grouped[key] = {"name": daemonset_name(tag, kernel), "os_tag": tag, "os_id": str(os_id), "version_id": str(version_id),
                            "kernel": kernel, "image": image(repository, version, tag, kernel), "node_selector": selector,
                            "nodes": [], "rdma": False, "host_mofed": False, "gds": False, "gdrcopy": False,
                            "gpudirect_nodes": {"GDS": [], "GDRCopy": []}, "subscriptions": []}
        pool = grouped[key]
        pool["nodes"].append(name)
        rdma = row.get("rdma") or {}
        pool["rdma"] = pool["rdma"] or bool(rdma.get("peermem"))
        pool["host_mofed"] = pool["host_mofed"] or (bool(rdma.get("peermem")) and bool(rdma.get("host_ofed")))
        gpudirect = row.get("gpudirect") or {}
        if gpudirect.get("gds"):
            pool["gds"] = True
            pool["gpudirect_nodes"]["GDS"].append(name)
        if gpudirect.get("gdrcopy"):
            pool["gdrcopy"] = True
            pool["gpudirect_nodes"]["GDRCopy"].append(name)
    for (os_id, _version, _kernel), pool in grouped.items():
        runtimes = [str(nodes[n].get("gpuops_container_toolkit_runtime_found") or "") for n in pool["nodes"]]
        pool["subscriptions"] = subscriptions(os_id, precompiled, runtimes)
    return sorted(grouped.values(), key=lambda p: p["name"]), left_out


def check_pools(found: list[Pool], precompiled: bool) -> list[str]:
    """What the images cannot do: GDS and GDRCopy have no precompiled builds (the operator refuses them too)."""
    errors = []
    for pool in found if precompiled else []:
        for feature, nodes in pool["gpudirect_nodes"].items():
            if nodes:
                errors.append(f"gpuops_driver_container_precompiled: true, but {feature} runs on {', '.join(nodes[:5])} "
                              "(gpuops_rdma_gds / gpuops_rdma_gdrcopy), which precompiled driver images do not build; "
                              "accepted: gpuops_driver_container_precompiled: false there")
    return errors


_DURATION = re.compile(r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$")
_FM_KEY = re.compile(r"^[A-Z][A-Z0-9_]*$")


def check_settings(settings: Mapping[str, Any]) -> list[str]:
    """The role's settings that its argument spec cannot check: the version (or branch) the tags are made of, the
    drain timeout, Fabric Manager's keys and values. Keys are the role variables' names without the prefix."""
    var = "gpuops_driver_container_"
    errors: list[str] = []
    precompiled = bool(settings.get("precompiled"))
    version = str(settings.get("version") or "")
    errors += check_version(var + "version", version, False)
    if precompiled and str(settings.get("branch") or ""):
        errors += check_version(var + "branch", str(settings["branch"]), True)
    timeout = settings.get("drain_timeout")
    if not isinstance(timeout, str) or not _DURATION.match(timeout):
        errors.append(f"{var}drain_timeout: {timeout!r} is not a Go duration such as 0s, 300s or 5m")
    config = settings.get("fabric_manager_config")
    for key, value in (config.items() if isinstance(config, Mapping) else []):
        if not isinstance(key, str) or not _FM_KEY.match(key):
            errors.append(f"{var}fabric_manager_config: key {key!r} is not a fabricmanager.cfg key (upper case, digits, _; "
                          "e.g. FABRIC_MODE)")
        if isinstance(value, (dict, list)) or value is None:
            errors.append(f"{var}fabric_manager_config[{key!r}]: {value!r} is not a value for fabricmanager.cfg (a string or number)")
    return errors


def plan(nodes: Mapping[str, Mapping[str, Any]], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The driver DaemonSets' pools, the nodes left out (each with why) and every error in the settings or the pools.
    `settings`: the role's variables without their prefix (image, version, precompiled, branch, drain_timeout,
    fabric_manager_config)."""
    errors = check_settings(settings)
    precompiled = bool(settings.get("precompiled"))
    version = branch(settings) if precompiled else str(settings.get("version") or "")
    found, left_out = pools(nodes, str(settings.get("image") or ""), version, precompiled)
    return {"pools": found, "left_out": left_out, "errors": errors or check_pools(found, precompiled)}


def branch(settings: Mapping[str, Any]) -> str:
    """The precompiled images' branch: the one set, else the version's."""
    return str(settings.get("branch") or "") or str(settings.get("version") or "").split(".", maxsplit=1)[0]


def leftovers(found: list[str], current: list[Pool], namespace: str, served: bool) -> list[dict[str, Any]]:
    """What pools that are gone left: their DaemonSets (of `found`, the driver DaemonSets in the cluster), and when
    no node is served any more (`served` false), the driver container's service account, RBAC and scripts; as
    definitions to delete."""
    wanted = {p["name"] for p in current}
    gone: list[dict[str, Any]] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": n, "namespace": namespace}}
                                  for n in sorted(set(found) - wanted)]
    if gone and not served:
        gone += [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "nvidia-driver", "namespace": namespace}},
                 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "gpuops-nvidia-driver"}},
                 {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "gpuops-nvidia-driver"}},
                 *({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n, "namespace": namespace}}
                   for n in ("nvidia-driver-startup-probe", "gpuops-driver-root"))]
    return gone


SCRIPTS_CONFIGMAP = "gpuops-driver-root"
SCRIPT = "/gpuops/driver-root.sh"


def wait_parts(image_ref: str) -> dict[str, Any]:
    """What a GPU component's pod needs, in a cluster where the driver container serves nodes, to wait for its node's
    driver and run with that driver's root (the driver_container role's driver-root.sh):

    - `init`: an init container, from `image_ref` (one with a shell: the device plugin's), that waits;
    - `command`: the prefix of a main container's command that exports NVIDIA_DRIVER_ROOT, CONTAINER_DRIVER_ROOT and
      DRIVER_ROOT_CTR_PATH for the driver found, then runs it;
    - `mounts`: the script and the host's / at /host, for a container that runs it (`script_mount` alone where the
      container mounts the host's / at /host already);
    - `volumes`: the two volumes.
    """
    script_mount = {"name": SCRIPTS_CONFIGMAP, "mountPath": "/gpuops", "readOnly": True}
    host_mount = {"name": "gpuops-host", "mountPath": "/host", "readOnly": True, "mountPropagation": "HostToContainer"}
    return {
        "init": {"name": "driver-wait", "image": image_ref, "command": ["sh", SCRIPT],
                 "securityContext": {"privileged": True}, "volumeMounts": [script_mount, host_mount]},
        "command": ["sh", SCRIPT],
        "mounts": [script_mount, host_mount],
        "script_mount": script_mount,
        "volumes": [{"name": SCRIPTS_CONFIGMAP, "configMap": {"name": SCRIPTS_CONFIGMAP, "defaultMode": 0o755}},
                    {"name": "gpuops-host", "hostPath": {"path": "/"}}],
    }
