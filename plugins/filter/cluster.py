# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import yaml
from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.lazy import LazyModule

# Imported at first use (module_utils/_common/lazy.py says why): a task that calls one filter imports its module_utils only.
if TYPE_CHECKING:  # pragma: no cover
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common import mig as common_mig
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common import slim as common_slim
    from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import dra as cluster_dra
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import driver_container
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import rules as cluster
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import uninstall as cluster_uninstall
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import upgrade as cluster_upgrade
    from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import validation as cluster_validation
else:
    _MU = "ansible_collections.gpuops.nvidia.plugins.module_utils."
    common_mig = LazyModule(_MU + "_common.mig")
    common_slim = LazyModule(_MU + "_common.slim")
    cluster_dra = LazyModule(_MU + "cluster.dra")
    driver_container = LazyModule(_MU + "cluster.driver_container")
    cluster = LazyModule(_MU + "cluster.rules")
    cluster_uninstall = LazyModule(_MU + "cluster.uninstall")
    cluster_upgrade = LazyModule(_MU + "cluster.upgrade")
    cluster_validation = LazyModule(_MU + "cluster.validation")


def _gfd_labels(info: dict, chosen: object, gfd: dict | None) -> dict | None:
    """The hardware labels GFD should set on the node, from its full facts; None without GFD's settings."""
    if not gfd:
        return None
    configs = gfd.get("configs") or {}
    name = str(chosen or gfd.get("default_config") or "")
    config = configs.get(name) if name and isinstance(configs, dict) else None
    return cluster_validation.expected_gfd_labels(info, config if isinstance(config, dict) else None, str(gfd.get("mig_strategy") or "none"))


def cluster_nodes(hosts: list, hostvars: Any, keys: dict, gfd: dict | None = None) -> dict:
    nodes: dict[str, dict] = {}
    for host in hosts:
        hv = hostvars[host]
        name = str(hv.get("gpuops_cluster_node_name") or host)
        info = hv.get("gpuops_gpu_info")
        if not isinstance(info, dict):
            raise AnsibleFilterError(f"host {host} has no gpuops_gpu_info: run the preflight role (node.yml) "
                                     "or the first play of cluster.yml on it first")
        if name in nodes:
            raise AnsibleFilterError(f"gpuops_cluster_node_name: hosts {nodes[name]['host']} and {host} both name Node {name!r}")
        row = {"host": host, "info": common_slim.slim(cast("GpuInfo", info))}
        for key, default in keys.items():
            value = hv.get(key)
            row[key] = default if value is None else value
        # Computed here, from the full facts, so that only the slim part is kept for a thousand nodes.
        row["gfd_labels"] = _gfd_labels(info, hv.get("gpuops_device_plugin_config"), gfd)
        row["gpudirect"] = cluster.gpudirect(info, hv.get("gpuops_rdma"))
        rdma = hv.get("gpuops_rdma")
        ofed = ((info.get("node") or {}).get("rdma") or {}).get("ofed") or {}
        rdma = rdma if isinstance(rdma, dict) else {}
        # A host OFED: found on the node, or the rdma role's stack (DOCA-OFED it installs, or the one it found).
        row["rdma"] = {"peermem": bool(rdma.get("peermem")), "host_ofed": bool(ofed.get("present")) or rdma.get("stack") in ("doca", "host")}
        row["driver"] = _driver(hv)
        nodes[name] = row
    return nodes


def _driver(hv: Any) -> dict:
    """How the node's driver is run: the driver role's method where it ran (gpuops_driver), else the host's setting;
    and the host driver packages its facts name (a few, for a message)."""
    fact = hv.get("gpuops_driver")
    fact = fact if isinstance(fact, dict) else {}
    method = fact.get("method") or hv.get("gpuops_driver_method") or "auto"
    return {"method": str(method), "packages": [str(p) for p in list(fact.get("packages") or [])[:6]]}


def driver_container_leftovers(found: Any, plan: dict, namespace: str, served: Any) -> list:
    """Of the collection's DaemonSets (names), the driver's whose pool is gone, and when no node is served any more the
    rest of the driver container's objects: definitions to delete."""
    names = [str(n) for n in list(found or []) if str(n).startswith(driver_container.DAEMONSET_PREFIX)]
    return driver_container.leftovers(names, list(plan.get("pools") or []), str(namespace), bool(served))


def driver_container_nodes(nodes: Any) -> list:
    """The GPU nodes the driver container serves (set for it, without a host driver)."""
    return driver_container.driver_container_nodes(nodes if isinstance(nodes, dict) else {})


def driver_wait(image: str) -> dict:
    """The init container, command prefix, mounts and volumes with which a GPU component waits for its node's driver."""
    return driver_container.wait_parts(str(image))


def host_driver_root(nodes: Any, setting: Any) -> str:
    """The device plugin's host driver root (gpuops_device_plugin_driver_root, else the GPU hosts' toolkit root)."""
    return driver_container.device_plugin_driver_root(nodes if isinstance(nodes, dict) else {}, str(setting or ""))[0]


def dra_errors(nodes: dict, gates: Any, root: str) -> list:
    """What the DRA role refuses in its own settings: unknown or clashing feature gates, several driver roots."""
    return cluster_dra.check_feature_gates(gates) + cluster_dra.driver_root(nodes, str(root or ""))[1]


def dra_feature_gates_env(gates: Any) -> str:
    """The DRA driver's FEATURE_GATES: Name=true,Name=false."""
    return cluster_dra.feature_gates_env(gates if isinstance(gates, dict) else {})


def dra_driver_root(nodes: dict, root: str) -> str:
    """The DRA plugin's driver root: the one set, else the driver container's where it serves every GPU node, else /."""
    return cluster_dra.driver_root(nodes, str(root or ""))[0]


def dra_api_errors(info: Any) -> list:
    """Whether the cluster serves resource.k8s.io/v1, from cluster_read's result with api_groups
    (kubernetes.core.k8s_cluster_info's shape). The ComputeDomain CRDs are the dra role's to apply, not the cluster's to have."""
    info = info if isinstance(info, dict) else {}
    server = ((info.get("version") or {}).get("server") or {}).get("kubernetes") or {}
    apis = info.get("apis") or {}
    return cluster_dra.check_api(apis, str(server.get("gitVersion") or ""))


def dra_expected_devices(nodes: dict, mig_applied: dict | None = None) -> dict:
    """Node -> the devices the DRA plugin publishes there (whole GPUs, MIG devices per profile), in the MIG layout a
    config applied in this run gives (node -> its mig-parted entries)."""
    out = {}
    for name, row in nodes.items():
        info = row["info"]
        if not common_slim.gpu_count(info):
            continue
        if mig_applied and name in mig_applied:
            info = common_mig.apply_mig_config(info, mig_applied[name])
        out[name] = cluster_dra.devices(info)
    return out


def cluster_run_nodes(nodes: dict, hosts: list) -> dict:
    """The nodes whose host is one of `hosts` (those of a --limit run)."""
    wanted = set(hosts)
    return {name: row for name, row in nodes.items() if row["host"] in wanted}


def cluster_run_hosts(hosts: Any, limited: Any = None) -> list:
    """The group's hosts that the run's --limit names (`limited`: those hosts, or None without a limit), in the group's order."""
    return cluster.run_hosts([str(h) for h in hosts or []], None if limited is None else [str(h) for h in limited])


def hosts_without(hosts: list, hostvars: Any, key: str) -> list:
    """The hosts whose `key` is not a mapping (their facts are not known yet)."""
    return [h for h in hosts if not isinstance(hostvars[h].get(key), dict)]


def cluster_node_labels(nodes: dict, components: list, absent: list | None = None) -> dict:
    out: dict[str, dict[str, str | None]] = {}
    for name, row in nodes.items():
        labels: dict[str, str | None] = dict(cluster.node_labels(row["info"], components))
        if common_slim.gpu_count(row["info"]):
            labels[driver_container.LABEL_DEPLOY_DRIVER] = driver_container.deploy_label(row)
            labels.update({key: None for key in absent or [] if key not in labels})
        out[name] = labels
    return out


def driver_container_pools(nodes: dict, settings: dict) -> dict:
    """The driver DaemonSets' pools, the nodes left out (each with why) and every error in the settings or the pools."""
    return driver_container.plan(nodes, settings)


def device_plugin_errors(configs: Any, nodes: dict, default: str, mig_strategy: str, key: str = "gpuops_device_plugin_config") -> list:
    return cluster.check_device_plugin(configs, nodes, default, mig_strategy, key)


def _plain(value: Any) -> Any:
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
                         key: str = "gpuops_device_plugin_config", mig_applied: dict | None = None) -> dict:
    """Node -> the resources its device plugin advertises; for a node in mig_applied (node -> the mig-parted
    config entries its MIG manager applies in this run), with the layout that config gives."""
    out = {}
    for name, chosen in cluster.chosen_configs(nodes, key, default).items():
        info = nodes[name]["info"]
        if mig_applied and name in mig_applied:
            info = common_mig.apply_mig_config(info, mig_applied[name])
        out[name] = cluster.advertised(info, mig_strategy, configs.get(chosen) if chosen else None)
    return out


def mig_models(nodes: dict) -> dict:
    return cluster.mig_models(nodes)


def mig_parted_config(models: dict, custom: dict) -> dict:
    return common_mig.mig_parted_config(models, custom)


def mig_errors(custom: Any, nodes: dict, default: str, key: str = "gpuops_mig_manager_config", mig_strategy: str = "mixed") -> list:
    return cluster.check_mig(custom, nodes, default, key, mig_strategy)


def device_plugin_labels(nodes: dict, configs: dict, default: str = "", key: str = "gpuops_device_plugin_config") -> dict:
    """Node -> the config label (null: none chosen) and nvidia.com/mps.capable ("true" where the config shares with
    MPS, which the MPS control daemon's nodeSelector reads; "false" on other GPU nodes, as GFD sets it)."""
    out: dict[str, dict[str, str | None]] = {}
    for name, row in nodes.items():
        if not common_slim.gpu_count(row["info"]):
            out[name] = {"nvidia.com/device-plugin.config": None, "nvidia.com/mps.capable": None}
            continue
        chosen = row.get(key) or None
        config = (configs or {}).get(chosen or default) if (chosen or default) else None
        out[name] = {"nvidia.com/device-plugin.config": chosen,
                     "nvidia.com/mps.capable": "true" if cluster.uses_mps(config) else "false"}
    return out


def cluster_cdi(nodes: dict, setting: Any, deployed: Any = None) -> bool:
    """Whether the components use CDI: `true`, or `auto` and every GPU host reports its toolkit's CDI spec; a host
    whose report is not known counts as the deployed DaemonSets (the collection's, as read) run it."""
    value = str(setting).lower()
    if value in ("true", "false"):
        return value == "true"
    # A host whose runtime the collection leaves alone (gpuops_node_container_toolkit: false) has no CDI of ours; read
    # as node.yml's `| bool` reads it, so both sides agree on which hosts ran the toolkit role.
    reported = [row.get("gpuops_container_toolkit_cdi") if boolean(row.get("gpuops_node_container_toolkit", True), strict=False)
                else False for row in nodes.values()]
    return cluster.cdi_on(reported, cluster.deployed_cdi(deployed))


def runtime_class_handler(nodes: dict, setting: Any, existing: Any = None) -> str:
    """The RuntimeClass's handler: the setting, a GPU host's toolkit's, or (none known) the RuntimeClass's as read."""
    reported = [row.get("gpuops_container_toolkit_runtime_handler") for row in nodes.values()]
    return cluster.runtime_handler(str(setting or ""), reported, existing)


def mig_config_labels(nodes: dict, default: str, explicit: bool, key: str = "gpuops_mig_manager_config") -> dict:
    """nvidia.com/mig.config per MIG-capable node: with explicit, the nodes whose host sets `key` (their value);
    else the others (the default, which the role sets only where the label is absent)."""
    out = {}
    for name, row in nodes.items():
        if not common_slim.mig_capable(row["info"]) or bool(row.get(key)) != explicit:
            continue
        out[name] = {"nvidia.com/mig.config": row.get(key) if explicit else (default or None)}
    return out


def mig_configs_set(nodes: dict, default: str, changed: list, key: str = "gpuops_mig_manager_config") -> dict:
    """Node -> the MIG config the role's labels set, for the nodes whose label changed (node_labels' changed_nodes)."""
    wanted = {**mig_config_labels(nodes, default, False, key), **mig_config_labels(nodes, default, True, key)}
    return {n: wanted[n]["nvidia.com/mig.config"] for n in changed or [] if n in wanted and wanted[n]["nvidia.com/mig.config"]}


def mig_applied(configs: dict, parted: dict) -> dict:
    """Node -> the mig-parted entries of the config set there (for expected_allocatable's mig_applied)."""
    table = (parted or {}).get("mig-configs") or {}
    return {n: table[c] for n, c in (configs or {}).items() if c in table}


MIG_PARTED_CONFIGMAP = "default-mig-parted-config"


def mig_reconfigure_plan(facts: Any, node: Any, configmap: Any, name: str, node_name: str, namespace: str) -> dict:
    """What the cluster path of mig_reconfigure does on one Node, read before it changes anything: `errors` (each
    naming what to change), the per-GPU plan (`gpus`, as mig_config's), whether the Node is in the config already
    (`done`: its label names it and the MIG manager reports success), its label and state now, and the config's
    entries (`entries`, for expected_allocatable's mig_applied) and a line per GPU (`summary`, from the facts). `node` and `configmap` are the objects as
    cluster_info returns them ({} when absent)."""
    where = f"ConfigMap {namespace}/{MIG_PARTED_CONFIGMAP}"
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    out: dict[str, Any] = {"errors": [], "gpus": [], "entries": [], "current": labels.get(cluster_validation.MIG_CONFIG),
                           "state": labels.get(cluster_validation.MIG_STATE)}
    out["done"] = out["current"] == name and out["state"] == "success"
    info = common_slim.slim(cast("GpuInfo", facts))
    if not common_slim.mig_capable(info):
        # A run over every GPU node leaves the others alone (the MIG manager does not run there either).
        names = sorted({str(g.get("name") or g.get("device_id")) for g in (facts.get("pci") or {}).get("gpus") or []})
        out["skip"] = f"no GPU here can do MIG ({', '.join(names) or 'no GPU'}); left alone"
        return out
    out["skip"] = ""
    if not node:
        out["errors"].append(f"no Node {node_name} in the cluster (gpuops_cluster_node_name names another)")
        return out
    if labels.get(cluster_validation.MIG_DEPLOY) != "true":
        out["errors"].append(f"no MIG manager runs on Node {node_name} ({cluster_validation.MIG_DEPLOY}="
                             f"{labels.get(cluster_validation.MIG_DEPLOY) or '(absent)'}): deploy it with playbooks/cluster.yml "
                             "(the mig_manager role), or set gpuops_mig_reconfigure_path: host")
    text = ((configmap or {}).get("data") or {}).get("config.yaml")
    try:
        parted = yaml.safe_load(text) if text else None
    except yaml.YAMLError as exc:
        out["errors"].append(f"the MIG manager's {where} is not YAML: {exc}")
        return out
    configs = (parted or {}).get("mig-configs") if isinstance(parted, dict) else None
    if not isinstance(configs, dict):
        out["errors"].append(f"the MIG manager's {where} is {'missing' if not configmap else 'without mig-configs'}: "
                             "deploy it with playbooks/cluster.yml (the mig_manager role)")
        return out
    if name not in configs:
        out["errors"].append(f"gpuops_mig_reconfigure_config: {name!r} is not a config of the MIG manager ({where} has "
                             f"{', '.join(sorted(map(str, configs)))}); add it to gpuops_mig_manager_configs and run playbooks/cluster.yml")
        return out
    errors, gpus = common_mig.plan(cast("GpuInfo", facts), parted, name, where)
    out["errors"] += errors
    out["gpus"] = gpus
    out["entries"] = configs[name]
    out["summary"] = ", ".join(f"GPU {g['index']} {_layout(g['mig_before'], g['before'])} -> {_layout(g['mig_after'], g['after'])}"
                               if g["change"] else f"GPU {g['index']} unchanged" for g in gpus)
    return out


def _layout(mig: bool, devices: list[str]) -> str:
    if not mig:
        return "MIG off"
    return "+".join(f"{devices.count(d)}x{d}" for d in sorted(set(devices))) or "MIG on, no devices"


def driver_upgrade_plan(facts: Any, driver: Any, node: Any, kernel_release: str, node_name: str) -> dict:
    """Where one node stands against the driver upgrade's target (module_utils/cluster/upgrade.node_plan)."""
    if not isinstance(facts, dict) or not isinstance(driver, dict):
        raise AnsibleFilterError("driver_upgrade_plan: the host's gpuops_gpu_info and the driver role's plan (driver_info) are needed")
    return cluster_upgrade.node_plan(facts, driver, node if isinstance(node, dict) else None, str(kernel_release or ""), str(node_name))


def driver_upgrade_restore(labels: Any) -> dict:
    """The paused deploy labels of a Node put back to their values before the upgrade (only those that change)."""
    return cluster_upgrade.restore_labels(labels if isinstance(labels, dict) else {})


def driver_upgrade_running(units: Any, states: Any, recorded: Any = "") -> list:
    """The units that were running, from `systemctl is-active`'s lines for them, and those a failed run recorded stopping."""
    return cluster_upgrade.running_units([str(u) for u in units or []], [str(s) for s in states or []], str(recorded or ""))


def day2_lost_hosts(removed: Any, hostvars: Any, started: Any, ended: Any) -> dict:
    """The hosts removed from the play mid-change (unreachable: no rescue ran), host -> Node name."""
    return cluster_upgrade.lost_hosts([str(h) for h in removed or []], hostvars, str(started), [str(e) for e in ended or []])


def driver_upgrade_budget(nodes: Any, run: Any, batch: Any, max_unavailable: Any, variable: Any = "gpuops_upgrade_max_unavailable") -> dict:
    """The rollout's batch size and whether a batch fits, counting the cluster's unavailable GPU nodes as the operator does."""
    return cluster_upgrade.budget([n for n in nodes or [] if isinstance(n, dict)], [str(h) for h in run or []],
                                  None if batch is None else [str(h) for h in batch], max_unavailable, str(variable))


def uninstall_gpu_pods(pods: Any, runtime_class: Any, namespace: Any) -> list:
    """The users' pods on the nvidia runtime or holding a GPU, which an uninstall would break (ns/name on node)."""
    return cluster_uninstall.user_gpu_pods(list(pods or []), str(runtime_class), str(namespace))


def driver_upgrade_drain(plan: Any, reboot: Any, pods: Any, selector: Any) -> dict:
    """Which Pods the drain before the host changes evicts: every Pod where the node will reboot."""
    if not isinstance(plan, dict):
        raise AnsibleFilterError("driver_upgrade_drain: the node's driver_upgrade_plan is needed")
    return cluster_upgrade.drain_scope(plan, str(reboot), str(pods), str(selector or ""))


def driver_upgrade_waiting(pods: Any, daemonsets: Any, labels: Any) -> list:
    """The paused components' pods still on the Node (namespace/name)."""
    return cluster_upgrade.waiting_pods(list(pods or []), list(daemonsets or []), labels if isinstance(labels, dict) else {})


def dcgm_metrics_errors(text: Any, extra: list) -> list:
    return cluster.check_metrics_csv("gpuops_dcgm_exporter_metrics", text, extra or [])


class FilterModule:
    def filters(self) -> dict[str, Callable[..., Any]]:
        return {
            "cluster_nodes": cluster_nodes,
            "cluster_node_labels": cluster_node_labels,
            "driver_container_pools": driver_container_pools,
            "driver_container_leftovers": driver_container_leftovers,
            "driver_container_nodes": driver_container_nodes,
            "driver_wait": driver_wait,
            "host_driver_root": host_driver_root,
            "dra_errors": dra_errors,
            "dra_driver_root": dra_driver_root,
            "dra_feature_gates_env": dra_feature_gates_env,
            "dra_api_errors": dra_api_errors,
            "dra_expected_devices": dra_expected_devices,
            "hosts_without": hosts_without,
            "cluster_run_hosts": cluster_run_hosts,
            "cluster_run_nodes": cluster_run_nodes,
            "device_plugin_errors": device_plugin_errors,
            "device_plugin_data": device_plugin_data,
            "device_plugin_labels": device_plugin_labels,
            "cluster_cdi": cluster_cdi,
            "runtime_class_handler": runtime_class_handler,
            "mig_config_labels": mig_config_labels,
            "mig_configs_set": mig_configs_set,
            "mig_applied": mig_applied,
            "expected_allocatable": expected_allocatable,
            "mig_models": mig_models,
            "mig_parted_config": mig_parted_config,
            "mig_errors": mig_errors,
            "mig_reconfigure_plan": mig_reconfigure_plan,
            "dcgm_metrics_errors": dcgm_metrics_errors,
            "driver_upgrade_plan": driver_upgrade_plan,
            "driver_upgrade_restore": driver_upgrade_restore,
            "driver_upgrade_waiting": driver_upgrade_waiting,
            "driver_upgrade_running": driver_upgrade_running,
            "driver_upgrade_drain": driver_upgrade_drain,
            "day2_lost_hosts": day2_lost_hosts,
            "uninstall_gpu_pods": uninstall_gpu_pods,
            "driver_upgrade_budget": driver_upgrade_budget,
        }
