# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading what the driver plan needs from a host: packages, candidates, kernels, the installed module.

Each reader takes the command runner (AnsibleModule.run_command or a test double) and parses the
command's output. plan_driver makes the plan from a DriverRequest and what these return: it resolves
what needs no package index (method, flavour, kernel), asks the package source of the family
(driver_sources) for the branch and its packages, and assembles one DriverPlan.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import KernelModuleType, PciGpu
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver, driver_sources
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files as nf
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.fabric_manager import FAMILY as FM_FAMILY
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import IMAGE_BUILD_ARG, runfile_driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.host import PLAN_ARGS, Host

if TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule


def installed_kernels(root: str = "/") -> list[str]:
    """Kernels installed in the root: /lib/modules entries that hold a kernel's own modules."""
    base = os.path.join(root, "lib/modules")
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    return sorted(e for e in entries if os.path.isdir(os.path.join(base, e, "kernel")))


# Where the distributions' packages put nvidia-persistenced's unit; an administrator's copy in /etc wins.
PERSISTENCED_UNIT_DIRS = ("etc/systemd/system", "usr/lib/systemd/system", "lib/systemd/system")
PERSISTENCED_USER = re.compile(r"^ExecStart=\S*nvidia-persistenced\b.*?--user[ =](\S+)", re.MULTILINE)


def persistenced_user(root: str = "/") -> str | None:
    """The user nvidia-persistenced's own unit runs it as (its --user; root without one), None without the unit.

    The driver role's persistence-mode drop-in replaces the unit's ExecStart and keeps this user.
    """
    for directory in PERSISTENCED_UNIT_DIRS:
        text = read_text(os.path.join(root, directory, "nvidia-persistenced.service"), errors="replace")
        if text is not None:
            found = PERSISTENCED_USER.search(text)
            return found.group(1) if found else "root"
    return None


# The driver role's files (driver_files' host_files): its module options, and nvidia-persistenced's persistence-mode drop-in.
MODPROBE_FILE = "/etc/modprobe.d/gpuops-nvidia.conf"
PERSISTENCED_DROPIN_DIR = "/etc/systemd/system/nvidia-persistenced.service.d"
PERSISTENCED_DROPIN = PERSISTENCED_DROPIN_DIR + "/gpuops.conf"
PERSISTENCED_DROPIN_TEXT = """\
# Managed by gpuops.nvidia (gpuops_driver_persistenced): keep the GPUs initialised between jobs.
[Service]
ExecStart=
ExecStart=/usr/bin/nvidia-persistenced --user {user} --persistence-mode --verbose
# Ubuntu's unit has no [Install] section (udev starts it when the driver binds); enabled, it
# also runs from boot everywhere.
[Install]
WantedBy=multi-user.target
"""


def host_files(result: Mapping[str, Any], gpu_info: Mapping[str, Any], *, state_dir: str, modprobe_file: str,
               persistenced: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The host driver's plain files and nvidia-persistenced's unit, as node_files entries, from driver_files' plan or read
    (driver_result's answer: the plan, what is installed and whether a reboot is required).

    The state directory and its record that the host driver owns the GPUs; the module options (or no file); and, where the
    node has nvidia-persistenced's unit, the drop-in that runs it in persistence mode as the unit's own user, enabled
    (Ubuntu's unit has no [Install] section: udev starts it when the driver binds) and started (restarted when the drop-in
    changed) where the driver runs now.
    """
    plan, installed = result["plan"], result["installed"]
    options = plan["modprobe_options"]
    files: list[dict[str, Any]] = [
        {"path": state_dir, "state": "directory", "mode": "0755", "owner": "root", "group": "root"},
        {"path": os.path.join(state_dir, "driver-method"), "content": "host\n", "mode": "0644", "owner": "root", "group": "root"},
        {"path": modprobe_file, "mode": "0644", **({"content": "# Managed by gpuops.nvidia (gpuops_driver_module_options).\n" + options}
                                                   if options else {"state": "absent"})},
    ]
    user = installed.get("persistenced_user")
    if not persistenced or user is None:
        return files, []
    files += [{"path": PERSISTENCED_DROPIN_DIR, "state": "directory", "mode": "0755"},
              {"path": PERSISTENCED_DROPIN, "mode": "0644", "content": PERSISTENCED_DROPIN_TEXT.format(user=user)}]
    runs_now = not plan["image_build"] and not result["reboot_required"] and bool(gpu_info.get("node", {}).get("modules", {}).get("nvidia"))
    unit: dict[str, Any] = {"name": "nvidia-persistenced.service", "enabled": True}
    if runs_now:
        unit.update(state="started", restart_on=[PERSISTENCED_DROPIN])
    return files, [unit]


@dataclass(frozen=True)
class DriverRequest:
    """What the user asked for (the driver_info module's parameters) and what the host is (its gpu_info facts)."""

    distribution: str
    major_version: str
    architecture: str
    method: str
    repository: str
    branch: str  # as given: driver.parse_branch reads it when the plan is made
    kernel_module_type: str
    kernel_release: str
    compute_only: bool
    allow_branch_change: bool
    allow_method_change: bool
    cuda_repo_url: str
    repo_ready: bool
    offline: bool
    image_build: bool  # 'auto' already resolved from the host's facts
    state_dir: str
    module_options: dict[str, Any]
    gpus: list[PciGpu]
    recommendation: KernelModuleType  # the facts' derived recommendation, or {} without one
    running_kernel: str | None
    root: str = "/"
    remove_host_driver: bool = False  # containerized: purge a host driver instead of refusing

    @classmethod
    def from_params(cls, params: Mapping[str, Any], gpu_info: Mapping[str, Any], root: str = "/") -> DriverRequest:
        node = gpu_info.get("node", {})
        forced = params["image_build"]
        return cls(
            distribution=params["distribution"], major_version=str(params["major_version"]),
            architecture=params["architecture"], method=params["method"], repository=params["repository"],
            branch=params["branch"], kernel_module_type=params["kernel_module_type"], kernel_release=params["kernel_release"],
            compute_only=params["compute_only"], allow_branch_change=params["allow_branch_change"],
            allow_method_change=params["allow_method_change"], cuda_repo_url=params["cuda_repo_url"],
            repo_ready=params["repo_ready"], offline=bool(params.get("offline")),
            image_build=node.get("image_build", False) if forced == "auto" else forced == "true",
            state_dir=params["state_dir"], module_options=params.get("module_options") or {},
            gpus=gpu_info.get("pci", {}).get("gpus", []),
            recommendation=gpu_info.get("derived", {}).get("kernel_module_type", {}),
            running_kernel=node.get("kernel", {}).get("running"), root=root,
            remove_host_driver=bool(params.get("remove_host_driver")),
        )


# The keys of the module's `plan`, in the order it returns them.
PLAN_KEYS = ("family", "repository", "method", "image_build", "branch", "module_type", "module_type_reason", "kernel",
             "kernel_reason", "boot_kernel", "packages", "install", "unhold", "remove", "cuda_repo", "rhel", "warnings", "modprobe_options")


@dataclass
class DriverPlan:
    """The plan, one shape for every method and source, and what it was made from."""

    family: str
    repository: str
    method: str
    image_build: bool
    modprobe_options: str
    installed: dict[str, Any]  # driver.installed_driver's answer
    marker: str | None  # the method recorded on the node
    branch: int | None = None
    module_type: str | None = None
    module_type_reason: str | None = None
    kernel: str | None = None
    kernel_reason: str | None = None
    boot_kernel: str | None = None  # the newest installed kernel, when the node boots it next and it is not `kernel`
    packages: list[str] = field(default_factory=list)
    install: bool = False
    unhold: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)  # containerized: the host driver's packages to purge
    cuda_repo: dict[str, str] | None = None
    rhel: dict[str, Any] | None = None
    warnings: list[str] = field(default_factory=list)
    candidates: dict[str, str | None] = field(default_factory=dict)
    installed_module_type: str | None = None  # the flavour of the nvidia module installed for the kernel
    installed_module_types: dict[str, str | None] = field(default_factory=dict)  # the same for each planned kernel

    @property
    def kernels(self) -> list[str]:
        """The kernels the driver is installed for: the target, and the one the node boots next."""
        return [k for k in (self.kernel, self.boot_kernel) if k]

    def result(self) -> dict[str, Any]:
        """The driver_info module's result: plan, installed (with its module flavour), marker, candidates."""
        return {
            "plan": {key: copy.deepcopy(getattr(self, key)) for key in PLAN_KEYS},
            "installed": {**copy.deepcopy(self.installed), "module_type": self.installed_module_type,
                          "module_types": dict(self.installed_module_types)},
            "marker": self.marker,
            "candidates": dict(self.candidates),
        }


def plan_driver(request: DriverRequest, host: Host) -> DriverPlan:
    """The whole plan: validated request, packages, what is installed, what to hold, what needs a reboot.

    Raises driver.PlanError for anything the role must refuse before it changes the host.
    """
    _refuse_runfile_driver(request)
    family = driver.distro_key(request.distribution, request.major_version)
    branch = driver.parse_branch(request.branch)
    method = driver.resolve_method(request.distribution, request.repository, request.method)
    everything = host.packages(family)
    installed = driver.installed_driver(everything, family)
    installed["persistenced_user"] = persistenced_user(request.root)
    plan = DriverPlan(family=family, repository=request.repository, method=method, image_build=request.image_build,
                      marker=_read_marker(request.state_dir), modprobe_options=driver.modprobe_options(request.module_options),
                      installed=installed)
    if method == "containerized":
        plan.remove = _host_driver_to_remove(installed, request.remove_host_driver)
        if plan.remove:
            # Held packages cannot go, nor can a held Fabric Manager that depends on the driver.
            plan.unhold = sorted(set(installed["held"]) | {n for n, p in everything.items() if FM_FAMILY.match(n) and p["held"]})
        return plan
    _refuse_method_change(request, plan.marker)
    module_type, why = driver.resolve_module_type(request.kernel_module_type, request.gpus, request.recommendation, branch)
    driver.check_method(request.distribution, request.major_version, request.repository, method, module_type)
    kernel, kernel_reason = driver.target_kernel(request.kernel_release, request.running_kernel, installed_kernels(request.root),
                                                 plan.image_build)
    plan.module_type, plan.module_type_reason, plan.kernel, plan.kernel_reason = module_type, why, kernel, kernel_reason
    if request.offline:
        # What can be refused without the package lists, before the role refreshes them.
        if branch is not None:
            driver.check_branch_for_gpus(branch, request.gpus)
            driver.check_branch_change(installed, branch, request.allow_branch_change)
        plan.branch = branch
        return plan
    source = driver_sources.source_for(family, request.repository)
    query = _query(request, family, method, module_type, why, kernel, branch, installed["branch"])
    choice = source.choose(query, host)
    driver.check_branch_change(installed, choice.branch, request.allow_branch_change)
    plan.boot_kernel = driver.boot_kernel(kernel, installed_kernels(request.root), request.kernel_release, plan.image_build)
    packages, candidates = list(choice.packages), dict(choice.candidates)
    if plan.boot_kernel:
        extra, found = _boot_kernel_packages(plan, choice.packages, source.where(query), host)
        packages += extra
        candidates |= found
    names = source.package_names(packages)
    plan.branch, plan.packages, plan.candidates = choice.branch, packages, {n: candidates.get(n) for n in names}
    plan.module_type, plan.module_type_reason, plan.warnings = choice.module_type, choice.module_type_reason, choice.warnings
    plan.cuda_repo, plan.rhel = choice.cuda_repo, choice.rhel
    plan.install = bool(source.missing(names, choice.branch, installed, everything))
    plan.unhold = source.to_unhold(installed, plan.install)
    if plan.install and family != "rhel":
        # Fabric Manager's packages depend on the driver's exact version (Ubuntu's on
        # nvidia-kernel-common-<branch>-server-<version>): held, they stop apt from moving the driver. The
        # fabric_manager role, which follows in the play, installs and holds them at the new version.
        plan.unhold += sorted(n for n, p in everything.items() if FM_FAMILY.match(n) and p["held"] and n not in plan.unhold)
    if installed["packages"]:
        plan.installed_module_types = {k: host.module_type(k) for k in plan.kernels}
        plan.installed_module_type = plan.installed_module_types[kernel]
    return plan


def _boot_kernel_packages(plan: DriverPlan, packages: list[str], where: str, host: Host) -> tuple[list[str], dict[str, str | None]]:
    """The target kernel's headers or modules, for the kernel the node boots next; refused when the source lacks them.

    A kernel update installed and waiting for its reboot: without these, DKMS cannot build (or no
    precompiled module exists) for it, and the node comes back from the reboot without its GPUs.
    """
    kernel, boot = plan.kernel or "", plan.boot_kernel or ""
    extra = driver.kernel_packages(packages, kernel, boot) if kernel and boot else []
    if not extra or plan.family == "rhel":
        # The RHEL family's kernel-devel is checked by dnf itself when it installs.
        return extra, {}
    found = host.candidates(extra)
    missing = [p for p in extra if not found.get(p)]
    if missing:
        raise driver.PlanError(
            "gpuops_driver_kernel_release",
            f"unset, and the node boots kernel {boot} next (the newest installed; the driver's target is "
            f"{kernel}, {plan.kernel_reason}), but {where} has no {', '.join(missing)} for it: after the reboot the "
            "node would have no nvidia module; accepted: a kernel whose packages the repository has (or remove "
            f"{boot}), gpuops_driver_method: dkms, or gpuops_driver_kernel_release set to the kernel to install for")
    return extra, found


def make_plan(params: Mapping[str, Any], gpu_info: Mapping[str, Any], host: Host, root: str = "/") -> dict[str, Any]:
    """The driver_info module's result for its parameters: plan_driver's plan as a dict."""
    return plan_driver(DriverRequest.from_params(params, gpu_info, root), host).result()


def _host_driver_to_remove(installed: Mapping[str, Any], remove: bool) -> list[str]:
    """The containerized driver and a host driver fight over the GPUs: the host driver's packages to purge when asked
    (all of them), else a refusal that names them; none without a host driver."""
    if not installed["modules"]:
        return []
    packages = list(installed["packages"])
    if remove:
        return packages
    raise driver.PlanError(
        "gpuops_driver_method",
        f"'containerized': a host driver is installed ({installed['version'] or 'unknown version'}: {', '.join(packages)}); "
        "two drivers fight over the GPUs: remove these packages first, or set gpuops_driver_remove_host_driver: true "
        "for the role to purge them")


def _refuse_runfile_driver(request: DriverRequest) -> None:
    """A driver from NVIDIA's .run installer and the packages (or the driver container) would be two drivers."""
    runfile = runfile_driver(request.root)
    if runfile:
        raise driver.PlanError(
            "gpuops_driver_method",
            f"{request.method!r}: a driver from NVIDIA's .run installer is installed ({runfile}), and "
            + ("the driver container's modules would fight it over the GPUs" if request.method == "containerized" else
               "packages installed over it would overwrite its files and leave two drivers")
            + f"; accepted: a node without it (remove it with {runfile} --silent and reboot, then run again)")


def _refuse_method_change(request: DriverRequest, marker: str | None) -> None:
    """A node recorded as set for the containerized driver takes a host driver only when allowed."""
    if marker == "containerized" and not request.allow_method_change:
        raise driver.PlanError(
            "gpuops_driver_method",
            f"{request.method!r}: this node is set for the containerized driver ({request.state_dir}/driver-method); "
            "installing a host driver takes gpuops_driver_allow_method_change: true")


def _query(request: DriverRequest, family: str, method: str, module_type: str, why: str, kernel: str, branch: int | None,
           installed_branch: int | None) -> driver_sources.SourceQuery:
    """What the package source is asked: the request with what the plan has resolved so far."""
    return driver_sources.SourceQuery(
        family=family, distribution=request.distribution, major_version=request.major_version, architecture=request.architecture,
        method=method, module_type=module_type, module_type_reason=why,
        module_type_forced=request.kernel_module_type in ("open", "proprietary"), kernel=kernel, compute_only=request.compute_only,
        branch=branch, installed_branch=installed_branch, gpus=request.gpus, cuda_repo_url=request.cuda_repo_url,
        repo_ready=request.repo_ready)


def _read_marker(state_dir: str) -> str | None:
    return (read_text(os.path.join(state_dir, "driver-method")) or "").strip() or None


def reboot_reasons(plan: dict, installed: dict, gpu_info: dict) -> list[str]:
    """Why the installed driver is not the one running, on a booted host (none in an image build)."""
    if plan.get("image_build") or plan.get("method") == "containerized":
        return []
    reasons = []
    node = gpu_info.get("node", {})
    running = node.get("kernel", {}).get("running")
    if plan.get("kernel") and running and plan["kernel"] != running:
        reasons.append(f"the driver is installed for kernel {plan['kernel']}; the running kernel is {running}")
    if node.get("modules", {}).get("nouveau"):
        reasons.append("nouveau is loaded: the nvidia module loads after a reboot")
    loaded = node.get("modules", {}).get("flavour")
    if loaded and installed.get("module_type") and loaded != installed["module_type"]:
        reasons.append(f"the loaded nvidia modules are {loaded}; the installed ones are {installed['module_type']}")
    loaded_version = gpu_info.get("nvml", {}).get("driver_version")
    if loaded_version and installed.get("version") and loaded_version != installed["version"]:
        reasons.append(f"the loaded driver is {loaded_version}; the installed one is {installed['version']}")
    return reasons


# driver_info's arguments (documented by the node_plan and driver_request fragments), which driver_files takes too.
DRIVER_ARGS: dict[str, dict[str, Any]] = {
    **PLAN_ARGS,
    "method": {"type": "str", "choices": ["auto", "precompiled", "dkms", "containerized"], "default": "auto"},
    "repository": {"type": "str", "choices": ["distro", "cuda"], "default": "distro"},
    "branch": {"type": "str", "default": ""},
    "kernel_module_type": {"type": "str", "choices": ["auto", "open", "proprietary"], "default": "auto"},
    "kernel_release": {"type": "str", "default": ""},
    "compute_only": {"type": "bool", "default": True},
    "allow_branch_change": {"type": "bool", "default": False},
    "allow_method_change": {"type": "bool", "default": False},
    "remove_host_driver": {"type": "bool", "default": False},
    "cuda_repo_url": {"type": "str", "default": "https://developer.download.nvidia.com/compute/cuda/repos"},
    "repo_ready": {"type": "bool", "default": False},
    "offline": {"type": "bool", "default": False},
    "image_build": IMAGE_BUILD_ARG,
    "state_dir": {"type": "path", "default": "/etc/gpuops-nvidia"},
    "module_options": {"type": "dict", "default": {}},
    "root": {"type": "path", "default": "/"},
}


def driver_result(module: AnsibleModule, host: Host | None = None) -> dict[str, Any]:
    """driver_info's result for the module's parameters (changed false, the plan, what is installed, the reboot's reasons);
    a request that cannot work fails the module, naming the variable. Its commands through `host` where given (one read
    shared with other plans), else through the module."""
    p = module.params
    host = host or Host.of(module)
    result: dict[str, Any] = {}
    try:
        result = make_plan(p, p["gpu_info"], host, p["root"])
    except driver.PlanError as exc:
        module.fail_json(msg=str(exc), variable=exc.variable)
    except (RuntimeError, OSError, ValueError) as exc:
        # OSError/ValueError: a state file (the method marker, dnf's versionlock list) that exists but cannot be read.
        module.fail_json(msg=str(exc))
    reasons = reboot_reasons(result["plan"], result["installed"], p["gpu_info"])
    return {"changed": False, "reboot_required": bool(reasons), "reboot_reasons": reasons, **result}


# driver_files' own options, beside the request's.
FILES_ARGS: dict[str, dict[str, Any]] = {
    "host_files": {"type": "bool", "default": True},
    "persistenced": {"type": "bool", "default": True},
    "modprobe_file": {"type": "path", "default": MODPROBE_FILE},
}


def files_result(module: AnsibleModule, diff: bool, host: Host | None = None) -> dict[str, Any]:
    """driver_files' result for the module's parameters (DRIVER_ARGS and FILES_ARGS): the plan (through `host` where
    given), and for a host driver its files and unit put in place (in check mode, what would change), with their diff
    where asked."""
    p = module.params
    result = driver_result(module, host)
    if p["host_files"] and result["plan"]["method"] != "containerized":
        files, units = host_files(result, p["gpu_info"], state_dir=p["state_dir"], modprobe_file=p["modprobe_file"],
                                  persistenced=p["persistenced"])
        tracker = ChangeTracker(diff, always_list=True)
        result["node_files"] = nf.ensure(module, tracker, image_build=bool(result["plan"]["image_build"]), files_entries=files,
                                         units_entries=units)
        result["changed"] = result["node_files"]["changed"]
        tracker.update(result)
    return result
