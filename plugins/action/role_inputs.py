# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""role_inputs: several of the collection's roles' inputs checked in one task, on the controller.

A role's argument spec is checked by a task Ansible puts first in the role, and a role's own checks (what a spec cannot
say: a config against the GPUs' models, an image reference) by a task of its own: two tasks a role, eighteen for the
nine roles cluster.yml deploys, each about 40 ms of the controller's time and a line of output in every run. This
action does both for a list of roles in one: each role's spec for the entry point, with the values the task sees (as
the role's own validation task does), then the messages of the role's variable `__gpuops_<role>_input_errors` where the
role defines one. Every error of every role comes in one message, before anything has changed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase

# The collection's roles, beside plugins/ (this file is plugins/action/role_inputs.py).
ROLES = Path(__file__).resolve().parents[2] / "roles"
PREFIX = "gpuops.nvidia."

ARGUMENT_SPEC: dict[str, Any] = {
    "roles": {"type": "list", "elements": "str", "required": True},
    "entry_point": {"type": "str", "default": "main"},
}


def role_name(name: str) -> str:
    """The role's directory name for a name given as in this collection (`device_plugin`, `gpuops.nvidia.device_plugin`)."""
    short = name.removeprefix(PREFIX)
    if not re.fullmatch(r"[a-z][a-z0-9_]*", short) or not (ROLES / short / "tasks").is_dir():
        known = sorted(p.name for p in ROLES.iterdir() if (p / "tasks").is_dir())
        raise AnsibleActionFail(f"roles: {name!r} is not a role of gpuops.nvidia; its roles are {', '.join(known)}")
    return short


def errors_variable(role: str) -> str:
    """The variable a role's own checks are in: a list of messages, empty when its inputs are right."""
    return f"__gpuops_{role}_input_errors"


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
        spec_errors: dict[str, list[str]] = {}
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
        for role in roles:
            name = errors_variable(role)
            if name not in task_vars:
                continue
            try:
                own = self._templar.template(task_vars[name])
            except AnsibleError:
                # A value of the wrong type, which the spec named already, can break a check that expects the right one.
                if spec_errors[role]:
                    continue
                raise
            if not isinstance(own, list):
                raise AnsibleActionFail(f"{name} of the role {role} is not a list of messages: {own!r}")
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
