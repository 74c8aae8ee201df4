from __future__ import annotations

import copy

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import container_runtimes, runfile_driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.preflight import findings, report_lines

DEFAULTS = {"driver_method": "precompiled", "fabricmanager_enabled": True}


@pytest.fixture
def info_of(info_of):
    """The lab profiles' facts on a booted node: its running kernel installed under /lib/modules (the fake hardware tree
    has none, and a root without a kernel is a blocker of its own: test_no_kernel_in_the_root_blocks...)."""
    def read(profile: str) -> dict:
        info = copy.deepcopy(info_of(profile))
        kernel = info["node"]["kernel"]
        kernel["installed"] = kernel["installed"] or [kernel["running"] or "6.8.0-45-generic"]
        return info
    return read


def ids(found, severity="blocker"):
    return [f["id"] for f in found if f["severity"] == severity]


@pytest.mark.parametrize(
    ("profile", "distro", "settings", "blockers"),
    [
        ("hgx-h100", ("Ubuntu", "24"), DEFAULTS, []),
        ("hgx-h100", ("Ubuntu", "24"), {**DEFAULTS, "fabricmanager_enabled": False}, ["fabric_manager_disabled"]),
        ("hgx-h100", ("Ubuntu", "24"), {"driver_method": "containerized", "fabricmanager_enabled": False}, []),
        ("hgx-b200", ("Ubuntu", "24"), {**DEFAULTS, "fabricmanager_enabled": False}, ["fabric_manager_disabled"]),
        ("l40s", ("Debian", "12"), DEFAULTS, ["nouveau_loaded"]),
        ("l40s", ("Debian", "12"), {**DEFAULTS, "driver_method": "none"}, []),
        ("gh200", ("Ubuntu", "24"), DEFAULTS, []),
        ("gh200", ("Ubuntu", "24"), {**DEFAULTS, "driver_method": "dkms"}, ["secure_boot_unsigned"]),
        # The driver container builds its modules on the node unless its images are precompiled (and signed).
        ("gh200", ("Ubuntu", "24"), {**DEFAULTS, "driver_method": "containerized"}, ["secure_boot_unsigned"]),
        ("gh200", ("Ubuntu", "24"), {**DEFAULTS, "driver_method": "containerized", "driver_container_precompiled": True}, []),
        # auto is precompiled from Ubuntu's archive, DKMS from Debian's or from the CUDA repository.
        ("gh200", ("Ubuntu", "24"), {**DEFAULTS, "driver_method": "auto"}, []),
        ("gh200", ("Ubuntu", "24"), {**DEFAULTS, "driver_method": "auto", "driver_repository": "cuda"}, ["secure_boot_unsigned"]),
        ("gh200", ("Debian", "12"), {**DEFAULTS, "driver_method": "auto"}, ["secure_boot_unsigned"]),
        ("l40s", ("Debian", "12"), {**DEFAULTS, "nouveau_managed": True}, []),
        ("v100", ("Ubuntu", "22"), DEFAULTS, []),
        ("hgx-h100", ("Ubuntu", "26"), DEFAULTS, []),
        ("a100-pcie-mig", ("CentOS", "7"), DEFAULTS, ["unsupported_distribution"]),
    ],
)
def test_blockers(info_of, profile, distro, settings, blockers):
    assert ids(findings(info_of(profile), *distro, settings)) == blockers


@pytest.mark.parametrize(("distro", "version", "warned"), [
    (("Ubuntu", "26"), "2.19.14", True),
    (("Ubuntu", "26"), "2.19.4", True),
    (("Ubuntu", "26"), "2.20.0rc1", False),
    (("Ubuntu", "26"), "2.20.10", False),
    (("Ubuntu", "26"), "2.21.5", False),
    (("Ubuntu", "26"), "", False),
    (("Ubuntu", "24"), "2.19.4", False),
])
def test_a_target_python_newer_than_the_runs_ansible_core_is_warned_of(info_of, distro, version, warned):
    """Ubuntu 26.04's Python 3.14 is a target from ansible-core 2.20 on: on 2.19 the run is warned, not stopped."""
    found = findings(info_of("hgx-h100"), *distro, {**DEFAULTS, "ansible_version": version})
    assert ids(found) == []
    assert ("ansible_core_older_than_target" in ids(found, "warning")) is warned
    if warned:
        finding = next(f for f in found if f["id"] == "ansible_core_older_than_target")
        assert "Python is 3.14" in finding["message"] and version in finding["message"] and "2.20" in finding["fix"]


def test_no_gpu_is_a_warning_not_a_blocker(info_of):
    found = findings(info_of("no-gpu"), "Ubuntu", "24", DEFAULTS)
    assert ids(found) == [] and ids(found, "warning") == ["no_gpu"]


def test_nouveau_finding_names_the_bound_gpus_and_the_fix(info_of):
    (f,) = findings(info_of("l40s"), "Debian", "12", DEFAULTS)
    assert "bound to 0000:4a:00.0, 0000:61:00.0, 0000:ca:00.0, 0000:e1:00.0" in f["message"]
    assert "gpuops.nvidia.nouveau" in f["fix"]


def test_nouveau_is_a_warning_when_the_nouveau_role_follows(info_of):
    (f,) = findings(info_of("l40s"), "Debian", "12", {**DEFAULTS, "nouveau_managed": True})
    assert f["id"] == "nouveau_loaded" and f["severity"] == "warning"
    assert "reboot" in f["fix"] and "gpuops_nouveau_reboot" in f["fix"]


def test_missing_headers_warn_for_dkms_as_the_driver_role_installs_them(info_of):
    found = findings(info_of("v100"), "Debian", "12", {**DEFAULTS, "driver_method": "dkms"})
    assert "kernel_headers_missing" in ids(found, "warning")
    # The driver container builds against its own headers: the host's are not needed.
    found = findings(info_of("v100"), "Debian", "12", {**DEFAULTS, "driver_method": "containerized"})
    assert "kernel_headers_missing" not in ids(found, "warning")


def test_mixed_module_types_block(info_of):
    info = info_of("v100")
    mixed = {**info, "derived": {**info["derived"], "kernel_module_type": {"type": None, "reason": None, "error": "mix"}}}
    assert ids(findings(mixed, "Ubuntu", "24", DEFAULTS)) == ["mixed_module_types"]


def test_unknown_driver_method_is_named(info_of):
    with pytest.raises(ValueError, match="driver method 'runfile' is not one of auto, precompiled, dkms, containerized, none"):
        findings(info_of("v100"), "Ubuntu", "24", {"driver_method": "runfile"})


def test_report_says_what_is_there_what_will_happen_and_what_blocks(info_of):
    info = info_of("hgx-h100")
    found = findings(info, "Ubuntu", "24", {**DEFAULTS, "fabricmanager_enabled": False})
    lines = report_lines("gpu1", info, found)
    assert lines[0] == "== gpu1 =="
    assert lines[1] == "GPUs: 8x NVIDIA H100 80GB HBM3 (hopper)"
    assert "NVSwitches: 4; NVIDIA NICs: 8" in lines
    assert any(line.startswith("Will use: open kernel modules") for line in lines)
    assert any(line.startswith("BLOCKER fabric_manager_disabled:") and "Fix:" in line for line in lines)
    assert "Nothing blocks the install." not in lines


@pytest.mark.parametrize(
    ("profile", "method", "warned"),
    [
        ("a100-pcie-mig", "precompiled", True),  # proprietary loaded, open recommended
        ("a100-pcie-mig", "dkms", True),
        ("a100-pcie-mig", "containerized", False),  # the host modules are not ours to choose
        ("a100-pcie-mig", "none", False),
        ("hgx-h100", "precompiled", False),  # open loaded, open recommended
        ("l40s", "precompiled", False),  # nothing loaded
    ],
)
def test_a_loaded_flavour_other_than_the_recommendation_is_a_warning(info_of, profile, method, warned):
    found = findings(info_of(profile), "Ubuntu", "22", {**DEFAULTS, "driver_method": method})
    assert ("module_type_differs" in ids(found, "warning")) is warned
    assert "module_type_differs" not in ids(found)
    if warned:
        (f,) = [f for f in found if f["id"] == "module_type_differs"]
        assert "proprietary" in f["message"] and "open" in f["message"]
        assert "gpuops_driver_kernel_module_type" in f["fix"]


@pytest.mark.parametrize(("method", "blocked"), [("precompiled", True), ("dkms", True), ("auto", True), ("containerized", True),
                                                 ("none", False)])
def test_a_runfile_driver_blocks_every_method_that_brings_a_driver(info_of, method, blocked):
    info = copy.deepcopy(info_of("hgx-b200"))
    assert info["node"]["runfile"] is None
    info["node"]["runfile"] = "/usr/bin/nvidia-uninstall"
    found = findings(info, "Ubuntu", "24", {**DEFAULTS, "driver_method": method})
    assert ("runfile_driver" in ids(found)) is blocked
    if blocked:
        (f,) = [f for f in found if f["id"] == "runfile_driver"]
        assert "(/usr/bin/nvidia-uninstall; 570.133.20 is loaded)" in f["message"]
        assert f["fix"] == "remove it with /usr/bin/nvidia-uninstall --silent and reboot, then run again"


def test_runfile_driver_is_read_from_the_installers_uninstaller(tmp_path):
    assert runfile_driver(str(tmp_path)) is None
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-uninstall").symlink_to("nvidia-installer")  # the installer makes it a link; dangling here
    assert runfile_driver(str(tmp_path)) == f"{tmp_path}/usr/bin/nvidia-uninstall"


def test_no_kernel_in_the_root_blocks_where_the_driver_role_would_refuse(info_of):
    """node.yml's driver role refuses a root without a kernel under /lib/modules (gpuops_driver_kernel_release unset):
    the preflight says so instead of 'Nothing blocks the install', GPUs or not."""
    for profile in ("hgx-h100", "no-gpu"):
        info = copy.deepcopy(info_of(profile))
        info["node"]["kernel"]["installed"] = []
        found = findings(info, "Ubuntu", "24", DEFAULTS)
        assert ids(found) == ["no_kernel_installed"]
        assert "gpuops_driver_kernel_release" in found[0]["fix"]
        assert "Nothing blocks the install." not in report_lines("n", info, found)
        assert ids(findings(info, "Ubuntu", "24", {**DEFAULTS, "driver_kernel_release": "6.8.0-45-generic"})) == []
        assert ids(findings(info, "Ubuntu", "24", {**DEFAULTS, "driver_method": "containerized"})) == []


@pytest.mark.parametrize(
    ("wanted", "found", "blocked"),
    [
        ("auto", [], True),
        ("auto", ["containerd"], False),
        ("auto", ["crio"], False),
        ("containerd", ["containerd"], False),
        ("crio", ["containerd"], True),
        ("containerd", ["crio"], True),
        ("auto", ["containerd", "crio"], True),  # the role cannot tell which one kubelet uses
        ("", [], False),  # no container_toolkit role in the play (gpuops_node_container_toolkit: false)
    ],
)
def test_a_runtime_the_toolkit_role_cannot_configure_blocks(info_of, wanted, found, blocked):
    """node.yml's container_toolkit role refuses a node without the runtime it configures (containerd or CRI-O, the one
    named or the only one there): the preflight says so before the run, GPUs or not."""
    for profile in ("hgx-h100", "no-gpu"):
        info = copy.deepcopy(info_of(profile))
        info["node"]["container_runtimes"] = found
        result = findings(info, "Ubuntu", "24", {**DEFAULTS, "container_runtime": wanted})
        assert ids(result) == (["no_container_runtime"] if blocked else [])
        if blocked:
            finding = next(f for f in result if f["id"] == "no_container_runtime")
            assert "gpuops_container_toolkit_runtime" in finding["message"] and "gpuops_node_container_toolkit" in finding["fix"]
            assert "Nothing blocks the install." not in report_lines("n", info, result)


def test_a_node_read_before_runtimes_were_reported_is_not_judged_on_them(info_of):
    """Facts from a fact cache written by an older collection have no container_runtimes: unknown, not missing."""
    info = copy.deepcopy(info_of("hgx-h100"))
    info["node"].pop("container_runtimes", None)
    assert ids(findings(info, "Ubuntu", "24", {**DEFAULTS, "container_runtime": "auto"})) == []


def test_the_runtimes_on_the_node_are_read_from_path_and_the_sbin_directories(tmp_path, monkeypatch):
    for name, where in (("containerd", "bin"), ("crio", "sbin")):
        (tmp_path / where).mkdir(exist_ok=True)
        (tmp_path / where / name).write_text("#!/bin/sh\n")
        (tmp_path / where / name).chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert container_runtimes(sbin=(str(tmp_path / "sbin"),)) == ["containerd", "crio"]
    assert container_runtimes(sbin=()) == ["containerd"]


def test_what_a_following_role_would_refuse_blocks_naming_the_role(info_of):
    """node.yml's read answers the checks of the roles that follow; a check those roles would fail is a blocker before
    the nouveau or RDMA role changes anything, unless a finding already names that role's cause."""
    info = info_of("hgx-h100")
    refused = {"driver": {"settings": {}, "result": None,
                          "refused": "gpuops_driver_branch: None: Debian 12 (distro repository) has no NVIDIA driver"},
               "fabric_manager": {"settings": {}, "result": {"changed": False}},
               "container_toolkit": {"settings": {}, "result": None}}
    found = findings(info, "Ubuntu", "24", {**DEFAULTS, "answers": refused})
    assert ids(found) == ["driver_refuses"]
    blocker = found[-1] if found[-1]["id"] == "driver_refuses" else next(f for f in found if f["id"] == "driver_refuses")
    assert blocker["message"].startswith("the driver role would refuse: gpuops_driver_branch: None: Debian 12")
    assert "gpuops_driver_branch" in blocker["message"] and "before any change" in blocker["fix"]
    # A finding that names the driver role's cause stands alone.
    bare = copy.deepcopy(info)
    bare["node"]["kernel"]["installed"] = []
    assert ids(findings(bare, "Ubuntu", "24", {**DEFAULTS, "answers": refused})) == ["no_kernel_installed"]
    # On a distribution the collection does not install on, that says it all.
    assert ids(findings(info, "CentOS", "7", {**DEFAULTS, "answers": refused})) == ["unsupported_distribution"]
