# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster side's decisions, computed from each node's facts (SlimFacts, _common/slim.py): pure functions, no I/O.

- the node labels the GPU Operator would set for a host-managed node (gpu.present, deploy.*, mig.capable),
- the device plugin's named configs (time-slicing, MPS) checked with the device plugin's own rules,
- the resources each node should advertise, given its GPUs, the MIG strategy and its sharing config,
- each node's choice of mig-parted config checked against its GPUs, and the layouts the device plugin's single
  strategy cannot advertise (the configs themselves, their checks and generation are _common/mig.py's, which the
  host side applies too),
- the DCGM exporter's metrics CSV checked (three fields, known types, known DCGM field names),
- the GPUDirect features (GDS, GDRCopy) the device plugin passes to GPU containers.

Checks return lists of messages, each naming the variable, the value and what is accepted; an empty list
means the input is good. Nothing here talks to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard, cast

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.mig import apply_mig_config, check_mig_configs, entry_applies, gpu_models, mig_parted_config
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import SlimFacts, gpu_count, mig_capable, nvml_gpus
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.dcgm_fields import EXPORTER_FIELDS, FIELD_NAMES

MIG_STRATEGIES = ("none", "single", "mixed")
# The GPU Operator's deploy labels, for the components this collection deploys.
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
COMPONENTS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "mig-manager")
LABEL_PRESENT = "nvidia.com/gpu.present"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
METRIC_TYPES = ("gauge", "counter", "histogram", "summary", "label")
_CONFIG_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap key, and a label value
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


# ---------------------------------------------------------------------------------------------------
# GPUDirect features
# ---------------------------------------------------------------------------------------------------

def gpudirect(info: Mapping[str, Any], rdma: object) -> dict[str, bool]:
    """GDS and GDRCopy on a node, from its full gpu_info and the rdma role's fact (gpuops_rdma, when it ran).

    The GPU Operator's device plugin entrypoint turns them on from the modules it sees loaded (nvidia_fs,
    gdrdrv); here the same modules in the node's facts count, and so does what the rdma role set up in this
    run (it loads at the next boot where the driver is not loaded yet). Facts from before schema 4 have no
    node.rdma: nothing is loaded then.
    """
    loaded = ((info.get("node") or {}).get("rdma") or {}).get("modules") or []
    role = rdma if isinstance(rdma, Mapping) else {}
    return {"gds": "nvidia_fs" in loaded or bool(role.get("gds")), "gdrcopy": "gdrdrv" in loaded or bool(role.get("gdrcopy"))}


# ---------------------------------------------------------------------------------------------------
# What the GPU hosts' toolkit reports, and what the cluster runs while a host's report is not known
# ---------------------------------------------------------------------------------------------------

# The DaemonSets whose pod spec follows the CDI choice (CDI_ENABLED), by the names the GPU Operator gives them.
CDI_DAEMONSETS = ("nvidia-device-plugin-daemonset", "nvidia-mig-manager")


def deployed_cdi(daemonsets: object) -> bool | None:
    """Whether the device plugin or MIG manager the cluster runs has CDI on; None where neither is deployed."""
    found = None
    for ds in daemonsets if isinstance(daemonsets, list) else []:
        if not isinstance(ds, Mapping) or (ds.get("metadata") or {}).get("name") not in CDI_DAEMONSETS:
            continue
        containers = (((ds.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        env = [e for c in containers if isinstance(c, Mapping) for e in c.get("env") or [] if isinstance(e, Mapping)]
        on = any(e.get("name") == "CDI_ENABLED" and str(e.get("value")).lower() == "true" for e in env)
        found = on or bool(found)
    return found


def cdi_on(reported: list[object], deployed: bool | None) -> bool:
    """`auto`: CDI on when every GPU host's toolkit reports it. A host whose report is not known in this run (None:
    cluster.yml on its own, its toolkit facts neither set in the run nor in a fact cache) counts as the cluster runs
    it now, so that such a run does not roll the DaemonSets that a site.yml run set; with nothing deployed it does
    not count. No GPU host at all: off."""
    votes = [bool(r) for r in reported if r is not None]
    if len(votes) < len(reported) and deployed is not None:
        votes.append(deployed)
    return bool(votes) and all(votes)


def runtime_handler(setting: str, reported: list[object], existing: object) -> str:
    """The RuntimeClass's handler: the setting; else the first a GPU host's toolkit reports; else, while no host's
    report is known in this run, the handler of the RuntimeClass that is there (a handler cannot be changed in
    place); else nvidia, the toolkit's default runtime name."""
    if setting:
        return setting
    known = [str(r) for r in reported if r]
    if known:
        return known[0]
    for obj in existing if isinstance(existing, list) else []:
        if isinstance(obj, Mapping) and obj.get("handler"):
            return str(obj["handler"])
    return "nvidia"


# ---------------------------------------------------------------------------------------------------
# Node labels
# ---------------------------------------------------------------------------------------------------

def node_labels(info: SlimFacts, components: list[str] | tuple[str, ...]) -> dict[str, str]:
    """The labels the cluster roles own on a node: presence, deploy gates of the enabled components, MIG capability.

    A node without GPUs gets `nvidia.com/gpu.present=false` and no deploy labels. `mig-manager` is
    deployed only where a GPU can do MIG.
    """
    if gpu_count(info) == 0:
        return {LABEL_PRESENT: "false"}
    labels = {LABEL_PRESENT: "true", LABEL_MIG_CAPABLE: "true" if mig_capable(info) else "false"}
    for component in components:
        if component == "mig-manager" and not mig_capable(info):
            continue
        labels[DEPLOY_PREFIX + component] = "true"
    return labels


# ---------------------------------------------------------------------------------------------------
# Device plugin configs
# ---------------------------------------------------------------------------------------------------

def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _sharing_block(config: dict) -> tuple[str, dict | None]:
    """The device plugin's choice: `mps` when present (it is then the only replicated block), else time-slicing."""
    sharing = config.get("sharing") or {}
    if sharing.get("mps") is not None:
        return "mps", sharing["mps"]
    if sharing.get("timeSlicing") is not None:
        return "time-slicing", sharing["timeSlicing"]
    return "none", None


def uses_mps(config: object) -> bool:
    """Whether a sharing config shares with MPS (the device plugin then needs the MPS control daemon)."""
    return isinstance(config, dict) and _sharing_block(config)[0] == "mps"


def resource_name(name: str) -> str:
    return name if name.startswith("nvidia.com/") else "nvidia.com/" + name


def replicated(config: dict) -> tuple[str, dict[str, tuple[int, str]]]:
    """(strategy, {resource: (replicas, advertised name)}) of a valid config."""
    strategy, block = _sharing_block(config)
    if block is None:
        return "none", {}
    rename = bool(block.get("renameByDefault"))
    out = {}
    for res in block.get("resources") or []:
        name = resource_name(str(res["name"]))
        out[name] = (int(res["replicas"]), name + ".shared" if rename else name)
    return strategy, out


def _check_devices(where: str, devices: object) -> list[str]:
    if devices is None or devices == "all":
        return []
    if _is_int(devices):
        return [] if devices > 0 else [f"{where}.devices: {devices!r} must be a count above 0, 'all' or a list"]
    if isinstance(devices, list):
        bad = [d for d in devices if not (_is_int(d) or (isinstance(d, str) and re.match(r"^(\d+(:\d+)?|GPU-.+|MIG-.+)$", d)))]
        return [f"{where}.devices: {bad!r} are not GPU indexes, <gpu>:<mig> indexes or GPU/MIG UUIDs"] if bad else []
    return [f"{where}.devices: {devices!r} must be 'all', a count or a list of GPUs"]


def check_plugin_config(var: str, name: str, config: object, mig_strategy: str) -> list[str]:
    """One named device plugin config, checked as the device plugin checks its config file."""
    where = f"{var}[{name!r}]"
    errors: list[str] = []
    if not _CONFIG_KEY.match(str(name)) or len(str(name)) > 63:
        errors.append(f"{var}: config name {name!r} must be a ConfigMap key and a label value ([-._a-zA-Z0-9], at most 63)")
    if not isinstance(config, dict):
        return [*errors, f"{where}: must be a device plugin config (a mapping with version, flags, sharing), got {config!r}"]
    unknown = sorted(set(config) - {"version", "flags", "resources", "sharing", "imex"})
    if unknown:
        errors.append(f"{where}: unknown key(s) {unknown}; accepted: version, flags, resources, sharing, imex")
    if config.get("version", "v1") not in ("v1", "", None):
        errors.append(f"{where}.version: {config['version']!r} is not a config version the device plugin reads (v1)")
    flags = config.get("flags") or {}
    if not isinstance(flags, dict):
        errors.append(f"{where}.flags: must be a mapping, got {flags!r}")
        flags = {}
    config_mig = flags.get("migStrategy")
    if config_mig is not None and config_mig not in MIG_STRATEGIES:
        errors.append(f"{where}.flags.migStrategy: {config_mig!r} is not one of {', '.join(MIG_STRATEGIES)}")
    elif config_mig is not None and config_mig != mig_strategy:
        errors.append(f"{where}.flags.migStrategy: {config_mig!r} differs from gpuops_device_plugin_mig_strategy "
                      f"{mig_strategy!r}, which the DaemonSet passes as MIG_STRATEGY and which wins over the file")
    sharing = config.get("sharing") or {}
    if not isinstance(sharing, dict):
        return [*errors, f"{where}.sharing: must be a mapping with timeSlicing or mps, got {sharing!r}"]
    unknown = sorted(set(sharing) - {"timeSlicing", "mps"})
    if unknown:
        errors.append(f"{where}.sharing: unknown key(s) {unknown}; accepted: timeSlicing, mps")
    if sharing.get("timeSlicing") is not None and sharing.get("mps") is not None:
        errors.append(f"{where}.sharing: timeSlicing and mps are mutually exclusive in the device plugin; keep one")
    for key in ("timeSlicing", "mps"):
        block = sharing.get(key)
        if block is None:
            continue
        bwhere = f"{where}.sharing.{key}"
        if not isinstance(block, dict):
            errors.append(f"{bwhere}: must be a mapping with resources, got {block!r}")
            continue
        unknown = sorted(set(block) - {"renameByDefault", "failRequestsGreaterThanOne", "resources"})
        if unknown:
            errors.append(f"{bwhere}: unknown key(s) {unknown}; accepted: renameByDefault, failRequestsGreaterThanOne, resources")
        for flag in ("renameByDefault", "failRequestsGreaterThanOne"):
            if flag in block and not isinstance(block[flag], bool):
                errors.append(f"{bwhere}.{flag}: {block[flag]!r} must be a boolean (true or false)")
        resources = block.get("resources")
        if not isinstance(resources, list) or not resources:
            errors.append(f"{bwhere}.resources: no resources specified; give a list of {{name, replicas}}")
            continue
        for i, res in enumerate(resources):
            rwhere = f"{bwhere}.resources[{i}]"
            if not isinstance(res, dict):
                errors.append(f"{rwhere}: must be a mapping with name and replicas, got {res!r}")
                continue
            unknown = sorted(set(res) - {"name", "rename", "devices", "replicas"})
            if unknown:
                errors.append(f"{rwhere}: unknown key(s) {unknown}; accepted: name, rename, devices, replicas")
            name_ok = isinstance(res.get("name"), str) and re.match(r"^(nvidia\.com/)?(gpu|mig-.+)$", res["name"])
            if not name_ok:
                errors.append(f"{rwhere}.name: {res.get('name')!r} must be nvidia.com/gpu or nvidia.com/mig-<profile>")
            replicas = res.get("replicas")
            if not _is_int(replicas) or replicas < 2:
                errors.append(f"{rwhere}.replicas: {replicas!r} is not accepted; the number of replicas must be an integer >= 2")
            errors.extend(_check_devices(rwhere, res.get("devices")))
        if key == "mps" and mig_strategy == "mixed":
            errors.append(f"{bwhere}: MPS is not supported with MIG strategy mixed "
                          "(gpuops_device_plugin_mig_strategy: mixed); use none or single, or time-slicing")
        if key == "mps" and any(isinstance(r, dict) and str(r.get("name", "")).rsplit("/", maxsplit=1)[-1].startswith("mig-")
                                for r in resources):
            errors.append(f"{bwhere}.resources: MPS cannot share MIG devices (nvidia.com/mig-*)")
    return errors


def check_plugin_configs(var: str, configs: object, default: str, mig_strategy: str) -> list[str]:
    if mig_strategy not in MIG_STRATEGIES:
        return [f"gpuops_device_plugin_mig_strategy: {mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}"]
    if not isinstance(configs, dict):
        return [f"{var}: must be a mapping of config name to device plugin config, got {configs!r}"]
    errors = []
    for name, config in configs.items():
        errors.extend(check_plugin_config(var, str(name), config, mig_strategy))
    if default and default not in configs:
        errors.append(f"gpuops_device_plugin_default_config: {default!r} is not a config of {var} "
                      f"(known: {', '.join(sorted(configs)) or 'none'})")
    return errors


def check_node_plugin_configs(selection: dict[str, str | None], configs: dict, infos: dict[str, SlimFacts]) -> list[str]:
    """Each node's chosen config exists, and an MPS config is not chosen for a node with a GPU in MIG mode."""
    errors = []
    for node, name in sorted(selection.items()):
        if not name:
            continue
        if name not in configs:
            errors.append(f"gpuops_device_plugin_config on {node}: {name!r} names no config of gpuops_device_plugin_configs "
                          f"(known: {', '.join(sorted(configs)) or 'none'})")
            continue
        strategy, _res = replicated(configs[name])
        if strategy == "mps" and node in infos and any(g["mig"]["current"] for g in nvml_gpus(infos[node])):
            errors.append(f"gpuops_device_plugin_config on {node}: {name!r} uses MPS, which the device plugin "
                          "refuses on a node whose GPUs are in MIG mode")
    return errors


# ---------------------------------------------------------------------------------------------------
# Expected allocatable
# ---------------------------------------------------------------------------------------------------

def advertised(info: SlimFacts, mig_strategy: str, config: dict | None = None) -> dict[str, int]:
    """The extended resources the device plugin advertises on a node, sharing included."""
    gpus = nvml_gpus(info)
    count = gpu_count(info)
    if count == 0:
        return {}
    mig = [g["mig"]["devices"] for g in gpus if g["mig"]["current"]]
    full = count - len(mig)
    if mig_strategy == "none" or not mig:
        base = {"nvidia.com/gpu": count}
    elif mig_strategy == "single":
        names = {d["profile"] for devs in mig for d in devs}
        base = {} if full or len(names) != 1 or any(not devs for devs in mig) else {"nvidia.com/gpu": sum(map(len, mig))}
    else:
        base = {"nvidia.com/gpu": full} if full else {}
        for devs in mig:
            for dev in devs:
                key = "nvidia.com/mig-" + str(dev["profile"]).replace("+", ".")
                base[key] = base.get(key, 0) + 1
    _strategy, shared = replicated(config or {})
    out: dict[str, int] = {}
    for name, value in base.items():
        replicas, advertised_as = shared.get(name, (1, name))
        out[advertised_as] = out.get(advertised_as, 0) + value * replicas
    return out


# ---------------------------------------------------------------------------------------------------
# MIG: each node's choice of mig-parted config
# ---------------------------------------------------------------------------------------------------

def single_strategy_gap(info: SlimFacts) -> str | None:
    """Why the device plugin's single strategy would advertise nothing on a node in this layout, or None: single
    needs every GPU in MIG mode, each with devices, all of one profile (or no GPU in MIG mode at all)."""
    gpus = nvml_gpus(info)
    mig = [g for g in gpus if g["mig"]["current"]]
    if not mig:
        return None
    if len(mig) != len(gpus):
        return f"{len(mig)} of its {len(gpus)} GPUs in MIG mode"
    if any(not g["mig"]["devices"] for g in mig):
        return "a GPU in MIG mode without MIG devices"
    profiles = sorted({str(d["profile"]) for g in mig for d in g["mig"]["devices"]})
    if len(profiles) > 1:
        return f"MIG devices of {len(profiles)} profiles ({', '.join(profiles)})"
    return None


def check_node_mig_configs(selection: dict[str, str | None], configs: dict, node_models: dict[str, list[str]],
                           variables: dict[str, str] | None = None) -> list[str]:
    """Each MIG-capable node's chosen config exists and has an entry for its GPUs. `variables` names, per node,
    the variable its choice came from (the host's gpuops_mig_manager_config, or the default's variable)."""
    errors = []
    unknown_reported: set[str] = set()
    for node, name in sorted(selection.items()):
        if not name:
            continue
        variable = (variables or {}).get(node, "gpuops_mig_manager_config")
        where = f"{variable} on {node}" if variable == "gpuops_mig_manager_config" else variable
        entries = configs.get(name)
        if entries is None:
            if where not in unknown_reported:
                errors.append(f"{where}: {name!r} is not a MIG config (known: {', '.join(sorted(configs))})")
            if where == variable:
                unknown_reported.add(where)  # a default is one value: said once, not once per node
            continue
        for key in node_models.get(node, []):
            if not any(entry_applies(e, key) for e in entries):
                errors.append(f"{where}: {name!r} has no entry for the GPUs of {node} ({key})" if where == variable else
                              f"{where}: {name!r} has no entry for the node's GPUs ({key})")
    return errors


def chosen_configs(nodes: Mapping[str, Mapping[str, Any]], key: str, default: str) -> dict[str, str]:
    """Each GPU node's config: its host's choice (the row's `key`), else the default. `nodes`: cluster_common's GPU nodes."""
    return {name: (row.get(key) or default) for name, row in nodes.items() if gpu_count(row["info"])}


def check_device_plugin(configs: object, nodes: Mapping[str, Mapping[str, Any]], default: str, mig_strategy: str,
                        key: str = "gpuops_device_plugin_config") -> list[str]:
    """The device plugin's named configs, then each GPU node's choice of one against its GPUs."""
    errors = check_plugin_configs("gpuops_device_plugin_configs", configs, default, mig_strategy)
    if errors:
        return errors
    selection: dict[str, str | None] = {n: v for n, v in chosen_configs(nodes, key, "").items() if v}
    return check_node_plugin_configs(selection, cast(dict, configs), {n: r["info"] for n, r in nodes.items()})


def mig_models(nodes: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The GPU models of the nodes, each with its MIG profiles (from a node whose NVML reported them)."""
    models: dict[str, Any] = {}
    for row in nodes.values():
        for key, model in gpu_models(row["info"]).items():
            if key not in models or not models[key]["profiles"]:
                models[key] = model
    return models


def check_mig(custom: object, nodes: Mapping[str, Mapping[str, Any]], default: str, key: str = "gpuops_mig_manager_config",
              mig_strategy: str = "mixed") -> list[str]:
    """The MIG manager's custom configs against the GPU models, each MIG-capable node's choice of a config, and with the
    device plugin's single strategy, a layout it can advertise on each node."""
    models = mig_models(nodes)
    errors = check_mig_configs("gpuops_mig_manager_configs", custom, models)
    if errors:
        return errors
    configs = mig_parted_config(models, cast(dict, custom))["mig-configs"]
    capable = {n: r for n, r in nodes.items() if mig_capable(r["info"])}
    selection: dict[str, str | None] = {n: (r.get(key) or default) for n, r in capable.items()}
    variables = {n: key if r.get(key) else "gpuops_mig_manager_default_config" for n, r in capable.items()}
    node_models = {n: sorted(gpu_models(r["info"])) for n, r in capable.items()}
    errors = check_node_mig_configs(selection, configs, node_models, variables)
    if errors or mig_strategy != "single":
        return errors
    # The single strategy advertises nothing on a node whose layout it cannot describe: named before apply.
    for name, row in sorted(capable.items()):
        chosen = selection[name]
        gap = single_strategy_gap(apply_mig_config(row["info"], configs[chosen]) if chosen else row["info"])
        if gap:
            errors.append(f"gpuops_device_plugin_mig_strategy: single advertises no GPU on {name}, whose MIG config "
                          f"{chosen or '(none)'} leaves {gap}; use mixed, or a config with one profile on every GPU "
                          f"(gpuops_mig_manager_config, all-<profile>)")
    return errors


# ---------------------------------------------------------------------------------------------------
# DCGM exporter metrics
# ---------------------------------------------------------------------------------------------------

def check_metrics_csv(var: str, text: object, extra_fields: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The exporter's collectors file: `# comments`, else `DCGM field, type, help` per line."""
    if not isinstance(text, str) or not text.strip():
        return [f"{var}: must be the metrics CSV text (DCGM field, Prometheus type, help per line)"]
    known = FIELD_NAMES | EXPORTER_FIELDS | set(extra_fields)
    errors = []
    records = 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        records += 1
        fields = [f.strip() for f in stripped.split(",")]
        if len(fields) != 3:
            errors.append(f"{var} line {number}: {stripped!r} has {len(fields)} field(s); each record is exactly "
                          "'DCGM field, type, help' (three fields, no comma in the help)")
            continue
        name, kind = fields[0], fields[1]
        if name not in known:
            close = sorted(n for n in FIELD_NAMES if name.upper().replace("DCGM_FI_", "") in n)[:3]
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            errors.append(f"{var} line {number}: {name!r} is not a DCGM field name{hint}; "
                          "add fields newer than this collection to gpuops_dcgm_exporter_extra_fields")
        if kind not in METRIC_TYPES:
            errors.append(f"{var} line {number}: type {kind!r} of {name} is not one of {', '.join(METRIC_TYPES)}")
    if not records and not errors:
        errors.append(f"{var}: has no metric records, only comments")
    return errors


def run_hosts(hosts: list[str], limited: list[str] | None) -> list[str]:
    """The GPU hosts whose Nodes this run labels and validates: those of `hosts` (the group's, in its order) that
    `limited` names (the hosts of the run's --limit), or all of them without a limit."""
    if limited is None:
        return list(hosts)
    wanted = set(limited)
    return [host for host in hosts if host in wanted]
