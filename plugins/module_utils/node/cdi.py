# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""CDI specs: the checks of the CDI JSON schema that matter, the device names gpu_info expects, and comparison.

Pure functions over parsed specs (plain dicts); the cdi_spec module runs `nvidia-ctk cdi generate`.
The schema rules are those of the CDI specification (tags.cncf.io/container-device-interface, schema.json
and SPEC.md): cdiVersion, a `vendor/class` kind, at least one device, unique device names, container edits
that are not empty, absolute paths for device nodes, mounts and hooks, known hook names, no unknown fields.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo

KNOWN_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
HOOK_NAMES = ("createRuntime", "createContainer", "startContainer", "poststart", "poststop", "prestart")
# kind: a vendor (a DNS-like name) and a class (CDI SPEC.md "Kind").
KIND = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9.-]*[a-zA-Z0-9]/[a-zA-Z0-9][a-zA-Z0-9_.-]*$")
DEVICE_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.:-]*$")
TOP_FIELDS = {"cdiVersion", "kind", "annotations", "devices", "containerEdits"}
DEVICE_FIELDS = {"name", "annotations", "containerEdits"}
EDIT_FIELDS = {"env", "deviceNodes", "hooks", "mounts", "intelRdt", "additionalGids", "netDevices"}
NAME_STRATEGIES = ("index", "uuid", "type-index")


def _absolute(value: object, where: str, errors: list[str]) -> None:
    if not isinstance(value, str) or not value.startswith("/"):
        errors.append(f"{where}: {value!r} is not an absolute path")


def _edits(edits: object, where: str, errors: list[str]) -> None:
    if not isinstance(edits, Mapping):
        errors.append(f"{where}: containerEdits is not an object")
        return
    for key in sorted(set(edits) - EDIT_FIELDS):
        errors.append(f"{where}: unknown field containerEdits.{key}")
    for i, env in enumerate(edits.get("env") or []):
        if not isinstance(env, str) or "=" not in env:
            errors.append(f"{where}: env[{i}] {env!r} is not NAME=VALUE")
    for i, node in enumerate(edits.get("deviceNodes") or []):
        _absolute((node or {}).get("path"), f"{where}: deviceNodes[{i}].path", errors)
    for i, mount in enumerate(edits.get("mounts") or []):
        _absolute((mount or {}).get("hostPath"), f"{where}: mounts[{i}].hostPath", errors)
        _absolute((mount or {}).get("containerPath"), f"{where}: mounts[{i}].containerPath", errors)
    for i, hook in enumerate(edits.get("hooks") or []):
        if (hook or {}).get("hookName") not in HOOK_NAMES:
            errors.append(f"{where}: hooks[{i}].hookName {(hook or {}).get('hookName')!r} is not one of {', '.join(HOOK_NAMES)}")
        _absolute((hook or {}).get("path"), f"{where}: hooks[{i}].path", errors)


def validate(spec: object) -> list[str]:
    """What is wrong with a CDI spec; empty when it is valid."""
    if not isinstance(spec, Mapping):
        return ["the spec is not an object"]
    errors: list[str] = []
    for key in sorted(set(spec) - TOP_FIELDS):
        errors.append(f"unknown field {key}")
    if spec.get("cdiVersion") not in KNOWN_VERSIONS:
        errors.append(f"cdiVersion {spec.get('cdiVersion')!r} is not one of {', '.join(KNOWN_VERSIONS)}")
    if not isinstance(spec.get("kind"), str) or not KIND.match(spec["kind"]):
        errors.append(f"kind {spec.get('kind')!r} is not <vendor>/<class>")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        errors.append("devices: a spec needs at least one device")
        devices = []
    seen: set[str] = set()
    for i, device in enumerate(devices):
        name = (device or {}).get("name") if isinstance(device, Mapping) else None
        where = f"devices[{i}] ({name})"
        if not isinstance(name, str) or not DEVICE_NAME.match(name):
            errors.append(f"{where}: the name is not a valid device name")
        elif name in seen:
            errors.append(f"{where}: the name is used twice")
        seen.add(str(name))
        if not isinstance(device, Mapping):
            continue
        for key in sorted(set(device) - DEVICE_FIELDS):
            errors.append(f"{where}: unknown field {key}")
        edits = device.get("containerEdits")
        if not edits:
            errors.append(f"{where}: containerEdits is empty")
        else:
            _edits(edits, where, errors)
    if spec.get("containerEdits") is not None:
        _edits(spec["containerEdits"], "containerEdits", errors)
    return errors


def device_names(spec: Mapping) -> list[str]:
    return [d["name"] for d in spec.get("devices") or [] if isinstance(d, Mapping) and isinstance(d.get("name"), str)]


def expected_names(gpu_info: GpuInfo, strategies: list[str], all_device: bool = True) -> list[str]:
    """The device names nvidia-ctk gives the GPUs and MIG devices gpu_info read, for the naming strategies."""
    names: list[str] = []
    for gpu in gpu_info["nvml"]["gpus"]:
        index = gpu["index"]
        mig = gpu["mig"]
        # A hand-written gpu_info (the cdi_spec module's option) may give a GPU an empty `mig`.
        migs = mig["devices"] if mig and mig["current"] else []
        if "index" in strategies:
            names.append(str(index))
            names += [f"{index}:{m['index']}" for m in migs]
        if "uuid" in strategies:
            names.append(gpu["uuid"])
            names += [m["uuid"] for m in migs]
        if "type-index" in strategies:
            names.append(f"gpu{index}")
            names += [f"mig{index}:{m['index']}" for m in migs]
    if all_device and names:
        names.append("all")
    return [n for n in names if n]


def same_spec(old: object, new: object) -> bool:
    """Whether two parsed specs are the same (a header comment or key order is not a difference)."""
    return old == new
