"""The driver plan's pure decisions: branches, flavours, kernels, package names, refusals."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError


@pytest.mark.parametrize("value", ["580", 580, " 535 ", "610", "625"])
def test_branches_known_or_newer_are_accepted(value):
    assert driver.parse_branch(value) == int(str(value).strip())


@pytest.mark.parametrize("value", ["abc", "58", "5800", "123", "561", "580.95"])
def test_an_unknown_branch_names_the_variable_and_what_is_accepted(value):
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: .* is not an NVIDIA driver branch; accepted: .*580"):
        driver.parse_branch(value)


def test_an_empty_branch_means_the_default():
    assert driver.parse_branch("") is None
    assert driver.parse_branch(None) is None


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        ("580.178.04-0ubuntu0.24.04.1", "580.178.04"),
        ("535.309.01-0+deb12u1", "535.309.01"),
        ("3:580.105.08-1.el9", "580.105.08"),
        ("550.54", "550.54"),
        ("6.8.0-151.151", None),
        (None, None),
    ],
)
def test_driver_version_from_a_package_version(version, expected):
    assert driver.driver_version(version) == expected


@pytest.mark.parametrize(
    ("distribution", "repository", "expected"),
    [("Ubuntu", "distro", "precompiled"), ("Ubuntu", "cuda", "dkms"), ("Debian", "distro", "dkms"), ("Rocky", "cuda", "dkms")],
)
def test_auto_method(distribution, repository, expected):
    assert driver.resolve_method(distribution, repository, "auto") == expected
    assert driver.resolve_method(distribution, repository, "dkms") == "dkms"


@pytest.mark.parametrize(
    ("args", "variable"),
    [
        (("Debian", "12", "distro", "precompiled", "open"), "gpuops_driver_method"),
        (("Ubuntu", "24", "cuda", "precompiled", "open"), "gpuops_driver_method"),
        (("Rocky", "9", "distro", "dkms", "open"), "gpuops_driver_repository"),
        (("RedHat", "9", "cuda", "precompiled", "open"), "gpuops_driver_method"),
        (("RedHat", "10", "cuda", "precompiled", "proprietary"), "gpuops_driver_method"),
        (("Fedora", "40", "cuda", "dkms", "open"), "ansible_facts.distribution"),
    ],
)
def test_methods_a_source_cannot_serve_are_refused(args, variable):
    with pytest.raises(PlanError) as exc:
        driver.check_method(*args)
    assert exc.value.variable == variable
    assert "accepted" in str(exc.value) or "is not a distribution" in str(exc.value)


@pytest.mark.parametrize(
    "args",
    [("Ubuntu", "24", "distro", "precompiled", "open"), ("RedHat", "9", "cuda", "precompiled", "proprietary"),
     ("Debian", "12", "cuda", "dkms", "open"), ("Ubuntu", "22", "distro", "containerized", "open")],
)
def test_methods_a_source_serves(args):
    driver.check_method(*args)


def _gpus(info):
    return info["pci"]["gpus"], info["derived"]["kernel_module_type"]


def test_auto_flavour_follows_the_gpus(info_of):
    assert driver.resolve_module_type("auto", *_gpus(info_of("hgx-h100")), 580)[0] == "open"
    assert driver.resolve_module_type("auto", *_gpus(info_of("v100")), 580)[0] == "proprietary"
    assert driver.resolve_module_type("proprietary", *_gpus(info_of("hgx-h100")), 580) == (
        "proprietary", "set by gpuops_driver_kernel_module_type")


def test_open_for_a_proprietary_only_gpu_is_refused(info_of):
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_module_type: 'open': Tesla V100-SXM2-16GB .* "
                                        r"run only the proprietary modules; accepted: proprietary, auto"):
        driver.resolve_module_type("open", *_gpus(info_of("v100")), 580)


@pytest.mark.parametrize("profile", ["hgx-b200", "gh200"])
def test_proprietary_for_an_open_only_gpu_is_refused(info_of, profile):
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_module_type: 'proprietary': .* run only the open modules"):
        driver.resolve_module_type("proprietary", *_gpus(info_of(profile)), 580)


def test_open_modules_before_their_first_branch_are_refused(info_of):
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 470: the open kernel modules exist from branch 515"):
        driver.resolve_module_type("auto", *_gpus(info_of("a100-pcie-mig")), 470)


OLDER_THAN_THE_ARCHITECTURE = [("hgx-h100", 470, 525, "Hopper"), ("hgx-h100", 520, 525, "Hopper"), ("hgx-b200", 565, 570, "Blackwell")]


@pytest.mark.parametrize(("profile", "branch", "first", "arch"), OLDER_THAN_THE_ARCHITECTURE)
@pytest.mark.parametrize("module_type", ["auto", "proprietary", "open"])
def test_a_branch_older_than_the_architecture_is_refused(info_of, profile, branch, first, arch, module_type):
    # Only apt's dependency simulation stopped 470 on Hopper before; the message now names the first branch.
    with pytest.raises(PlanError, match=rf"gpuops_driver_branch: {branch}: .* \({arch}\) are driven from branch {first} on; "
                                        rf"accepted: {first} or later"):
        driver.resolve_module_type(module_type, *_gpus(info_of(profile)), branch)
    driver.check_branch_for_gpus(first, info_of(profile)["pci"]["gpus"])


def test_no_gpu_takes_the_branch_default():
    assert driver.resolve_module_type("auto", [], {"type": None, "error": None}, 550)[0] == "proprietary"
    assert driver.resolve_module_type("auto", [], {"type": None, "error": None}, 580)[0] == "open"


def test_legacy_gpus_stop_at_580(info_of):
    gpus = info_of("v100")["pci"]["gpus"]
    driver.check_branch_for_gpus(580, gpus)
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 590: .* supported up to branch 580"):
        driver.check_branch_for_gpus(590, gpus)


@pytest.mark.parametrize(
    ("requested", "running", "installed", "image_build", "expected"),
    [
        ("", "6.8.0-151-generic", ["6.8.0-149-generic", "6.8.0-151-generic"], False, "6.8.0-151-generic"),
        # A container or a host whose running kernel is not in this root: the newest installed one.
        ("", "6.18.44-fc", ["6.8.0-149-generic", "6.8.0-151-generic", "6.8.0-90-generic"], False, "6.8.0-151-generic"),
        # An image build never takes the build machine's kernel.
        ("", "6.8.0-151-generic", ["6.8.0-151-generic", "6.11.0-9-generic"], True, "6.11.0-9-generic"),
        ("6.8.0-152-generic", "6.8.0-151-generic", ["6.8.0-151-generic"], False, "6.8.0-152-generic"),
    ],
)
def test_target_kernel(requested, running, installed, image_build, expected):
    assert driver.target_kernel(requested, running, installed, image_build)[0] == expected


def test_no_kernel_to_install_for_names_the_variable():
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_release: unset, and no kernel is installed"):
        driver.target_kernel("", "6.18.44-fc", [], False)
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_release: 'latest' is not a kernel release"):
        driver.target_kernel("latest", "6.8.0-1-generic", [], False)


def test_ubuntu_precompiled_open_is_the_headless_userspace_and_the_signed_modules_of_the_kernel():
    assert driver.ubuntu_packages(580, "open", "precompiled", "6.8.0-151-generic", "x86_64", True) == [
        "nvidia-headless-no-dkms-580-server-open",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-open-6.8.0-151-generic",
    ]


def test_ubuntu_precompiled_proprietary_adds_the_objects_and_signatures():
    assert driver.ubuntu_packages(580, "proprietary", "precompiled", "5.15.0-204-generic", "x86_64", True) == [
        "nvidia-headless-no-dkms-580-server",
        "nvidia-utils-580-server",
        "linux-modules-nvidia-580-server-5.15.0-204-generic",
        "linux-objects-nvidia-580-server-5.15.0-204-generic",
        "linux-signatures-nvidia-5.15.0-204-generic",
    ]
    arm = driver.ubuntu_packages(580, "proprietary", "precompiled", "6.8.0-1-generic-64k", "aarch64", True)
    assert not any(p.startswith("linux-signatures") for p in arm)


def test_ubuntu_dkms_and_the_full_userspace():
    packages = driver.ubuntu_packages(570, "open", "dkms", "6.8.0-151-generic", "x86_64", False)
    assert packages[:3] == ["nvidia-headless-570-server-open", "nvidia-utils-570-server", "linux-headers-6.8.0-151-generic"]
    assert "libnvidia-gl-570-server" in packages and "libnvidia-fbc1-570-server" in packages


def test_debian_packages():
    assert driver.debian_packages("proprietary", "6.1.0-56-amd64", True) == [
        "nvidia-kernel-dkms", "libcuda1", "nvidia-smi", "nvidia-persistenced", "linux-headers-6.1.0-56-amd64"]
    assert driver.debian_packages("open", "6.1.0-56-amd64", False)[0] == "nvidia-open-kernel-dkms"


@pytest.mark.parametrize(
    ("branch", "module_type", "compute_only", "expected"),
    [
        (580, "open", False, ["nvidia-open-580", "linux-headers-K"]),
        (580, "proprietary", False, ["cuda-drivers-580", "linux-headers-K"]),
        # From 590 the names lose the branch and a pinning package holds it.
        (590, "open", False, ["nvidia-driver-pinning-590", "nvidia-open", "linux-headers-K"]),
        (590, "open", True, ["nvidia-driver-pinning-590", "nvidia-dkms-open", "libnvidia-compute", "nvidia-compute-utils",
                             "nvidia-utils", "linux-headers-K"]),
        (570, "proprietary", True, ["nvidia-dkms-570", "libnvidia-compute-570", "nvidia-compute-utils-570", "nvidia-utils-570",
                                    "linux-headers-K"]),
    ],
)
def test_cuda_repository_packages_for_debian_and_ubuntu(branch, module_type, compute_only, expected):
    assert driver.cuda_deb_packages(branch, module_type, "K", compute_only) == expected


@pytest.mark.parametrize(
    ("major", "module_type", "method", "stream", "packages"),
    [
        ("9", "open", "dkms", "nvidia-driver:580-open", ["@nvidia-driver:580-open/default", "kernel-devel-K", "kernel-headers-K"]),
        ("8", "proprietary", "dkms", "nvidia-driver:580-dkms", ["@nvidia-driver:580-dkms/default", "kernel-devel-K", "kernel-headers-K"]),
        ("9", "proprietary", "precompiled", "nvidia-driver:580", ["@nvidia-driver:580/default"]),
        ("10", "open", "dkms", None, ["nvidia-open-580", "kernel-devel-K", "kernel-headers-K"]),
        ("10", "proprietary", "dkms", None, ["cuda-drivers-580", "kernel-devel-K", "kernel-headers-K"]),
    ],
)
def test_rhel_streams_and_packages(major, module_type, method, stream, packages):
    plan = driver.rhel_plan(major, 580, module_type, method, "K")
    assert plan["module_stream"] == stream
    assert plan["packages"] == packages
    assert plan["versionlock"] == ["*nvidia*580*"]


@pytest.mark.parametrize(
    ("family", "distribution", "major", "arch", "url"),
    [
        ("ubuntu", "Ubuntu", "24", "x86_64", "https://mirror.example/cuda/repos/ubuntu2404/x86_64/"),
        ("ubuntu", "Ubuntu", "22", "aarch64", "https://mirror.example/cuda/repos/ubuntu2204/sbsa/"),
        ("debian", "Debian", "12", "x86_64", "https://mirror.example/cuda/repos/debian12/x86_64/"),
        ("rhel", "Rocky", "9", "x86_64", "https://mirror.example/cuda/repos/rhel9/x86_64/"),
    ],
)
def test_cuda_repository_under_a_mirror(family, distribution, major, arch, url):
    # Ansible's distribution_major_version for Ubuntu 24.04 is "24": the directory carries "04".
    major_version = f"{major}.04" if family == "ubuntu" else major
    assert driver.cuda_repo(family, distribution, major_version, arch, "https://mirror.example/cuda/repos/")["url"] == url


def test_driver_packages_leave_the_toolkit_and_fabric_manager_alone():
    names = ["nvidia-utils-580-server", "libnvidia-compute-580-server", "linux-modules-nvidia-580-server-open-6.8.0-151-generic",
             "nvidia-container-toolkit", "libnvidia-container1", "nvidia-fabricmanager-580", "libnvidia-nscq-580",
             "libcuda1", "firmware-nvidia-gsp", "nvidia-kernel-dkms", "python3-pynvml", "linux-headers-6.8.0-151-generic"]
    assert [n for n in names if driver.is_driver_package(n, "ubuntu")] == [
        "nvidia-utils-580-server", "libnvidia-compute-580-server", "linux-modules-nvidia-580-server-open-6.8.0-151-generic",
        "libcuda1", "firmware-nvidia-gsp", "nvidia-kernel-dkms"]


def test_installed_driver_version_branch_and_holds():
    packages = {
        "nvidia-utils-580-server": {"version": "580.178.04-0ubuntu0.24.04.1", "held": True},
        "libnvidia-compute-580-server": {"version": "580.178.04-0ubuntu0.24.04.1", "held": False},
        "linux-modules-nvidia-580-server-open-6.8.0-151-generic": {"version": "6.8.0-151.151", "held": False},
        "bash": {"version": "5.2.21-2ubuntu4", "held": False},
    }
    got = driver.installed_driver(packages, "ubuntu")
    assert got["version"] == "580.178.04" and got["branch"] == 580
    assert got["held"] == ["nvidia-utils-580-server"]
    assert got["not_held"] == ["libnvidia-compute-580-server", "linux-modules-nvidia-580-server-open-6.8.0-151-generic"]


def test_a_branch_change_is_refused_unless_allowed():
    installed = {"branch": 570, "version": "570.195.03"}
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 580: driver 570.195.03 \(branch 570\) is installed; "
                                        r"changing the branch takes gpuops_driver_allow_branch_change: true"):
        driver.check_branch_change(installed, 580, False)
    driver.check_branch_change(installed, 580, True)
    driver.check_branch_change(installed, 570, False)
    driver.check_branch_change({"branch": None, "version": None}, 580, False)


def test_candidates_missing_transitional_and_kernel_only():
    packages = driver.ubuntu_packages(535, "proprietary", "precompiled", "5.15.0-204-generic", "x86_64", True)
    # Ubuntu 22.04 turned its 535-server packages into transitional ones that install 580.
    transitional = {p: "535.288.01-0ubuntu0.22.04.1" for p in packages} | {"nvidia-headless-no-dkms-535-server": "580.178.04-0ubuntu0.22.04.1"}
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 535: nvidia-headless-no-dkms-535-server .* transitional .* branch 580; "
                                        r"branches with packages here: 570, 580"):
        driver.check_candidates("ubuntu", packages, transitional, 535, "Ubuntu 22", [570, 580])
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 535: no package nvidia-headless-no-dkms-535-server"):
        driver.check_candidates("ubuntu", packages, {}, 535, "Ubuntu 22", [])
    kernel_gone = {p: "1" for p in packages if not p.startswith("linux-")}
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_release: no package linux-modules-nvidia-535-server-5.15.0-204-generic"):
        driver.check_candidates("ubuntu", packages, kernel_gone, 535, "Ubuntu 22", [535])


def test_available_branches_skip_transitional_packages():
    names = ["nvidia-headless-no-dkms-535-server", "nvidia-headless-no-dkms-570-server", "nvidia-headless-no-dkms-580-server",
             "nvidia-headless-no-dkms-580-server-open", "nvidia-headless-no-dkms-590"]
    candidates = {"nvidia-headless-no-dkms-535-server": "580.178.04-0ubuntu0.22.04.1",
                  "nvidia-headless-no-dkms-570-server": "570.195.03-0ubuntu0.22.04.2",
                  "nvidia-headless-no-dkms-580-server": "580.178.04-0ubuntu0.22.04.1",
                  "nvidia-headless-no-dkms-580-server-open": "580.178.04-0ubuntu0.22.04.1"}
    assert driver.available_branches(names, candidates, "proprietary") == [570, 580]
    assert driver.available_branches(names, candidates, "open") == [580]


def test_debian_open_modules_that_lag_the_userspace_fall_back_or_refuse():
    candidates = {"libcuda1": "535.309.01-0+deb12u1", "nvidia-kernel-dkms": "535.309.01-0+deb12u1",
                  "nvidia-open-kernel-dkms": "535.261.03-1"}
    flavour, why = driver.check_debian_flavour("open", candidates, forced=False)
    assert flavour == "proprietary" and "535.261.03" in why and "535.309.01" in why
    with pytest.raises(PlanError, match=r"gpuops_driver_kernel_module_type: 'open': Debian's nvidia-open-kernel-dkms is 535.261.03"):
        driver.check_debian_flavour("open", candidates, forced=True)
    assert driver.check_debian_flavour("proprietary", candidates, forced=True) == ("proprietary", None)
    same = {**candidates, "nvidia-open-kernel-dkms": "535.309.01-1"}
    assert driver.check_debian_flavour("open", same, forced=False) == ("open", None)


def test_modprobe_options_file():
    text = driver.modprobe_options({"nvidia": {"NVreg_CoherentGPUMemoryMode": "driver", "NVreg_EnableGpuFirmware": True},
                                    "nvidia-uvm": {"uvm_disable_hmm": 1}})
    assert text == ("options nvidia NVreg_CoherentGPUMemoryMode=driver NVreg_EnableGpuFirmware=1\n"
                    "options nvidia_uvm uvm_disable_hmm=1\n")
    assert driver.modprobe_options({}) == ""


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"nouveau": {"modeset": 0}}, "module 'nouveau' is not an NVIDIA kernel module"),
        ({"nvidia": {"bad name": 1}}, "an option is a name and a scalar value"),
        ({"nvidia": {"x": [1, 2]}}, "an option is a name and a scalar value"),
        ({"nvidia": "NVreg_X=1"}, "is not a mapping"),
    ],
)
def test_bad_modprobe_options_name_the_variable(options, match):
    with pytest.raises(PlanError, match="gpuops_driver_module_options: .*" + match):
        driver.modprobe_options(options)


def test_libraries_without_a_kernel_module_are_not_an_installed_driver():
    # What python3-pynvml pulls in on Ubuntu 24.04: a compute library of some branch, no module.
    packages = {
        "libnvidia-compute-615-server": {"version": "615.71.09-0ubuntu0.24.04.2", "held": False},
        "nvidia-kernel-common-615-server": {"version": "615.71.09-0ubuntu0.24.04.2", "held": False},
        "python3-pynvml": {"version": "12.535.133-1", "held": False},
    }
    got = driver.installed_driver(packages, "ubuntu")
    assert got["branch"] is None and got["version"] is None and got["modules"] == []
    assert got["packages"] == ["libnvidia-compute-615-server", "nvidia-kernel-common-615-server"]
    packages["nvidia-dkms-615-server-open"] = {"version": "615.71.09-0ubuntu0.24.04.2", "held": False}
    assert driver.installed_driver(packages, "ubuntu")["branch"] == 615


def test_packages_of_another_branch_are_stray_and_never_held():
    # Ubuntu 22.04 after the 580 install replaced the 615 libraries python3-pynvml had pulled in.
    packages = {
        "nvidia-dkms-580-server": {"version": "580.178.04-0ubuntu0.22.04.1", "held": False},
        "libnvidia-compute-580-server": {"version": "580.178.04-0ubuntu0.22.04.1", "held": False},
        "linux-modules-nvidia-580-server-5.15.0-204-generic": {"version": "5.15.0-204.214", "held": False},
        "nvidia-firmware-615-server-615.71.09": {"version": "615.71.09-0ubuntu0.22.04.1", "held": False},
        "nvidia-kernel-common": {"version": "20151021+13", "held": False},
    }
    got = driver.installed_driver(packages, "ubuntu")
    assert got["branch"] == 580
    assert got["stray"] == ["nvidia-firmware-615-server-615.71.09"]
    assert got["not_held"] == ["libnvidia-compute-580-server", "linux-modules-nvidia-580-server-5.15.0-204-generic",
                               "nvidia-dkms-580-server", "nvidia-kernel-common"]


@pytest.mark.parametrize(
    ("name", "version", "branch"),
    [("linux-modules-nvidia-580-server-open-6.8.0-151-generic", "6.8.0-151.151", 580),
     ("nvidia-firmware-615-server-615.71.09", "615.71.09-0ubuntu0.22.04.1", 615),
     ("libcuda1", "535.309.01-0+deb12u1", 535),
     ("nvidia-kernel-common", "20151021+13", None),
     ("glx-alternative-nvidia", "1.2.2", None)],
)
def test_package_branch(name, version, branch):
    assert driver.package_branch(name, version) == branch


def test_candidates_of_packages_without_a_headless_one_skip_the_transitional_check():
    # NVIDIA's CUDA repository on Ubuntu: no nvidia-headless package to compare the branch with.
    packages = driver.cuda_deb_packages(580, "open", "6.8.0-151-generic", True)
    driver.check_candidates("ubuntu", packages, dict.fromkeys(packages, "580.105.08-1"), 580, "Ubuntu 24 (cuda repository)", [])
    with pytest.raises(PlanError, match=r"gpuops_driver_branch: 580: no package nvidia-utils-580 in Ubuntu 24 \(cuda repository\)"):
        driver.check_candidates("ubuntu", packages, {p: "580.105.08-1" for p in packages if p != "nvidia-utils-580"}, 580,
                                "Ubuntu 24 (cuda repository)", [])


@pytest.mark.parametrize(("target", "installed", "requested", "image_build", "expected"), [
    ("5.15.0-204-generic", ["5.15.0-204-generic", "6.8.0-149-generic"], "", False, "6.8.0-149-generic"),
    ("6.8.0-149-generic", ["5.15.0-204-generic", "6.8.0-149-generic"], "", False, None),
    ("5.15.0-204-generic", ["5.15.0-204-generic", "6.8.0-149-generic"], "5.15.0-204-generic", False, None),
    ("6.8.0-149-generic", ["6.8.0-149-generic"], "", True, None),
    ("6.8.0-9-generic", ["6.8.0-9-generic", "6.8.0-10-generic"], "", False, "6.8.0-10-generic"),  # numbers, not text
    ("6.8.0-9-generic", [], "", False, None),
])
def test_boot_kernel(target, installed, requested, image_build, expected):
    assert driver.boot_kernel(target, installed, requested, image_build) == expected


def test_kernel_packages_renames_only_the_kernel_specific_ones():
    packages = ["nvidia-headless-580-server", "linux-headers-5.15.0-204-generic", "linux-modules-nvidia-580-server-5.15.0-204-generic"]
    assert driver.kernel_packages(packages, "5.15.0-204-generic", "6.8.0-149-generic") == [
        "linux-headers-6.8.0-149-generic", "linux-modules-nvidia-580-server-6.8.0-149-generic"]
    assert driver.kernel_packages(["kernel-devel-5.14.0-503.el9.x86_64"], "5.14.0-503.el9.x86_64", "5.14.0-611.el9.x86_64") == [
        "kernel-devel-5.14.0-611.el9.x86_64"]
