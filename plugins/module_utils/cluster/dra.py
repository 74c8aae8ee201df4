# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's DRA driver for GPUs, from the cluster side: pure functions, no I/O.

With `gpuops_gpu_scheduling: dra` the driver's GPU kubelet plugin publishes each node's GPUs as devices of the driver
`gpu.nvidia.com` in ResourceSlices, and pods claim them through the DeviceClasses `gpu.nvidia.com` (whole GPUs) and
`mig.nvidia.com` (MIG devices). Here: the checks of the role's inputs (feature gates, the resource API the cluster
serves, one driver root for the plugin) and the devices each node should publish, which validation counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import SlimFacts, gpu_count, nvml_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import driver_container

DRIVER = "gpu.nvidia.com"
API = "resource.k8s.io/v1"
# The driver's feature gates (its pkg/featuregates/featuregates.go, kubernetes-sigs main at 95932046, v0.5.0-dev: the
# last five came after NVIDIA's v25.12.0), and those DynamicMIG cannot run with.
FEATURE_GATES = ("TimeSlicingSettings", "MPSSupport", "PassthroughSupport", "DynamicMIG", "NVMLDeviceHealthCheck",
                 "IMEXDaemonsWithDNSNames", "ComputeDomainCliques", "CrashOnNVLinkFabricErrors", "DeviceMetadata",
                 "FabricManagerPartitioning", "HostManagedIMEXDaemon", "DRAListTypeAttributes", "ConsumableShares")
NOT_WITH_DYNAMIC_MIG = ("PassthroughSupport", "NVMLDeviceHealthCheck", "MPSSupport")
# What else the driver refuses to start with (its featuregates.go ValidateFeatureGates): a gate that needs another on,
# and PassthroughSupport with NVMLDeviceHealthCheck (since v0.5.0, as DeviceMetadata's need). The gates on by default.
REQUIRES = {"ComputeDomainCliques": "IMEXDaemonsWithDNSNames", "DeviceMetadata": "PassthroughSupport"}
ON_BY_DEFAULT = ("IMEXDaemonsWithDNSNames", "ComputeDomainCliques", "CrashOnNVLinkFabricErrors")
# The resource names validation counts the published devices under: whole GPUs, and MIG devices per profile.
GPU = f"{DRIVER}/gpu"
MIG_PREFIX = f"{DRIVER}/mig-"


def check_feature_gates(gates: object) -> list[str]:
    var = "gpuops_dra_feature_gates"
    if not isinstance(gates, Mapping):
        return [f"{var}: {gates!r} is not a mapping of feature gate names to true or false"]
    errors = []
    for name, value in gates.items():
        if name not in FEATURE_GATES:
            errors.append(f"{var}: {name!r} is not a feature gate of the DRA driver; accepted: {', '.join(FEATURE_GATES)}")
        if not isinstance(value, bool):
            errors.append(f"{var}[{name!r}]: {value!r} is not true or false")
    if gates.get("DynamicMIG") is True:
        clash = [g for g in NOT_WITH_DYNAMIC_MIG if gates.get(g) is True]
        if clash:
            errors.append(f"{var}: DynamicMIG cannot be on with {', '.join(clash)} (the driver refuses to start); "
                          "accepted: one of them")

    def on(gate: str) -> bool:
        return gates.get(gate, gate in ON_BY_DEFAULT) is True

    if on("PassthroughSupport") and on("NVMLDeviceHealthCheck"):
        errors.append(f"{var}: PassthroughSupport cannot be on with NVMLDeviceHealthCheck (the driver refuses to start); "
                      "accepted: one of them")
    for gate, needed in REQUIRES.items():
        if on(gate) and not on(needed):
            errors.append(f"{var}: {gate} is on{'' if gate in gates else ' (its default)'} and needs {needed}, which is off "
                          f"(the driver refuses to start); accepted: {needed} true, or {gate} false")
    return errors


def feature_gates_env(gates: Mapping[str, bool]) -> str:
    """FEATURE_GATES as the driver reads it: Name=true,Name=false."""
    return ",".join(f"{name}={str(bool(value)).lower()}" for name, value in sorted(gates.items()))


def check_api(apis: Mapping[str, Any] | list, version: str) -> list[str]:
    """The cluster's API must serve resource.k8s.io/v1 (`apis`: the group/versions it serves; `version`: the server's)."""
    if API in apis:
        return []
    served = sorted(k for k in apis if str(k).startswith("resource.k8s.io/"))
    return [f"gpuops_gpu_scheduling: dra needs the {API} API (Kubernetes 1.34 and later); the cluster runs {version or 'an unknown version'}"
            f"{' and serves ' + ', '.join(served) if served else ', without resource.k8s.io'}; accepted: device-plugin on this cluster"]


def driver_root(nodes: Mapping[str, Mapping[str, Any]], setting: str) -> tuple[str, list[str]]:
    """The plugin's driver root: the one set, else /run/nvidia/driver where the driver container serves every GPU node,
    else the hosts' (their toolkit's root, / unless set); and the error where it serves some only, or the hosts' roots
    differ (one DaemonSet, one root)."""
    if setting:
        return setting, []
    gpu_nodes = sorted(n for n, row in nodes.items() if gpu_count(row["info"]))
    served = set(driver_container.driver_container_nodes(nodes))
    if not served:
        return driver_container.host_driver_root(nodes, "", "gpuops_dra_driver_root", "the DRA driver's plugin")
    if served.issuperset(gpu_nodes):
        return "/run/nvidia/driver", []
    hosts = [n for n in gpu_nodes if n not in served]
    return "/", [f"gpuops_dra_driver_root: the driver container serves {', '.join(sorted(served)[:5])} and the host's own driver "
                 f"{', '.join(hosts[:5])}, and the DRA driver's plugin has one root; accepted: the same driver method on every "
                 "GPU node, or gpuops_dra_driver_root set"]


def devices(info: SlimFacts) -> dict[str, int]:
    """The devices the plugin publishes on a node, counted as validation reads them: whole GPUs (those not in MIG mode)
    and MIG devices per profile."""
    count = gpu_count(info)
    if not count:
        return {}
    mig = [g["mig"]["devices"] for g in nvml_gpus(info) if g["mig"]["current"]]
    out = {GPU: count - len(mig)} if count - len(mig) else {}
    for devs in mig:
        for dev in devs:
            key = MIG_PREFIX + str(dev["profile"])
            out[key] = out.get(key, 0) + 1
    return out


def slice_devices(slices: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Node -> its published devices of the driver, counted as `devices` counts them, from ResourceSlices."""
    out: dict[str, dict[str, int]] = {}
    for item in slices:
        spec = item.get("spec") or {}
        node = spec.get("nodeName")
        if spec.get("driver") != DRIVER or not node:
            continue
        counts = out.setdefault(str(node), {})
        for device in spec.get("devices") or []:
            attrs = device.get("attributes") or {}
            kind = (attrs.get("type") or {}).get("string")
            if kind == "gpu":
                key = GPU
            elif kind == "mig":
                key = MIG_PREFIX + str((attrs.get("profile") or {}).get("string"))
            else:
                continue
            counts[key] = counts.get(key, 0) + 1
    return out
