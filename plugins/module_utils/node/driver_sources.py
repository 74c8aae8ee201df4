# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Where the driver's packages come from: one package source per family.

Ubuntu's archive, Debian's archive, NVIDIA's CUDA repository for Debian and Ubuntu (deb) and for the
RHEL family (rpm). Each source decides, for its family, which branch the node gets from what its
repository holds, the packages of that branch, the candidates it checks, and which planned packages
the node still lacks. driver_host.plan_driver picks the source and assembles the plan around it.
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import PciGpu
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver


class PackageIndex(Protocol):
    """What a source reads from the package manager (host.Host answers it)."""

    def candidates(self, names: list[str]) -> dict[str, str | None]: ...

    def package_names(self, prefix: str) -> list[str]: ...

    def depends(self, names: list[str]) -> dict[str, list[str]]: ...


@dataclass(frozen=True)
class SourceQuery:
    """What a source is asked: the request, resolved as far as it goes without the package index."""

    family: str  # 'ubuntu', 'debian' or 'rhel' (driver.distro_key)
    distribution: str
    major_version: str
    architecture: str
    method: str  # precompiled or dkms
    module_type: str  # open or proprietary
    module_type_reason: str
    module_type_forced: bool  # set by the user, not chosen from the GPUs
    kernel: str
    compute_only: bool
    branch: int | None  # the branch asked for; None for "the installed one, else the default"
    installed_branch: int | None
    gpus: list[PciGpu] = field(default_factory=list)
    cuda_repo_url: str = ""
    repo_ready: bool = False  # the CUDA repository is configured: its candidates can be checked


@dataclass
class SourceChoice:
    """What a source answers: the branch and its packages, and what it found on the way."""

    branch: int
    packages: list[str]
    module_type: str
    module_type_reason: str
    candidates: dict[str, str | None] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    cuda_repo: dict[str, str] | None = None
    rhel: dict[str, Any] | None = None


class PackageSource(ABC):
    """One family's packages: the branch, the names, the candidate checks and what is missing."""

    repository: ClassVar[str]

    @abstractmethod
    def choose(self, query: SourceQuery, index: PackageIndex) -> SourceChoice:
        """The branch and packages to install; raises driver.PlanError for what the source cannot serve."""

    def where(self, query: SourceQuery) -> str:
        """The source as the refusals name it."""
        return f"{query.distribution} {query.major_version} ({self.repository} repository)"

    def package_names(self, packages: list[str]) -> list[str]:
        """The plain package names of the planned packages (what candidates are reported for)."""
        return list(packages)

    def missing(self, names: list[str], branch: int, installed: Mapping[str, Any], everything: Mapping[str, Any]) -> list[str]:
        """The planned packages the node lacks: any of them makes the plan an install."""
        return [name for name in names if name not in everything]

    def to_unhold(self, installed: Mapping[str, Any], install: bool) -> list[str]:
        """The held driver packages to release before an install replaces them."""
        return list(installed["held"]) if install else []


class UbuntuArchive(PackageSource):
    """Ubuntu's archive: the -server branches, with Canonical's signed precompiled modules or DKMS."""

    repository = "distro"

    def choose(self, query: SourceQuery, index: PackageIndex) -> SourceChoice:
        flavour = "-server" + ("-open" if query.module_type == "open" else "")
        names = [n for n in index.package_names("nvidia-headless-no-dkms-") if n.endswith(flavour)]
        candidates = index.candidates(names)

        @functools.cache
        def every_branch() -> tuple[dict[int, tuple[str, str]], list[int]]:
            """The transitional branches and the branches with packages of their own: apt-cache depends on every branch's
            package, a quarter of a second, so only where the plan chooses the branch or a message lists them."""
            moved = driver.transitional_branches(index.depends(names))
            branches = [b for b in driver.available_branches(names, candidates, query.module_type) if b not in moved]
            if any(g.get("architecture") in driver.LEGACY_ARCHITECTURES for g in query.gpus):
                branches = [b for b in branches if b <= driver.LAST_LEGACY_BRANCH]
            return moved, branches

        branch = query.branch if query.branch is not None else query.installed_branch
        if branch is None:
            moved, branches = every_branch()
            branch = self._newest_complete(query, index, branches, candidates)
        else:
            # The branch asked for, or the installed one: whether it is transitional is its own package's question.
            moved = driver.transitional_branches(index.depends([n for n in names if n == f"nvidia-headless-no-dkms-{branch}{flavour}"]))
        warnings = []
        if branch in moved:
            package, target = moved[branch]
            why = (f"{package} {candidates.get(package)} in {self.where(query)} is a transitional package that depends on {target}: "
                   f"installing branch {branch} installs branch {driver.package_branch(target, None)}")
            if query.branch is not None:
                raise driver.PlanError("gpuops_driver_branch", f"{branch}: {why}; branches with packages of their own here: "
                                                               f"{', '.join(map(str, every_branch()[1])) or 'none'}")
            # The installed branch, retired since: the node keeps it, but any package installed for it brings the newer one.
            warnings.append(f"branch {branch} (installed): {why}; set gpuops_driver_branch (with gpuops_driver_allow_branch_change) "
                            "to move deliberately")
        packages = self._packages(query, branch)
        candidates |= index.candidates([p for p in packages if p not in candidates])
        driver.check_branch_for_gpus(branch, query.gpus)
        if driver.candidates_refused(query.family, packages, candidates, branch):
            # Refused: the message lists the branches there are.
            driver.check_candidates(query.family, packages, candidates, branch, self.where(query), every_branch()[1])
        return SourceChoice(branch, packages, query.module_type, query.module_type_reason, candidates, warnings)

    def _packages(self, query: SourceQuery, branch: int) -> list[str]:
        return driver.ubuntu_packages(branch, query.module_type, query.method, query.kernel, query.architecture, query.compute_only)

    def _newest_complete(self, query: SourceQuery, index: PackageIndex, branches: list[int], candidates: dict[str, str | None]) -> int:
        """The newest branch with every package for this kernel (a new branch's precompiled modules
        come for current kernels only). Adds the candidates it reads to `candidates`."""
        wanted = [p for b in branches for p in self._packages(query, b) if p not in candidates]
        candidates |= index.candidates(wanted)
        complete = [b for b in branches if all(candidates.get(p) for p in self._packages(query, b))]
        if not complete:
            # None at all: apt's lists name no driver (never refreshed, as on a machine that has had no network, or the
            # restricted component left out), which the kernel is not the cause of.
            lists = "" if branches or index.package_names("nvidia-headless-no-dkms-") else (
                "; apt's package lists name no NVIDIA driver package here: refresh them (apt-get update), with the restricted "
                "component enabled")
            raise driver.PlanError("gpuops_driver_branch",
                                   f"unset, and no -server driver branch has every package for kernel {query.kernel} in {self.where(query)} "
                                   f"(branches with packages: {', '.join(map(str, branches)) or 'none'}){lists}")
        return complete[-1]


class DebianArchive(PackageSource):
    """Debian's non-free: one driver branch per release, DKMS modules only."""

    repository = "distro"

    def choose(self, query: SourceQuery, index: PackageIndex) -> SourceChoice:
        candidates = index.candidates(["libcuda1", "nvidia-kernel-dkms", "nvidia-open-kernel-dkms"])
        here = driver.branch_of(candidates.get("libcuda1"))
        branch = query.branch
        if branch is None:
            branch = query.installed_branch or here
        if here is None or branch != here:
            raise driver.PlanError("gpuops_driver_branch",
                                   f"{branch}: {self.where(query)} has the driver of branch {here} only" if here else
                                   f"{branch}: {self.where(query)} has no NVIDIA driver (is the non-free component enabled?)")
        module_type, changed_why = driver.check_debian_flavour(query.module_type, candidates, query.module_type_forced)
        packages = driver.debian_packages(module_type, query.kernel, query.compute_only)
        candidates |= index.candidates([p for p in packages if p not in candidates])
        driver.check_branch_for_gpus(branch, query.gpus)
        driver.check_candidates(query.family, packages, candidates, branch, self.where(query), [here])
        return SourceChoice(branch, packages, module_type, changed_why or query.module_type_reason, candidates,
                            warnings=[changed_why] if changed_why else [])


class _CudaRepository(PackageSource):
    """NVIDIA's CUDA repository: every branch, so the branch is named (or kept); DKMS or module streams."""

    repository = "cuda"

    def _branch(self, query: SourceQuery) -> int:
        branch = query.branch if query.branch is not None else query.installed_branch
        if branch is None:
            raise driver.PlanError("gpuops_driver_branch", "unset: the CUDA repository serves every branch, so name one, e.g. 580")
        driver.check_branch_for_gpus(branch, query.gpus)
        return branch

    def _repo(self, query: SourceQuery) -> dict[str, str]:
        return driver.cuda_repo(query.family, query.distribution, query.major_version, query.architecture, query.cuda_repo_url)


class CudaDeb(_CudaRepository):
    """The CUDA repository for Debian and Ubuntu: DKMS packages; candidates checked once it is configured."""

    def choose(self, query: SourceQuery, index: PackageIndex) -> SourceChoice:
        branch = self._branch(query)
        repo = self._repo(query)
        packages = driver.cuda_deb_packages(branch, query.module_type, query.kernel, query.compute_only)
        candidates: dict[str, str | None] = {}
        if query.repo_ready:
            candidates = index.candidates(packages)
            driver.check_candidates(query.family, packages, candidates, branch, self.where(query), [])
        return SourceChoice(branch, packages, query.module_type, query.module_type_reason, candidates, cuda_repo=repo)


class CudaRpm(_CudaRepository):
    """The CUDA repository for the RHEL family: a dnf module stream (8, 9) or branch-named packages (10)."""

    def choose(self, query: SourceQuery, index: PackageIndex) -> SourceChoice:
        branch = self._branch(query)
        repo = self._repo(query)
        rhel = driver.rhel_plan(query.major_version, branch, query.module_type, query.method, query.kernel)
        return SourceChoice(branch, rhel["packages"], query.module_type, query.module_type_reason, cuda_repo=repo, rhel=rhel)

    def package_names(self, packages: list[str]) -> list[str]:
        # '@nvidia-driver:580-dkms/default' is the module stream nvidia-driver:580-dkms.
        return [p.split("/", maxsplit=1)[0].lstrip("@") for p in packages]

    def missing(self, names: list[str], branch: int, installed: Mapping[str, Any], everything: Mapping[str, Any]) -> list[str]:
        # A module stream or a branch-named package: installed when the branch's driver is.
        return [] if installed["branch"] == branch else names


def source_for(family: str, repository: str) -> PackageSource:
    """The source serving a family from a repository (the RHEL family has the CUDA repository only)."""
    if family == "rhel":
        return CudaRpm()
    if repository == "cuda":
        return CudaDeb()
    return UbuntuArchive() if family == "ubuntu" else DebianArchive()
