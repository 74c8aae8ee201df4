"""The lab's stand-in for the MIG manager: what mig-parted does to a node's GPUs for a config.

KWOK runs no container, so no MIG manager repartitions the simulated GPUs. The simulated device plugin
(devplugin.py) also watches the MIG manager's pods (`app=nvidia-mig-manager`): while one runs on a node,
it applies the config the node's `nvidia.com/mig.config` label names, as the MIG manager does - the label
`nvidia.com/mig.config.state` goes to `pending`, the config is read from the mig-parted ConfigMap the pod
mounts, each GPU takes the first entry that selects it (index in `devices` or `all`, model in
`device-filter`), and the state ends `success` (the node's GPUs now in that layout, which the device plugin
and GFD stand-ins advertise and label) or `failed` (a config not in the ConfigMap, a MIG profile the GPU does
not offer, or the node annotated `gpuops-lab/mig-fail: "true"`, the lab's way to make a real failure such as
a GPU in use happen). The hardware on a lab machine (its fake NVML) does not change.
"""

from __future__ import annotations

import copy

MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
FAIL_ANNOTATION = "gpuops-lab/mig-fail"


class MigError(Exception):
    """The config cannot be applied to these GPUs."""


def _offered(gpus: dict) -> set[str]:
    """The MIG profile names the GPU offers (the last field of each of the profile's table lines)."""
    return {str(line).split()[-1] for line in gpus.get("mig_profiles") or []}


def apply(profile: dict, configs: dict, name: str) -> dict:
    """The profile with its GPUs in the layout config `name` gives; MigError says why it cannot be."""
    gpus = (profile or {}).get("gpus")
    if not gpus:
        raise MigError("no GPU")
    if not gpus.get("mig_capable"):
        raise MigError(f"{gpus['name']} cannot do MIG")
    entries = (configs or {}).get(name)
    if entries is None:
        raise MigError(f"no MIG config {name!r} in the mig-parted ConfigMap")
    count = len(gpus["bus_ids"])
    enabled = [bool(e) for e in (gpus.get("mig_enabled") or [])] + [False] * count
    devices = [list(d) for d in (gpus.get("mig_devices") or [])] + [[]] * count
    model = f"0x{str(gpus['device_id']).upper()}10DE"
    offered = _offered(gpus)
    for index in range(count):
        for entry in entries:
            selected = entry.get("devices")
            filters = entry.get("device-filter")
            filters = [filters] if isinstance(filters, str) else list(filters or [])
            if (selected == "all" or (isinstance(selected, list) and index in selected)) and \
                    (not filters or model.lower() in {str(f).split(":", maxsplit=1)[0].lower() for f in filters}):
                enabled[index] = bool(entry.get("mig-enabled"))
                wanted = entry.get("mig-devices") or {} if enabled[index] else {}
                missing = sorted(set(wanted) - offered)
                if missing:
                    raise MigError(f"GPU {index} ({gpus['name']}) offers no MIG profile {', '.join(missing)}")
                devices[index] = [name for name, n in sorted(wanted.items()) for i in range(int(n))]
                break
    out = copy.deepcopy(profile)
    out["gpus"]["mig_enabled"] = enabled[:count]
    out["gpus"]["mig_devices"] = devices[:count]
    return out
