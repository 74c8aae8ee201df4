# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The preflight's findings: what will block the install, each with its fix. Pure, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import major_minor, resolve_method

# (distribution as Ansible names it, major version) the collection installs on.
SUPPORTED = {
    ("Ubuntu", "22"), ("Ubuntu", "24"), ("Ubuntu", "26"), ("Debian", "12"),
    ("RedHat", "8"), ("RedHat", "9"), ("RedHat", "10"),
    ("Rocky", "8"), ("Rocky", "9"), ("Rocky", "10"),
    ("AlmaLinux", "8"), ("AlmaLinux", "9"), ("AlmaLinux", "10"),
}
# The distributions whose Python is newer than the targets of the oldest ansible-core the collection claims
# (meta/runtime.yml): (distribution, major) -> (their Python, the first ansible-core that supports it as a target).
# Ubuntu 26.04's Python 3.14: ansible-core 2.20 (2.19 supports 3.8 to 3.13). The collection tests that pair on 2.20.
NEWER_PYTHON = {("Ubuntu", "26"): ("3.14", "2.20")}
DRIVER_METHODS = ("auto", "precompiled", "dkms", "containerized", "none")
# The methods that bring a driver to the node (the host's packages, or the driver container's modules).
DRIVER_BRINGING = ("precompiled", "dkms", "containerized")
# Install methods whose kernel modules are built on the node and so are not signed for Secure Boot.
UNSIGNED_METHODS = ("dkms",)


class Settings(TypedDict, total=False):
    """What the preflight judges against; every key has a default."""

    driver_method: str  # auto, precompiled, dkms, containerized, none
    driver_repository: str  # distro, cuda
    fabricmanager_enabled: bool
    nouveau_managed: bool  # the nouveau role runs before the driver
    driver_container_precompiled: bool  # containerized: the images carry precompiled, signed modules
    driver_kernel_release: str  # gpuops_driver_kernel_release: the kernel the driver is installed for, when set
    # The read's answers to the checks of the roles that follow (gpu_info's `answers`, node.yml): a check such a role would
    # fail is a blocker.
    answers: Mapping[str, Any]
    # The runtime the container_toolkit role configures (gpuops_container_toolkit_runtime: auto, containerd, crio); empty
    # where no such role follows (gpuops_node_container_toolkit: false), and then not judged.
    container_runtime: str
    ansible_version: str  # the controller's ansible-core (ansible_version.full); empty where not known


def _finding(fid: str, severity: str, message: str, fix: str) -> dict[str, str]:
    return {"id": fid, "severity": severity, "message": message, "fix": fix}


# The findings that name a role's cause of refusal: with one of them, that role's refusal says nothing more.
ROLE_OF = {"no_kernel_installed": "driver", "runfile_driver": "driver", "mixed_module_types": "driver",
           "secure_boot_unsigned": "driver", "fabric_manager_disabled": "fabric_manager", "no_container_runtime": "container_toolkit"}


def findings(gpu_info: GpuInfo, distribution: str, major_version: str, settings: Settings) -> list[dict[str, str]]:
    """Blockers (the install would fail or the node would not work) and warnings, in a stable order: the node's, then
    what the roles that follow would refuse (their answered checks), unless a finding names that role's cause."""
    found = _node_findings(gpu_info, distribution, major_version, settings)
    named = {ROLE_OF.get(f["id"]) for f in found if f["severity"] == "blocker"}
    if "unsupported_distribution" in {f["id"] for f in found}:
        return found
    for role, answer in (settings.get("answers") or {}).items():
        refused = answer.get("refused") if isinstance(answer, Mapping) else None
        if refused and role not in named:
            found.append(_finding(
                f"{role}_refuses", "blocker", f"the {role} role would refuse: {refused}",
                "change what that names, then run again: node.yml stopped here, before any change",
            ))
    return found


def _newer_python_finding(distribution: str, major_version: str, ansible_version: str) -> dict[str, str] | None:
    """A warning where the run's ansible-core is older than the first that supports the node's Python as a target."""
    python, first = NEWER_PYTHON.get((distribution, major_version), ("", ""))
    running = major_minor(ansible_version)
    if not first or running is None or running >= (major_minor(first) or running):
        return None
    return _finding(
        "ansible_core_older_than_target", "warning",
        f"{distribution} {major_version}'s Python is {python}, a target ansible-core supports from {first}; this run's "
        f"ansible-core is {ansible_version}",
        f"run the playbooks with ansible-core {first} or later: the collection is tested on {distribution} {major_version} "
        f"with {first}",
    )


def _node_findings(gpu_info: GpuInfo, distribution: str, major_version: str, settings: Settings) -> list[dict[str, str]]:
    """The node's own blockers and warnings."""
    method = settings.get("driver_method", "auto")
    if method not in DRIVER_METHODS:
        raise ValueError(f"driver method {method!r} is not one of {', '.join(DRIVER_METHODS)}")
    method = resolve_method(distribution, settings.get("driver_repository", "distro"), method)
    found = []
    pci, node, derived = gpu_info["pci"], gpu_info["node"], gpu_info["derived"]
    if (distribution, str(major_version)) not in SUPPORTED:
        found.append(_finding(
            "unsupported_distribution", "blocker",
            f"{distribution} {major_version} is not a distribution the collection installs on",
            "use Ubuntu 22.04/24.04/26.04, Debian 12 or RHEL/Rocky/Alma 8-10",
        ))
    newer = _newer_python_finding(distribution, str(major_version), settings.get("ansible_version", ""))
    if newer:
        found.append(newer)
    # The driver role plans for a kernel installed in the root (or the one set) whether or not GPUs are there, and
    # refuses without one (module_utils/node/driver.py, target_kernel): say so here, before the run stops there.
    kernel = node["kernel"]
    if method in ("precompiled", "dkms") and not kernel["installed"] and not settings.get("driver_kernel_release"):
        found.append(_finding(
            "no_kernel_installed", "blocker",
            f"no kernel is installed under /lib/modules (running: {kernel['running']}), so the driver role has no kernel "
            "to install the driver's modules for",
            "set gpuops_driver_kernel_release to the release of the kernel the node will boot, or install that kernel",
        ))
    runtime = _runtime_finding(settings.get("container_runtime", ""), node.get("container_runtimes"))
    if runtime:
        found.append(runtime)
    if not pci["gpus"]:
        found.append(_finding("no_gpu", "warning", "no NVIDIA GPU on the PCI bus: nothing to install",
                              "leave the host out of gpu_nodes, or check that the GPUs are seated and enabled in the BIOS"))
        return found
    if node["modules"]["nouveau"] and method != "none":
        bound = [g["bus_id"] for g in pci["gpus"] if g["driver"] == "nouveau"]
        managed = settings.get("nouveau_managed", False)
        found.append(_finding(
            "nouveau_loaded", "warning" if managed else "blocker",
            "the nouveau module is loaded" + (f" and bound to {', '.join(bound)}" if bound else ""),
            "the gpuops.nvidia.nouveau role that follows blacklists it and rebuilds the initramfs; the NVIDIA "
            "driver loads after a reboot (gpuops_nouveau_reboot: true reboots)" if managed else
            "run the gpuops.nvidia.nouveau role (blacklist, rebuild the initramfs) and reboot",
        ))
    runfile = node.get("runfile")
    if runfile and method in DRIVER_BRINGING:
        loaded = node["modules"]["version"]
        found.append(_finding(
            "runfile_driver", "blocker",
            f"a driver from NVIDIA's .run installer is on the node ({runfile}"
            + (f"; {loaded} is loaded" if loaded else "") + "): "
            + ("the driver container's modules and it would fight over the GPUs" if method == "containerized" else
               "packages installed over it overwrite its files and leave two drivers (Debian's packages refuse to)"),
            f"remove it with {runfile} --silent and reboot, then run again",
        ))
    if derived["kernel_module_type"]["error"] and method in DRIVER_BRINGING:
        found.append(_finding("mixed_module_types", "blocker", derived["kernel_module_type"]["error"],
                              "put GPUs that need different kernel module types in different nodes"))
    if node["secure_boot"] == "enabled" and method in UNSIGNED_METHODS:
        found.append(_finding(
            "secure_boot_unsigned", "blocker",
            f"Secure Boot is on and the {method} method builds kernel modules that are not signed",
            "use the precompiled, signed modules (gpuops_driver_method: precompiled) or enrol a MOK and sign DKMS modules",
        ))
    if node["secure_boot"] == "enabled" and method == "containerized" and not settings.get("driver_container_precompiled", False):
        found.append(_finding(
            "secure_boot_unsigned", "blocker",
            "Secure Boot is on and the driver container builds its kernel modules on the node, unsigned",
            "use the driver container's precompiled images, whose modules are signed (gpuops_driver_container_precompiled: true), "
            "or enrol a MOK and sign the modules",
        ))
    # The driver container needs no headers on the host: it builds against its own (or loads precompiled modules).
    if method == "dkms" and not node["kernel"]["headers_installed"]:
        found.append(_finding(
            "kernel_headers_missing", "warning",
            f"DKMS needs the headers of the kernel it builds for ({node['kernel']['running']} is running), "
            "and they are not installed",
            "the driver role installs the headers of the kernel it installs for; without the role, install them "
            "or use the precompiled method",
        ))
    loaded, recommended = node["modules"]["flavour"], derived["kernel_module_type"]["type"]
    if loaded and recommended and loaded != recommended and method in ("precompiled", "dkms"):
        found.append(_finding(
            "module_type_differs", "warning",
            f"the loaded nvidia kernel modules are {loaded}; the GPUs' recommended type is {recommended} "
            f"({derived['kernel_module_type']['reason']})",
            f"the driver role installs the {recommended} modules, which take effect after a reboot; "
            f"to keep the {loaded} ones set gpuops_driver_kernel_module_type: {loaded}",
        ))
    fm = derived["fabric_manager"]
    if fm["required"] and not settings.get("fabricmanager_enabled", True) and method != "containerized":
        found.append(_finding(
            "fabric_manager_disabled", "blocker",
            f"Fabric Manager is required ({fm['reason']}) but disabled: CUDA fails with 'system not yet initialized'",
            "set gpuops_fabric_manager_enabled: true (the fabric_manager role installs it pinned to the driver's version)",
        ))
    if gpu_info["nvml"]["status"] == "binding_missing":
        found.append(_finding("nvml_binding_missing", "warning",
                              "the NVML Python binding is not installed: only the PCI view was read",
                              "none needed before the driver is installed (the binding depends on the driver's NVML library); "
                              "afterwards python3-pynvml comes from Ubuntu universe/multiverse or Debian contrib"))
    return found


def _runtime_finding(wanted: str, installed: list[str] | None) -> dict[str, str] | None:
    """The container_toolkit role's refusal of the node's runtimes (container_runtime.detect_runtime, its module's own
    rule and words), as a blocker: none where it finds one to configure, where no such role follows, or where the read
    predates the key."""
    if not wanted or installed is None:
        return None
    try:
        cr.detect_runtime(wanted, installed)
    except cr.ConfigError as exc:
        return _finding("no_container_runtime", "blocker", exc.named({"runtime": "gpuops_container_toolkit_runtime"}),
                        "install the container runtime kubelet uses (containerd or CRI-O) first, or name it in "
                        "gpuops_container_toolkit_runtime; where the runtime is managed elsewhere, set "
                        "gpuops_node_container_toolkit: false")
    return None


def report_lines(host: str, gpu_info: GpuInfo, found: list[dict[str, str]]) -> list[str]:
    """A readable report: what is there, what the collection will do, what blocks it and the fix."""
    pci, nvml, derived = gpu_info["pci"], gpu_info["nvml"], gpu_info["derived"]
    lines = [f"== {host} =="]
    if pci["gpus"]:
        models: dict[str, int] = {}
        for g in pci["gpus"]:
            label = g["name"] or f"unknown GPU {g['device_id']}"
            models[label] = models.get(label, 0) + 1
        lines.append("GPUs: " + ", ".join(f"{n}x {m}" for m, n in models.items())
                     + f" ({', '.join(gpu_info['summary']['architectures'])})")
    else:
        lines.append("GPUs: none")
    lines.append(f"NVSwitches: {len(pci['nvswitches'])}; NVIDIA NICs: {len(pci['network'])}")
    driver = f"loaded, {nvml['driver_version']} (CUDA {nvml['cuda_driver_version']})" if nvml["status"] == "ok" else nvml["status"]
    lines.append(f"Driver: {driver}; Secure Boot: {gpu_info['node']['secure_boot']}")
    kmt = derived["kernel_module_type"]
    if kmt["type"]:
        lines.append(f"Will use: {kmt['type']} kernel modules ({kmt['reason']})")
    lines.append(f"Fabric Manager: {'required' if derived['fabric_manager']['required'] else 'not needed'} "
                 f"({derived['fabric_manager']['reason']})")
    blockers = [f for f in found if f["severity"] == "blocker"]
    warnings = [f for f in found if f["severity"] == "warning"]
    for f in blockers:
        lines.append(f"BLOCKER {f['id']}: {f['message']}. Fix: {f['fix']}")
    for f in warnings:
        lines.append(f"warning {f['id']}: {f['message']}. Fix: {f['fix']}")
    if not blockers:
        lines.append("Nothing blocks the install.")
    return lines
