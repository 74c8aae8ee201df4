"""The gpu_info module end to end on the HGX H100 profile's simulated hardware: the distribution facts it gives in
place of a setup round trip, and whether an NVML library is there for the binding the preflight role installs."""

from __future__ import annotations

import os
import platform

import pytest
from ansible.module_utils import basic
from ansible.module_utils.facts.system.distribution import DistributionFactCollector
from ansible.module_utils.facts.system.platform import PlatformFactCollector
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_info, rdma_info

from lab.sim.hardware import build_fake_nvml, load_profile, write_hardware

from ..harness import call


@pytest.fixture(scope="module")
def hw(tmp_path_factory):
    root = tmp_path_factory.mktemp("hw")
    write_hardware(load_profile("hgx-h100"), root, "m1", "6.8.0-45-generic", build_fake_nvml(tmp_path_factory.mktemp("nvml")))
    return root


class _NoCommands:
    """What the distribution collector may ask of a module, answered without running anything."""

    def get_bin_path(self, *_args, **_kwargs):
        return None

    def run_command(self, *_args, **_kwargs):
        return 1, "", ""


def test_distribution_facts_are_setups(hw):
    """On the machine the tests run on (one the collection installs on), each fact is what setup's collectors say."""
    res = call(gpu_info.main, {"root": str(hw), "distribution_facts": True})
    facts = res["ansible_facts"]
    assert set(facts) == set(gpu_info.DISTRIBUTION_FACTS)
    setup = DistributionFactCollector().collect(module=_NoCommands())
    setup.update(PlatformFactCollector().collect(module=_NoCommands()))
    assert facts == {k: setup[k] for k in gpu_info.DISTRIBUTION_FACTS}
    assert res["changed"] is False


@pytest.mark.parametrize("os_id,version_id,expected", [
    ("ubuntu", "24.04", ("Ubuntu", "24", "Debian")),
    ("ubuntu", "22.04", ("Ubuntu", "22", "Debian")),
    ("debian", "12", ("Debian", "12", "Debian")),
    ("rhel", "9.4", ("RedHat", "9", "RedHat")),
    ("rocky", "10.0", ("Rocky", "10", "RedHat")),
    ("almalinux", "8.10", ("AlmaLinux", "8", "RedHat")),
])
def test_distribution_facts_name_the_distribution_as_setup_does(os_id, version_id, expected):
    facts = gpu_info.distribution_facts({"id": os_id, "version_id": version_id})
    assert (facts["distribution"], facts["distribution_major_version"], facts["os_family"]) == expected
    assert facts["architecture"] == platform.machine()


@pytest.mark.parametrize("os_id,version_id", [("centos", "9"), ("fedora", "41"), (None, None), ("debian", None)])
def test_no_distribution_facts_for_a_distribution_the_collection_does_not_know(os_id, version_id):
    """Guessed names would be worse than none: the preflight role runs setup where gpu_info gives none."""
    assert gpu_info.distribution_facts({"id": os_id, "version_id": version_id}) == {}


def test_no_facts_unless_asked(hw):
    assert "ansible_facts" not in call(gpu_info.main, {"root": str(hw)})


def test_a_named_library_is_installed_when_it_exists(hw):
    lib = hw / "nvml/libnvidia-ml.so.1"
    res = call(gpu_info.main, {"root": str(hw), "nvml_library": str(lib)})
    assert res["nvml_library_installed"] is True and res["gpu_info"]["summary"]["gpu_count"] == 8


def test_the_linker_cache_says_whether_libnvidia_ml_is_there(tmp_path, monkeypatch):
    cache = tmp_path / "ld.so.cache"
    monkeypatch.setattr(gpu_info, "LD_CACHE", str(cache))
    assert gpu_info.nvml_library_installed(None) is False  # no cache at all
    cache.write_bytes(b"glibc-ld.so.cache1.1\x00libc.so.6\x00/lib/x86_64-linux-gnu/libc.so.6\x00")
    assert gpu_info.nvml_library_installed(None) is False
    cache.write_bytes(cache.read_bytes() + b"libnvidia-ml.so.1\x00/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\x00")
    assert gpu_info.nvml_library_installed(None) is True
    assert gpu_info.nvml_library_installed(str(tmp_path / "missing.so")) is False


def test_the_package_lists_age_is_read_as_apts_cache_valid_time_reads_it(tmp_path, monkeypatch):
    stamp, lists = tmp_path / "update-success-stamp", tmp_path / "lists"
    monkeypatch.setattr(gpu_info, "APT_LISTS_STAMPS", (str(stamp), str(lists)))
    assert gpu_info.package_lists_age(now=10_000) is None  # no apt
    lists.mkdir()
    os.utime(lists, (5_000, 5_000))
    assert gpu_info.package_lists_age(now=10_000) == 5_000
    # apt's periodic stamp, where there is one, wins over the lists directory.
    stamp.write_text("")
    os.utime(stamp, (9_000, 9_000))
    assert gpu_info.package_lists_age(now=10_000) == 1_000
    # A clock set back never makes an age below zero.
    assert gpu_info.package_lists_age(now=8_000) == 0


@pytest.mark.parametrize(("text", "where", "expected"), [
    ('PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\nID=ubuntu\nID_LIKE=debian\n', "etc/os-release",
     {"id": "ubuntu", "version_id": "24.04"}),
    ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nID=debian\n', "usr/lib/os-release",
     {"id": "debian", "version_id": "12"}),
    ("ID='rocky'\nVERSION_ID='9.4'\n", "etc/os-release", {"id": "rocky", "version_id": "9.4"}),
    ("ID=arch\n", "etc/os-release", {"id": "arch", "version_id": None}),
    (None, "etc/os-release", {"id": None, "version_id": None}),
])
def test_the_operating_system_is_read_as_os_release_names_it(tmp_path, text, where, expected):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import hardware

    if text is not None:
        (tmp_path / where).parent.mkdir(parents=True)
        (tmp_path / where).write_text(text)
    assert hardware.os_release(str(tmp_path)) == expected


@pytest.fixture
def node_packages(monkeypatch):
    """The node's package commands, answered: rdma-core installed, no candidate for anything else."""
    seen = []

    def run_command(self, argv, **_kwargs):
        seen.append(argv[0])
        if argv[0] == "dpkg-query":
            return 0, "ii \trdma-core\t50.0-2build2\tinstall ok installed\n", ""
        return 0, "", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")
    monkeypatch.setattr(gpu_info, "distribution_facts",
                        lambda _os: {"distribution": "Ubuntu", "distribution_major_version": "24", "os_family": "Debian",
                                     "architecture": "x86_64", "kernel": "6.8.0-45-generic"})
    # apt's lists refreshed a minute ago (the answers planned from them are made only while they are fresh).
    monkeypatch.setattr(gpu_info, "package_lists_age", lambda: 60)
    return seen


@pytest.mark.parametrize("settings", [{"module_type": "auto"}, {"module_type": "proprietary", "stack": "inbox"},
                                      {"module_type": "auto", "gds": True}])
def test_the_reads_rdma_answer_is_rdma_infos_result(hw, node_packages, settings, monkeypatch):
    """What gpu_info returns for the rdma role stands for rdma_info's run: the same result for the same settings, with
    auto resolved to the read's recommendation as the role resolves it."""
    res = call(gpu_info.main, {"root": str(hw), "checks": [{"role": "rdma", "settings": settings}]})
    answer = res["answers"]["rdma"]
    resolved = answer["settings"]
    assert resolved["module_type"] == ("open" if settings["module_type"] == "auto" else settings["module_type"])
    assert (resolved["distribution"], resolved["major_version"], resolved["architecture"]) == ("Ubuntu", "24", "x86_64")
    args = {k: v for k, v in resolved.items() if k not in ("distribution", "major_version", "architecture")}
    warned: list[str] = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    ran = call(rdma_info.main, {**args, "gpu_info": res["gpu_info"], "distribution": "Ubuntu", "major_version": "24",
                                "architecture": "x86_64"})
    if warned or ran.get("failed"):
        assert answer["result"] is None, "a plan that warns or fails is left to the module, which says so"
    else:
        assert answer["result"] == {k: v for k, v in ran.items() if k not in ("failed", "invocation")}
        assert answer["result"]["plan"]["nics"], "the profile's ConnectX NICs are planned for"


@pytest.mark.parametrize("option,settings", [("rdma", {"stack": "ofed"}), ("rdma", {"gds": "maybe"}),
                                             ("rdma", {"unknown": 1}), ("nouveau", {"state": "gone"})])
def test_settings_the_module_would_refuse_are_not_answered_and_the_read_does_not_fail(hw, node_packages, option, settings):
    """The role's own checks name its variables; the read before them must not fail in their place."""
    res = call(gpu_info.main, {"root": str(hw), "checks": [{"role": option, "settings": settings}]})
    assert not res.get("failed") and res["answers"] == {option: {"settings": settings, "result": None}}


def test_the_answers_of_one_read_read_the_package_database_once(hw, node_packages):
    """rdma's and the driver's plans both read dpkg's database: in one read, it is listed once."""
    res = call(gpu_info.main, {"root": str(hw), "checks": [{"role": "rdma", "settings": {"module_type": "auto"}},
                                                           {"role": "driver", "settings": {"method": "dkms", "branch": "580"}}]})
    assert set(res["answers"]) == {"rdma", "driver"}
    assert node_packages.count("dpkg-query") == 1, node_packages
    call(gpu_info.main, {"root": str(hw)})
    assert node_packages.count("dpkg-query") == 1, "a read asked for no plan reads no package database"


@pytest.mark.parametrize("age", [3600, 86_400, None])
def test_no_answer_made_of_the_package_lists_where_they_are_not_fresh(hw, node_packages, monkeypatch, age):
    """Lists an hour old or more (or no apt at all) are refreshed before the roles plan, and the roles then take no
    answer: none is planned, and no package database is read for them; nouveau's, which needs no lists, still is."""
    monkeypatch.setattr(gpu_info, "package_lists_age", lambda: age)
    monkeypatch.setattr(gpu_info.answers, "nouveau", lambda _module, given: {"settings": given, "result": {"changed": False}})
    asked = {"rdma": {"module_type": "auto"}, "driver": {"method": "dkms", "branch": "580"},
             "fabric_manager": {"mode": "auto"}, "container_toolkit": {"runtime": "auto"}}
    checks = [{"role": "nouveau", "settings": {"state": "blacklisted"}}] + [{"role": n, "settings": g} for n, g in asked.items()]
    res = call(gpu_info.main, {"root": str(hw), "checks": checks})
    assert not res.get("failed") and res["package_lists_age"] == age
    assert {name: res["answers"][name] for name in asked} == {name: {"settings": given, "result": None} for name, given in asked.items()}
    assert res["answers"]["nouveau"]["result"] is not None and "dpkg-query" not in node_packages


def test_a_role_s_check_asked_twice_or_of_an_unknown_role_fails_before_anything_is_read(hw, node_packages):
    twice = call(gpu_info.main, {"root": str(hw), "checks": [{"role": "driver", "settings": {}}, {"role": "rdma", "settings": {}},
                                                             {"role": "driver", "settings": {"branch": "580"}}]})
    assert twice["failed"] and twice["msg"] == "checks: each role's check is asked once; asked twice: driver"
    unknown = call(gpu_info.main, {"root": str(hw), "checks": [{"role": "dcgm", "settings": {}}]})
    assert unknown["failed"] and "dcgm" in unknown["msg"] and "container_toolkit" in unknown["msg"]
    assert node_packages == [], "nothing is read for a refused list"


def test_the_fabric_manager_check_is_answered_after_the_driver_s_whatever_the_order_asked(hw, node_packages, monkeypatch):
    """The fabric_manager answer plans from the driver's as the same read answers it: asked before it in the list, it
    still gets it."""
    seen = []
    monkeypatch.setattr(gpu_info.answers, "driver", lambda *_a: {"settings": {}, "result": {"plan": "driver's"}})
    monkeypatch.setattr(gpu_info.answers, "fabric_manager",
                        lambda _m, _given, _info, _facts, driver, _host: seen.append(driver) or {"settings": {}, "result": None})
    call(gpu_info.main, {"root": str(hw), "checks": [{"role": "fabric_manager", "settings": {}}, {"role": "driver", "settings": {}}]})
    assert seen == [{"settings": {}, "result": {"plan": "driver's"}}]
    call(gpu_info.main, {"root": str(hw), "checks": [{"role": "fabric_manager", "settings": {}}]})
    assert seen[1] is None, "without the driver's check, none to plan from"
