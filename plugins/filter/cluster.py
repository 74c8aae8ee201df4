# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
name: cluster_nodes
short_description: The cluster roles' view of the GPU nodes, and what follows from their facts
version_added: 0.1.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - C(cluster_nodes) turns the inventory's GPU hosts into Node name to the part of the host's facts
    (C(gpuops_gpu_info)) the cluster side reads and the per-host settings the cluster roles read. The other filters of this file compute from it, with the logic
    of the collection's C(cluster) module_utils - C(cluster_node_labels), C(device_plugin_errors),
    C(device_plugin_data), C(expected_allocatable), C(mig_models), C(mig_parted_config), C(mig_errors),
    C(dcgm_metrics_errors), C(node_label_map), C(hosts_without).
positional: hostvars, keys
options:
  _input:
    description: The inventory hosts of the GPU nodes.
    type: list
    elements: str
    required: true
  hostvars:
    description: C(hostvars).
    type: dict
    required: true
  keys:
    description: Host variables to carry along, with their default.
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: The GPU nodes
  ansible.builtin.set_fact:
    nodes: "{{ groups['gpu_nodes'] | gpuops.nvidia.cluster_nodes(hostvars, {'gpuops_device_plugin_config': ''}) }}"
"""

RETURN = r"""
_value:
  description: Node name to C(host), C(info) (gpu_info) and the keys asked for.
  type: dict
"""

import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import rules as cluster


def cluster_nodes(hosts: list, hostvars, keys: dict) -> dict:
    nodes = {}
    for host in hosts:
        hv = hostvars[host]
        name = str(hv.get("gpuops_cluster_node_name") or host)
        info = hv.get("gpuops_gpu_info")
        if not isinstance(info, dict):
            raise AnsibleFilterError(f"host {host} has no gpuops_gpu_info: run the preflight role (node.yml) "
                                     "or the first play of cluster.yml on it first")
        if name in nodes:
            raise AnsibleFilterError(f"gpuops_cluster_node_name: hosts {nodes[name]['host']} and {host} both name Node {name!r}")
        row = {"host": host, "info": cluster.slim(info)}
        for key, default in keys.items():
            value = hv.get(key)
            row[key] = default if value is None else value
        nodes[name] = row
    return nodes


def hosts_without(hosts: list, hostvars, key: str) -> list:
    """The hosts whose `key` is not a mapping (their facts are not known yet)."""
    return [h for h in hosts if not isinstance(hostvars[h].get(key), dict)]


def cluster_node_labels(nodes: dict, components: list) -> dict:
    return {name: cluster.node_labels(row["info"], components) for name, row in nodes.items()}


def _selection(nodes: dict, key: str, default: str) -> dict:
    return {name: (row.get(key) or default) for name, row in nodes.items() if cluster.gpu_count(row["info"])}


def device_plugin_errors(configs, nodes: dict, default: str, mig_strategy: str, key: str = "gpuops_device_plugin_config") -> list:
    errors = cluster.check_plugin_configs("gpuops_device_plugin_configs", configs, default, mig_strategy)
    if errors:
        return errors
    selection = {n: v for n, v in _selection(nodes, key, "").items() if v}
    return cluster.check_node_plugin_configs(selection, configs, {n: r["info"] for n, r in nodes.items()})


def _plain(value):
    """Plain dicts, lists and scalars (templated values carry types a YAML dumper does not know)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    for kind in (bool, int, float, str):
        if isinstance(value, kind):
            return kind(value)
    return value


def device_plugin_data(configs: dict) -> dict:
    return {str(name): yaml.safe_dump({"version": "v1", **_plain(config)}, sort_keys=False) for name, config in configs.items()}


def expected_allocatable(nodes: dict, mig_strategy: str, configs: dict, default: str,
                         key: str = "gpuops_device_plugin_config") -> dict:
    out = {}
    for name, chosen in _selection(nodes, key, default).items():
        out[name] = cluster.advertised(nodes[name]["info"], mig_strategy, configs.get(chosen) if chosen else None)
    return out


def mig_models(nodes: dict) -> dict:
    models: dict = {}
    for row in nodes.values():
        for key, model in cluster.gpu_models(row["info"]).items():
            if key not in models or not models[key]["profiles"]:
                models[key] = model
    return models


def mig_parted_config(models: dict, custom: dict) -> dict:
    return cluster.mig_parted_config(models, custom)


def mig_errors(custom, nodes: dict, default: str, key: str = "gpuops_mig_manager_config") -> list:
    models = mig_models(nodes)
    errors = cluster.check_mig_configs("gpuops_mig_manager_configs", custom, models)
    if errors:
        return errors
    configs = cluster.mig_parted_config(models, custom)["mig-configs"]
    capable = {n: r for n, r in nodes.items() if cluster.mig_capable(r["info"])}
    selection = {n: (r.get(key) or default) for n, r in capable.items()}
    node_models = {n: sorted(cluster.gpu_models(r["info"])) for n, r in capable.items()}
    return cluster.check_node_mig_configs(selection, configs, node_models)


def node_label_map(nodes: dict, key: str, label: str, default: str = "", only_mig_capable: bool = False) -> dict:
    """Node -> {label: the host's value of key (or default), or null to remove the label}."""
    out = {}
    for name, row in nodes.items():
        if only_mig_capable and not cluster.mig_capable(row["info"]):
            continue
        out[name] = {label: (row.get(key) or default or None) if cluster.gpu_count(row["info"]) else None}
    return out


def dcgm_metrics_errors(text, extra: list) -> list:
    return cluster.check_metrics_csv("gpuops_dcgm_exporter_metrics", text, extra or [])


class FilterModule:
    def filters(self):
        return {
            "cluster_nodes": cluster_nodes,
            "cluster_node_labels": cluster_node_labels,
            "hosts_without": hosts_without,
            "device_plugin_errors": device_plugin_errors,
            "device_plugin_data": device_plugin_data,
            "expected_allocatable": expected_allocatable,
            "mig_models": mig_models,
            "mig_parted_config": mig_parted_config,
            "mig_errors": mig_errors,
            "dcgm_metrics_errors": dcgm_metrics_errors,
            "node_label_map": node_label_map,
        }
