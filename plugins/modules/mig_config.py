#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: mig_config
short_description: Put a node's GPUs in the MIG layout a mig-parted config names, through NVML
version_added: 0.1.0
author:
  - gpuops.nvidia maintainers (@gpuops)
description:
  - Applies one config of a mig-parted config file (the file the MIG manager reads) on the host, for nodes that
    run no Kubernetes MIG manager (Slurm, plain hosts). Each GPU takes the first entry that selects it (its
    index in C(devices), or C(all), and its PCI id in C(device-filter)); GPUs no entry selects are left alone.
  - Before any change, refuses a config that is missing, a MIG profile the GPU does not offer, more instances
    than it holds, or a layout that cannot be placed together, naming the GPU and what it offers.
  - A GPU whose layout differs has its compute and GPU instances destroyed and created again, each GPU instance
    with one compute instance of its whole size, at placements NVML offers. MIG mode is switched first; when
    the driver leaves the change pending because a process holds the GPU, RV(reboot_required) says so and the
    GPU's instances are created by a run after the reboot (or GPU reset).
  - The systemd units in O(clients) that are running are stopped before the first change and started again
    after the last one, also when a change fails.
  - GPU and compute instances do not survive a reboot; run the module again at boot to restore them.
options:
  config:
    description:
      - A whole mig-parted config file, C(version) and C(mig-configs) (config name to a list of entries with
        C(devices), C(mig-enabled), C(mig-devices) and optionally C(device-filter)), used as it is.
      - Without it, the configs the collection's MIG manager generates for the node's GPU models
        (C(all-disabled), C(all-enabled), C(all-<profile>), C(all-balanced)) with O(configs) over them.
    type: dict
  configs:
    description: Configs of your own (name to a list of entries), added to the generated ones; not with O(config).
    type: dict
    default: {}
  name:
    description: The config to apply.
    type: str
    required: true
  variable:
    description:
      - The name error messages give the configs (a role passes its variable, so that a mistake is reported
        where it was made).
    type: str
    default: configs
  clients:
    description:
      - systemd units that hold the GPUs (C(nvidia-persistenced), C(nvidia-dcgm), C(nvidia-fabricmanager)).
        Those running are stopped around the change; a unit the host does not have is skipped.
    type: list
    elements: str
    default: []
  root:
    description: Directory under which C(sys/) is read for the GPUs' PCI ids (C(/) on a server).
    type: path
    default: /
  nvml_library:
    description: Path of the NVML library to load instead of the default C(libnvidia-ml.so.1).
    type: path
requirements:
  - nvidia-ml-py (C(python3-pynvml)) on the node, and the NVIDIA driver loaded.
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - Reads the GPUs, checks the config and reports the GPUs that would change; changes nothing and stops no unit.
  diff_mode:
    support: full
    details:
      - Per GPU that changes, its MIG mode and MIG devices before and after.
  idempotent:
    support: full
    details:
      - GPUs already in the wanted layout are not touched; a second run reports no change.
"""

EXAMPLES = r"""
- name: Split every A100 as the MIG manager's all-balanced config does
  gpuops.nvidia.mig_config:
    name: all-balanced
    clients: [nvidia-persistenced, nvidia-dcgm]
  register: mig

- name: Reboot when a MIG mode change is pending
  ansible.builtin.reboot:
  when: mig.reboot_required
"""

RETURN = r"""
gpus:
  description: Per MIG-capable GPU, its MIG mode and MIG devices before and after, and whether it changes.
  returned: always
  type: list
  elements: dict
reboot_required:
  description: A MIG mode change is pending on RV(pending) GPUs; reboot (or reset the GPUs) and run again.
  returned: always
  type: bool
pending:
  description: Indexes of the GPUs whose MIG mode change waits for a reset or reboot.
  returned: always
  type: list
  elements: int
stopped_clients:
  description: The units stopped around the change (and started again).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.mig import check_mig_configs, gpu_models, mig_parted_config, plan
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.slim import slim
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import mig
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.gpu_info import collect


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "config": {"type": "dict"},
            "configs": {"type": "dict", "default": {}},
            "variable": {"type": "str", "default": "configs"},
            "name": {"type": "str", "required": True},
            "clients": {"type": "list", "elements": "str", "default": []},
            "root": {"type": "path", "default": "/"},
            "nvml_library": {"type": "path"},
        },
        supports_check_mode=True,
        mutually_exclusive=[("config", "configs")],
    )
    p = module.params
    try:
        facts = collect(p["root"], p["nvml_library"])
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if facts["nvml"]["status"] != "ok":
        module.fail_json(msg=f"cannot read the GPUs through NVML ({facts['nvml']['status']}): {facts['nvml']['error']}")
    if p["config"] is not None:
        config, variable = p["config"], "config"
    else:
        models = gpu_models(slim(facts))
        errors = check_mig_configs(p["variable"], p["configs"], models)
        if errors:
            module.fail_json(msg="; ".join(errors), errors=errors)
        config, variable = mig_parted_config(models, p["configs"]), p["variable"]
    errors, plans = plan(facts, config, p["name"], variable)
    if errors:
        module.fail_json(msg="; ".join(errors), errors=errors)
    changing = [g for g in plans if g["change"]]
    already = sorted(g["index"] for g in plans if g["pending"] and not g["change"])
    result: dict = {"changed": bool(changing), "gpus": plans, "pending": already,
                    "reboot_required": bool(already), "stopped_clients": []}
    if module._diff and changing:
        result["diff"] = {"before": {f"gpu{g['index']}": {"mig": g["mig_before"], "devices": g["before"]} for g in changing},
                          "after": {f"gpu{g['index']}": {"mig": g["mig_after"], "devices": g["after"]} for g in changing}}
    if module.check_mode or not changing:
        module.exit_json(**result)
    systemctl = module.get_bin_path("systemctl")
    stopped: list[str] = []
    if systemctl:
        for unit in p["clients"]:
            rc, _out, _err = module.run_command([systemctl, "is-active", "--quiet", unit])
            if rc == 0:
                rc, _out, err = module.run_command([systemctl, "stop", unit])
                if rc != 0:
                    _start(module, systemctl, stopped)
                    module.fail_json(msg=f"stopping {unit}, which holds the GPUs, failed: {err.strip()}", **result)
                stopped.append(unit)
    result["stopped_clients"] = stopped
    log: list[str] = []
    try:
        pending = mig.apply(plans, p["nvml_library"], log.append)
    except (RuntimeError, OSError) as exc:
        failed = _start(module, systemctl, stopped)
        module.fail_json(msg=f"applying MIG config {p['name']!r} failed: {exc}"
                             + (f"; could not start {', '.join(failed)} again" if failed else ""), log=log, **result)
    failed = _start(module, systemctl, stopped)
    result["log"] = log
    result["pending"] = sorted(set(already) | set(pending))
    result["reboot_required"] = bool(result["pending"])
    if failed:
        module.fail_json(msg=f"MIG config {p['name']!r} applied, but {', '.join(failed)} did not start again", **result)
    module.exit_json(**result)


def _start(module: AnsibleModule, systemctl: str | None, units: list[str]) -> list[str]:
    """Start the units again; returns those that did not start."""
    failed = []
    for unit in units:
        rc, _out, _err = module.run_command([systemctl or "systemctl", "start", unit])
        if rc != 0:
            failed.append(unit)
    return failed


if __name__ == "__main__":
    main()
