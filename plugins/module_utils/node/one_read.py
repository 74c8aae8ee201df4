# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its modules, filters and module_utils use it; it carries no
# stability promise and other collections must not import it.
"""The node's one read: the contract between the preflight role's read and the host roles that follow it.

On a converged node each host role's module only finds that nothing is to do, and each run is a round trip. So the
preflight role's `gpu_info` run (a play's first) also answers the checks of the roles that follow it in the play, and a
role takes its answer instead of a module run of its own where the answer still holds. The contract, in four parts
(docs/node-read.md says it for users of the roles):

1. A role's check is published in one shape: its role variable `__gpuops_<role>_check` is `{role: <name>, settings:
   <its module's options but the GPUs and the distribution>}`, or null where the role will not plan on this node (a
   disabled role). `ROLES` are the roles whose checks a read can answer.
2. gpu_info's `checks` option takes a list of them; its `answers` return has, per role asked, `{settings, result}`: the
   settings as the answering module read them (with the distribution it planned for, where `Terms.planned`), and the
   module's check-mode result, or null where that module would fail or warn; where it would fail, `refused` is its
   message (answers.py), which the preflight blocks on.
3. The answers still open in a run are one fact, `__gpuops_node_answers` (the read's `answers`, or none where the node
   changed after the read: an NVML binding installed). Each role, at the end of its turn, leaves the answers to the roles
   after it (`after`): all but its own where it changed nothing, none where it changed the node. A role's answer is so
   taken at most once a run, and never after a change a role made.
4. `holds` decides whether a role's answer stands: it is still open, it was asked with the settings the role plans with
   now (and the distribution it has), and it satisfies the role's `Terms` (it changes nothing itself, no reboot due).

The functions here are pure: the filters of the same names (plugins/filter/node_read.py) call them on the controller,
and gpu_info's answers (module_utils/node/answers.py) on the node.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# The roles whose checks the node's read answers, in the order node.yml runs them (the fabric_manager answer is planned
# after the driver's).
ROLES = ("nouveau", "rdma", "driver", "fabric_manager", "container_toolkit")
# Within the container_toolkit role: its settings' check answers the CDI spec's check, or the refresh units'.
TOOLKIT_ANSWERS = ("cdi_spec", "cdi_refresh")
# The distribution facts an answer planned from the package lists was made for, as the answer's settings carry them
# (settings key: ansible_facts key).
PLANNED_FOR = {"distribution": "distribution", "major_version": "distribution_major_version", "architecture": "architecture"}


@dataclass(frozen=True)
class Terms:
    """What a role's answer must satisfy besides its settings."""

    # The answer's settings carry the distribution facts it was planned for (PLANNED_FOR), compared too.
    planned: bool
    # The answer itself changes nothing (a check-mode result with changed: false).
    unchanged: bool
    # No reboot is due by it.
    no_reboot: bool = False


TERMS: dict[str, Terms] = {
    "nouveau": Terms(planned=False, unchanged=True, no_reboot=True),
    # The plan's result says what it would do (its role applies it); it is the answer either way.
    "rdma": Terms(planned=True, unchanged=False),
    "driver": Terms(planned=True, unchanged=True),
    # As rdma's: the role installs or starts what the plan says.
    "fabric_manager": Terms(planned=True, unchanged=False),
    # An answer saying the settings are not in place is taken all the same: the role's change then runs.
    "container_toolkit": Terms(planned=False, unchanged=True),
    "cdi_spec": Terms(planned=False, unchanged=True),
    "cdi_refresh": Terms(planned=False, unchanged=True),
}


def asked_twice(checks: list[Mapping[str, Any]]) -> list[str]:
    """The roles whose check a list of published checks asks more than once (gpu_info refuses them)."""
    roles = [check["role"] for check in checks]
    return sorted({role for role in roles if roles.count(role) > 1})


def planned_settings(settings: Mapping[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as an answer planned for these distribution facts carries them (`facts` in gpu_info's names or
    Ansible's: distribution, distribution_major_version or major_version, architecture)."""
    planned = dict(settings)
    for key, fact in PLANNED_FOR.items():
        planned[key] = facts.get(fact, facts.get(key))
    return planned


def holds(answers: Any, role: str, settings: Any, facts: Any = None) -> dict[str, Any] | None:
    """The result answering `role`'s check, where the answer holds; else None (the role runs its module).

    `answers`: the answers still open (a mapping of role to {settings, result}); `settings`: the role's settings as it
    plans with them now; `facts`: the distribution facts it plans for (ansible_facts), for a role whose answer was planned
    from the package lists."""
    if role not in TERMS:
        raise ValueError(f"node_answer: {role!r} is not a role whose check is answered (known: {', '.join(TERMS)})")
    answer = answers.get(role) if isinstance(answers, Mapping) else None
    if not isinstance(answer, Mapping) or not isinstance(answer.get("result"), Mapping) or not isinstance(settings, Mapping):
        return None
    result = answer["result"]
    terms = TERMS[role]
    if terms.planned:
        if not isinstance(facts, Mapping) or not facts.get("distribution"):
            return None
        settings = planned_settings(settings, facts)
    if answer.get("settings") != settings:
        return None
    if terms.unchanged and result.get("changed"):
        return None
    if terms.no_reboot and result.get("reboot_required"):
        return None
    return dict(result)


def after(answers: Any, role: str, changed: Any) -> dict[str, Any]:
    """The answers left to the roles after `role`'s turn: none where it changed the node, else all but its own (taken at
    most once a run)."""
    if changed or not isinstance(answers, Mapping):
        return {}
    return {name: answer for name, answer in answers.items() if name != role}


def rdma_applies(plan: Any) -> bool:
    """Whether the rdma role's plan (rdma_info's result) asks for something on the node: the DOCA repository, a package to
    install or hold, a module to load at boot, or the boot list to remove."""
    if not isinstance(plan, Mapping):
        return False
    asked = plan["plan"]
    return bool(asked["doca_repo"] is not None or asked["install"] or asked["hold"] or asked["not_held"] or asked["modules"]
                or plan["boot_list"]["present"])


def driver_converged(answer: Any, hold: bool) -> dict[str, Any] | None:
    """The driver's answer where it plans nothing for the role to do, else None: no install, no hold to add (with `hold`),
    not the CUDA repository or the driver container, and the installed module of the planned flavour for the kernel the
    plan is for and the one the node boots next."""
    if not isinstance(answer, Mapping):
        return None
    plan, installed = answer["plan"], answer["installed"]
    if plan["install"] or plan["method"] == "containerized" or plan["repository"] == "cuda":
        return None
    if hold and installed["not_held"]:
        return None
    flavoured = {kernel for kernel, flavour in (installed.get("module_types") or {}).items() if flavour == plan["module_type"]}
    if any(kernel and kernel not in flavoured for kernel in (plan["kernel"], plan["boot_kernel"])):
        return None
    return dict(answer)


def fabric_complete(gpu_info: Any) -> bool:
    """Whether NVML saw every GPU's fabric completed with success, or no fabric at all."""
    nvml = (gpu_info or {}).get("nvml") or {}
    if nvml.get("status") != "ok":
        return False
    fabrics = [gpu.get("fabric") or {} for gpu in nvml.get("gpus") or []]
    return all(f.get("state") in ("completed", "not_supported") and f.get("status") in (None, "success") for f in fabrics)


def fabric_manager_converged(answer: Any, hold: bool, config: Any, gpu_info: Any) -> dict[str, Any] | None:
    """Fabric Manager's answer where it plans nothing for the role to do, else None: no daemon at all; or no package to
    install, release, remove or hold (with `hold`), no settings to write (`config`), not an IMEX node (its service is
    masked or unmasked), and the daemon enabled and either running with the fabric complete (`gpu_info`) or not to be
    started now."""
    if not isinstance(answer, Mapping):
        return None
    plan, service = answer["plan"], answer.get("service") or {}
    if plan["mode"] == "none":
        return dict(answer)
    if plan["install"] or plan["unhold"] or plan["remove"] or (hold and plan["not_held"]):
        return None
    if (plan["mode"] in ("fabricmanager", "nvlsm") and config) or plan["mode"] == "imex" or not service.get("enabled"):
        return None
    if answer["start"] and not (service.get("active") and fabric_complete(gpu_info)):
        return None
    return dict(answer)
