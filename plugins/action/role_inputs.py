# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""role_inputs: several of the collection's roles' inputs checked in one task, on the controller.

A role's argument spec is checked by a task Ansible puts first in the role, and a role's own checks (what a spec cannot
say: a config against the GPUs' models, an image reference) by a task of its own: two tasks a role, eighteen for the
nine roles cluster.yml deploys, each about 40 ms of the controller's time and a line of output in every run. This
action does both for a list of roles in one: each role's spec for the entry point, with the values the task sees (as
the role's own validation task does), then the checks its `meta/inputs.yml` declares (the kind of each variable, the
rules across variables; module_utils/_common/inputs.py computes them). Every error of every role comes in one message,
before anything has changed. A role's own check, where it runs alone, is this action for that role.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import inputs

# The collection's roles, beside plugins/ (this file is plugins/action/role_inputs.py).
ROLES = Path(__file__).resolve().parents[2] / "roles"
PREFIX = "gpuops.nvidia."

ARGUMENT_SPEC: dict[str, Any] = {
    "roles": {"type": "list", "elements": "str", "required": True},
    "entry_point": {"type": "str", "default": "main"},
}
# The modules whose RULES a declaration's `<side>.<rule>` names; imported only where a declaration names one of theirs
# (node.yml's check, once per host, imports no cluster code).
SIDES = {
    "cluster": "ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.inputs",
    "node": "ansible_collections.gpuops.nvidia.plugins.module_utils.node.inputs",
}


def role_name(name: str) -> str:
    """The role's directory name for a name given as in this collection (`device_plugin`, `gpuops.nvidia.device_plugin`)."""
    short = name.removeprefix(PREFIX)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", short) or not (ROLES / short / "tasks").is_dir():
        known = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())
        raise AnsibleActionFail(f"roles: {name!r} is not a role of gpuops.nvidia; its roles are {', '.join(known)}")
    return short


def declaration_path(role: str) -> Path:
    """Where a role declares its own checks (none: the argument spec says all)."""
    return ROLES / role / "meta/inputs.yml"


def rule(name: str) -> Callable[..., list[str]]:
    """The function of a rule named `<side>.<rule>` (module_utils/<side>/inputs.py)."""
    side, _dot, short = name.partition(".")
    if side not in SIDES:
        raise KeyError(f"no side {side!r} (known: {', '.join(SIDES)})")
    rules = importlib.import_module(SIDES[side]).RULES
    if short not in rules:
        raise KeyError(f"no rule {short!r} in module_utils/{side}/inputs.py (known: {', '.join(sorted(rules))})")
    return rules[short]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True

    def options(self, role: str, entry_point: str) -> dict[str, Any]:
        """The options of the role's argument spec for the entry point (none where the role has no such entry point)."""
        path = ROLES / role / "meta/argument_specs.yml"
        if not path.exists():
            return {}
        specs = (self._loader.load_from_file(str(path)) or {}).get("argument_specs") or {}
        return dict((specs.get(entry_point) or {}).get("options") or {})

    def declaration(self, role: str) -> dict[str, Any]:
        """The role's meta/inputs.yml ({} where it has none), checked: a mistake there is the collection's, named."""
        path = declaration_path(role)
        if not path.exists():
            return {}
        declaration = self._loader.load_from_file(str(path)) or {}
        problems = inputs.declaration_problems(declaration, rule)
        if problems:
            raise AnsibleActionFail(f"roles/{role}/meta/inputs.yml: {'; '.join(problems)}")
        return dict(declaration)

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp  # not used
        task_vars = task_vars or {}
        validated = ArgumentSpecValidator(ARGUMENT_SPEC).validate(dict(self._task.args))
        if validated.error_messages:
            raise AnsibleActionFail("; ".join(validated.error_messages))
        entry_point = validated.validated_parameters["entry_point"]
        roles = [role_name(name) for name in validated.validated_parameters["roles"]]

        errors: list[str] = []
        spec_errors: dict[str, list[str]] = {role: [] for role in roles}
        secrets: set[str] = set()
        for role in roles:
            spec = self.options(role, entry_point)
            # As Ansible's own check of a role's arguments: the values of the variables the spec names, templated.
            values = self._templar.template({name: task_vars[name] for name in spec if name in task_vars})
            checked = ArgumentSpecValidator(spec).validate(values)
            # As AnsibleModule does: the values of no_log options (a registry password) never reach a message.
            secrets |= set(getattr(checked, "_no_log_values", set()))
            found = checked.error_messages
            spec_errors[role] = list(found)
            errors.extend(message for message in found if message not in errors)

        # Each variable templated once for every role's checks (cluster_common's GPU nodes, read by several).
        templated: dict[str, Any] = {}

        def value(name: str) -> Any:
            if name not in templated:
                if name not in task_vars:
                    raise inputs.Undefined(name)
                templated[name] = self._templar.template(task_vars[name])
            return templated[name]

        for role in roles:
            declaration = self.declaration(role)
            # A value of the wrong type, which the spec named already, can break a check that expects the right one: that
            # check is left out. Without a spec error, such a break is the collection's, and is raised.
            refused = bool(spec_errors[role])
            try:
                own = inputs.declared_errors(declaration, value, rule, tolerate=refused)
            except inputs.Undefined as exc:
                raise AnsibleActionFail(f"the checks of the role {role} (roles/{role}/meta/inputs.yml) need {exc.args[0]}, "
                                        "which is not defined") from None
            except inputs.RuleFailed as exc:
                raise AnsibleActionFail(f"the checks of the role {role} (roles/{role}/meta/inputs.yml) failed: {exc}") from exc
            except AnsibleError:
                if refused:
                    continue
                raise
            errors.extend(str(message) for message in own if str(message) not in errors)

        result["roles"] = roles
        result["changed"] = False
        if errors:
            result["failed"] = True
            errors = remove_values(errors, secrets)
            result["input_errors"] = errors
            result["msg"] = "; ".join(errors)
        else:
            result["msg"] = f"the inputs of {', '.join(roles)} are right"
        return result
