"""The fabric manager plan: package names per source, the exact version, what is replaced, the config edit."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import fabric_manager as fm
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import host
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError

RECORDED = Path(__file__).parent / "recorded"
V580 = "580.178.04"
DEB580 = "580.178.04-0ubuntu0.24.04.1"


def gpu_info(mode: str = "fabricmanager", loaded: str | None = V580) -> dict:
    return {
        "derived": {"fabric_manager": {"mode": mode, "reason": "4 NVSwitch device(s) on the PCI bus", "required": mode != "none"}},
        "nvml": {"status": "ok" if loaded else "driver_not_loaded", "driver_version": loaded},
        "node": {"image_build": False, "modules": {"version": loaded}},
    }


def noble_versions(_family: str, names: list[str]) -> dict[str, list[str]]:
    """What the recorded apt-cache policy of Ubuntu 24.04 answers (names it does not know are absent)."""
    found = host.parse_policy_versions((RECORDED / "noble-fabricmanager-policy.txt").read_text())
    return {n: found[n] for n in names if n in found}


def plan(installed: dict | None = None, **kw) -> fm.FabricPlan:
    args = {"gpu_info": gpu_info(), "distribution": "Ubuntu", "major_version": "24", "architecture": "x86_64",
            "repository": "distro", "requested_mode": "auto", "driver_version_value": V580,
            "version_variable": "gpuops_driver.version", "settings": {},
            "installed": lambda _f: installed or {}, "available": noble_versions}
    args.update(kw)
    return fm.plan_fabric(**args)


@pytest.mark.parametrize("family, repository, branch, mode, arch, want", [
    # Canonical's archive names every branch.
    ("ubuntu", "distro", 580, "fabricmanager", "x86_64", ["nvidia-fabricmanager-580", "libnvidia-nscq-580"]),
    ("ubuntu", "distro", 570, "imex", "x86_64", ["nvidia-imex-570"]),
    # NVIDIA's CUDA repository: the branch in the name up to 575, one unversioned name from 580.
    ("ubuntu", "cuda", 575, "fabricmanager", "x86_64", ["nvidia-fabricmanager-575", "libnvidia-nscq-575"]),
    ("ubuntu", "cuda", 580, "fabricmanager", "x86_64", ["nvidia-fabricmanager", "libnvidia-nscq"]),
    ("debian", "cuda", 580, "nvlsm", "x86_64", ["nvidia-fabricmanager", "libnvidia-nscq", "nvlsm", "infiniband-diags", "libnvsdm"]),
    ("ubuntu", "cuda", 570, "nvlsm", "x86_64", ["nvidia-fabricmanager-570", "libnvidia-nscq-570", "nvlsm", "infiniband-diags", "libnvsdm-570"]),
    # libnvsdm is built for x86_64 only.
    ("ubuntu", "cuda", 580, "nvlsm", "aarch64", ["nvidia-fabricmanager", "libnvidia-nscq", "nvlsm", "infiniband-diags"]),
    ("rhel", "cuda", 570, "fabricmanager", "x86_64", ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]),
    ("rhel", "cuda", 580, "imex", "aarch64", ["nvidia-imex"]),
    ("ubuntu", "distro", 580, "none", "x86_64", []),
])
def test_package_names(family, repository, branch, mode, arch, want):
    assert fm.package_names(family, repository, branch, mode, arch) == want


def test_debian_archive_has_no_fabric_manager():
    with pytest.raises(PlanError, match="gpuops_driver_repository: distro: Debian's archive has no Fabric Manager"):
        fm.package_names("debian", "distro", 535, "fabricmanager")


def test_parse_policy_versions_reads_every_version_and_skips_unknown_names():
    found = host.parse_policy_versions((RECORDED / "noble-fabricmanager-policy.txt").read_text())
    assert found["nvidia-fabricmanager-580"] == [DEB580]
    assert found["infiniband-diags"] == ["50.0-2ubuntu0.2", "50.0-2build2"]
    assert found["nvidia-fabricmanager"] == []  # CUDA's unversioned name: not in Canonical's archive
    assert "nvlsm" not in found and "libnvsdm-580" not in found


def test_parse_policy_versions_reads_the_installed_marker():
    text = ("nvidia-fabricmanager-580:\n  Installed: 580.178.04-0ubuntu0.24.04.1\n  Candidate: 580.178.04-0ubuntu0.24.04.1\n"
            "  Version table:\n *** 580.178.04-0ubuntu0.24.04.1 500\n        500 http://a noble-updates/multiverse amd64 Packages\n"
            "        100 /var/lib/dpkg/status\n     580.95.05-0ubuntu1 500\n        500 http://a noble/multiverse amd64 Packages\n")
    assert host.parse_policy_versions(text) == {"nvidia-fabricmanager-580": [DEB580, "580.95.05-0ubuntu1"]}


def test_parse_repoquery():
    text = "nvidia-fabricmanager 580.105.08-1\nnvidia-fabricmanager 580.95.05-1\nlibnvidia-nscq 580.105.08-1\n"
    assert host.parse_repoquery(text) == {"nvidia-fabricmanager": ["580.105.08-1", "580.95.05-1"], "libnvidia-nscq": ["580.105.08-1"]}


def test_fresh_noble_node_installs_both_packages_pinned():
    p = plan()
    assert p.mode == "fabricmanager" and p.service == "nvidia-fabricmanager.service"
    assert p.packages == [f"nvidia-fabricmanager-580={DEB580}", f"libnvidia-nscq-580={DEB580}"]
    assert (p.install, p.unhold, p.remove, p.not_held) == (True, [], [], [])


def test_installed_and_held_is_a_no_op():
    have = {"nvidia-fabricmanager-580": {"version": DEB580, "held": True}, "libnvidia-nscq-580": {"version": DEB580, "held": True}}
    p = plan(have)
    assert (p.install, p.unhold, p.remove, p.not_held) == (False, [], [], [])


def test_installed_not_held_is_held():
    have = {"nvidia-fabricmanager-580": {"version": DEB580, "held": False}, "libnvidia-nscq-580": {"version": DEB580, "held": True}}
    assert plan(have).not_held == ["nvidia-fabricmanager-580"]


def test_a_mismatched_branch_is_released_and_removed():
    have = {"nvidia-fabricmanager-570": {"version": "570.211.01-0ubuntu1.24.04.1", "held": True},
            "nvidia-fabricmanager-dev-570": {"version": "570.211.01-0ubuntu1.24.04.1", "held": False},
            "libnvidia-nscq-570": {"version": "570.211.01-0ubuntu1.24.04.1", "held": True},
            "nvidia-imex-570": {"version": "570.211.01-0ubuntu1.24.04.1", "held": True}}
    p = plan(have)
    assert p.install is True
    assert p.unhold == ["nvidia-fabricmanager-570", "libnvidia-nscq-570"]
    assert p.remove == ["nvidia-fabricmanager-570", "nvidia-fabricmanager-dev-570", "libnvidia-nscq-570"]
    # IMEX is not what this node runs: left as it is.
    assert "nvidia-imex-570" not in p.unhold + p.remove


def test_a_stale_version_of_the_same_name_is_released_and_replaced_not_removed():
    have = {"nvidia-fabricmanager-580": {"version": "580.95.05-0ubuntu1", "held": True},
            "libnvidia-nscq-580": {"version": DEB580, "held": True}}
    p = plan(have)
    assert (p.install, p.unhold, p.remove) == (True, ["nvidia-fabricmanager-580"], [])


def test_a_version_the_archive_lacks_is_refused_naming_the_variable_and_what_it_found():
    with pytest.raises(PlanError) as err:
        plan(driver_version_value="580.65.06", version_variable="gpuops_fabric_manager_driver_version")
    assert str(err.value) == (
        "gpuops_fabric_manager_driver_version: 580.65.06: fabricmanager needs its packages at the driver's version, and "
        f"Canonical's archive lack(s) nvidia-fabricmanager-580 (found: {DEB580}); libnvidia-nscq-580 (found: {DEB580})")


def test_nvlsm_from_canonicals_archive_is_refused_pointing_at_the_cuda_repository():
    with pytest.raises(PlanError, match=r"lack\(s\) nvlsm \(found: none\); libnvsdm-580 \(found: none\); NVIDIA's CUDA "
                                        r"repository has them \(gpuops_driver_repository: cuda\)"):
        plan(gpu_info=gpu_info("nvlsm"))


def test_imex_on_a_tray():
    p = plan(gpu_info=gpu_info("imex"))
    assert (p.service, p.packages) == ("nvidia-imex.service", [f"nvidia-imex-580={DEB580}"])


def test_nothing_for_a_pcie_node_reads_no_package():
    def refuse(*_a):
        raise AssertionError("no package read for a node that needs nothing")
    p = plan(gpu_info=gpu_info("none"), installed=refuse, available=refuse, driver_version_value="")
    assert (p.mode, p.packages, p.service) == ("none", [], None)


def test_without_a_version_the_installed_drivers_is_taken():
    have = {"nvidia-dkms-580-server-open": {"version": DEB580, "held": True},
            "libnvidia-compute-580-server": {"version": DEB580, "held": True}}
    p = plan(have, driver_version_value="", version_variable="gpuops_fabric_manager_driver_version")
    assert p.version == V580 and p.packages == [f"nvidia-fabricmanager-580={DEB580}", f"libnvidia-nscq-580={DEB580}"]


def test_without_a_version_or_a_driver_it_is_refused():
    with pytest.raises(PlanError, match=r"^gpuops_fabric_manager_driver_version \(empty; the package database has no driver either\): "
                                        r"'' is not a driver version"):
        plan(driver_version_value="", version_variable="gpuops_fabric_manager_driver_version")


@pytest.mark.parametrize("value", ["580", "latest", "580.178.04-0ubuntu1"])
def test_a_driver_version_that_is_not_one_is_refused(value):
    with pytest.raises(PlanError, match=r"^gpuops_driver.version: .* is not a driver version"):
        plan(driver_version_value=value)


def test_a_forced_mode_says_what_the_hardware_says():
    p = plan(requested_mode="imex")
    assert p.mode == "imex" and "set by gpuops_fabric_manager_mode" in p.reason


@pytest.mark.parametrize("settings, says", [
    ({"FABRIC_MODE": 7}, "gpuops_fabric_manager_config: FABRIC_MODE: 7 is not accepted; one of 0, 1, 2"),
    ({"FABRIC_MOD": 1}, "gpuops_fabric_manager_config: FABRIC_MOD: not a fabricmanager.cfg setting; known: LOG_LEVEL, "),
    ({"LOG_LEVEL": "debug"}, "LOG_LEVEL: 'debug' is not accepted; one of 0, 1, 2, 3, 4"),
    ({"STARTING_TCP_PORT": "16k"}, "STARTING_TCP_PORT: '16k' is not accepted; a whole number"),
    ({"LOG_FILE_NAME": "/var/log/fm.log\nDAEMONIZE=0"}, "spans lines"),
])
def test_bad_settings_are_refused_before_anything(settings, says):
    with pytest.raises(PlanError) as err:
        plan(settings=settings)
    assert says in str(err.value)


def test_settings_become_text():
    assert fm.check_config({"FABRIC_MODE": 1, "DAEMONIZE": True, "LOG_FILE_NAME": " /var/log/fm.log "}) == {
        "FABRIC_MODE": "1", "DAEMONIZE": "1", "LOG_FILE_NAME": "/var/log/fm.log"}


SHIPPED = """# NVIDIA Fabric Manager configuration file.
# Note: This configuration file is read during Fabric Manager service startup.

# Description: Fabric Manager logging levels
LOG_LEVEL=4

# Description: Fabric Manager operating mode
FABRIC_MODE=0
# FABRIC_MODE=1
STATE_FILE_NAME=/tmp/fabricmanager.state
"""


def test_edit_in_place_keeps_comments_order_and_other_lines():
    out = fm.edit_config(SHIPPED, {"FABRIC_MODE": "1", "LOG_LEVEL": "4"})
    assert out == SHIPPED.replace("FABRIC_MODE=0\n", "FABRIC_MODE=1\n")
    assert fm.edit_config(out, {"FABRIC_MODE": "1"}) == out  # a second run changes nothing


def test_a_setting_the_file_lacks_is_appended_once():
    out = fm.edit_config(SHIPPED, {"FM_STAY_RESIDENT_ON_FAILURES": "1"})
    assert out == SHIPPED + "# Added by gpuops.nvidia (gpuops_fabric_manager_config)\nFM_STAY_RESIDENT_ON_FAILURES=1\n"
    assert fm.edit_config(out, {"FM_STAY_RESIDENT_ON_FAILURES": "1"}) == out


def test_every_key_of_the_shipped_580_file_is_known():
    # The keys of fabricmanager.cfg in nvidia-fabricmanager-580 580.178.04 (Ubuntu 24.04), in its order.
    shipped = ["LOG_LEVEL", "LOG_FILE_NAME", "LOG_APPEND_TO_LOG", "LOG_FILE_MAX_SIZE", "LOG_MAX_ROTATE_COUNT", "LOG_USE_SYSLOG",
               "DAEMONIZE", "BIND_INTERFACE_IP", "STARTING_TCP_PORT", "UNIX_SOCKET_PATH", "FABRIC_MODE", "FABRIC_MODE_RESTART",
               "STATE_FILE_NAME", "FM_CMD_BIND_INTERFACE", "FM_CMD_PORT_NUMBER", "FM_CMD_UNIX_SOCKET_PATH", "FM_CMD_VSOCK_CID",
               "FM_CMD_VSOCK_PORT_NUMBER", "FM_STAY_RESIDENT_ON_FAILURES", "ACCESS_LINK_FAILURE_MODE", "TRUNK_LINK_FAILURE_MODE",
               "NVSWITCH_FAILURE_MODE", "ABORT_CUDA_JOBS_ON_FM_EXIT", "TOPOLOGY_FILE_PATH", "USE_RPC", "NETWORK_INTERFACE",
               "ENABLE_AUTH_ENCRYPTION", "AUTH_SOURCE", "SERVER_KEY", "SERVER_CERT", "SERVER_CERT_AUTH", "CLIENT_KEY", "CLIENT_CERT",
               "CLIENT_CERT_AUTH", "SECURITY_TARGET_OVERRIDE", "MNNVL_RESILIENCY_MODE", "MNNVL_ENABLE_DEFAULT_PARTITION"]
    assert list(fm.CONFIG_KEYS) == shipped


@pytest.mark.parametrize("loaded, image_build, start, says", [
    (V580, False, True, "the loaded driver is 580.178.04"),
    ("550.54.15", False, False, "the loaded driver is 550.54.15, the installed one 580.178.04"),
    (None, False, False, "no NVIDIA driver is loaded"),
    (V580, True, False, "an image build"),
])
def test_never_started_against_another_driver(loaded, image_build, start, says):
    ok, why = fm.start_decision(V580, gpu_info(loaded=loaded), image_build)
    assert ok is start and says in why


def test_the_kernel_modules_version_decides_over_nvmls():
    # After a reboot into the new module, an NVML library of the old driver still answering (the lab's case).
    info = {**gpu_info(loaded="550.54.15"), "node": {"image_build": False, "modules": {"version": V580}}}
    assert fm.start_decision(V580, info, False) == (True, "the loaded driver is 580.178.04")
