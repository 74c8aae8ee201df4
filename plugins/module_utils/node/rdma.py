# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""RDMA and GPUDirect for a node: which RDMA stack, which GPUDirect path, which packages and modules.

Pure functions over gpu_info's structure and the package database (read by the caller's Host).

The two GPUDirect RDMA paths (NVIDIA's GPU Operator RDMA documentation):
- DMA-BUF: the open kernel modules, a Turing or newer GPU, Linux 5.12 or newer; the distribution's own
  RDMA stack (rdma-core) is enough. The default.
- nvidia-peermem: any driver, but it registers through the PeerDirect API that only MLNX_OFED's or
  DOCA-OFED's ib_core exports, so without one of them the module does not load ("Unknown symbol
  ib_register_peer_memory_client"); and it must be built against that stack's kernel sources
  (/usr/src/ofa_kernel), so the driver's modules come from DKMS, built after the OFED.
GPUDirect Storage (nvidia-fs) needs the open kernel modules; GDRCopy (gdrdrv) needs neither NIC nor OFED.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError, distro_key, major_minor, resolve_method

STACKS = ("auto", "inbox", "doca")
NICS = ("auto", "present")
# The distribution's RDMA stack: the verbs library and providers, and ibv_devinfo to look at it.
INBOX_PACKAGES = {"deb": ["rdma-core", "ibverbs-utils"], "rhel": ["rdma-core", "libibverbs-utils"]}
# DOCA-OFED from NVIDIA's DOCA repository: the kernel part (built by DKMS) and the user space.
DOCA_PACKAGE = "doca-ofed"
# GPUDirect Storage and GDRCopy: the kernel module (DKMS) and its library, from whichever repository carries them
# (NVIDIA's CUDA repository, Ubuntu's multiverse and Debian's non-free have nvidia-fs-dkms; GDRCopy's packages are
# published as files for a local repository).
GDS_PACKAGES = {"deb": ["nvidia-fs-dkms"], "rhel": ["nvidia-fs"]}
GDRCOPY_PACKAGES = {"deb": ["gdrdrv-dkms", "libgdrapi"], "rhel": ["gdrcopy-kmod", "gdrcopy"]}
# DOCA's repository directory per distribution ("<os><version>") and architecture.
DOCA_OS = {"ubuntu24": "ubuntu24.04", "ubuntu22": "ubuntu22.04", "debian12": "debian12", "rhel9": "rhel9", "rhel8": "rhel8"}
DOCA_ARCH = {"x86_64": "x86_64", "aarch64": "arm64-sbsa"}
# The kernel that first exports dma-buf for RDMA (ib_umem_dmabuf): 5.12.
DMABUF_KERNEL = (5, 12)
# The driver's methods that build nvidia-peermem against the OFED: DKMS on the host, or the driver container.
PEERMEM_METHODS = ("dkms", "containerized")
PRE_TURING = frozenset(("kepler", "maxwell", "pascal", "volta"))
MODULES_LOAD_PATH = "/etc/modules-load.d/gpuops-rdma.conf"
_DOCA_VERSION = re.compile(r"^\d+\.\d+(\.\d+)*(-\d+)?$")


def nics(gpu_info: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The node's RDMA NICs: ConnectX functions that are not an NVLink5 board's switch management bridges."""
    return [n for n in gpu_info.get("pci", {}).get("network", []) if not n.get("switch_managed")]


def dmabuf_blockers(gpu_info: Mapping[str, Any], module_type: str, kernel: str | None) -> list[str]:
    """Why DMA-BUF cannot work on the node (empty: it can)."""
    why = []
    if module_type != "open":
        why.append(f"it needs the open kernel modules, and the driver gets the {module_type or 'unknown'} ones")
    old = sorted({g["architecture"] for g in gpu_info.get("pci", {}).get("gpus", []) if g.get("architecture") in PRE_TURING})
    if old:
        why.append(f"it needs Turing or newer GPUs, and the node has {', '.join(old)}")
    version = major_minor(kernel)
    if version is None:
        why.append(f"the kernel release {kernel!r} does not read as a version")
    elif version < DMABUF_KERNEL:
        why.append(f"it needs Linux 5.12 or newer, and the node runs {kernel}")
    return why


@dataclass
class RdmaRequest:
    """The role's inputs, with the names of the variables they come from (for the messages)."""

    stack: str = "auto"
    nics: str = "auto"  # auto: the PCI bus says; present: the node has ConnectX NICs (an image built for such nodes)
    peermem: bool = False
    gds: bool = False
    gdrcopy: bool = False
    module_type: str = ""  # the driver's kernel module type: open or proprietary
    module_type_variable: str = "gpuops_driver_kernel_module_type"
    driver_method: str = "auto"
    driver_repository: str = "distro"
    kernel: str = ""  # the kernel the modules are for (empty: the running one)
    doca_version: str = ""
    doca_repo_url: str = ""


@dataclass
class RdmaPlan:
    nics: list[str]
    path: str  # dmabuf, peermem or none
    reason: str
    stack: str  # inbox, doca, host (an OFED already on the host, left as it is) or none
    family: str
    ofed: dict[str, Any]
    packages: list[str] = field(default_factory=list)  # what to install (names; DOCA's pinned by its repository)
    hold: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)  # to load now and at every boot (modules-load.d)
    doca_repo: dict[str, str] | None = None
    warnings: list[str] = field(default_factory=list)
    installed: dict[str, dict] = field(default_factory=dict)
    install: list[str] = field(default_factory=list)  # packages not installed yet
    not_held: list[str] = field(default_factory=list)

    def result(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("nics", "path", "reason", "stack", "family", "ofed", "packages", "hold", "modules",
                                              "doca_repo", "warnings", "installed", "install", "not_held")}


def doca_repository(url: str, version: str, family: str, architecture: str) -> dict[str, str]:
    """DOCA's repository for the release and distribution: <url>/<version>/<os>/<arch>/ (a flat repository)."""
    if not _DOCA_VERSION.match(version or ""):
        raise PlanError("gpuops_rdma_doca_version", f"{version!r} is not a DOCA release (such as 2.9.1); "
                                                    "gpuops_rdma_stack: doca installs exactly the release given")
    if family not in DOCA_OS:
        raise PlanError("gpuops_rdma_stack", f"'doca': the DOCA repository has no release for {family}; "
                                             f"accepted on {', '.join(sorted(DOCA_OS))}, else inbox")
    if architecture not in DOCA_ARCH:
        raise PlanError("gpuops_rdma_stack", f"'doca': no DOCA packages for the architecture {architecture!r}; "
                                             f"accepted on {', '.join(DOCA_ARCH)}")
    if not re.match(r"^https?://[^/\s]+", url or ""):
        raise PlanError("gpuops_rdma_doca_repo_url", f"{url!r} is not an http(s) URL with a host")
    return {"url": f"{url.rstrip('/')}/{version}/{DOCA_OS[family]}/{DOCA_ARCH[architecture]}/", "version": version}


def plan_rdma(request: RdmaRequest, gpu_info: Mapping[str, Any], *, distribution: str, major_version: str, architecture: str,
              installed: Callable[[str], dict[str, dict]], available: Callable[[str, list[str]], dict[str, bool]]) -> RdmaPlan:
    """The plan: refuses, before any change, what cannot work (naming the variable), else says what to do."""
    if request.stack not in STACKS:
        raise PlanError("gpuops_rdma_stack", f"{request.stack!r} is not accepted; one of {', '.join(STACKS)}")
    distro = distro_key(distribution, major_version)
    family = "rhel" if distro == "rhel" else "deb"
    key = f"{distribution.lower()}{major_version}" if distro != "rhel" else f"rhel{major_version}"
    node = gpu_info.get("node", {})
    ofed = dict(node.get("rdma", {}).get("ofed") or {"present": False, "version": None, "kernel_source": False})
    kernel = request.kernel or (node.get("kernel", {}).get("running") or "")
    module_type = request.module_type
    method = resolve_method(distribution, request.driver_repository, request.driver_method)
    _check_storage(request, module_type)

    if request.nics not in NICS:
        raise PlanError("gpuops_rdma_nics", f"{request.nics!r} is not accepted; one of {', '.join(NICS)}")
    found = [str(n["bus_id"]) for n in nics(gpu_info)]
    if not found and request.nics != "present":
        plan = RdmaPlan(nics=[], path="none", reason="no ConnectX NIC on the PCI bus: no RDMA stack, no GPUDirect RDMA",
                        stack="none", family=distro, ofed=ofed)
        if request.stack == "doca":
            plan.warnings.append("gpuops_rdma_stack is 'doca', but the node has no ConnectX NIC: DOCA-OFED is not installed")
    else:
        if request.stack == "doca":
            stack = "doca"
        elif ofed["present"]:
            stack = "host"
        else:
            stack = "inbox"
        with_ofed = stack in ("doca", "host")
        blockers = dmabuf_blockers(gpu_info, module_type, kernel)
        nic_text = f"{len(found)} ConnectX NIC(s)" if found else "ConnectX NICs (gpuops_rdma_nics: present; none visible here)"
        if request.peermem:
            _check_peermem(request, with_ofed, method)
            path, reason = "peermem", f"{nic_text}; nvidia-peermem set by gpuops_rdma_peermem"
        elif not blockers:
            path, reason = "dmabuf", (f"{nic_text}; DMA-BUF: {module_type} kernel modules, Turing or newer GPUs, Linux {kernel}"
                                      + ("; the distribution's rdma-core is enough" if stack == "inbox" else ""))
        elif with_ofed and method in PEERMEM_METHODS:
            path, reason = "peermem", f"{nic_text}; DMA-BUF cannot work ({'; '.join(blockers)}): nvidia-peermem with the OFED"
        else:
            path = "none"
            reason = f"{nic_text}; no GPUDirect RDMA: DMA-BUF cannot work ({'; '.join(blockers)})"
        plan = RdmaPlan(nics=found, path=path, reason=reason, stack=stack, family=distro, ofed=ofed)
        if path == "none":
            plan.warnings.append(f"{reason}; and nvidia-peermem needs MLNX_OFED or DOCA-OFED (gpuops_rdma_stack: doca) with "
                                 "gpuops_driver_method: dkms")
        if stack == "inbox":
            plan.packages += INBOX_PACKAGES[family]
        elif stack == "doca":
            plan.doca_repo = doca_repository(request.doca_repo_url, request.doca_version, key, architecture)
            plan.packages.append(DOCA_PACKAGE)
            plan.hold.append(DOCA_PACKAGE)
        if path == "peermem" and method != "containerized":
            plan.modules.append("nvidia-peermem")
    # GPUDirect Storage and GDRCopy: the variable, the packages, the module.
    extra = [(variable, packages[family], module) for wanted, variable, packages, module in
             ((request.gds, "gpuops_rdma_gds", GDS_PACKAGES, "nvidia-fs"),
              (request.gdrcopy, "gpuops_rdma_gdrcopy", GDRCOPY_PACKAGES, "gdrdrv")) if wanted]
    everything = installed(family)
    unknown = [n for _variable, names, _module in extra for n in names if n not in everything]
    _check_available([(v, names) for v, names, _module in extra],
                     dict.fromkeys(everything, True) | (available(family, unknown) if unknown else {}))
    for _variable, names, module in extra:
        plan.packages += names
        plan.modules.append(module)

    plan.installed = {n: everything[n] for n in plan.packages if n in everything}
    plan.install = [n for n in plan.packages if n not in everything]
    plan.not_held = [n for n in plan.hold if n in everything and not everything[n].get("held")]
    return plan


def _check_peermem(request: RdmaRequest, with_ofed: bool, method: str) -> None:
    if not with_ofed:
        raise PlanError("gpuops_rdma_peermem", "true needs MLNX_OFED or DOCA-OFED on the host, and it has neither (no "
                                               "ofed_info, no /usr/src/ofa_kernel): nvidia-peermem registers through their "
                                               "PeerDirect API, which the distribution's RDMA stack lacks; accepted: "
                                               "gpuops_rdma_stack: doca (with gpuops_rdma_doca_version), or false for DMA-BUF")
    if method not in PEERMEM_METHODS:
        raise PlanError("gpuops_rdma_peermem", f"true needs the driver's modules built by DKMS against the OFED's kernel "
                                               f"sources, and gpuops_driver_method {request.driver_method!r} installs {method} "
                                               "modules (built against the distribution's RDMA stack); accepted: "
                                               "gpuops_driver_method: dkms or containerized")


def _check_storage(request: RdmaRequest, module_type: str) -> None:
    if request.gds and module_type != "open":
        raise PlanError("gpuops_rdma_gds", f"true needs the open kernel modules (nvidia-fs 2.17.5 and later), and "
                                           f"{request.module_type_variable} gives {module_type or 'none'!r}; accepted: "
                                           "gpuops_driver_kernel_module_type: open (Turing or newer GPUs), or false")


def _check_available(wanted: list[tuple[str, list[str]]], found: Mapping[str, bool]) -> None:
    """GDS and GDRCopy come from whichever repository the node has that carries them: refuse when none does."""
    for variable, names in wanted:
        missing = [n for n in names if not found.get(n)]
        if missing:
            raise PlanError(variable, f"true needs {', '.join(missing)}, and no repository of the node offers "
                                      f"{'it' if len(missing) == 1 else 'them'} (Ubuntu's multiverse and Debian's non-free carry nvidia-fs-dkms; "
                                      "NVIDIA publishes GDRCopy's packages as files, for a repository of your own); "
                                      "accepted: a repository with the packages, or false")
