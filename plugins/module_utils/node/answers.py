# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks of a later role's module answered in an earlier module's round trip: the node's one read (gpu_info's `checks`,
module_utils/node/one_read.py says the contract) for the roles that follow the preflight, and the toolkit's settings
check (container_runtime's `cdi_spec`) for the CDI spec.

Each answer is what that role's own module would return with the role's settings, run in check mode in this process:
the same code on the same node, so a role that finds its answer made with its settings, and nothing changed on the node
since, takes it instead of a module run of its own. An answer is null where that module would fail or refuse the
settings: the role's module then runs and says so, naming the role's variables. The warnings of an answer given are the
answering module's, named by whose check they come from (a node whose containerd has no CDI would otherwise run the
toolkit's check again on every run only to warn).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

if TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import Host

# The nouveau module's options its role sets (the rest stay at their defaults there too).
NOUVEAU_SETTINGS = ("state", "initramfs", "unload", "root", "image_build")


class Refused(Exception):
    """The borrowed module's fail_json: its run would fail."""


class ModuleView:
    """Another module's run inside this one: its own parameters, check mode, no diff; its failure raises Refused and its
    warnings are kept (`_borrowed` passes them on where it gives the answer)."""

    check_mode = True
    _diff = False

    def __init__(self, module: AnsibleModule, params: dict[str, Any]) -> None:
        self._module = module
        self.params = params
        self.warnings: list[str] = []

    def fail_json(self, msg: str, **_kwargs: Any) -> None:
        raise Refused(msg)

    def warn(self, warning: str) -> None:
        self.warnings.append(warning)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)


def shared_host(module: AnsibleModule) -> Host:
    """The node's commands for the plans one read answers: the package database read once between them (imported here,
    so that a read asked for none does not load the package reader)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import Host

    return Host.of(module)


def gpus_seen(info: Mapping[str, Any] | None) -> bool:
    """Whether this gpu_info's NVML answered with GPUs: the container_toolkit role makes the CDI spec only then."""
    nvml = (info or {}).get("nvml") or {}
    return nvml.get("status") == "ok" and bool(nvml.get("gpus"))


def validated(spec: dict[str, dict[str, Any]], given: dict[str, Any]) -> dict[str, Any] | None:
    """Another module's options as that module reads them (types, defaults); None where it would refuse them."""
    checked = ArgumentSpecValidator(spec).validate(given)
    return None if checked.error_messages else checked.validated_parameters


def _run_borrowed(module: AnsibleModule, params: dict[str, Any], run: Callable[[ModuleView], dict[str, Any]],
                  whose: str) -> dict[str, Any] | None:
    """`run`'s result as the borrowed module's check-mode run with these parameters; None where the check cannot be made
    in this process; Refused (its message) where that module would fail. Its warnings become this module's, after
    `whose` check they are, only with an answer: where none is given, the role's own run warns."""
    view = ModuleView(module, params)
    try:
        result = run(view)
    except (RuntimeError, OSError, ValueError):
        return None
    if result is not None:
        for warning in view.warnings:
            module.warn(f"{whose}: {warning}")
    return result


def _answer(settings: dict[str, Any], module: AnsibleModule, params: dict[str, Any],
            run: Callable[[ModuleView], dict[str, Any]], whose: str) -> dict[str, Any]:
    """The answer to a role's check: {settings, result}, and where the role's module would fail, `refused` (its message,
    which names the role's variable; the preflight blocks on it before any role changes the node)."""
    try:
        return {"settings": settings, "result": _run_borrowed(module, params, run, whose)}
    except Refused as exc:
        return _refused(settings, str(exc))


def _refused(settings: dict[str, Any], message: str) -> dict[str, Any]:
    return {"settings": settings, "result": None, "refused": message}


def _planned(settings: dict[str, Any], given: dict[str, Any], facts: dict[str, str]) -> dict[str, Any]:
    """The settings as the role compares them: those it gave, as the module reads them, and the distribution the answer
    was planned for."""
    return dict({name: settings[name] for name in given}, distribution=facts.get("distribution"),
                major_version=facts.get("distribution_major_version"), architecture=facts.get("architecture"))


def _plan_params(settings: dict[str, Any], info: Mapping[str, Any], facts: dict[str, str]) -> dict[str, Any]:
    return {**settings, "gpu_info": info, "distribution": facts["distribution"],
            "major_version": facts["distribution_major_version"], "architecture": facts["architecture"]}


def nouveau(module: AnsibleModule, given: dict[str, Any]) -> dict[str, Any]:
    """The nouveau module's check-mode result with these of its options."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nouveau_run

    settings = validated({name: nouveau_run.ARGUMENT_SPEC[name] for name in NOUVEAU_SETTINGS}, given)
    if settings is None:
        return {"settings": given, "result": None}
    params = {name: spec.get("default") for name, spec in nouveau_run.ARGUMENT_SPEC.items()}
    params.update(settings)
    try:
        result = nouveau_run.run(ModuleView(module, params), params, False)
    except nouveau_run.NouveauError:
        result = None
    return {"settings": {name: settings[name] for name in given}, "result": result}


def rdma(module: AnsibleModule, given: dict[str, Any], info: Mapping[str, Any], facts: dict[str, str],
         host: Host | None = None) -> dict[str, Any]:
    """rdma_info's result with these settings (its options but the plan's common ones; module_type auto: this read's
    recommendation), this read's GPUs and distribution; the node's commands through `host` where given (shared by the
    answers of one read)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import rdma_run
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError

    settings = validated(rdma_run.SETTINGS_SPEC, given)
    if settings is None or not facts:
        return {"settings": given, "result": None}
    if settings["module_type"] == "auto":
        settings["module_type"] = info["derived"]["kernel_module_type"]["type"] or ""
    params = _plan_params(settings, info, facts)
    try:
        result: dict[str, Any] | None = rdma_run.run(ModuleView(module, params), params, host)
    except PlanError as exc:
        return _refused(_planned(settings, given, facts), str(exc))
    except (RuntimeError, OSError):
        result = None
    if result is not None and result.pop("warnings"):
        result = None
    return {"settings": _planned(settings, given, facts), "result": result}


def driver(module: AnsibleModule, given: dict[str, Any], info: Mapping[str, Any], facts: dict[str, str],
           host: Host | None = None) -> dict[str, Any]:
    """driver_files' check-mode result with these settings (its options but the plan's common ones), this read's GPUs
    and distribution; the node's commands through `host` where given."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver_host
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import PLAN_ARGS

    spec = {name: value for name, value in {**driver_host.DRIVER_ARGS, **driver_host.FILES_ARGS}.items() if name not in PLAN_ARGS}
    settings = validated(spec, given)
    if settings is None or not facts:
        return {"settings": given, "result": None}
    return _answer(_planned(settings, given, facts), module, _plan_params(settings, info, facts),
                   lambda view: driver_host.files_result(view, False, host), "the driver role's check")


def fabric_manager(module: AnsibleModule, given: dict[str, Any], info: Mapping[str, Any], facts: dict[str, str],
                   driver_answer: dict[str, Any] | None, host: Host | None = None) -> dict[str, Any]:
    """fabric_manager_info's result with these settings (its options but the plan's common ones), this read's GPUs and
    distribution, after the driver role's plan as this read answered it: a null `driver_version` is the version that
    plan finds installed, a null `image_build` its image build (without a driver answer the driver role takes, none is
    given)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import fabric_manager_run
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError

    driver_result = (driver_answer or {}).get("result")
    # Where the driver's answer changes or installs something, the driver role will not take it, nor this role this.
    if driver_result is None or driver_result["changed"] or driver_result["plan"]["install"] or not facts:
        return {"settings": given, "result": None}
    resolved = dict(given)
    if resolved.get("driver_version") is None:
        resolved["driver_version"] = (driver_result.get("installed") or {}).get("version") or ""
    if resolved.get("image_build") is None:
        resolved["image_build"] = bool(driver_result["plan"]["image_build"])
    settings = validated(fabric_manager_run.SETTINGS_SPEC, resolved)
    if settings is None:
        return {"settings": given, "result": None}
    params = _plan_params(settings, info, facts)
    try:
        result: dict[str, Any] | None = fabric_manager_run.run(ModuleView(module, params), params, host)
    except PlanError as exc:
        return _refused(_planned(settings, resolved, facts), str(exc))
    except (RuntimeError, OSError):
        result = None
    return {"settings": _planned(settings, resolved, facts), "result": result}


def cdi_spec(module: AnsibleModule, given: dict[str, Any], refresh_unit: bool) -> dict[str, Any]:
    """The cdi_spec module's check-mode result with these of its options, answered in container_runtime's check: the
    refresh units' files and units only where the toolkit has the units (`refresh_unit`), as the container_toolkit role
    passes them then. The settings are returned as given (without the GPUs), for the role to compare with its own."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import cdi_run

    resolved = dict(given)
    if not refresh_unit:
        resolved.update(files=[], units=[])
    shown = {name: value for name, value in resolved.items() if name != "gpu_info"}
    params = validated(cdi_run.ARGUMENT_SPEC, resolved)
    if params is None:
        return {"settings": shown, "result": None}
    return _answer(shown, module, params, lambda view: cdi_run.spec_result(view, False), "the CDI spec's check")


def cdi_refresh(module: AnsibleModule, given: dict[str, Any]) -> dict[str, Any]:
    """The node_files module's check-mode result with the refresh units' files and units (`given`), answered in
    container_runtime's check where no CDI spec is made on the node (no CDI in the runtime, no GPUs, none asked for) but
    the toolkit has its refresh units: the container_toolkit role keeps them with that module then."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files

    settings = {"files": given.get("files") or [], "units": given.get("units") or []}
    params = validated(node_files.ARGUMENT_SPEC, settings)
    if params is None:
        return {"settings": settings, "result": None}
    return _answer(settings, module, params, lambda view: node_files.module_result(view, diff=view._diff, image_build=False),
                   "the CDI refresh units' check")


def container_runtime(module: AnsibleModule, given: dict[str, Any], info: Mapping[str, Any], host: Host | None = None) -> dict[str, Any]:
    """container_runtime's settings check (validate_only) with these of its options, in check mode: the container_toolkit
    role's first round trip. Its CDI spec's check (`cdi_spec`, the spec's settings without the GPUs) with this read's GPUs,
    where the driver answers with some (as the role generates the spec only then), else its refresh units' check
    (`cdi_refresh`); the packages' versions through `host`
    where given. The settings are returned as given, for the role to compare with its own."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime_run

    resolved = dict(given, validate_only=True)
    spec = resolved.pop("cdi_spec", None)
    if spec is not None and gpus_seen(info):
        resolved["cdi_spec"] = dict(spec, gpu_info=info)
    params = validated(container_runtime_run.ARGUMENT_SPEC, resolved)
    if params is None or params["state"] != "present":
        return {"settings": given, "result": None}
    return _answer(given, module, params, lambda view: container_runtime_run.validate(view, host),
                   "the container_toolkit role's settings check")


# The answers made of the package lists: older lists are refreshed before those roles plan, and the roles then take no
# answer (nouveau's needs no lists).
PACKAGE_ANSWERS = ("rdma", "driver", "fabric_manager", "container_toolkit")


def answer_checks(module: AnsibleModule, checks: list[dict[str, Any]], info: Mapping[str, Any], facts: dict[str, str],
                  fresh: bool) -> dict[str, dict[str, Any]]:
    """The answers to the published checks (one_read's shape, validated), by role: each role's {settings, result} in
    one_read.ROLES' order (the fabric_manager plan after the driver's, whose answer it plans from). Those made of the
    package lists only where they are `fresh`: else their result is null, and no package database is read for them."""
    asked = {check["role"]: check["settings"] for check in checks}
    found: dict[str, dict[str, Any]] = {role: {"settings": settings, "result": None} for role, settings in asked.items()
                                        if role in PACKAGE_ANSWERS and not fresh}
    host = shared_host(module) if fresh and any(role in PACKAGE_ANSWERS for role in asked) else None
    if "nouveau" in asked:
        found["nouveau"] = nouveau(module, asked["nouveau"])
    if not fresh:
        return found
    if "rdma" in asked:
        found["rdma"] = rdma(module, asked["rdma"], info, facts, host)
    if "driver" in asked:
        found["driver"] = driver(module, asked["driver"], info, facts, host)
    if "fabric_manager" in asked:
        found["fabric_manager"] = fabric_manager(module, asked["fabric_manager"], info, facts, found.get("driver"), host)
    if "container_toolkit" in asked:
        found["container_toolkit"] = container_runtime(module, asked["container_toolkit"], info, host)
    return found
