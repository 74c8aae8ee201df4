"""The package sources of the driver plan, one per family, asked directly.

Ubuntu's and Debian's archives answer from apt-cache output recorded on the lab machines; the CUDA
repository, which the lab does not mirror, from candidate versions written out here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import host
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver_sources import (
    CudaDeb,
    CudaRpm,
    DebianArchive,
    SourceQuery,
    UbuntuArchive,
    source_for,
)

RECORDED = Path(__file__).parent / "recorded"


class Index:
    """A package index answering from candidate versions, and remembering what it was asked."""

    def __init__(self, candidates: dict[str, str | None], names: list[str] | None = None,
                 depends: dict[str, list[str]] | None = None) -> None:
        self._candidates = candidates
        self._names = names or []
        self._depends = depends or {}
        self.asked: list[tuple[str, list[str] | str]] = []

    @classmethod
    def recorded(cls, release: str) -> Index:
        names = RECORDED / f"{release}-pkgnames.txt"
        depends = RECORDED / f"{release}-depends.txt"
        return cls(host.parse_policy((RECORDED / f"{release}-policy.txt").read_text()),
                   names.read_text().split() if names.exists() else [],
                   host.parse_depends(depends.read_text()) if depends.exists() else {})

    def depends(self, names: list[str]) -> dict[str, list[str]]:
        self.asked.append(("depends", list(names)))
        return {n: self._depends[n] for n in names if n in self._depends}

    def candidates(self, names: list[str]) -> dict[str, str | None]:
        self.asked.append(("candidates", list(names)))
        return {n: self._candidates.get(n) for n in names}

    def package_names(self, prefix: str) -> list[str]:
        self.asked.append(("package_names", prefix))
        return sorted(n for n in self._names if n.startswith(prefix))


def query(**kw: Any) -> SourceQuery:
    base = SourceQuery(family="ubuntu", distribution="Ubuntu", major_version="24", architecture="x86_64", method="precompiled",
                       module_type="open", module_type_reason="Hopper GPUs support the open modules", module_type_forced=False,
                       kernel="6.8.0-151-generic", compute_only=True, branch=None, installed_branch=None,
                       cuda_repo_url="https://mirror.example/cuda")
    return replace(base, **kw)


# A V100, as gpu_info lists it: Volta runs the proprietary modules up to branch 580.
V100 = {"bus_id": "0000:18:00.0", "vendor_id": "10de", "device_id": "1db4", "architecture": "volta", "name": "Tesla V100-PCIE-16GB",
        "grace": False}


@pytest.mark.parametrize(("family", "repository", "source"), [
    ("ubuntu", "distro", UbuntuArchive), ("debian", "distro", DebianArchive), ("ubuntu", "cuda", CudaDeb),
    ("debian", "cuda", CudaDeb), ("rhel", "cuda", CudaRpm), ("rhel", "distro", CudaRpm),
])
def test_each_family_and_repository_has_its_source(family, repository, source):
    assert source_for(family, repository).__class__ is source


# Ubuntu's archive ---------------------------------------------------------------------------------

def test_ubuntu_archive_takes_the_newest_branch_with_every_package_for_the_kernel():
    index = Index.recorded("noble")
    choice = UbuntuArchive().choose(query(), index)
    # 615 is the newest -server branch of the recorded archive with signed modules for 6.8.0-151.
    assert choice.branch == 615
    assert choice.packages == ["nvidia-headless-no-dkms-615-server-open", "nvidia-utils-615-server",
                               "linux-modules-nvidia-615-server-open-6.8.0-151-generic"]
    assert choice.candidates["linux-modules-nvidia-615-server-open-6.8.0-151-generic"] == "6.8.0-151.151"
    assert (choice.module_type, choice.cuda_repo, choice.rhel, choice.warnings) == ("open", None, None, [])
    assert index.asked[0] == ("package_names", "nvidia-headless-no-dkms-")


def test_ubuntu_archive_keeps_the_installed_branch_without_reading_every_branch():
    index = Index.recorded("noble")
    choice = UbuntuArchive().choose(query(installed_branch=580), index)
    assert choice.branch == 580
    asked = [names for kind, names in index.asked if kind == "candidates"]
    # The headless names, then only the 580 packages not read yet: no other branch's modules.
    assert len(asked) == 2
    assert asked[1] == ["nvidia-utils-580-server", "linux-modules-nvidia-580-server-open-6.8.0-151-generic"]


def test_ubuntu_archive_without_a_branch_for_the_kernel_names_the_branches_it_has():
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: unset, and no -server driver branch has every package for kernel "
                                        r"6.8.0-90-generic in Ubuntu 24 \(distro repository\) \(branches with packages: 580, 595, 615\)"):
        UbuntuArchive().choose(query(kernel="6.8.0-90-generic"), Index.recorded("noble"))


def test_ubuntu_archive_with_no_driver_in_the_lists_says_to_refresh_them():
    """The device machine's case (lab/device_check.sh): no network, so package lists that name no NVIDIA package."""
    with pytest.raises(PlanError, match=r"\(branches with packages: none\); apt's package lists name no NVIDIA driver package here: "
                                        r"refresh them \(apt-get update\), with the restricted component enabled$"):
        UbuntuArchive().choose(query(), Index({}))


def test_ubuntu_archive_keeps_an_installed_branch_retired_since_and_says_what_an_install_would_bring():
    """A node on 570 from before Canonical made 570's packages depend on 580's: the plan keeps it, with a warning."""
    index = Index.recorded("noble")
    # Candidates the recorded policy lacks (the DKMS method's packages of 570), as apt-cache policy answers them there.
    index._candidates |= {"nvidia-headless-570-server-open": "570.211.01-0ubuntu1.24.04.1", "linux-headers-6.8.0-151-generic": "6.8.0-151.151"}
    choice = UbuntuArchive().choose(query(installed_branch=570, method="dkms", kernel="6.8.0-151-generic"), index)
    assert choice.branch == 570
    assert choice.warnings == [
        "branch 570 (installed): nvidia-headless-no-dkms-570-server-open 570.211.01-0ubuntu1.24.04.1 in Ubuntu 24 (distro repository) "
        "is a transitional package that depends on nvidia-headless-no-dkms-580-server-open: installing branch 570 installs branch 580; "
        "set gpuops_driver_branch (with gpuops_driver_allow_branch_change) to move deliberately"]


def test_ubuntu_archive_stops_legacy_gpus_at_580():
    index = Index.recorded("jammy")
    choice = UbuntuArchive().choose(query(major_version="22", module_type="proprietary", kernel="5.15.0-204-generic", gpus=[V100]),
                                    index)
    assert choice.branch == 580
    assert "linux-signatures-nvidia-5.15.0-204-generic" in choice.packages
    # Asked without the GPU, the same archive offers a newer branch.
    newer = UbuntuArchive().choose(query(major_version="22", module_type="proprietary", kernel="5.15.0-204-generic"),
                                   Index.recorded("jammy"))
    assert newer.branch > 580


def test_ubuntu_archive_missing_packages_are_a_package_install():
    source = UbuntuArchive()
    names = source.package_names(["nvidia-utils-580-server", "linux-headers-6.8.0-151-generic"])
    assert source.missing(names, 580, {"branch": 580}, {"nvidia-utils-580-server": {}}) == ["linux-headers-6.8.0-151-generic"]
    assert source.to_unhold({"held": ["nvidia-utils-570-server"]}, install=True) == ["nvidia-utils-570-server"]
    assert source.to_unhold({"held": ["nvidia-utils-570-server"]}, install=False) == []


# Debian's archive ---------------------------------------------------------------------------------

def debian(**kw: Any) -> SourceQuery:
    return query(family="debian", distribution="Debian", major_version="12", method="dkms", kernel="6.1.0-56-amd64", **kw)


def test_debian_archive_has_its_release_branch_and_dkms_packages():
    choice = DebianArchive().choose(debian(module_type="proprietary", module_type_reason="set"), Index.recorded("bookworm"))
    assert (choice.branch, choice.module_type, choice.module_type_reason, choice.warnings) == (535, "proprietary", "set", [])
    assert choice.packages == ["nvidia-kernel-dkms", "libcuda1", "nvidia-smi", "nvidia-persistenced", "linux-headers-6.1.0-56-amd64"]
    assert choice.candidates["libcuda1"] == "535.309.01-0+deb12u1"


def test_debian_archive_replaces_lagging_open_modules_unless_they_were_asked_for():
    choice = DebianArchive().choose(debian(), Index.recorded("bookworm"))
    assert choice.module_type == "proprietary"
    assert choice.warnings == [choice.module_type_reason]
    assert "nvidia-open-kernel-dkms is 535.261.03" in choice.module_type_reason
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_module_type: 'open': Debian's nvidia-open-kernel-dkms is 535.261.03"):
        DebianArchive().choose(debian(module_type_forced=True), Index.recorded("bookworm"))


def test_debian_archive_refuses_another_branch_and_a_missing_driver():
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 580: Debian 12 \(distro repository\) has the driver of branch 535 only"):
        DebianArchive().choose(debian(installed_branch=580), Index.recorded("bookworm"))
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: None: Debian 12 .* has no NVIDIA driver \(is the non-free component"):
        DebianArchive().choose(debian(), Index({}))


# NVIDIA's CUDA repository, deb --------------------------------------------------------------------

CUDA_580_PACKAGES = ("nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-utils-580")
CUDA_580 = {name: "580.105.08-1" for name in CUDA_580_PACKAGES} | {"linux-headers-6.8.0-151-generic": "6.8.0-151.151"}


def test_cuda_deb_needs_a_branch_and_checks_nothing_before_the_repository_is_configured():
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: unset: the CUDA repository serves every branch"):
        CudaDeb().choose(query(method="dkms"), Index(CUDA_580))
    index = Index({})
    choice = CudaDeb().choose(query(method="dkms", branch=580), index)
    assert choice.packages == ["nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-utils-580",
                               "linux-headers-6.8.0-151-generic"]
    assert choice.cuda_repo == {"url": "https://mirror.example/cuda/ubuntu24/x86_64/", "directory": "ubuntu24", "arch": "x86_64"}
    assert (choice.candidates, index.asked) == ({}, [])


def test_cuda_deb_on_ubuntu_checks_the_repository_candidates():
    # Ubuntu's transitional-package check looks for the archive's nvidia-headless package, which the
    # CUDA repository does not have: the check must pass over it, not fail.
    choice = CudaDeb().choose(query(method="dkms", branch=580, repo_ready=True), Index(CUDA_580))
    assert choice.candidates == {p: CUDA_580[p] for p in choice.packages}
    without_compute = {p: v for p, v in CUDA_580.items() if p != "libnvidia-compute-580"}
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 580: no package libnvidia-compute-580 in Ubuntu 24 \(cuda repository\); "
                                        r"no branch has packages here"):
        CudaDeb().choose(query(method="dkms", branch=580, repo_ready=True), Index(without_compute))


def test_cuda_deb_keeps_the_installed_branch_and_stops_legacy_gpus_at_580():
    choice = CudaDeb().choose(debian(repo_ready=False, installed_branch=590), Index({}))
    assert choice.branch == 590 and choice.packages[0] == "nvidia-driver-pinning-590"
    assert choice.cuda_repo is not None and choice.cuda_repo["directory"] == "debian12"
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 590: Tesla V100-PCIE-16GB are supported up to branch 580"):
        CudaDeb().choose(debian(branch=590, gpus=[V100]), Index({}))


# NVIDIA's CUDA repository, rpm --------------------------------------------------------------------

def rhel(**kw: Any) -> SourceQuery:
    return query(family="rhel", distribution="Rocky", major_version="9", method="dkms", kernel="5.14.0-503.el9.x86_64", **kw)


def test_cuda_rpm_plans_the_module_stream_without_reading_the_index():
    index = Index({})
    choice = CudaRpm().choose(rhel(branch=580), index)
    assert choice.packages == ["@nvidia-driver:580-open/default", "kernel-devel-5.14.0-503.el9.x86_64",
                               "kernel-headers-5.14.0-503.el9.x86_64"]
    assert choice.rhel == {"module_stream": "nvidia-driver:580-open", "packages": choice.packages, "versionlock": ["*nvidia*580*"]}
    assert choice.cuda_repo is not None and choice.cuda_repo["url"] == "https://mirror.example/cuda/rhel9/x86_64/"
    assert index.asked == []


def test_cuda_rpm_is_installed_when_the_branch_is():
    source = CudaRpm()
    names = source.package_names(["@nvidia-driver:580-open/default", "kernel-devel-5.14.0-503.el9.x86_64"])
    assert names == ["nvidia-driver:580-open", "kernel-devel-5.14.0-503.el9.x86_64"]
    # A module stream is no package name: the branch of the installed driver decides.
    assert source.missing(names, 580, {"branch": 580}, {}) == []
    assert source.missing(names, 580, {"branch": 570}, {"kernel-devel-5.14.0-503.el9.x86_64": {}}) == names
    assert source.missing(names, 580, {"branch": None}, {}) == names
