# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The cluster side's decisions, computed from each node's facts (SlimFacts, cluster/facts.py): pure functions, no I/O.

- the node labels the GPU Operator would set for a host-managed node (gpu.present, deploy.*, mig.capable),
- the device plugin's named configs (time-slicing, MPS) checked with the device plugin's own rules,
- the resources each node should advertise, given its GPUs, the MIG strategy and its sharing config,
- the mig-parted config (`version: v1`, `mig-configs`) per GPU model, and its check against each model's
  MIG profile table as the node's NVML reports it (names, counts and placement),
- the DCGM exporter's metrics CSV checked (three fields, known types, known DCGM field names),
- the GPUDirect features (GDS, GDRCopy) the device plugin passes to GPU containers.

Checks return lists of messages, each naming the variable, the value and what is accepted; an empty list
means the input is good. Nothing here talks to a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeGuard, cast

from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.dcgm_fields import EXPORTER_FIELDS, FIELD_NAMES
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.facts import SlimFacts, filter_id, gpu_count, gpu_models, mig_capable, nvml_gpus

MIG_STRATEGIES = ("none", "single", "mixed")
# The GPU Operator's deploy labels, for the components this collection deploys.
DEPLOY_PREFIX = "nvidia.com/gpu.deploy."
COMPONENTS = ("device-plugin", "gpu-feature-discovery", "dcgm-exporter", "dcgm", "mig-manager")
LABEL_PRESENT = "nvidia.com/gpu.present"
LABEL_MIG_CAPABLE = "nvidia.com/mig.capable"
LABEL_MIG_CONFIG = "nvidia.com/mig.config"
LABEL_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"
METRIC_TYPES = ("gauge", "counter", "histogram", "summary", "label")
_MIG_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb([+-][a-z]+(\.[a-z]+)*)?$")
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
# MIG: mig-parted configs
# ---------------------------------------------------------------------------------------------------

def _fits(table: dict[str, dict], wanted: dict[str, int]) -> bool:
    """Whether the GPU instances can be placed together on one GPU.

    The GPU has C compute slices (the largest profile's) over M memory slices (its span). A profile
    spanning s memory slices starts at a multiple of s, within M, and its compute slices stay within C:
    the placements `nvidia-smi mig -lgipp` lists (on a 7-slice GPU: 1g at 0..6, 2g at 0/2/4, 3g at 0/4,
    4g and 7g at 0, the double-memory 1g at 0/2/4/6).
    """
    if not table:
        return False
    top = max(table.values(), key=lambda p: (p["slices"], p["size"]))
    compute, memory = top["slices"], top["size"]
    items = sorted([item for n, c in wanted.items() for item in [(table[n]["size"], table[n]["slices"])] * c], reverse=True)

    def place(i: int, used: int) -> bool:
        if i == len(items):
            return True
        size, slices = items[i]
        for start in range(0, memory, size):
            mask = ((1 << size) - 1) << start
            if start + size <= memory and start + slices <= compute and not used & mask and place(i + 1, used | mask):
                return True
        return False

    return place(0, 0)


def entry_applies(entry: object, key: str) -> bool:
    """Whether a mig-parted entry applies to a model: no device filter, or one naming its 0x<DEVICE><VENDOR>."""
    filters = entry.get("device-filter") if isinstance(entry, dict) else None
    filters = [filters] if isinstance(filters, str) else list(filters or [])
    return not filters or key.lower() in {str(f).split(":", maxsplit=1)[0].lower() for f in filters}


def check_mig_entry(where: str, entry: object, models: Mapping[str, Any]) -> list[str]:
    """One entry of a mig-parted config, against every model it applies to."""
    if not isinstance(entry, dict):
        return [f"{where}: must be a mapping with devices, mig-enabled and mig-devices, got {entry!r}"]
    errors = []
    unknown = sorted(set(entry) - {"device-filter", "devices", "mig-enabled", "mig-devices"})
    if unknown:
        errors.append(f"{where}: unexpected field(s) {unknown}; accepted: device-filter, devices, mig-enabled, mig-devices")
    devices = entry.get("devices")
    if not (devices == "all" or (isinstance(devices, list) and devices and all(_is_int(d) and d >= 0 for d in devices))):
        errors.append(f"{where}.devices: {devices!r} must be 'all' or a list of GPU indexes")
    enabled = entry.get("mig-enabled")
    if not isinstance(enabled, bool):
        errors.append(f"{where}.mig-enabled: {enabled!r} must be true or false")
    wanted = entry.get("mig-devices") or {}
    if not isinstance(wanted, dict):
        return [*errors, f"{where}.mig-devices: must be a mapping of MIG profile to count, got {wanted!r}"]
    if enabled is False and wanted:
        errors.append(f"{where}.mig-devices: must be empty when mig-enabled is false")
    if enabled is True and "mig-devices" not in entry:
        errors.append(f"{where}.mig-devices: required when mig-enabled is true (use {{}} for no devices)")
    for name, count in wanted.items():
        if not _MIG_PROFILE.match(str(name)):
            errors.append(f"{where}.mig-devices: {name!r} is not a MIG profile name such as 1g.10gb or 1g.10gb+me")
        if not _is_int(count) or count < 0:
            errors.append(f"{where}.mig-devices[{name!r}]: {count!r} must be a count >= 0")
    if wanted and all(_is_int(c) and c == 0 for c in wanted.values()):
        errors.append(f"{where}.mig-devices: every count is 0; give at least one device or use mig-devices: {{}}")
    if errors or not wanted:
        return errors
    for key in [k for k in models if entry_applies(entry, k)]:
        model = models[key]
        table = model["profiles"]
        label = f"{model['name']} ({key})"
        if not table:
            errors.append(f"{where}: the MIG profiles of {label} are unknown (its node's NVML did not list them); "
                          "load the driver before configuring MIG on it")
            continue
        missing = [n for n in wanted if n not in table]
        if missing:
            errors.append(f"{where}.mig-devices: {', '.join(missing)} is not a MIG profile {label} can host; "
                          f"it offers {', '.join(sorted(table))}")
            continue
        over = [f"{wanted[n]} x {n} (at most {table[n]['max']})" for n in wanted if wanted[n] > table[n]["max"]]
        if over:
            errors.append(f"{where}.mig-devices: {', '.join(over)} on {label}")
        elif not _fits(table, {n: c for n, c in wanted.items() if c}):
            layout = " + ".join(f"{c} x {n}" for n, c in wanted.items() if c)
            errors.append(f"{where}.mig-devices: {layout} do not fit together on one {label} (its slices cannot hold them all)")
    return errors


def check_mig_configs(var: str, configs: object, models: Mapping[str, Any]) -> list[str]:
    if not isinstance(configs, dict):
        return [f"{var}: must be a mapping of config name to a list of entries, got {configs!r}"]
    errors = []
    for name, entries in configs.items():
        if not _CONFIG_KEY.match(str(name)) or len(str(name)) > 63:
            errors.append(f"{var}: config name {name!r} must be a label value ([-._a-zA-Z0-9], at most 63)")
        if not isinstance(entries, list) or not entries:
            errors.append(f"{var}[{name!r}]: must be a list of at least one entry, got {entries!r}")
            continue
        for i, entry in enumerate(entries):
            errors.extend(check_mig_entry(f"{var}[{name!r}][{i}]", entry, models))
    return errors


def _base(name: str) -> bool:
    return "+" not in name and "-me" not in name and "c." not in name


def generated_mig_configs(models: Mapping[str, Any]) -> dict[str, list[dict]]:
    """all-disabled, all-enabled, all-<profile> at its maximum count and all-balanced, per model present.

    With more than one model in the cluster, each model's entries carry its device filter.
    """
    configs: dict[str, list[dict]] = {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "all-enabled": [{"devices": "all", "mig-enabled": True, "mig-devices": {}}],
    }
    several = len(models) > 1
    for key in sorted(models):
        table = models[key]["profiles"]
        head = {"device-filter": key} if several else {}
        for name in sorted(table, key=lambda n: (table[n]["slices"], table[n]["size"], n)):
            configs.setdefault("all-" + name.replace("+", "."), []).append(
                {**head, "devices": "all", "mig-enabled": True, "mig-devices": {name: table[name]["max"]}})
        if not table:
            continue
        compute = max(p["slices"] for p in table.values())
        plan = {1: 2, 2: 1, 3: 1} if compute >= 7 else {1: 2, 2: 1}
        balanced = {}
        for slices, count in plan.items():
            candidates = [n for n, p in table.items() if p["slices"] == slices and _base(n)]
            if candidates:
                best = max(candidates, key=lambda n: (table[n]["max"], -table[n]["size"]))
                balanced[best] = count
        if balanced and _fits(table, balanced):
            configs.setdefault("all-balanced", []).append({**head, "devices": "all", "mig-enabled": True, "mig-devices": balanced})
    return configs


def mig_parted_config(models: Mapping[str, Any], custom: dict | None) -> dict:
    configs = generated_mig_configs(models)
    configs.update(custom or {})
    return {"version": "v1", "mig-configs": configs}


def apply_mig_config(info: SlimFacts, entries: list) -> SlimFacts:
    """The node's facts once the MIG manager has applied a mig-parted config: each GPU takes the first entry
    that selects it (its index in `devices`, or `all`, and its model in `device-filter`), MIG mode and
    devices as the entry says; a GPU no entry selects keeps its state, as mig-parted leaves it."""
    ids = {g["bus_id"]: g["device_id"] for g in info["pci"]["gpus"]}
    gpus = []
    for index, gpu in enumerate(nvml_gpus(info)):
        gpu = {**gpu, "mig": {**gpu["mig"]}}
        device_id = ids.get(gpu["bus_id"])
        for entry in entries or []:
            devices = entry.get("devices")
            if (devices == "all" or (isinstance(devices, list) and index in devices)) and device_id \
                    and entry_applies(entry, filter_id(device_id)):
                enabled = bool(entry.get("mig-enabled"))
                gpu["mig"]["current"] = enabled
                wanted = sorted((entry.get("mig-devices") or {}).items()) if enabled else []
                gpu["mig"]["devices"] = [{"profile": name} for name, count in wanted for i in range(int(count))]
                break
        gpus.append(gpu)
    return cast(SlimFacts, {**info, "nvml": {**info["nvml"], "gpus": gpus}})


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
