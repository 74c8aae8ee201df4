# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Fabric Manager, the NVLink Subnet Manager and IMEX for a node: what it runs, at which version, configured how.

Pure functions; the commands (dpkg-query, apt-cache policy, dnf repoquery) are run by the caller's Host.
The rule NVIDIA states for every one of these packages: its version is exactly the driver's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError, branch_of, distro_key, driver_version, installed_driver

MODES = ("auto", "none", "fabricmanager", "nvlsm", "imex")
CONFIG_PATH = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
SERVICES = {"none": None, "fabricmanager": "nvidia-fabricmanager.service", "nvlsm": "nvidia-fabricmanager.service",
            "imex": "nvidia-imex.service"}
# The last branch whose packages carry the branch in their names in NVIDIA's CUDA repository; Canonical's
# archive names every branch so (nvidia-fabricmanager-580).
LAST_VERSIONED_CUDA_BRANCH = 575
# Every package of this family, any branch: what a mismatched or stale install leaves behind.
FAMILY = re.compile(r"^(nvidia-fabricmanager|nvidia-fabricmanager-dev|nvidia-fabric-manager-devel|libnvidia-nscq|"
                    r"nvidia-imex|libnvsdm|cuda-drivers-fabricmanager)(-\d{3})?$")

_BOOL = ("0", "1")
# fabricmanager.cfg's keys as the 580 package ships them, with the values each accepts (None: any text,
# int: a whole number).
CONFIG_KEYS: dict[str, tuple[str, ...] | type | None] = {
    "LOG_LEVEL": ("0", "1", "2", "3", "4"),
    "LOG_FILE_NAME": None,
    "LOG_APPEND_TO_LOG": _BOOL,
    "LOG_FILE_MAX_SIZE": int,
    "LOG_MAX_ROTATE_COUNT": int,
    "LOG_USE_SYSLOG": _BOOL,
    "DAEMONIZE": _BOOL,
    "BIND_INTERFACE_IP": None,
    "STARTING_TCP_PORT": int,
    "UNIX_SOCKET_PATH": None,
    # 0 bare metal or full passthrough, 1 shared NVSwitch multitenancy, 2 vGPU multitenancy.
    "FABRIC_MODE": ("0", "1", "2"),
    "FABRIC_MODE_RESTART": _BOOL,
    "STATE_FILE_NAME": None,
    "FM_CMD_BIND_INTERFACE": None,
    "FM_CMD_PORT_NUMBER": int,
    "FM_CMD_UNIX_SOCKET_PATH": None,
    "FM_CMD_VSOCK_CID": None,
    "FM_CMD_VSOCK_PORT_NUMBER": int,
    "FM_STAY_RESIDENT_ON_FAILURES": _BOOL,
    "ACCESS_LINK_FAILURE_MODE": ("0", "1"),
    "TRUNK_LINK_FAILURE_MODE": ("0", "1"),
    "NVSWITCH_FAILURE_MODE": ("0", "1"),
    "ABORT_CUDA_JOBS_ON_FM_EXIT": _BOOL,
    "TOPOLOGY_FILE_PATH": None,
    "USE_RPC": _BOOL,
    "NETWORK_INTERFACE": None,
    "ENABLE_AUTH_ENCRYPTION": _BOOL,
    "AUTH_SOURCE": None,
    "SERVER_KEY": None,
    "SERVER_CERT": None,
    "SERVER_CERT_AUTH": None,
    "CLIENT_KEY": None,
    "CLIENT_CERT": None,
    "CLIENT_CERT_AUTH": None,
    "SECURITY_TARGET_OVERRIDE": None,
    "MNNVL_RESILIENCY_MODE": None,
    "MNNVL_ENABLE_DEFAULT_PARTITION": _BOOL,
}
CONFIG_VARIABLE = "gpuops_fabric_manager_config"


def check_config(settings: Mapping[str, Any]) -> dict[str, str]:
    """The settings as the file writes them; an unknown key or a value the key does not take raises PlanError."""
    unknown = sorted(k for k in settings if k not in CONFIG_KEYS)
    if unknown:
        raise PlanError(CONFIG_VARIABLE, f"{', '.join(unknown)}: not a fabricmanager.cfg setting; known: {', '.join(CONFIG_KEYS)}")
    out = {}
    for key, value in settings.items():
        text = str(int(value)) if isinstance(value, bool) else str(value).strip()
        accepted = CONFIG_KEYS[key]
        if "\n" in text:
            raise PlanError(CONFIG_VARIABLE, f"{key}: {value!r} spans lines; a setting is one line")
        if accepted is int and not re.fullmatch(r"\d+", text):
            raise PlanError(CONFIG_VARIABLE, f"{key}: {value!r} is not accepted; a whole number")
        if isinstance(accepted, tuple) and text not in accepted:
            raise PlanError(CONFIG_VARIABLE, f"{key}: {value!r} is not accepted; one of {', '.join(accepted)}")
        out[key] = text
    return out


def edit_config(text: str, settings: Mapping[str, str]) -> str:
    """The file with each setting's line changed in place (the first one, if several), missing ones appended.

    Comments, blank lines, the order and every other line stay as they were.
    """
    lines = text.splitlines()
    done: set[str] = set()
    for i, line in enumerate(lines):
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or line.lstrip().startswith("#") or key not in settings or key in done:
            continue
        done.add(key)
        if value.strip() != settings[key]:
            lines[i] = f"{key}={settings[key]}"
    missing = [f"{k}={v}" for k, v in settings.items() if k not in done]
    if missing:
        lines += ["# Added by gpuops.nvidia (gpuops_fabric_manager_config)", *missing]
    return "\n".join(lines) + ("\n" if lines else "")


def package_names(family: str, repository: str, branch: int, mode: str, architecture: str = "x86_64") -> list[str]:
    """The packages of the mode, for the driver's branch (its version is pinned separately).

    Canonical's archive (Ubuntu, repository distro) names every branch: nvidia-fabricmanager-580. NVIDIA's
    CUDA repository (deb and rpm) names the branch up to 575, and from 580 ships one unversioned name per
    package, pinned to the driver's version. Debian's archive has none of them.
    """
    if mode == "none":
        return []
    if family == "debian" and repository == "distro":
        raise PlanError("gpuops_driver_repository", "distro: Debian's archive has no Fabric Manager or IMEX package; "
                                                    "they come from NVIDIA's CUDA repository (gpuops_driver_repository: cuda)")
    versioned = (family == "ubuntu" and repository == "distro") or branch <= LAST_VERSIONED_CUDA_BRANCH
    suffix = f"-{branch}" if versioned else ""
    if mode == "imex":
        return [f"nvidia-imex{suffix}"]
    names = [f"nvidia-fabricmanager{suffix}", f"libnvidia-nscq{suffix}"]
    if mode == "nvlsm":
        # The start script runs ibstat (infiniband-diags) to find the switch bridges; libnvsdm is built for x86_64 only.
        names += ["nvlsm", "infiniband-diags"]
        if architecture in ("x86_64", "amd64"):
            names.append(f"libnvsdm{suffix}")
    return names


# Packages from the distribution whose version is not the driver's.
UNPINNED = frozenset(("infiniband-diags",))


def _sort_key(version: str) -> list[object]:
    return [int(p) if p.isdigit() else p for p in re.split(r"[.\-+~:]", version)]


@dataclass
class FabricPlan:
    mode: str
    reason: str
    family: str
    version: str | None
    service: str | None
    packages: list[str] = field(default_factory=list)  # install specs, pinned
    names: list[str] = field(default_factory=list)
    install: bool = False
    unhold: list[str] = field(default_factory=list)
    remove: list[str] = field(default_factory=list)
    not_held: list[str] = field(default_factory=list)
    installed: dict[str, dict] = field(default_factory=dict)
    config: dict[str, str] = field(default_factory=dict)

    def result(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("mode", "reason", "family", "version", "service", "packages", "names",
                                              "install", "unhold", "remove", "not_held", "installed", "config")}


def choose_mode(requested: str, derived: Mapping[str, Any]) -> tuple[str, str]:
    if requested not in MODES:
        raise PlanError("gpuops_fabric_manager_mode", f"{requested!r} is not accepted; one of {', '.join(MODES)}")
    if requested != "auto":
        return requested, f"set by gpuops_fabric_manager_mode (the hardware says: {derived.get('reason', 'unknown')})"
    return str(derived.get("mode", "none")), str(derived.get("reason", ""))


def plan_fabric(*, gpu_info: Mapping[str, Any], distribution: str, major_version: str, architecture: str, repository: str,
                requested_mode: str, driver_version_value: str, version_variable: str, settings: Mapping[str, Any],
                installed: Callable[[str], dict[str, dict]], available: Callable[[str, list[str]], dict[str, list[str]]]) -> FabricPlan:
    """The plan: refuses, before any change, what cannot work (naming the variable), else says what to do."""
    config = check_config(settings)
    mode, reason = choose_mode(requested_mode, gpu_info.get("derived", {}).get("fabric_manager", {}))
    family = distro_key(distribution, major_version)
    plan = FabricPlan(mode=mode, reason=reason, family=family, version=None, service=SERVICES[mode], config=config)
    if mode == "none":
        return plan
    everything = installed(family)
    if not driver_version_value.strip():
        # No version given (the role runs without the driver role before it): the installed driver's.
        driver_version_value = installed_driver(everything, family)["version"] or ""
        version_variable = f"{version_variable} (empty; the package database has no driver either)" if not driver_version_value \
            else version_variable
    version = driver_version(driver_version_value)
    if not version or version != driver_version_value.strip():
        raise PlanError(version_variable, f"{driver_version_value!r} is not a driver version (such as 580.105.08): "
                                          f"{mode} must run at exactly the installed driver's version; run the driver role first "
                                          "or set gpuops_fabric_manager_driver_version")
    branch = branch_of(version) or 0
    plan.version = version
    plan.names = package_names(family, repository, branch, mode, architecture)
    found = available(family, plan.names)
    specs: list[str] = []
    missing: list[str] = []
    for name in plan.names:
        versions = sorted(found.get(name) or [], key=_sort_key, reverse=True)
        if name in UNPINNED:
            (specs if versions else missing).append(name)
            continue
        match = [v for v in versions if driver_version(v) == version]
        if match:
            specs.append(f"{name}={match[0]}" if family != "rhel" else f"{name}-{match[0]}")
        else:
            missing.append(f"{name} (found: {', '.join(versions) or 'none'})")
    if missing:
        where = "Canonical's archive" if family == "ubuntu" and repository == "distro" else "the node's repositories"
        raise PlanError(version_variable, f"{version}: {mode} needs its packages at the driver's version, and {where} "
                                          f"lack(s) {'; '.join(missing)}"
                                          + ("; NVIDIA's CUDA repository has them (gpuops_driver_repository: cuda)"
                                             if mode == "nvlsm" and repository == "distro" else ""))
    plan.packages = specs
    have = {n: p for n, p in everything.items() if FAMILY.match(n) or n in plan.names}
    plan.installed = have
    wanted = dict(zip(plan.names, specs, strict=True))

    def current(name: str) -> bool:
        pkg = have.get(name)
        if not pkg:
            return False
        return name in UNPINNED or driver_version(pkg["version"]) == version

    plan.install = any(not current(n) for n in plan.names)
    plan.not_held = [n for n in plan.names if current(n) and not have[n]["held"] and n not in UNPINNED]
    # What stands in the way: another branch or version of the family, held or not.
    stale = [n for n in have if n not in UNPINNED and FAMILY.match(n) and not current(n)
             and (n in wanted or _same_kind(n, plan.names))]
    plan.unhold = [n for n in stale if have[n]["held"]]
    plan.remove = [n for n in stale if n not in wanted]
    return plan


def _kind(name: str) -> str:
    m = FAMILY.match(name)
    return m.group(1) if m else name


def _same_kind(name: str, wanted: list[str]) -> bool:
    """nvidia-fabricmanager-570 and nvidia-fabricmanager (or -dev-570 beside -580) are the same kind of package."""
    kinds = {_kind(w) for w in wanted}
    kind = _kind(name)
    return (kind in kinds or kind.removesuffix("-dev") in kinds or kind.replace("-devel", "") in kinds
            or (kind == "nvidia-fabric-manager-devel" and "nvidia-fabricmanager" in kinds))


def start_decision(version: str | None, gpu_info: Mapping[str, Any], image_build: bool) -> tuple[bool, str]:
    """Whether the daemon may start now, and why: never against a driver of another version.

    The loaded kernel module's version is what the daemon checks itself against; NVML's is the fallback.
    """
    if image_build:
        return False, "an image build: enabled, started by the booted node"
    nvml = gpu_info.get("nvml", {})
    loaded = (gpu_info.get("node", {}).get("modules", {}).get("version")
              or (nvml.get("driver_version") if nvml.get("status") == "ok" else None))
    if not loaded:
        return False, "no NVIDIA driver is loaded: enabled, it starts at boot once the driver loads"
    if loaded != version:
        return False, f"the loaded driver is {loaded}, the installed one {version}: enabled, it starts after the reboot the driver needs"
    return True, f"the loaded driver is {loaded}"
