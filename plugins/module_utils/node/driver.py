# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The driver install plan: which packages, from where, for which kernel, and what refuses. Pure, no I/O.

The driver_info module does the reading (dpkg, apt-cache, modinfo) and hands the results to these
functions, so every decision here is unit-tested without a host. Sources for the package names are
in shared/reference/host-facts.md section 2.
"""

from __future__ import annotations

import re

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import KernelModuleType, PciGpu
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.derive import LEGACY_ARCHITECTURES
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hwdb import OPEN_ONLY

METHODS = ("auto", "precompiled", "dkms", "containerized")
REPOSITORIES = ("distro", "cuda")
MODULE_TYPES = ("auto", "open", "proprietary")
# NVIDIA driver branches released up to this collection's release (production, new feature and
# long-term branches). A three-digit branch above the newest one is taken as a branch released
# since, and left to the package check; anything else is not a driver branch.
KNOWN_BRANCHES = (
    450, 455, 460, 465, 470, 495, 510, 515, 520, 525, 530, 535, 545, 550, 555, 560, 565, 570, 575, 580,
    590, 595, 610, 615,
)
# The open kernel modules exist from R515; the driver defaults to them from R560.
FIRST_OPEN_BRANCH = 515
FIRST_OPEN_DEFAULT_BRANCH = 560
# The last branch that supports Maxwell, Pascal and Volta (later branches list them as legacy 580.xx).
LAST_LEGACY_BRANCH = 580
# The first production branch that drives an architecture, and where that is written. Hopper: the R525 Data
# Center driver release notes (525.85.12) are the first production ones to list HGX H100 firmware (H100 came with
# the 520.61.05 feature branch, NVIDIA AI Enterprise 2.3 release notes). Blackwell: the GPU Operator's platform
# support page requires 570.133.20 or later for HGX B200. Older architectures run on every branch this collection
# knows (450 and later).
FIRST_BRANCH = {"hopper": 525, "blackwell": 570}
# From R590 the CUDA repository's Debian-family packages drop the branch from their names; a
# nvidia-driver-pinning-<branch> package holds the branch instead.
CUDA_UNVERSIONED_FROM = 590
# Packages that belong to other roles (toolkit, fabric manager, RDMA) though their names start like
# the driver's: never held, counted or removed by the driver role.
_NOT_DRIVER = re.compile(
    r"^(nvidia-container|libnvidia-container|nvidia-docker|nvidia-fabricmanager|libnvidia-nscq|nvidia-imex|libnvsdm|"
    r"nvidia-cuda-|nvidia-driver-assistant)"
)
_DRIVER_DEB = re.compile(
    r"^(nvidia-|libnvidia-|linux-modules-nvidia-|linux-objects-nvidia-|linux-signatures-nvidia-|libcuda1|"
    r"libnvcuvid1|libnvoptix1|xserver-xorg-video-nvidia|firmware-nvidia-gsp|cuda-drivers)"
)
_DRIVER_RPM = re.compile(r"^(nvidia-|libnvidia-|kmod-nvidia-|cuda-drivers|dkms-nvidia)")
# The packages whose version is the driver's version, best first.
_CORE_DEB = (
    re.compile(r"^libnvidia-compute(-\d+)?(-server)?$"),
    re.compile(r"^libcuda1$"),
    re.compile(r"^nvidia-kernel-dkms$"),
    re.compile(r"^nvidia-open-kernel-dkms$"),
)
# Packages that put an nvidia kernel module on the system: without one, NVIDIA libraries on the node
# (pulled in by python3-pynvml, say) are not an installed driver.
_MODULE_DEB = re.compile(r"^(linux-modules-nvidia-|linux-objects-nvidia-|nvidia-dkms-|nvidia-kernel-dkms$|nvidia-open-kernel-dkms$)")
_MODULE_RPM = re.compile(r"^(kmod-nvidia|nvidia-kmod)")
_CORE_RPM = (re.compile(r"^nvidia-driver-cuda-libs$"), re.compile(r"^nvidia-driver$"), re.compile(r"^kmod-nvidia"))
_VERSION = re.compile(r"^(?:\d+:)?(\d{3})\.(\d+)(?:\.(\d+))?")
_NAME_BRANCH = re.compile(r"-(\d{3})(?:-server)?(?:-open)?(?:-|$)")
_KERNEL = re.compile(r"^\d+\.\d+(\.\d+)?[-+.~_A-Za-z0-9]*$")
_OPTION = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MODPROBE_MODULES = ("nvidia", "nvidia_uvm", "nvidia_modeset", "nvidia_drm", "nvidia_peermem")


class PlanError(Exception):
    """An input the plan cannot honour: names the variable, the value and what is accepted."""

    def __init__(self, variable: str, message: str) -> None:
        super().__init__(f"{variable}: {message}")
        self.variable = variable


def driver_version(package_version: str | None) -> str | None:
    """'580.178.04' from a package version such as '580.178.04-0ubuntu0.24.04.1' or '3:580.105.08-1.el9'."""
    m = _VERSION.match(package_version or "")
    if not m:
        return None
    return ".".join(p for p in m.groups() if p is not None)


def major_minor(version: str | None) -> tuple[int, int] | None:
    """(6, 8) of the kernel release '6.8.0-45-generic', (2, 20) of ansible-core's '2.20.0rc1'; None when it does not
    start with MAJOR.MINOR."""
    m = re.match(r"^(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def branch_of(version: str | None) -> int | None:
    m = _VERSION.match(version or "")
    return int(m.group(1)) if m else None


def parse_branch(value: object) -> int | None:
    """The branch asked for, None for 'the default'; an unknown branch raises PlanError."""
    text = str(value if value is not None else "").strip()
    if not text:
        return None
    if not re.fullmatch(r"\d{3}", text) or (int(text) not in KNOWN_BRANCHES and int(text) <= max(KNOWN_BRANCHES)):
        raise PlanError(
            "gpuops_driver_branch",
            f"{text!r} is not an NVIDIA driver branch; accepted: a branch number such as "
            f"{', '.join(str(b) for b in KNOWN_BRANCHES[-6:])}, or empty for the newest one available",
        )
    return int(text)


def distro_key(distribution: str, major_version: str) -> str:
    """'ubuntu', 'debian' or 'rhel' (RHEL and its rebuilds), the package family the plan is made for."""
    if distribution == "Ubuntu":
        return "ubuntu"
    if distribution == "Debian":
        return "debian"
    if distribution in ("RedHat", "Rocky", "AlmaLinux", "OracleLinux", "CentOS"):
        return "rhel"
    raise PlanError("ansible_facts.distribution", f"{distribution} {major_version} is not a distribution the driver role installs on")


def resolve_method(distribution: str, repository: str, method: str) -> str:
    """'auto' becomes precompiled where the source has signed precompiled modules, else dkms."""
    if method != "auto":
        return method
    return "precompiled" if distribution == "Ubuntu" and repository == "distro" else "dkms"


def check_method(distribution: str, major_version: str, repository: str, method: str, module_type: str) -> None:
    """Refuse a method the source cannot serve."""
    family = distro_key(distribution, major_version)
    if method == "containerized":
        return
    if repository == "distro" and family == "rhel":
        raise PlanError("gpuops_driver_repository",
                        f"'distro': {distribution} does not package the NVIDIA driver; accepted: cuda")
    if method == "precompiled":
        if family == "debian" and repository == "distro":
            raise PlanError("gpuops_driver_method",
                            f"'precompiled': Debian {major_version} packages the driver as DKMS only; accepted: dkms, auto")
        if family in ("ubuntu", "debian") and repository == "cuda":
            raise PlanError("gpuops_driver_method",
                            "'precompiled': NVIDIA's CUDA repository has DKMS packages only for Debian and Ubuntu; "
                            "accepted: dkms, or gpuops_driver_repository: distro on Ubuntu")
        if family == "rhel" and module_type == "open":
            raise PlanError("gpuops_driver_method",
                            "'precompiled' with open modules: the CUDA repository's precompiled streams are proprietary; "
                            "accepted: dkms with open modules")
        if family == "rhel" and str(major_version) not in ("8", "9"):
            raise PlanError("gpuops_driver_method",
                            f"'precompiled': RHEL {major_version} has no precompiled module streams; accepted: dkms")


def _needs(gpus: list[PciGpu], archs: frozenset[str]) -> list[str]:
    return sorted({f"{g.get('name') or g['device_id']}" for g in gpus if g.get("architecture") in archs})


def resolve_module_type(requested: str, gpus: list[PciGpu], recommendation: KernelModuleType, branch: int | None) -> tuple[str, str]:
    """The kernel module flavour to install and why; a flavour the GPUs or the branch cannot use raises."""
    check_branch_for_gpus(branch, gpus)
    legacy = _needs(gpus, LEGACY_ARCHITECTURES)
    open_only = sorted(set(_needs(gpus, OPEN_ONLY)) | {f"{g.get('name') or g['device_id']}" for g in gpus if g.get("grace")})
    if requested == "open" and legacy:
        raise PlanError("gpuops_driver_kernel_module_type",
                        f"'open': {', '.join(legacy)} (Maxwell, Pascal or Volta) run only the proprietary modules; "
                        "accepted: proprietary, auto")
    if requested == "proprietary" and open_only:
        raise PlanError("gpuops_driver_kernel_module_type",
                        f"'proprietary': {', '.join(open_only)} run only the open modules; accepted: open, auto")
    if requested in ("open", "proprietary"):
        chosen, reason = requested, "set by gpuops_driver_kernel_module_type"
    elif recommendation.get("error"):
        raise PlanError("gpuops_driver_kernel_module_type", f"'auto': {recommendation['error']}; accepted: open, proprietary")
    elif recommendation.get("type"):
        chosen, reason = str(recommendation["type"]), str(recommendation.get("reason") or "")
    else:
        # No GPU to decide from (an image built without the hardware): the driver's own default.
        chosen = "open" if branch is None or branch >= FIRST_OPEN_DEFAULT_BRANCH else "proprietary"
        reason = "no GPU to decide from: the driver branch's default"
    if chosen == "open" and branch is not None and branch < FIRST_OPEN_BRANCH:
        raise PlanError("gpuops_driver_branch",
                        f"{branch}: the open kernel modules exist from branch {FIRST_OPEN_BRANCH}; "
                        "accepted: a later branch, or gpuops_driver_kernel_module_type: proprietary")
    return chosen, reason


def check_branch_for_gpus(branch: int | None, gpus: list[PciGpu]) -> None:
    """A branch the GPUs cannot run on raises: too new for Maxwell to Volta, too old for a newer architecture."""
    for arch, first in sorted(FIRST_BRANCH.items(), key=lambda item: -item[1]):
        too_new = _needs(gpus, frozenset((arch,)))
        if branch is not None and too_new and branch < first:
            raise PlanError("gpuops_driver_branch",
                            f"{branch}: {', '.join(too_new)} ({arch.capitalize()}) are driven from branch {first} on; "
                            f"accepted: {first} or later")
    legacy = _needs(gpus, LEGACY_ARCHITECTURES)
    if branch is not None and legacy and branch > LAST_LEGACY_BRANCH:
        raise PlanError("gpuops_driver_branch",
                        f"{branch}: {', '.join(legacy)} are supported up to branch {LAST_LEGACY_BRANCH}; "
                        f"accepted: {LAST_LEGACY_BRANCH} or earlier")


def _kernel_key(release: str) -> list:
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\-+~_]", release)]


def target_kernel(requested: str, running: str | None, installed: list[str], image_build: bool) -> tuple[str, str]:
    """The kernel to install modules for, and why it is that one.

    The running kernel on a booted host whose root holds it; otherwise (an image build, a container,
    a host whose running kernel was removed) the newest kernel installed in the root.
    """
    if requested:
        if not _KERNEL.match(requested):
            raise PlanError("gpuops_driver_kernel_release",
                            f"{requested!r} is not a kernel release; accepted: a release as 'uname -r' prints it, e.g. 6.8.0-151-generic")
        return requested, "set by gpuops_driver_kernel_release"
    if running and running in installed and not image_build:
        return running, "the running kernel"
    if installed:
        newest = max(installed, key=_kernel_key)
        why = "image build" if image_build else f"the running kernel {running} is not installed in this root"
        return newest, f"the newest kernel installed ({why})"
    raise PlanError("gpuops_driver_kernel_release",
                    f"unset, and no kernel is installed under /lib/modules (running: {running}); "
                    "accepted: the release of the kernel the node will boot")


def boot_kernel(target: str, installed: list[str], requested: str, image_build: bool) -> str | None:
    """The kernel the node boots next when it is not the target: the newest installed one.

    The boot loader's default on Debian, Ubuntu and the RHEL family is the newest kernel installed, so
    a kernel update waiting for its reboot is that one; the driver must be ready for it before the
    reboot. None when it is the target, when the kernel is set by gpuops_driver_kernel_release, and in
    an image build (whose target already is the newest).
    """
    if requested or image_build or not installed:
        return None
    newest = max(installed, key=_kernel_key)
    return None if newest == target else newest


def kernel_packages(packages: list[str], kernel: str, other: str) -> list[str]:
    """The planned packages made for one kernel (headers, precompiled modules), named for another."""
    suffix = f"-{kernel}"
    return [p[: -len(suffix)] + f"-{other}" for p in packages if p.endswith(suffix)]


def available_branches(names: list[str], candidates: dict[str, str | None], module_type: str) -> list[int]:
    """Ubuntu -server branches whose headless package is real (not a transitional package of another branch)."""
    found = set()
    pattern = re.compile(r"^nvidia-headless-no-dkms-(\d{3})-server" + ("-open" if module_type == "open" else "") + "$")
    for name in names:
        m = pattern.match(name)
        if m and branch_of(candidates.get(name)) == int(m.group(1)):
            found.add(int(m.group(1)))
    return sorted(found)


_HEADLESS = re.compile(r"^nvidia-headless-no-dkms-(\d{3})(-[a-z-]+)?$")


def transitional_branches(depends: dict[str, list[str]]) -> dict[int, tuple[str, str]]:
    """Branch -> (its headless package, the other branch's package it depends on), for Ubuntu's transitional ones.

    Canonical retires a branch by turning its packages into transitional ones that keep the old branch's version
    but depend on the same package of a newer branch (Ubuntu 24.04's nvidia-headless-no-dkms-570-server-open
    570.211.01 depends on nvidia-headless-no-dkms-580-server-open): installing the old branch installs the new one.
    `depends` maps each headless package to its candidate's dependencies (apt-cache depends).
    """
    moved: dict[int, tuple[str, str]] = {}
    for name, deps in depends.items():
        m = _HEADLESS.match(name)
        if not m:
            continue
        for dep in deps:
            d = _HEADLESS.match(dep)
            if d and d.group(1) != m.group(1) and d.group(2) == m.group(2):
                moved[int(m.group(1))] = (name, dep)
    return moved


def _server(branch: int, module_type: str) -> tuple[str, str]:
    return f"{branch}-server", "-open" if module_type == "open" else ""


def ubuntu_packages(branch: int, module_type: str, method: str, kernel: str, arch: str, compute_only: bool) -> list[str]:
    """Packages from Ubuntu's archive: the -server branch, precompiled signed modules or DKMS."""
    srv, flavour = _server(branch, module_type)
    if method == "precompiled":
        # Userspace without DKMS, and Canonical's signed modules for exactly this kernel.
        packages = [f"nvidia-headless-no-dkms-{srv}{flavour}", f"nvidia-utils-{srv}"]
        if module_type == "open":
            packages.append(f"linux-modules-nvidia-{srv}-open-{kernel}")
        else:
            packages += [f"linux-modules-nvidia-{srv}-{kernel}", f"linux-objects-nvidia-{srv}-{kernel}"]
            if arch == "x86_64":
                packages.append(f"linux-signatures-nvidia-{kernel}")
    else:
        packages = [f"nvidia-headless-{srv}{flavour}", f"nvidia-utils-{srv}", f"linux-headers-{kernel}"]
    if not compute_only:
        extra = ["libnvidia-gl", "libnvidia-decode", "libnvidia-encode", "libnvidia-extra"]
        if arch == "x86_64":
            extra.append("libnvidia-fbc1")
        packages += [f"{name}-{srv}" for name in extra]
    return packages


def debian_packages(module_type: str, kernel: str, compute_only: bool) -> list[str]:
    """Packages from Debian's non-free: DKMS modules, CUDA and NVML libraries, nvidia-smi, persistenced."""
    packages = ["nvidia-open-kernel-dkms" if module_type == "open" else "nvidia-kernel-dkms",
                "libcuda1", "nvidia-smi", "nvidia-persistenced", f"linux-headers-{kernel}"]
    if not compute_only:
        packages.append("nvidia-driver")
    return packages


def cuda_deb_packages(branch: int, module_type: str, kernel: str, compute_only: bool) -> list[str]:
    """Packages from NVIDIA's CUDA repository for Debian and Ubuntu (DKMS)."""
    pinned = branch >= CUDA_UNVERSIONED_FROM
    suffix = "" if pinned else f"-{branch}"
    packages = [f"nvidia-driver-pinning-{branch}"] if pinned else []
    if compute_only:
        dkms = f"nvidia-dkms{suffix}-open" if module_type == "open" else f"nvidia-dkms{suffix}"
        packages += [dkms, f"libnvidia-compute{suffix}", f"nvidia-compute-utils{suffix}", f"nvidia-utils{suffix}"]
    else:
        packages.append(("nvidia-open" if module_type == "open" else "cuda-drivers") + suffix)
    return [*packages, f"linux-headers-{kernel}"]


def rhel_plan(major_version: str, branch: int, module_type: str, method: str, kernel: str) -> dict:
    """dnf module stream (RHEL 8/9) or branch-named packages (RHEL 10), and the versionlock to add."""
    headers = [f"kernel-devel-{kernel}", f"kernel-headers-{kernel}"] if method == "dkms" else []
    if str(major_version) in ("8", "9"):
        # Open: <branch>-open (DKMS); proprietary: <branch>-dkms, or <branch> for the precompiled kmod.
        proprietary = f"{branch}-dkms" if method == "dkms" else str(branch)
        stream = f"{branch}-open" if module_type == "open" else proprietary
        return {"module_stream": f"nvidia-driver:{stream}", "packages": [f"@nvidia-driver:{stream}/default", *headers],
                "versionlock": [f"*nvidia*{branch}*"]}
    name = "nvidia-open" if module_type == "open" else "cuda-drivers"
    return {"module_stream": None, "packages": [f"{name}-{branch}", *headers], "versionlock": [f"*nvidia*{branch}*"]}


def cuda_repo(family: str, distribution: str, major_version: str, arch: str, base_url: str) -> dict:
    """Where NVIDIA's CUDA repository for this system lives under base_url."""
    if arch not in ("x86_64", "aarch64"):
        raise PlanError("ansible_facts.architecture", f"{arch}: the CUDA repository serves x86_64 and aarch64 (sbsa)")
    repo_arch = "sbsa" if arch == "aarch64" else "x86_64"
    if family == "ubuntu":
        directory = f"ubuntu{major_version.replace('.', '')}"
    elif family == "debian":
        directory = f"debian{major_version}"
    else:
        directory = f"rhel{major_version}"
    url = f"{base_url.rstrip('/')}/{directory}/{repo_arch}/"
    return {"url": url, "directory": directory, "arch": repo_arch}


def is_driver_package(name: str, family: str) -> bool:
    if _NOT_DRIVER.match(name):
        return False
    return bool((_DRIVER_RPM if family == "rhel" else _DRIVER_DEB).match(name))


def installed_driver(packages: dict[str, dict], family: str) -> dict:
    """What driver the package database holds: its packages, version, branch and which are held.

    packages: name -> {version, held} for every installed package. Libraries without a package that
    provides the kernel module have no version or branch: they are not a driver, and the install
    replaces them.
    """
    mine = {n: p for n, p in sorted(packages.items()) if is_driver_package(n, family)}
    version = None
    for pattern in _CORE_RPM if family == "rhel" else _CORE_DEB:
        for name, pkg in mine.items():
            if pattern.match(name) and driver_version(pkg["version"]):
                version = driver_version(pkg["version"])
                break
        if version:
            break
    modules = sorted(n for n in mine if (_MODULE_RPM if family == "rhel" else _MODULE_DEB).match(n))
    if not modules:
        version = None
    branch = branch_of(version)
    # Packages of another branch left behind (firmware or libraries a binding pulled in before the
    # driver was chosen): reported, never held.
    stray = sorted(n for n, p in mine.items() if branch and package_branch(n, p["version"]) not in (None, branch))
    return {
        "packages": sorted(mine),
        "modules": modules,
        "version": version,
        "branch": branch,
        "held": sorted(n for n, p in mine.items() if p.get("held")),
        "not_held": sorted(n for n, p in mine.items() if not p.get("held") and n not in stray),
        "stray": stray,
    }


def package_branch(name: str, version: str | None) -> int | None:
    """The driver branch a package belongs to, from its version or its name; None for branch-neutral ones."""
    found = branch_of(version)
    if found:
        return found
    m = _NAME_BRANCH.search(name)
    return int(m.group(1)) if m else None


def check_branch_change(installed: dict, branch: int, allow: bool) -> None:
    if installed["branch"] and installed["branch"] != branch and not allow:
        raise PlanError("gpuops_driver_branch",
                        f"{branch}: driver {installed['version']} (branch {installed['branch']}) is installed; "
                        f"changing the branch takes gpuops_driver_allow_branch_change: true "
                        f"(or gpuops_driver_branch: {installed['branch']} to keep it)")


def _other_branch(family: str, packages: list[str], candidates: dict[str, str | None], branch: int) -> int | None:
    """On Ubuntu, the branch the archive's headless package installs where it is not `branch` (a transitional package)."""
    if family != "ubuntu":
        return None
    # The archive's headless package (the CUDA repository's packages have none to check).
    head = next((p for p in packages if p.startswith("nvidia-headless")), None)
    got = branch_of(candidates.get(head)) if head else None
    return got if got is not None and got != branch else None


def candidates_refused(family: str, packages: list[str], candidates: dict[str, str | None], branch: int) -> bool:
    """Whether check_candidates refuses these candidates (without the branches its message lists)."""
    return any(not candidates.get(p) for p in packages) or _other_branch(family, packages, candidates, branch) is not None


def check_candidates(family: str, packages: list[str], candidates: dict[str, str | None], branch: int,
                     where: str, branches_here: list[int]) -> None:
    """Every package has a candidate, of the branch asked for (not a transitional one of another branch)."""
    missing = [p for p in packages if not candidates.get(p)]
    here = f"branches with packages here: {', '.join(map(str, branches_here))}" if branches_here else "no branch has packages here"
    got = _other_branch(family, packages, candidates, branch)
    if got is not None:
        head = next(p for p in packages if p.startswith("nvidia-headless"))
        raise PlanError("gpuops_driver_branch", f"{branch}: {head} in {where} is a transitional package that installs branch {got}; {here}")
    if missing:
        kernel_only = all(p.startswith(("linux-modules-nvidia-", "linux-objects-nvidia-", "linux-signatures-nvidia-", "linux-headers-"))
                          for p in missing)
        if kernel_only:
            raise PlanError("gpuops_driver_kernel_release",
                            f"no package {', '.join(missing)} in {where}: the kernel has no modules or headers for "
                            "this branch (kernels get them while they are current); accepted: a current kernel "
                            "(upgrade it and set gpuops_driver_kernel_release), or gpuops_driver_method: dkms")
        raise PlanError("gpuops_driver_branch",
                        f"{branch}: no package {', '.join(missing)} in {where}; {here}")


def check_debian_flavour(module_type: str, candidates: dict[str, str | None], forced: bool) -> tuple[str, str | None]:
    """Debian's open module package can lag its userspace; a version that does not match cannot run.

    Returns the flavour to use and, when it had to change, why.
    """
    userspace = driver_version(candidates.get("libcuda1"))
    open_version = driver_version(candidates.get("nvidia-open-kernel-dkms"))
    if module_type != "open" or open_version == userspace:
        return module_type, None
    why = (f"Debian's nvidia-open-kernel-dkms is {open_version or 'missing'} and its userspace {userspace}: "
           "a module and libraries of different versions do not load together")
    if forced:
        raise PlanError("gpuops_driver_kernel_module_type", f"'open': {why}; accepted: proprietary, auto")
    return "proprietary", why + "; the proprietary modules are installed instead"


def modprobe_options(options: dict) -> str:
    """The managed modprobe options file from {module: {option: value}}; empty when nothing is set."""
    lines = []
    for module in sorted(options or {}):
        if module.replace("-", "_") not in MODPROBE_MODULES:
            raise PlanError("gpuops_driver_module_options",
                            f"module {module!r} is not an NVIDIA kernel module; accepted: {', '.join(MODPROBE_MODULES)}")
        values = options[module] or {}
        if not isinstance(values, dict):
            raise PlanError("gpuops_driver_module_options", f"{module}: {values!r} is not a mapping of option to value")
        parts = []
        for key in sorted(values):
            value = values[key]
            if not _OPTION.match(str(key)) or isinstance(value, (dict, list)) or " " in str(value) or value is None:
                raise PlanError("gpuops_driver_module_options",
                                f"{module}.{key}={value!r}: an option is a name and a scalar value without spaces")
            if isinstance(value, bool):
                value = int(value)
            parts.append(f"{key}={value}")
        if parts:
            lines.append(f"options {module.replace('-', '_')} {' '.join(parts)}")
    return "".join(line + "\n" for line in lines)
