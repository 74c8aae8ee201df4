"""The driver plan made from a host's answers: apt-cache and dpkg output recorded on the lab machines."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver_host, host
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError

RECORDED = Path(__file__).parent / "recorded"


class FakeHost:
    """Answers the commands driver_host runs from recorded output, and remembers them."""

    def __init__(self, release: str, dpkg: str = "", license_text: str = "") -> None:
        self.policy = host.parse_policy((RECORDED / f"{release}-policy.txt").read_text())
        names = RECORDED / f"{release}-pkgnames.txt"
        self.pkgnames = names.read_text() if names.exists() else ""
        depends = RECORDED / f"{release}-depends.txt"
        self.depends = depends.read_text() if depends.exists() else ""
        self.dpkg = dpkg
        self.license = license_text
        self.calls: list[list[str]] = []

    def run(self, argv, environ_update=None):
        assert environ_update == {"LC_ALL": "C", "LANG": "C"}
        self.calls.append(argv)
        if argv[:2] == ["apt-cache", "policy"]:
            out = "".join(f"{n}:\n  Installed: (none)\n  Candidate: {self.policy[n] or '(none)'}\n" for n in argv[2:] if n in self.policy)
            return 0, out, ""
        if argv[:2] == ["apt-cache", "depends"]:
            return (0, self.depends, "") if self.depends else (100, "", "E: No packages found")
        if argv[:2] == ["apt-cache", "pkgnames"]:
            return 0, "\n".join(n for n in self.pkgnames.split() if n.startswith(argv[2])), ""
        if argv[0] in ("dpkg-query", "rpm"):
            return 0, self.dpkg, ""
        if argv[0].endswith("modinfo"):
            return (0, self.license, "") if self.license else (1, "", "modinfo: ERROR: Module nvidia not found.")
        raise AssertionError(f"unexpected command {argv}")

    def host(self) -> host.Host:
        return host.Host(self.run, lambda name: f"/usr/sbin/{name}")


def request(**kw):
    base = {"distribution": "Ubuntu", "major_version": "24", "architecture": "x86_64", "method": "auto",
            "repository": "distro", "branch": "", "kernel_module_type": "auto", "kernel_release": "", "compute_only": True,
            "allow_branch_change": False, "allow_method_change": False, "cuda_repo_url": "https://mirror.example/cuda",
            "repo_ready": False, "image_build": "false", "state_dir": "/nonexistent", "module_options": {}}
    return base | kw


@pytest.fixture
def root(tmp_path):
    def make(*kernels):
        for k in kernels:
            (tmp_path / "lib/modules" / k / "kernel").mkdir(parents=True, exist_ok=True)
        return str(tmp_path)
    return make


def test_policy_parsing_of_recorded_output():
    found = host.parse_policy((RECORDED / "noble-policy.txt").read_text())
    assert found["nvidia-headless-no-dkms-580-server-open"] == "580.178.04-0ubuntu0.24.04.1"
    assert found["linux-modules-nvidia-580-server-open-6.8.0-151-generic"] == "6.8.0-151.151"


def test_dpkg_parsing_keeps_installed_packages_and_holds():
    text = ("nvidia-utils-580-server\t580.178.04-0ubuntu0.24.04.1\thi \n"
            "libnvidia-compute-580-server:amd64\t580.178.04-0ubuntu0.24.04.1\tii \n"
            "nvidia-kernel-common-575-server\t575.57.08-0ubuntu0.24.04.3\trc \n"
            "bash\t5.2.21-2ubuntu4\tii \n")
    got = host.parse_dpkg(text)
    assert got == {"nvidia-utils-580-server": {"version": "580.178.04-0ubuntu0.24.04.1", "held": True},
                   "libnvidia-compute-580-server": {"version": "580.178.04-0ubuntu0.24.04.1", "held": False},
                   "bash": {"version": "5.2.21-2ubuntu4", "held": False}}


def test_noble_h100_fresh_plans_precompiled_open_for_the_installed_kernel(info_of, root):
    fake = FakeHost("noble")
    out = driver_host.make_plan(request(branch="580"), info_of("hgx-h100"), fake.host(), root("6.8.0-151-generic"))
    plan = out["plan"]
    assert (plan["method"], plan["branch"], plan["module_type"], plan["kernel"]) == ("precompiled", 580, "open", "6.8.0-151-generic")
    assert plan["packages"] == ["nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server",
                                "linux-modules-nvidia-580-server-open-6.8.0-151-generic"]
    assert plan["install"] and plan["unhold"] == []
    # The profile's running kernel (the lab host's) is not in this root: the newest installed one is taken.
    assert "not installed in this root" in plan["kernel_reason"]
    assert ["apt-cache", "pkgnames", "nvidia-headless-no-dkms-"] in fake.calls


def test_an_empty_branch_takes_the_newest_with_packages(info_of, root):
    out = driver_host.make_plan(request(), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic"))
    assert out["plan"]["branch"] == 615


def test_jammy_v100_takes_proprietary_and_stops_at_580(info_of, root):
    out = driver_host.make_plan(request(major_version="22"), info_of("v100"), FakeHost("jammy").host(), root("5.15.0-204-generic"))
    plan = out["plan"]
    assert (plan["branch"], plan["module_type"]) == (580, "proprietary")
    assert plan["packages"][0] == "nvidia-headless-no-dkms-580-server"
    assert "linux-signatures-nvidia-5.15.0-204-generic" in plan["packages"]


def test_a_branch_without_packages_names_the_branches_there_are(info_of, root):
    with pytest.raises(PlanError) as exc:
        driver_host.make_plan(request(branch="545"), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic"))
    assert exc.value.variable == "gpuops_driver_branch"
    assert "545: no package nvidia-headless-no-dkms-545-server-open" in str(exc.value)
    # The archive's 535 to 575 and 590 are transitional now (their packages depend on 580's or 595's): not offered.
    assert "branches with packages here: 580, 595, 615" in str(exc.value)


def test_a_transitional_branch_is_refused(info_of, root):
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 515: nvidia-headless-no-dkms-515-server 525\S+ in Ubuntu 22 \(distro repository\) "
                                        r"is a transitional package that depends on nvidia-headless-no-dkms-535-server: installing branch 515 "
                                        r"installs branch 535; branches with packages of their own here: 470, 580"):
        driver_host.make_plan(request(major_version="22", branch="515"), info_of("v100"), FakeHost("jammy").host(),
                              root("5.15.0-204-generic"))


def test_a_retired_branch_that_keeps_its_version_but_depends_on_a_newer_one_is_refused(info_of, root):
    """Ubuntu 24.04's 570-server-open packages are 570.211.01 and depend on 580's: asking for 570 would install 580."""
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 570: nvidia-headless-no-dkms-570-server-open 570\.211\.01\S* .*depends on "
                                        r"nvidia-headless-no-dkms-580-server-open: installing branch 570 installs branch 580; "
                                        r"branches with packages of their own here: 580, 595, 615"):
        driver_host.make_plan(request(branch="570", method="dkms"), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic"))


def test_open_on_a_v100_is_refused_before_any_command_but_the_package_list(info_of, root):
    fake = FakeHost("jammy")
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_module_type: 'open'"):
        driver_host.make_plan(request(major_version="22", kernel_module_type="open"), info_of("v100"), fake.host(), root("5.15.0-204-generic"))
    assert [c[0] for c in fake.calls] == ["dpkg-query"]


def test_a_kernel_without_precompiled_modules_names_the_kernel_variable(info_of, root):
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_release: no package linux-modules-nvidia-580-server-open-6.8.0-90-generic"):
        driver_host.make_plan(request(branch="580"), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-90-generic"))


def test_installed_and_held_driver_is_a_no_op(info_of, root):
    names = ("nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server", "libnvidia-compute-580-server")
    dpkg = "".join(f"{n}\t580.178.04-0ubuntu0.24.04.1\thi \n" for n in names)
    dpkg += "linux-modules-nvidia-580-server-open-6.8.0-151-generic\t6.8.0-151.151\thi \n"
    fake = FakeHost("noble", dpkg, "Dual MIT/GPL\n")
    out = driver_host.make_plan(request(), info_of("hgx-h100"), fake.host(), root("6.8.0-151-generic"))
    assert out["plan"]["branch"] == 580  # the installed branch, not the newest
    assert not out["plan"]["install"] and out["plan"]["unhold"] == []
    assert out["installed"]["module_type"] == "open" and out["installed"]["not_held"] == []
    assert ["/usr/sbin/modinfo", "-k", "6.8.0-151-generic", "-F", "license", "nvidia"] in fake.calls
    # The installed branch is the plan's: apt-cache depends (a quarter of a second on the lab) asks about its package
    # only, not about every branch's.
    depends = [c for c in fake.calls if c[:2] == ["apt-cache", "depends"]]
    assert [[a for a in c if a.startswith("nvidia-")] for c in depends] == [["nvidia-headless-no-dkms-580-server-open"]]


def test_another_installed_branch_is_refused_then_replaced_when_allowed(info_of, root):
    dpkg = ("libnvidia-compute-570-server\t570.211.01-0ubuntu1.24.04.1\thi \n"
            "linux-modules-nvidia-570-server-open-6.8.0-151-generic\t6.8.0-151.151\thi \n")
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 580: driver 570.211.01 \(branch 570\) is installed"):
        driver_host.make_plan(request(branch="580"), info_of("hgx-h100"), FakeHost("noble", dpkg).host(), root("6.8.0-151-generic"))
    out = driver_host.make_plan(request(branch="580", allow_branch_change=True), info_of("hgx-h100"), FakeHost("noble", dpkg).host(),
                                root("6.8.0-151-generic"))
    assert out["plan"]["install"]
    assert out["plan"]["unhold"] == ["libnvidia-compute-570-server", "linux-modules-nvidia-570-server-open-6.8.0-151-generic"]


def test_a_driver_install_releases_the_held_fabric_manager_bound_to_the_old_version(info_of, root):
    # Ubuntu's nvidia-fabricmanager-570 depends on nvidia-kernel-common-570-server-570.211.01: held, apt could not
    # move the driver. The fabric_manager role holds the new one after the install.
    dpkg = ("libnvidia-compute-570-server\t570.211.01-0ubuntu1.24.04.1\thi \n"
            "nvidia-fabricmanager-570\t570.211.01-0ubuntu1.24.04.1\thi \n"
            "libnvidia-nscq-570\t570.211.01-0ubuntu1.24.04.1\tii \n")
    out = driver_host.make_plan(request(branch="580", allow_branch_change=True), info_of("hgx-h100"), FakeHost("noble", dpkg).host(),
                                root("6.8.0-151-generic"))
    assert out["plan"]["unhold"] == ["libnvidia-compute-570-server", "nvidia-fabricmanager-570"]


def test_bookworm_l40s_falls_back_to_proprietary_when_open_lags(info_of, root):
    out = driver_host.make_plan(request(distribution="Debian", major_version="12"), info_of("l40s"), FakeHost("bookworm").host(),
                                root("6.1.0-56-amd64"))
    plan = out["plan"]
    assert (plan["method"], plan["branch"], plan["module_type"]) == ("dkms", 535, "proprietary")
    assert plan["packages"] == ["nvidia-kernel-dkms", "libcuda1", "nvidia-smi", "nvidia-persistenced", "linux-headers-6.1.0-56-amd64"]
    assert plan["warnings"] and "nvidia-open-kernel-dkms" in plan["warnings"][0]


def test_bookworm_has_one_branch(info_of, root):
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 580: Debian 12 \(distro repository\) has the driver of branch 535 only"):
        driver_host.make_plan(request(distribution="Debian", major_version="12", branch="580"), info_of("l40s"),
                              FakeHost("bookworm").host(), root("6.1.0-56-amd64"))


def test_containerized_refuses_a_host_driver_and_a_host_method_refuses_the_marker(info_of, root, tmp_path):
    dpkg = ("libnvidia-compute-580-server\t580.178.04-0ubuntu0.24.04.1\tii \n"
            "nvidia-dkms-580-server-open\t580.178.04-0ubuntu0.24.04.1\tii \n")
    with pytest.raises(PlanError, match=r"gpuops_driver_method: 'containerized': a host driver is installed \(580.178.04"):
        driver_host.make_plan(request(method="containerized"), info_of("hgx-h100"), FakeHost("noble", dpkg).host(), root())
    out = driver_host.make_plan(request(method="containerized"), info_of("hgx-h100"), FakeHost("noble").host(), root())
    assert out["plan"]["method"] == "containerized" and out["plan"]["packages"] == []
    state = tmp_path / "state"
    state.mkdir()
    (state / "driver-method").write_text("containerized\n")
    with pytest.raises(PlanError, match=r"set for the containerized driver .* gpuops_driver_allow_method_change: true"):
        driver_host.make_plan(request(state_dir=str(state)), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic"))


def test_containerized_names_every_host_driver_package_and_purges_them_when_asked(info_of, root):
    dpkg = ("libnvidia-compute-580-server\t580.178.04-0ubuntu0.24.04.1\thi \n"
            "nvidia-dkms-580-server-open\t580.178.04-0ubuntu0.24.04.1\thi \n"
            "nvidia-utils-580-server\t580.178.04-0ubuntu0.24.04.1\tii \n"
            "nvidia-fabricmanager-580\t580.178.04-0ubuntu0.24.04.1\thi \n")
    with pytest.raises(PlanError) as refused:
        driver_host.make_plan(request(method="containerized"), info_of("hgx-h100"), FakeHost("noble", dpkg).host(), root())
    assert ("libnvidia-compute-580-server, nvidia-dkms-580-server-open, nvidia-utils-580-server); two drivers fight over the GPUs: "
            "remove these packages first, or set gpuops_driver_remove_host_driver: true") in str(refused.value)
    out = driver_host.make_plan(request(method="containerized", remove_host_driver=True), info_of("hgx-h100"),
                                FakeHost("noble", dpkg).host(), root())
    assert out["plan"]["remove"] == ["libnvidia-compute-580-server", "nvidia-dkms-580-server-open", "nvidia-utils-580-server"]
    assert out["plan"]["unhold"] == ["libnvidia-compute-580-server", "nvidia-dkms-580-server-open", "nvidia-fabricmanager-580"]
    # Nothing to remove without a host driver, whatever is asked.
    out = driver_host.make_plan(request(method="containerized", remove_host_driver=True), info_of("hgx-h100"), FakeHost("noble").host(), root())
    assert out["plan"]["remove"] == [] and out["plan"]["unhold"] == []


def test_a_marker_that_cannot_be_read_is_an_error_not_an_absent_marker(info_of, root, tmp_path):
    # Only a missing marker means "no method recorded"; one that exists but cannot be read must not let a
    # host install go ahead over a containerized driver.
    state = tmp_path / "state"
    (state / "driver-method").mkdir(parents=True)
    with pytest.raises(IsADirectoryError):
        driver_host.make_plan(request(state_dir=str(state)), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic"))


def test_cuda_repository_needs_a_branch_and_plans_the_rhel_stream(info_of, root):
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: unset: the CUDA repository serves every branch"):
        driver_host.make_plan(request(distribution="Rocky", major_version="9", repository="cuda"), info_of("hgx-h100"),
                              FakeHost("noble").host(), root("5.14.0-503.el9.x86_64"))


def test_reboot_reasons(info_of):
    info = info_of("a100-pcie-mig")
    plan = {"kernel": "6.8.0-151-generic", "image_build": False, "method": "precompiled"}
    reasons = driver_host.reboot_reasons(plan, {"module_type": "open", "version": "580.178.04"}, info)
    assert any("installed for kernel 6.8.0-151-generic" in r for r in reasons)
    assert any("loaded nvidia modules are proprietary" in r for r in reasons)
    assert driver_host.reboot_reasons({**plan, "image_build": True}, {}, info) == []


def test_offline_checks_run_no_apt_cache_and_still_refuse(info_of, root):
    fake = FakeHost("jammy")
    out = driver_host.make_plan(request(major_version="22", branch="580", offline=True), info_of("v100"), fake.host(),
                                root("5.15.0-204-generic"))
    assert out["plan"]["branch"] == 580 and out["plan"]["packages"] == []
    assert [c[0] for c in fake.calls] == ["dpkg-query"]
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 590: .* supported up to branch 580"):
        driver_host.make_plan(request(major_version="22", branch="590", offline=True), info_of("v100"), FakeHost("jammy").host(),
                              root("5.15.0-204-generic"))


def test_every_result_has_the_same_shape(info_of, root):
    """Containerized, offline and full plans return the same keys: the role reads them without defaults."""
    results = [
        driver_host.make_plan(request(method="containerized"), info_of("hgx-h100"), FakeHost("noble").host(), root()),
        driver_host.make_plan(request(branch="580", offline=True), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic")),
        driver_host.make_plan(request(branch="580"), info_of("hgx-h100"), FakeHost("noble").host(), root("6.8.0-151-generic")),
    ]
    for out in results:
        assert sorted(out) == ["candidates", "installed", "marker", "plan"]
        assert tuple(out["plan"]) == driver_host.PLAN_KEYS
        assert sorted(out["installed"]) == ["branch", "held", "module_type", "module_types", "modules", "not_held", "packages",
                                            "persistenced_user", "stray", "version"]
    assert [bool(out["candidates"]) for out in results] == [False, False, True]


def test_the_request_reads_the_module_parameters_and_the_host_facts(info_of):
    info = info_of("hgx-h100")
    asked = driver_host.DriverRequest.from_params(request(image_build="auto", module_options=None, major_version=24), info, "/srv/root")
    assert (asked.major_version, asked.offline, asked.module_options, asked.root) == ("24", False, {}, "/srv/root")
    assert asked.image_build is info["node"]["image_build"]
    assert asked.running_kernel == info["node"]["kernel"]["running"]
    assert len(asked.gpus) == 8 and asked.recommendation["type"] == "open"
    assert driver_host.DriverRequest.from_params(request(image_build="true"), info).image_build is True
    assert driver_host.DriverRequest.from_params(request(image_build="false"), {}).gpus == []


def test_ubuntu_from_the_cuda_repository_plans_from_its_candidates_once_configured(info_of, root):
    fake = FakeHost("noble")
    fake.policy |= dict.fromkeys(["nvidia-dkms-580-open", "libnvidia-compute-580", "nvidia-compute-utils-580", "nvidia-utils-580"],
                                 "580.105.08-1ubuntu1")
    fake.policy["linux-headers-6.8.0-151-generic"] = "6.8.0-151.151"
    out = driver_host.make_plan(request(repository="cuda", branch="580", repo_ready=True), info_of("hgx-h100"), fake.host(),
                                root("6.8.0-151-generic"))
    plan = out["plan"]
    assert (plan["method"], plan["module_type"], plan["install"]) == ("dkms", "open", True)
    assert plan["cuda_repo"]["url"] == "https://mirror.example/cuda/ubuntu24/x86_64/"
    assert out["candidates"]["nvidia-dkms-580-open"] == "580.105.08-1ubuntu1"
    assert ["apt-cache", "pkgnames", "nvidia-headless-no-dkms-"] not in fake.calls


def test_rhel_plans_the_stream_and_installs_only_when_the_branch_is_not_installed(info_of, root):
    args = (request(distribution="Rocky", major_version="9", repository="cuda", branch="580"), info_of("hgx-h100"))
    out = driver_host.make_plan(*args, FakeHost("noble").host(), root("5.14.0-503.el9.x86_64"))
    plan = out["plan"]
    assert plan["family"] == "rhel" and plan["packages"][0] == "@nvidia-driver:580-open/default" and plan["install"]
    assert plan["rhel"]["module_stream"] == "nvidia-driver:580-open"
    assert out["candidates"] == dict.fromkeys(["nvidia-driver:580-open", "kernel-devel-5.14.0-503.el9.x86_64",
                                               "kernel-headers-5.14.0-503.el9.x86_64"])
    rpm = "nvidia-driver\t580.105.08-1.el9\nkmod-nvidia-open-dkms\t580.105.08-1.el9\n"
    fake = FakeHost("noble", rpm, "Dual MIT/GPL\n")
    again = driver_host.make_plan(*args, fake.host(), root("5.14.0-503.el9.x86_64"))
    assert not again["plan"]["install"] and again["installed"]["module_type"] == "open"
    assert [c[0] for c in fake.calls] == ["rpm", "/usr/sbin/modinfo"]


# A kernel update waiting for its reboot: jammy runs its GA kernel, the HWE kernel is installed and newest.
GA, HWE = "5.15.0-204-generic", "6.8.0-149-generic"


def running(info: dict, kernel: str) -> dict:
    return {**info, "node": {**info["node"], "kernel": {**info["node"]["kernel"], "running": kernel}}}


def test_a_newer_installed_kernel_gets_its_headers_before_the_reboot(info_of, root):
    out = driver_host.make_plan(request(major_version="22", method="dkms"), running(info_of("v100"), GA), FakeHost("jammy").host(),
                                root(GA, HWE))
    plan = out["plan"]
    assert (plan["kernel"], plan["kernel_reason"], plan["boot_kernel"]) == (GA, "the running kernel", HWE)
    assert f"linux-headers-{GA}" in plan["packages"] and f"linux-headers-{HWE}" in plan["packages"]
    assert plan["install"]
    assert out["candidates"][f"linux-headers-{HWE}"] == "6.8.0-149.149~22.04.1"


def test_a_newer_installed_kernel_gets_its_precompiled_modules(info_of, root):
    out = driver_host.make_plan(request(major_version="22"), running(info_of("v100"), GA), FakeHost("jammy").host(), root(GA, HWE))
    packages = out["plan"]["packages"]
    for name in ("linux-modules-nvidia-580-server-", "linux-objects-nvidia-580-server-", "linux-signatures-nvidia-"):
        assert name + GA in packages and name + HWE in packages


def test_a_boot_kernel_the_repository_has_nothing_for_is_refused_before_any_change(info_of, root):
    fake = FakeHost("jammy")
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_release: unset, and the node boots kernel 6\.8\.0-999-generic next .*"
                                        r"no linux-headers-6\.8\.0-999-generic"):
        driver_host.make_plan(request(major_version="22", method="dkms"), running(info_of("v100"), GA), fake.host(),
                              root(GA, "6.8.0-999-generic"))
    assert not [c for c in fake.calls if c[0] not in ("apt-cache", "dpkg-query")]


@pytest.mark.parametrize(("kernels", "image_build", "kernel_release", "boot"), [
    ((GA,), "false", "", None),                      # one kernel: nothing else to boot
    ((GA, HWE), "true", "", None),                   # an image build installs for the newest already
    ((GA, HWE), "false", GA, None),                  # the user named the kernel
    (("5.15.0-100-generic", GA), "false", "", None),  # the running kernel is the newest
])
def test_no_boot_kernel_when_the_target_is_what_boots(info_of, root, kernels, image_build, kernel_release, boot):
    out = driver_host.make_plan(request(major_version="22", method="dkms", image_build=image_build, kernel_release=kernel_release),
                                running(info_of("v100"), GA), FakeHost("jammy").host(), root(*kernels))
    assert out["plan"]["boot_kernel"] == boot
    assert [p for p in out["plan"]["packages"] if p.startswith("linux-headers-")] == [f"linux-headers-{out['plan']['kernel']}"]


class PerKernelModinfo(FakeHost):
    """modinfo answers per kernel: the module built for some kernels only."""

    def __init__(self, release: str, dpkg: str, built_for: dict[str, str]) -> None:
        super().__init__(release, dpkg)
        self.built_for = built_for

    def run(self, argv, environ_update=None):
        if argv[0].endswith("modinfo"):
            self.calls.append(argv)
            text = self.built_for.get(argv[2])
            return (0, text, "") if text else (1, "", "modinfo: ERROR: Module nvidia not found.")
        return super().run(argv, environ_update)


def test_the_module_is_read_for_each_planned_kernel(info_of, root):
    names = ("nvidia-headless-580-server", "nvidia-utils-580-server", "libnvidia-compute-580-server", "nvidia-dkms-580-server")
    dpkg = "".join(f"{n}\t580.126.20-0ubuntu0.22.04.1\thi \n" for n in names)
    fake = PerKernelModinfo("jammy", dpkg, {GA: "NVIDIA\n"})
    out = driver_host.make_plan(request(major_version="22", method="dkms"), running(info_of("v100"), GA), fake.host(), root(GA, HWE))
    assert out["installed"]["module_type"] == "proprietary"
    assert out["installed"]["module_types"] == {GA: "proprietary", HWE: None}


# The ExecStart lines of nvidia-persistenced's unit as the lab's machines have them (systemctl cat).
@pytest.mark.parametrize(("where", "unit", "user"), [
    ("usr/lib/systemd/system", "[Service]\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose\n",
     "nvidia-persistenced"),  # Ubuntu 24.04 and 22.04
    ("lib/systemd/system", "[Service]\nType=forking\nExecStart=/usr/bin/nvidia-persistenced --user nvpd\n", "nvpd"),  # Debian 12
    ("etc/systemd/system", "[Service]\nExecStart=/usr/bin/nvidia-persistenced --user=gpu --verbose\n", "gpu"),
    ("usr/lib/systemd/system", "[Service]\nExecStart=/usr/bin/nvidia-persistenced --verbose\n", "root"),
])
def test_the_persistenced_user_is_read_from_its_unit(tmp_path, where, unit, user):
    assert driver_host.persistenced_user(str(tmp_path)) is None
    (tmp_path / where).mkdir(parents=True)
    (tmp_path / where / "nvidia-persistenced.service").write_text(unit)
    assert driver_host.persistenced_user(str(tmp_path)) == user


RUNFILE_CASES = [("auto", "packages installed over it"), ("dkms", "packages installed over it"),
                 ("containerized", "the driver container's modules would fight it")]


@pytest.mark.parametrize(("method", "why"), RUNFILE_CASES)
def test_a_runfile_driver_is_refused_before_any_command_for_every_method(info_of, root, tmp_path, method, why):
    """NVIDIA's .run installer leaves /usr/bin/nvidia-uninstall (a link to nvidia-installer); no package ships it."""
    where = root("6.8.0-151-generic")
    (tmp_path / "usr/bin").mkdir(parents=True)
    (tmp_path / "usr/bin/nvidia-uninstall").symlink_to("nvidia-installer")  # dangling here, as the check must not follow it
    fake = FakeHost("noble")
    with pytest.raises(PlanError) as refused:
        driver_host.make_plan(request(method=method), info_of("hgx-h100"), fake.host(), where)
    text = str(refused.value)
    assert text.startswith(f"gpuops_driver_method: '{method}': a driver from NVIDIA's .run installer is installed "
                           f"({tmp_path}/usr/bin/nvidia-uninstall)")
    assert why in text and f"remove it with {tmp_path}/usr/bin/nvidia-uninstall --silent and reboot" in text
    assert fake.calls == []


def test_depends_reads_dpkg_for_a_package_installed_at_its_candidate():
    """dpkg's record for what is installed at the candidate's version; apt-cache depends (a third of a second) for the rest."""
    head = "nvidia-headless-no-dkms-580-server-open"
    calls = []

    def run(argv, environ_update=None):
        calls.append(argv)
        if argv[0] == "dpkg-query":
            assert argv[3] == host.DPKG_DEPENDS_FORMAT
            return 1, (f"{head}\t580.178.04-0ubuntu0.24.04.1\thi \t, nvidia-kernel-common-580-server (<= 580.178.04-1), "
                       "libnvidia-compute-580-server:amd64 (= 580.178.04-0ubuntu0.24.04.1) | nvidia-compute-alt\n"
                       "nvidia-headless-no-dkms-570-server-open\t570.1-0\trc \t, x\n"), "dpkg-query: no packages found matching y\n"
        if argv[:2] == ["apt-cache", "policy"]:
            return 0, "".join(f"{n}:\n  Installed: (none)\n  Candidate: {versions[n]}\n" for n in argv[2:]), ""
        if argv[:2] == ["apt-cache", "depends"]:
            return 0, "".join(f"{n}\n  Depends: {n}-dep\n" for n in argv if n.startswith("nvidia-headless") or n == "y"), ""
        raise AssertionError(argv)

    versions = {head: "580.178.04-0ubuntu0.24.04.1"}
    fake = host.Host(run, lambda name: f"/usr/bin/{name}")
    # The plan asks for the candidate first; the dependency read does not ask apt-cache policy again.
    assert fake.candidates([head]) == {head: versions[head]}
    got = fake.depends([head, "y"])
    assert got[head] == ["nvidia-kernel-common-580-server", "libnvidia-compute-580-server", "nvidia-compute-alt"]
    assert got["y"] == ["y-dep"]
    assert [c[8:] for c in calls if c[:2] == ["apt-cache", "depends"]] == [["y"]]
    assert [c[2:] for c in calls if c[:2] == ["apt-cache", "policy"]] == [[head]]
    # A newer candidate than the installed version (another node, another run): apt says what that one depends on.
    versions[head] = "580.200.01-0ubuntu0.24.04.1"
    calls.clear()
    fake = host.Host(run, lambda name: f"/usr/bin/{name}")
    assert fake.depends([head]) == {head: [f"{head}-dep"]}
    assert calls[-1][:2] == ["apt-cache", "depends"]
