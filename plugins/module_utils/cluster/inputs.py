# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster roles' checks across their variables, which their meta/inputs.yml names as `cluster.<rule>`.

Each rule takes the values of the variables the declaration passes it (by parameter name; a parameter with a default
may be left undefined) and returns one message per error, naming the role variable, its value and what is accepted.
The rules call the cluster side's own checks (rules.py, dra.py, driver_container.py); the kinds of single values
(images, ports, URLs ...) are _common/inputs.py's. Run on the controller by the role_inputs action.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.inputs import context_error, text
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import dra as cluster_dra
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import driver_container as cluster_driver_container
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import rules as cluster_rules

# A variable that is not defined (the parameter's default: the role says so only where it is set).
UNSET: Any = object()
_ABSOLUTE_PATH = re.compile(r"^/[^\s]*$")
SMOKE_WHEN = ("changed", "always", "never")


def gpu_hosts(group: Any, groups: Mapping[str, Any], nodes: Mapping[str, Mapping[str, Any]], runtime_handler: Any) -> list[str]:
    """cluster_prereqs: the group of the GPU hosts has hosts, and one RuntimeClass handler serves them: the one set, else
    the one handler the hosts report."""
    if not list(groups.get(group) or []):
        return [f"gpuops_cluster_nodes_group: group {text(group)} has no hosts"]
    handlers: list[str] = []
    for row in nodes.values():
        handler = row.get("gpuops_container_toolkit_runtime_handler")
        if handler and handler not in handlers:
            handlers.append(handler)
    if not runtime_handler and len(handlers) > 1:
        return [f"the hosts report different runtime handlers {', '.join(map(str, handlers))}; one RuntimeClass has one handler: "
                "set gpuops_cluster_prereqs_runtime_handler"]
    return []


def kubelet_root(root: Any) -> list[str]:
    """The kubelet's --root-dir, an absolute path without spaces."""
    if isinstance(root, str) and _ABSOLUTE_PATH.match(root):
        return []
    return [f"gpuops_cluster_kubelet_root: {text(root)} is not an absolute path (the kubelet's --root-dir)"]


def kube_context(context: Any = None, kubeconfig: Any = None) -> list[str]:
    """cluster_common: the context set is one of the kubeconfig the connection takes (the one set, else as the kube
    modules find it: $K8S_AUTH_KUBECONFIG, $KUBECONFIG, ~/.kube/config)."""
    path = kubeconfig or os.environ.get("K8S_AUTH_KUBECONFIG") or os.environ.get("KUBECONFIG") or "~/.kube/config"
    problem = context_error("gpuops_cluster_context", context, str(path))
    return [problem] if problem else []


def dcgm_metrics(metrics: Any, extra_fields: Any) -> list[str]:
    """dcgm_exporter: the metrics CSV, each field known (or one of the extra fields)."""
    return cluster_rules.check_metrics_csv("gpuops_dcgm_exporter_metrics", metrics, list(extra_fields or []))


def device_plugin_configs(configs: Any, nodes: Mapping[str, Mapping[str, Any]], default_config: Any, mig_strategy: Any) -> list[str]:
    """device_plugin: the sharing configs, the default, and each host's choice against its GPUs."""
    return cluster_rules.check_device_plugin(configs, nodes, str(default_config or ""), str(mig_strategy))


def device_plugin_with_dra(configs: Any, scheduling: Any) -> list[str]:
    """device_plugin: no sharing configs where DRA schedules the GPUs (nothing reads them)."""
    if scheduling != "dra" or not configs:
        return []
    return [f"gpuops_device_plugin_configs: {[str(name) for name in configs]} are the device plugin's sharing configs, which nothing "
            "reads with gpuops_gpu_scheduling: dra; accepted: {} (no configs) with DRA"]


def dra_ports(healthcheck_port: Any, compute_domains_port: Any) -> list[str]:
    """dra: the two containers of the plugin pod listen on different health check ports."""
    if text(compute_domains_port) != text(healthcheck_port):
        return []
    return [f"gpuops_dra_compute_domains_healthcheck_port: {text(compute_domains_port)} is gpuops_dra_healthcheck_port too; the two "
            "containers of a plugin pod share its ports; accepted: another port"]


def dra_feature_gates(gates: Any) -> list[str]:
    return cluster_dra.check_feature_gates(gates)


def dra_driver_root(nodes: Mapping[str, Mapping[str, Any]], root: Any) -> list[str]:
    """dra: one driver root for the plugin (set, or the same driver method on every GPU node)."""
    return cluster_dra.driver_root(nodes, str(root or ""))[1]


def device_plugin_driver_root(nodes: Mapping[str, Mapping[str, Any]], root: Any) -> list[str]:
    """device_plugin: one host driver root for its DaemonSet (set as an absolute path, or the same on every GPU host)."""
    if root and not _ABSOLUTE_PATH.match(str(root)):
        return [f"gpuops_device_plugin_driver_root: {text(root)} is not an absolute path (the host driver's root, such as / "
                "or /opt/nvidia/driver); empty: the GPU hosts' gpuops_container_toolkit_driver_root"]
    return cluster_driver_container.device_plugin_driver_root(nodes, str(root or ""))[1]


def driver_container(nodes: Mapping[str, Mapping[str, Any]], settings: Mapping[str, Any]) -> list[str]:
    """driver_container: its settings, and the pools the GPU nodes set for it make."""
    return list(cluster_driver_container.plan(nodes, settings)["errors"])


def mig_configs(configs: Any, nodes: Mapping[str, Mapping[str, Any]], default_config: Any, mig_strategy: Any) -> list[str]:
    """mig_manager: the custom configs against the GPU models, the default and each host's choice, and a layout the
    device plugin's strategy can advertise."""
    return cluster_rules.check_mig(configs, nodes, str(default_config or ""), "gpuops_mig_manager_config", str(mig_strategy))


def validation_smoke(smoke: Any, smoke_test: Any = UNSET) -> list[str]:
    """validation: when the smoke test runs; and the variable that said so before, which is gone."""
    errors = []
    if smoke not in SMOKE_WHEN:
        errors.append(f"gpuops_validation_smoke: {json.dumps(smoke, default=str)} is not one of changed (default: on the nodes "
                      "something changed on in this run), always, never")
    if smoke_test is not UNSET:
        errors.append("gpuops_validation_smoke_test was replaced by gpuops_validation_smoke: set it to always, never or changed "
                      "(the default)")
    return errors


def nri(nri: Any, cdi: Any) -> list[str]:
    """cluster_common: NRI mode's devices are CDI devices (the GPU Operator refuses its NRI plugin with CDI off too)."""
    if nri is True and str(cdi).lower() == "false":
        return [f"gpuops_device_plugin_cdi: {json.dumps(str(cdi).lower())} turns CDI off, and NRI mode (gpuops_cluster_nri: "
                "true) injects CDI devices: use auto or true"]
    return []


def nri_hosts(nri: Any, nodes: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """cluster_prereqs: the cluster side's NRI mode agrees with the GPU hosts that set their toolkit's mode (those that
    leave it to a play's vars are not known here). NRI hosts have no nvidia runtime for a RuntimeClass to name; other
    hosts have no NRI plugin to act on the operands' annotations."""
    modes: dict[str, list[str]] = {}
    for name, row in nodes.items():
        mode = str(row.get("gpuops_container_toolkit_mode") or "")
        if mode:
            modes.setdefault(mode, []).append(name)
    if nri is True:
        other = sorted(f"{n} ({mode})" for mode, names in modes.items() if mode != "nri" for n in names)
        if other:
            return [f"gpuops_cluster_nri: true, and GPU hosts set another gpuops_container_toolkit_mode: {', '.join(other[:5])}; "
                    "there no NRI plugin gives the operands their devices; accepted: gpuops_container_toolkit_mode: nri on every "
                    "GPU host, or gpuops_cluster_nri: false"]
    elif modes.get("nri"):
        return [f"gpuops_cluster_nri: {text(nri).lower()}, and GPU hosts run NRI mode (gpuops_container_toolkit_mode: nri): "
                f"{', '.join(sorted(modes['nri'])[:5])}; they have no nvidia runtime for the RuntimeClass the cluster roles use; "
                "accepted: gpuops_cluster_nri: true"]
    return []


RULES: dict[str, Callable[..., list[str]]] = {
    "gpu_hosts": gpu_hosts, "kubelet_root": kubelet_root, "kube_context": kube_context, "dcgm_metrics": dcgm_metrics,
    "device_plugin_configs": device_plugin_configs, "device_plugin_with_dra": device_plugin_with_dra, "dra_ports": dra_ports,
    "dra_feature_gates": dra_feature_gates, "dra_driver_root": dra_driver_root, "device_plugin_driver_root": device_plugin_driver_root,
    "driver_container": driver_container,
    "mig_configs": mig_configs, "validation_smoke": validation_smoke, "nri": nri, "nri_hosts": nri_hosts,
}
