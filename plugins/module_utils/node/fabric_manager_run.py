# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fabric_manager_info module's work: the fabric's plan at the driver's version, and its service's state.

Shared by the fabric_manager_info module and by gpu_info, which answers the fabric_manager role's plan in its own round
trip (module_utils/node/answers.py).
"""

from __future__ import annotations

from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.fabric_manager import MODES, plan_fabric, start_decision
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import PLAN_ARGS, Host
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.node_files import SYSTEMCTL_ENV, unit_state

# The role's settings: every option but the plan's common ones (the GPUs and the distribution).
SETTINGS_SPEC: dict[str, dict[str, Any]] = {
    "repository": {"type": "str", "choices": ["distro", "cuda"], "default": "distro"},
    "mode": {"type": "str", "choices": list(MODES), "default": "auto"},
    "driver_version": {"type": "str", "default": ""},
    "version_variable": {"type": "str", "default": "gpuops_fabric_manager_driver_version"},
    "config": {"type": "dict", "default": {}},
    "image_build": {"type": "bool", "default": False},
}
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {**PLAN_ARGS, **SETTINGS_SPEC}


def run(module: AnsibleModule, p: dict[str, Any], host: Host | None = None) -> dict[str, Any]:
    """The module's result for the options `p` (all of ARGUMENT_SPEC); its commands through `host` where given (one read
    shared with other plans), else through the module.

    Raises PlanError (a request that cannot work, naming its variable), RuntimeError or OSError (a command failed)."""
    host = host or Host.of(module)
    plan = plan_fabric(gpu_info=p["gpu_info"], distribution=p["distribution"], major_version=p["major_version"],
                       architecture=p["architecture"], repository=p["repository"], requested_mode=p["mode"],
                       driver_version_value=p["driver_version"], version_variable=p["version_variable"],
                       settings=p["config"], installed=host.packages, available=host.versions)
    start, why = start_decision(plan.version, p["gpu_info"], p["image_build"]) if plan.mode != "none" else (False, "nothing to run")
    service = {}
    if plan.mode != "none" and plan.service:
        service = unit_state(lambda argv: module.run_command(argv, environ_update=SYSTEMCTL_ENV), module.get_bin_path("systemctl"),
                             plan.service)
    return {"changed": False, "plan": plan.result(), "start": start, "start_reason": why, "service": service}
