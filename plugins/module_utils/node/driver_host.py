# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading what the driver plan needs from a host: packages, candidates, kernels, the installed module.

Each reader takes the command runner (AnsibleModule.run_command or a test double) and parses the
command's output; the plan itself is made by driver.make_plan from what these return.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver

Runner = Callable[..., tuple[int, str, str]]
C_ENV = {"LC_ALL": "C", "LANG": "C"}
# DNF4's versionlock plugin list (DNF5 keeps /etc/dnf/versionlock.toml, not read yet).
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
DPKG_FORMAT = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n"


def parse_dpkg(text: str) -> dict[str, dict]:
    """Installed packages from dpkg-query -W: name -> {version, held}; 'h' first means held."""
    packages = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3:
            continue
        name, version, status = fields
        if len(status) < 2 or status[1] not in "iHUFWt":
            continue
        if status[1] != "i":
            continue
        packages[name.split(":")[0]] = {"version": version, "held": status[0] == "h"}
    return packages


def parse_rpm(text: str, locked: str = "") -> dict[str, dict]:
    """Installed packages from rpm -qa (name<TAB>version-release); held when the versionlock list names them."""
    held = set(re.findall(r"^(?:\d+:)?([A-Za-z0-9_.+-]+?)-\d", locked, re.M))
    packages = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 2:
            packages[fields[0]] = {"version": fields[1], "held": fields[0] in held}
    return packages


def parse_policy(text: str) -> dict[str, str | None]:
    """Candidate versions from apt-cache policy: name -> version, None for '(none)'."""
    candidates: dict[str, str | None] = {}
    name = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            name = line[:-1].split(":")[0]
            candidates[name] = None
        elif name and line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            candidates[name] = None if value == "(none)" else value
    return candidates


def installed_kernels(root: str = "/") -> list[str]:
    """Kernels installed in the root: /lib/modules entries that hold a kernel's own modules."""
    base = os.path.join(root, "lib/modules")
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    return sorted(e for e in entries if os.path.isdir(os.path.join(base, e, "kernel")))


def module_type_of(license_text: str) -> str | None:
    """The flavour of an nvidia.ko from its license: the open modules are dual MIT/GPL."""
    text = license_text.strip()
    if not text:
        return None
    return "open" if "MIT" in text or "GPL" in text else "proprietary"


class Host:
    """The commands the plan needs, run through one runner."""

    def __init__(self, run: Runner, which: Callable[[str], str | None]) -> None:
        self._run = run
        self._which = which

    def _cmd(self, argv: list[str]) -> tuple[int, str, str]:
        return self._run(argv, environ_update=C_ENV)

    def packages(self, family: str) -> dict[str, dict]:
        if family == "rhel":
            rc, out, err = self._cmd(["rpm", "-qa", "--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}\\n"])
            if rc != 0:
                raise RuntimeError(f"rpm -qa failed: {err.strip()}")
            return parse_rpm(out, _read_text(VERSIONLOCK_LIST))
        rc, out, err = self._cmd(["dpkg-query", "-W", "-f", DPKG_FORMAT])
        if rc != 0:
            raise RuntimeError(f"dpkg-query failed: {err.strip()}")
        return parse_dpkg(out)

    def candidates(self, names: list[str]) -> dict[str, str | None]:
        if not names:
            return {}
        rc, out, err = self._cmd(["apt-cache", "policy", *names])
        if rc != 0:
            raise RuntimeError(f"apt-cache policy failed: {err.strip()}")
        # A name apt does not know is absent from its answer: no candidate.
        return dict.fromkeys(names) | parse_policy(out)

    def package_names(self, prefix: str) -> list[str]:
        rc, out, _err = self._cmd(["apt-cache", "pkgnames", prefix])
        return sorted(out.split()) if rc == 0 else []

    def module_type(self, kernel: str) -> str | None:
        """The flavour of the nvidia module installed for the kernel, None when there is none."""
        modinfo = self._which("modinfo")
        if not modinfo:
            return None
        # Debian renames the module nvidia-current (and aliases it nvidia in modprobe.d, which
        # modinfo does not read).
        for name in ("nvidia", "nvidia-current"):
            rc, out, _err = self._cmd([modinfo, "-k", kernel, "-F", "license", name])
            if rc == 0:
                return module_type_of(out)
        return None


def make_plan(request: dict, gpu_info: dict, host: Host, root: str = "/") -> dict:
    """The whole plan: validated request, packages, what is installed, what to hold, what needs a reboot.

    Raises driver.PlanError for anything the role must refuse before it changes the host.
    """
    dist, major = request["distribution"], str(request["major_version"])
    family = driver.distro_key(dist, major)
    repository = request["repository"]
    branch = driver.parse_branch(request["branch"])
    method = driver.resolve_method(dist, repository, request["method"])
    gpus = gpu_info.get("pci", {}).get("gpus", [])
    node = gpu_info.get("node", {})
    image_build = node.get("image_build", False) if request["image_build"] == "auto" else request["image_build"] == "true"
    everything = host.packages(family)
    installed = driver.installed_driver(everything, family)
    marker = _read_marker(request["state_dir"])
    plan: dict[str, object] = {
        "family": family, "repository": repository, "method": method, "image_build": image_build,
        "branch": None, "module_type": None, "module_type_reason": None, "kernel": None, "kernel_reason": None,
        "packages": [], "install": False, "unhold": [], "cuda_repo": None, "rhel": None, "warnings": [],
        "modprobe_options": driver.modprobe_options(request.get("module_options") or {}),
    }
    if method == "containerized":
        if installed["modules"]:
            raise driver.PlanError(
                "gpuops_driver_method",
                f"'containerized': a host driver is installed ({installed['version'] or 'unknown version'}: "
                f"{', '.join(installed['packages'][:6])}{' ...' if len(installed['packages']) > 6 else ''}); "
                "two drivers fight over the GPUs: remove the host driver first")
        return {"plan": plan, "installed": installed, "marker": marker}
    if marker == "containerized" and not request["allow_method_change"]:
        raise driver.PlanError(
            "gpuops_driver_method",
            f"{request['method']!r}: this node is set for the containerized driver ({request['state_dir']}/driver-method); "
            "installing a host driver takes gpuops_driver_allow_method_change: true")
    forced = request["kernel_module_type"] in ("open", "proprietary")
    module_type, why = driver.resolve_module_type(request["kernel_module_type"], gpus,
                                                  gpu_info.get("derived", {}).get("kernel_module_type", {}), branch)
    driver.check_method(dist, major, repository, method, module_type)
    kernel_state = node.get("kernel", {})
    kernel, kernel_reason = driver.target_kernel(request["kernel_release"], kernel_state.get("running"),
                                                 installed_kernels(root), image_build)
    if request.get("offline"):
        # What can be refused without the package lists, before the role refreshes them.
        if branch is not None:
            driver.check_branch_for_gpus(branch, gpus)
            driver.check_branch_change(installed, branch, request["allow_branch_change"])
        plan.update(branch=branch, module_type=module_type, module_type_reason=why, kernel=kernel, kernel_reason=kernel_reason)
        return {"plan": plan, "installed": installed, "marker": marker, "candidates": {}}
    candidates: dict[str, str | None] = {}
    where = f"{dist} {major} ({repository} repository)"
    if family == "ubuntu" and repository == "distro":
        args = (module_type, method, kernel, request["architecture"], request["compute_only"])
        names = [n for n in host.package_names("nvidia-headless-no-dkms-") if n.endswith("-server" + ("-open" if module_type == "open" else ""))]
        candidates = host.candidates(names)
        branches = driver.available_branches(names, candidates, module_type)
        if gpus and any(g.get("architecture") in driver.LEGACY_ARCHITECTURES for g in gpus):
            branches = [b for b in branches if b <= driver.LAST_LEGACY_BRANCH]
        if branch is None and installed["branch"]:
            branch = installed["branch"]
        elif branch is None:
            # The newest branch with every package for this kernel (a new branch's precompiled modules
            # come for current kernels only).
            wanted = [p for b in branches for p in driver.ubuntu_packages(b, *args) if p not in candidates]
            candidates |= host.candidates(wanted)
            complete = [b for b in branches if all(candidates.get(p) for p in driver.ubuntu_packages(b, *args))]
            if not complete:
                raise driver.PlanError("gpuops_driver_branch",
                                       f"unset, and no -server driver branch has every package for kernel {kernel} in {where} "
                                       f"(branches with packages: {', '.join(map(str, branches)) or 'none'})")
            branch = complete[-1]
        packages = driver.ubuntu_packages(branch, *args)
        candidates |= host.candidates([p for p in packages if p not in candidates])
        driver.check_branch_for_gpus(branch, gpus)
        driver.check_candidates(family, packages, candidates, branch, where, branches)
    elif family == "debian" and repository == "distro":
        candidates = host.candidates(["libcuda1", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"])
        here = driver.branch_of(candidates.get("libcuda1"))
        if branch is None:
            branch = installed["branch"] or here
        if here is None or branch != here:
            raise driver.PlanError("gpuops_driver_branch",
                                   f"{branch}: {where} has the driver of branch {here} only" if here else
                                   f"{branch}: {where} has no NVIDIA driver (is the non-free component enabled?)")
        module_type, changed_why = driver.check_debian_flavour(module_type, candidates, forced)
        if changed_why:
            why = changed_why
            plan["warnings"].append(changed_why)
        packages = driver.debian_packages(module_type, kernel, request["compute_only"])
        candidates |= host.candidates([p for p in packages if p not in candidates])
        driver.check_branch_for_gpus(branch, gpus)
        driver.check_candidates(family, packages, candidates, branch, where, [here])
    else:
        if branch is None:
            branch = installed["branch"]
            if branch is None:
                raise driver.PlanError("gpuops_driver_branch",
                                       "unset: the CUDA repository serves every branch, so name one, e.g. 580")
        driver.check_branch_for_gpus(branch, gpus)
        plan["cuda_repo"] = driver.cuda_repo(family, dist, major, request["architecture"], request["cuda_repo_url"])
        if family == "rhel":
            rhel = driver.rhel_plan(major, branch, module_type, method, kernel)
            plan["rhel"] = rhel
            packages = rhel["packages"]
        else:
            packages = driver.cuda_deb_packages(branch, module_type, kernel, request["compute_only"])
            if request["repo_ready"]:
                candidates = host.candidates(packages)
                driver.check_candidates(family, packages, candidates, branch, where, [])
    driver.check_branch_change(installed, branch, request["allow_branch_change"])
    plain = [p.split("/", maxsplit=1)[0].lstrip("@") for p in packages]
    plan.update(branch=branch, module_type=module_type, module_type_reason=why, kernel=kernel,
                kernel_reason=kernel_reason, packages=packages)
    # On RHEL a module stream or a branch-named package: installed when the branch's driver is.
    rhel_missing = [] if installed["branch"] == branch else plain
    missing = rhel_missing if family == "rhel" else [p for p in plain if p not in everything]
    plan["install"] = bool(missing)
    plan["unhold"] = installed["held"] if plan["install"] else []
    installed["module_type"] = host.module_type(kernel) if installed["packages"] else None
    return {"plan": plan, "installed": installed, "marker": marker, "candidates": {p: candidates.get(p) for p in plain}}


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError:
        return ""


def _read_marker(state_dir: str) -> str | None:
    return _read_text(os.path.join(state_dir, "driver-method")).strip() or None


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
