# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rdma_info module's work: the RDMA plan, read from the node's packages and repositories.

Shared by the rdma_info module and by gpu_info, which answers the rdma role's check in its own round trip
(module_utils/node/answers.py).
"""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import PLAN_ARGS, Host
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.rdma import MODULES_LOAD_PATH, NICS, STACKS, RdmaRequest, plan_rdma

# The role's settings: every option but the plan's common ones (the GPUs and the distribution), which the read has.
SETTINGS_SPEC: dict[str, dict[str, Any]] = {
    "stack": {"type": "str", "choices": list(STACKS), "default": "auto"},
    "nics": {"type": "str", "choices": list(NICS), "default": "auto"},
    "peermem": {"type": "bool", "default": False},
    "gds": {"type": "bool", "default": False},
    "gdrcopy": {"type": "bool", "default": False},
    "module_type": {"type": "str", "default": ""},
    "module_type_variable": {"type": "str", "default": "gpuops_driver_kernel_module_type"},
    "driver_method": {"type": "str", "default": "auto"},
    "driver_repository": {"type": "str", "default": "distro"},
    "kernel": {"type": "str", "default": ""},
    "doca_version": {"type": "str", "default": ""},
    "doca_repo_url": {"type": "str", "default": ""},
}
ARGUMENT_SPEC: dict[str, dict[str, Any]] = {**PLAN_ARGS, **SETTINGS_SPEC}


def run(module: AnsibleModule, p: dict[str, Any], host: Host | None = None) -> dict[str, Any]:
    """The module's result for the options `p` (all of ARGUMENT_SPEC), with `warnings` (a list) for the module to give;
    its commands through `host` where given (one read shared with other plans), else through the module.

    Raises PlanError (a request that cannot work, naming its variable), RuntimeError or OSError (a command failed)."""
    host = host or Host.of(module)
    request = RdmaRequest(**{k: p[k] for k in SETTINGS_SPEC})

    def available(family: str, names: list[str]) -> dict[str, bool]:
        if family == "rhel":
            versions = host.versions(family, names)
            return {n: bool(versions.get(n)) for n in names}
        return {n: candidate is not None for n, candidate in host.candidates(names).items()}

    plan = plan_rdma(request, p["gpu_info"], distribution=p["distribution"], major_version=p["major_version"],
                     architecture=p["architecture"], installed=host.packages, available=available)
    return {"changed": False, "plan": plan.result(), "warnings": list(plan.warnings),
            "boot_list": {"path": MODULES_LOAD_PATH, "present": os.path.lexists(MODULES_LOAD_PATH)}}
