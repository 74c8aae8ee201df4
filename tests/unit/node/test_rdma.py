"""The RDMA plan: which stack, which GPUDirect path, what is refused before any change; and the host OFED read."""

from __future__ import annotations

import copy

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import hardware, rdma
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError

NOTHING: dict[str, dict] = {}
OFED = {"present": True, "version": "OFED-internal-24.10-1.1.4", "kernel_source": True}


def with_ofed(info: dict, ofed: dict | None = None) -> dict:
    info = copy.deepcopy(info)
    info["node"]["rdma"]["ofed"] = ofed or OFED
    return info


def plan(info: dict, distribution: str = "Ubuntu", major: str = "24", installed: dict | None = None,
         offered: tuple[str, ...] = ("nvidia-fs-dkms", "gdrdrv-dkms", "libgdrapi"), **request) -> rdma.RdmaPlan:
    request.setdefault("module_type", "open")
    asked: list[list[str]] = []

    def available(family: str, names: list[str]) -> dict[str, bool]:
        asked.append(names)
        return {n: n in offered for n in names}

    result = rdma.plan_rdma(rdma.RdmaRequest(**request), info, distribution=distribution, major_version=major,
                            architecture="x86_64", installed=lambda family: installed or NOTHING, available=available)
    assert all(asked), "asked the repositories for nothing"
    return result


def refused(info: dict, variable: str, *fragments: str, **kwargs) -> None:
    with pytest.raises(PlanError) as exc:
        plan(info, **kwargs)
    assert exc.value.variable == variable
    for fragment in fragments:
        assert fragment in str(exc.value)


# --- the GPUDirect path -------------------------------------------------------------------------------------------

def test_hgx_h100_with_open_modules_takes_dmabuf_on_the_distributions_stack(info_of):
    p = plan(info_of("hgx-h100"))
    assert (p.path, p.stack) == ("dmabuf", "inbox")
    assert len(p.nics) == 8
    assert p.packages == p.install == ["rdma-core", "ibverbs-utils"]
    assert p.modules == [] and p.hold == [] and p.doca_repo is None and p.warnings == []
    assert "Linux 6.8.0-45-generic" in p.reason


def test_installed_packages_are_not_installed_again(info_of):
    have = {"rdma-core": {"version": "50.0-2build2", "held": False}, "ibverbs-utils": {"version": "50.0-2build2", "held": False}}
    p = plan(info_of("hgx-h100"), installed=have)
    assert p.install == [] and set(p.installed) == {"rdma-core", "ibverbs-utils"}


def test_rhel_names_its_utilities_package(info_of):
    assert plan(info_of("hgx-h100"), distribution="Rocky", major="9").packages == ["rdma-core", "libibverbs-utils"]


@pytest.mark.parametrize("profile", ["l40s", "v100", "a100-pcie-mig", "no-gpu"])
def test_a_node_without_nics_gets_nothing(profile, info_of):
    p = plan(info_of(profile), module_type="proprietary" if profile == "v100" else "open")
    assert (p.path, p.stack, p.packages, p.modules, p.nics) == ("none", "none", [], [], [])


def test_an_image_for_nodes_with_nics_gets_the_stack_though_none_is_visible(info_of):
    p = plan(info_of("no-gpu"), nics="present")
    assert (p.path, p.stack, p.nics, p.packages) == ("dmabuf", "inbox", [], ["rdma-core", "ibverbs-utils"])
    assert "none visible here" in p.reason


def test_an_unknown_nics_value_is_refused(info_of):
    refused(info_of("l40s"), "gpuops_rdma_nics", "'yes' is not accepted; one of auto, present", nics="yes")


def test_switch_management_bridges_are_not_rdma_nics(info_of):
    info = info_of("hgx-b200")
    bridges = [n["bus_id"] for n in info["pci"]["network"] if n["switch_managed"]]
    assert bridges
    p = plan(info)
    assert p.nics and not set(bridges) & set(p.nics)


@pytest.mark.parametrize(("change", "why"), [
    ({"module_type": "proprietary"}, "needs the open kernel modules, and the driver gets the proprietary ones"),
    ({"kernel": "5.10.0-28-amd64"}, "needs Linux 5.12 or newer, and the node runs 5.10.0-28-amd64"),
    ({"kernel": "not-a-kernel"}, "does not read as a version"),
])
def test_where_dmabuf_cannot_work_and_no_ofed_there_is_no_gpudirect_and_a_warning(change, why, info_of):
    p = plan(info_of("hgx-h100"), **change)
    assert p.path == "none" and why in p.reason
    assert p.stack == "inbox" and p.packages == ["rdma-core", "ibverbs-utils"]
    assert len(p.warnings) == 1 and "gpuops_rdma_stack: doca" in p.warnings[0]


def test_pre_turing_gpus_cannot_use_dmabuf(info_of):
    info = copy.deepcopy(info_of("hgx-h100"))
    info["pci"]["gpus"][0]["architecture"] = "volta"
    assert "needs Turing or newer GPUs, and the node has volta" in plan(info).reason


def test_where_dmabuf_cannot_work_a_host_ofed_with_dkms_gives_peermem(info_of):
    p = plan(with_ofed(info_of("hgx-h100")), module_type="proprietary", driver_method="dkms")
    assert (p.path, p.stack) == ("peermem", "host")
    assert p.packages == [] and p.modules == ["nvidia-peermem"]


def test_a_host_ofed_is_kept_and_dmabuf_still_preferred(info_of):
    p = plan(with_ofed(info_of("hgx-h100")))
    assert (p.path, p.stack, p.packages) == ("dmabuf", "host", [])


def test_peermem_when_asked_with_a_host_ofed(info_of):
    p = plan(with_ofed(info_of("hgx-h100")), peermem=True, driver_method="dkms")
    assert p.path == "peermem" and p.modules == ["nvidia-peermem"] and "gpuops_rdma_peermem" in p.reason


def test_peermem_with_a_containerized_driver_loads_nothing_on_the_host(info_of):
    p = plan(with_ofed(info_of("hgx-h100")), peermem=True, driver_method="containerized")
    assert p.path == "peermem" and p.modules == []


# --- refused before any change ----------------------------------------------------------------------------------

def test_peermem_without_an_ofed_is_refused_naming_what_is_missing(info_of):
    refused(info_of("hgx-h100"), "gpuops_rdma_peermem", "MLNX_OFED or DOCA-OFED", "no ofed_info, no /usr/src/ofa_kernel",
            "gpuops_rdma_stack: doca", peermem=True, driver_method="dkms")


def test_peermem_with_precompiled_modules_is_refused(info_of):
    refused(with_ofed(info_of("hgx-h100")), "gpuops_rdma_peermem", "gpuops_driver_method 'auto' installs precompiled",
            "accepted: gpuops_driver_method: dkms or containerized", peermem=True)


def test_peermem_on_debian_auto_is_dkms(info_of):
    assert plan(with_ofed(info_of("hgx-h100")), distribution="Debian", major="12", peermem=True).path == "peermem"


def test_gds_with_the_proprietary_modules_is_refused_even_without_nics(info_of):
    refused(info_of("v100"), "gpuops_rdma_gds", "needs the open kernel modules", "gpuops_driver_kernel_module_type gives 'proprietary'",
            gds=True, module_type="proprietary")


@pytest.mark.parametrize(("option", "missing"), [("gds", "nvidia-fs-dkms"), ("gdrcopy", "gdrdrv-dkms, libgdrapi")])
def test_storage_and_gdrcopy_need_a_repository_that_has_them(option, missing, info_of):
    refused(info_of("hgx-h100"), f"gpuops_rdma_{option}", f"true needs {missing}, and no repository of the node offers",
            "accepted: a repository with the packages, or false", offered=(), **{option: True})


def test_installed_storage_packages_need_no_repository(info_of):
    have = {n: {"version": "1", "held": False} for n in ("gdrdrv-dkms", "libgdrapi")}
    p = plan(info_of("l40s"), gdrcopy=True, installed=have, offered=())
    assert p.install == [] and p.modules == ["gdrdrv"]


def test_gds_and_gdrcopy_add_their_modules_and_packages(info_of):
    p = plan(info_of("l40s"), gds=True, gdrcopy=True)
    assert p.modules == ["nvidia-fs", "gdrdrv"]
    assert p.packages == ["nvidia-fs-dkms", "gdrdrv-dkms", "libgdrapi"]


def test_an_unknown_stack_is_refused(info_of):
    refused(info_of("hgx-h100"), "gpuops_rdma_stack", "'mofed' is not accepted; one of auto, inbox, doca", stack="mofed")


# --- DOCA-OFED ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("distribution", "major", "arch_dir"), [
    ("Ubuntu", "24", "ubuntu24.04"), ("Ubuntu", "22", "ubuntu22.04"), ("Debian", "12", "debian12"), ("Rocky", "9", "rhel9"),
])
def test_doca_repository_per_distribution(distribution, major, arch_dir, info_of):
    p = plan(info_of("hgx-h100"), distribution=distribution, major=major, stack="doca", doca_version="2.9.1",
             doca_repo_url="https://doca.example/public/repo/doca/")
    assert p.doca_repo == {"url": f"https://doca.example/public/repo/doca/2.9.1/{arch_dir}/x86_64/", "version": "2.9.1"}
    assert p.stack == "doca" and p.packages == ["doca-ofed"] and p.hold == ["doca-ofed"]


def test_doca_is_held_once_installed(info_of):
    p = plan(info_of("hgx-h100"), stack="doca", doca_version="2.9.1", doca_repo_url="https://doca.example/doca",
             installed={"doca-ofed": {"version": "2.9.1-1", "held": False}})
    assert p.install == [] and p.not_held == ["doca-ofed"]


@pytest.mark.parametrize(("change", "variable", "fragment"), [
    ({"doca_version": ""}, "gpuops_rdma_doca_version", "'' is not a DOCA release"),
    ({"doca_version": "latest"}, "gpuops_rdma_doca_version", "'latest' is not a DOCA release"),
    ({"doca_repo_url": "doca.example/doca"}, "gpuops_rdma_doca_repo_url", "is not an http(s) URL with a host"),
    ({"doca_repo_url": ""}, "gpuops_rdma_doca_repo_url", "'' is not an http(s) URL"),
])
def test_doca_inputs_are_checked(change, variable, fragment, info_of):
    request = {"stack": "doca", "doca_version": "2.9.1", "doca_repo_url": "https://doca.example/doca"} | change
    refused(info_of("hgx-h100"), variable, fragment, **request)


def test_doca_on_a_distribution_it_does_not_serve_is_refused(info_of):
    refused(info_of("hgx-h100"), "gpuops_rdma_stack", "no release for debian11", distribution="Debian", major="11",
            stack="doca", doca_version="2.9.1", doca_repo_url="https://doca.example/doca")


def test_doca_with_peermem_needs_no_ofed_yet(info_of):
    p = plan(info_of("hgx-h100"), stack="doca", doca_version="2.9.1", doca_repo_url="https://doca.example/doca",
             peermem=True, driver_method="dkms")
    assert (p.path, p.stack, p.modules) == ("peermem", "doca", ["nvidia-peermem"])


def test_doca_on_a_node_without_nics_installs_nothing_and_says_so(info_of):
    p = plan(info_of("l40s"), stack="doca", doca_version="2.9.1", doca_repo_url="https://doca.example/doca")
    assert p.packages == [] and p.doca_repo is None and "no ConnectX NIC" in p.warnings[0]


# --- the host's OFED, as gpu_info reads it ------------------------------------------------------------------------

@pytest.mark.parametrize(("script", "version"), [
    ('if [ "X$1" == "X-s" ]; then echo MLNX_OFED_LINUX-5.8-1.0.1.1:; exit; fi\n', "MLNX_OFED_LINUX-5.8-1.0.1.1"),
    ('if [ "X$1" == "X-s" ]; then echo OFED-internal-24.10-1.1.4:; exit; fi\n', "OFED-internal-24.10-1.1.4"),
    ("#!/bin/bash\necho unknown\n", None),
])
def test_ofed_info_release_is_read_from_the_script(script, version, tmp_path):
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/ofed_info").write_text(script)
    assert hardware.ofed_state(str(tmp_path)) == {"present": True, "version": version, "kernel_source": False}


def test_ofa_kernel_sources_alone_mean_an_ofed(tmp_path):
    (tmp_path / "usr/src/ofa_kernel/default").mkdir(parents=True)
    assert hardware.ofed_state(str(tmp_path)) == {"present": True, "version": None, "kernel_source": True}


def test_no_ofed(tmp_path):
    assert hardware.ofed_state(str(tmp_path)) == {"present": False, "version": None, "kernel_source": False}


def test_rdma_modules_are_picked_from_the_loaded_ones():
    state = hardware.rdma_state(["nvidia", "mlx5_core", "ib_core", "nvidia_peermem", "ext4"], "/nonexistent")
    assert state["modules"] == ["mlx5_core", "ib_core", "nvidia_peermem"]
