# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running a cluster module's work in the task's own worker process, where the module would run on the controller.

The cluster roles' modules talk to the API server from the controller (connection local). Run as a module, each is a
payload written to a temporary directory and a new Python process that imports ansible-core again: about 0.35 s of
every call on the lab's 2-core machine, before the module does anything, three calls in every cluster.yml. Their
action plugins (plugins/action) run the same code (the module's own `run(module)`) in the worker process Ansible
forked for the task, with the module's argument spec validated as AnsibleModule validates it, and fall back to the
module where the module would not have run in that process: another connection (delegation to a bastion), become,
async, a task `environment`, or a connection only the kubernetes client can make (kube_http cannot: an exec
credential plugin, an in-cluster account) - the module then finds the client on the target's interpreter.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase
from ansible.utils.vars import merge_hash
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import kube_http
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube import auth_settings, self_sufficient


class ModuleDone(Exception):
    """Raised by exit_json and fail_json, carrying the result."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result


class InProcessModule:
    """What the cluster modules' run() uses of an AnsibleModule: params, check_mode, _diff, warn, exit_json, fail_json."""

    def __init__(self, params: dict[str, Any], check_mode: bool, diff: bool) -> None:
        self.params = params
        self.check_mode = check_mode
        self._diff = diff
        self.warnings: list[str] = []

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def exit_json(self, **result: Any) -> None:
        raise ModuleDone({"changed": False, **result})

    def fail_json(self, msg: str, **result: Any) -> None:
        raise ModuleDone({**result, "failed": True, "msg": msg})


def runs_here(transport: str, become: bool, async_val: int, environment: object, params: dict[str, Any],
              environ: dict[str, str]) -> bool:
    """Whether the module would run on this controller with these settings, and without the kubernetes client."""
    if transport not in ("local", "ansible.builtin.local") or become or async_val or environment:
        return False
    try:
        auth = auth_settings(params, environ)
        return kube_http.settings(auth, environ, self_sufficient(auth)) is not None
    except Exception:  # the module says what is wrong with it
        return False


class InProcessAction(ActionBase):
    """An action plugin that runs its module's run() here, or the module where runs_here() says no."""

    _supports_check_mode = True
    _supports_async = True
    argument_spec: dict[str, Any] = {}
    body: Callable[[Any], None]

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        del tmp  # not used
        validated = ArgumentSpecValidator(self.argument_spec).validate(dict(self._task.args))
        environment = [e for e in (self._task.environment or []) if e]
        if validated.error_messages or not runs_here(
                str(self._connection.transport), bool(self._play_context.become), int(self._task.async_val or 0), environment,
                validated.validated_parameters, dict(os.environ)):
            # The module itself, as the normal action runs it: its own messages for bad arguments, and every case above.
            wrap_async = bool(self._task.async_val) and not self._connection.has_native_async
            result = merge_hash(result, self._execute_module(task_vars=task_vars, wrap_async=wrap_async))
            if not wrap_async:
                self._remove_tmp_path(self._connection._shell.tmpdir)  # pylint: disable=protected-access
            return result
        module = InProcessModule(validated.validated_parameters, bool(self._task.check_mode), bool(self._task.diff))
        try:
            type(self).body(module)
            done: dict[str, Any] = {"failed": True, "msg": "the module returned without a result"}
        except ModuleDone as exc:
            done = exc.result
        if module.warnings:
            done["warnings"] = module.warnings
        done.setdefault("invocation", {"module_args": validated.validated_parameters})
        # As AnsibleModule does: the values of no_log options never come back.
        result.update(remove_values(done, getattr(validated, "_no_log_values", set())))
        return result
