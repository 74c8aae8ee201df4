# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""MIG configs in mig-parted's format, the rules both sides apply: pure functions over the slim facts, no I/O.

The config is the file the MIG manager reads (`version: v1`, `mig-configs: {name: [entries]}`). The cluster side
generates it per GPU model and checks each node's choice (the mig_manager role, cluster/rules.py); the host side
checks it and plans a node's change with the same rules before NVML applies it (the mig_config module,
node/mig.py), and so does the cluster path of mig_reconfigure (the mig_reconfigure_plan filter):

- a node's MIG-capable GPU models and the profiles each offers, from its NVML (`gpu_models`);
- a config's check against those models: profile names, counts and whether they fit together on one GPU;
- the configs generated for the models present (all-disabled, all-enabled, all-<profile>, all-balanced);
- the layout a config leaves on a node, as mig-parted applies it (`apply_mig_config`), and the per-GPU plan to get
  there from the layout the node is in (`plan`).

Checks return lists of messages, each naming the variable, the value and what is accepted.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, TypedDict, TypeGuard, cast

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import SlimFacts, nvml_gpus, slim

_MIG_PROFILE = re.compile(r"^(\d+c\.)?\d+g\.\d+gb([+-][a-z]+(\.[a-z]+)*)?$")
_CONFIG_NAME = re.compile(r"^[-._a-zA-Z0-9]+$")  # a ConfigMap key, and a label value (nvidia.com/mig.config)


class MigProfileSpan(TypedDict):
    max: int  # instances of the profile one GPU holds
    slices: int  # compute slices
    size: int  # span in memory slices


class GpuModel(TypedDict):
    name: str
    profiles: dict[str, MigProfileSpan]


def filter_id(device_id: str) -> str:
    """mig-parted's device filter for an NVIDIA PCI device id: 0x<DEVICE><VENDOR>, upper case."""
    return f"0x{device_id.upper()}10DE"


def gpu_models(info: SlimFacts) -> dict[str, GpuModel]:
    """The node's MIG-capable GPU models: device filter -> {name, profiles {name: {max, slices, size}}}.

    Profiles come from the node's NVML (the profiles the GPU offers, with their instance counts).
    `size` is the profile's span in memory slices, from its memory relative to the smallest profile.
    """
    models: dict[str, GpuModel] = {}
    pci = {g["bus_id"]: g for g in info["pci"]["gpus"]}
    for gpu in nvml_gpus(info):
        mig = gpu["mig"]
        pci_gpu = pci.get(gpu["bus_id"])
        device_id = pci_gpu["device_id"] if pci_gpu else None
        if not mig["capable"] or not device_id:
            continue
        key = filter_id(device_id)
        profiles = mig["profiles"]
        if key in models and models[key]["profiles"]:
            continue
        smallest = min((p["memory_mib"] for p in profiles if p["memory_mib"]), default=0)
        table: dict[str, MigProfileSpan] = {}
        for p in profiles:
            if not p["name"]:
                continue  # NVML gave the GPU no memory size to name it by: nothing to configure with it
            ratio = p["memory_mib"] / smallest if smallest else 1
            table[p["name"]] = {"max": int(p["instances"]), "slices": int(p["slices"]),
                                "size": 2 ** round(math.log2(max(ratio, 1)))}
        models[key] = {"name": gpu["name"] or key, "profiles": table}
    return models


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


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
        if not _CONFIG_NAME.match(str(name)) or len(str(name)) > 63:
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


class GpuPlan(TypedDict):
    index: int
    bus_id: str
    name: str
    mig_before: bool
    mig_after: bool
    pending: bool  # a mode change already pending (from an earlier run): a reset or reboot applies it
    before: list[str]  # MIG device profiles now, sorted
    after: list[str]  # wanted
    change: bool


def plan(facts: GpuInfo, config: object, name: str, var: str) -> tuple[list[str], list[GpuPlan]]:
    """(errors, per-GPU plan) for putting the node's GPUs in config `name`; errors name `var` and say what is accepted."""
    info = slim(facts)
    pending_modes = [g["mig"]["pending"] for g in facts["nvml"]["gpus"]]
    if not isinstance(config, dict) or not isinstance(config.get("mig-configs"), dict):
        return [f"{var}: must be a mig-parted config, a mapping with mig-configs (name -> list of entries), got {config!r}"], []
    configs = config["mig-configs"]
    models = gpu_models(info)
    if name not in configs:
        return [f"MIG config {name!r}: not a config of {var} or the generated ones (known: {', '.join(sorted(map(str, configs))) or 'none'})"], []
    errors = check_mig_configs(f"{var}.mig-configs", {name: configs[name]}, models)
    if errors:
        return errors, []
    entries = configs[name]
    capable = [g for g in nvml_gpus(info) if g["mig"]["capable"]]
    if not capable:
        return [f"no GPU on this node can do MIG ({', '.join(sorted({g['name'] for g in nvml_gpus(info)})) or 'no GPU'})"], []
    missing = sorted(k for k in models if not any(entry_applies(e, k) for e in entries))
    if missing:
        return [f"the MIG config {name!r} has no entry for this node's GPUs ({', '.join(missing)})"], []
    target = nvml_gpus(apply_mig_config(info, entries))
    plans: list[GpuPlan] = []
    for index, (now, want) in enumerate(zip(nvml_gpus(info), target, strict=True)):
        if not now["mig"]["capable"]:
            continue
        before = sorted(str(d["profile"]) for d in now["mig"]["devices"])
        after = sorted(str(d["profile"]) for d in want["mig"]["devices"]) if want["mig"]["current"] else []
        pending = bool(pending_modes[index])
        mode_now, mode_want = bool(now["mig"]["current"]), bool(want["mig"]["current"])
        plans.append({"index": index, "bus_id": now["bus_id"], "name": now["name"], "mig_before": mode_now,
                      "mig_after": mode_want, "pending": pending != mode_now, "before": before if mode_now else [],
                      "after": after, "change": mode_now != mode_want or (mode_want and before != after)})
    return [], plans
