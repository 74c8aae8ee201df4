"""The driver_files module end to end: driver_info's plan from recorded apt and dpkg answers, then the host driver's files in a
temporary directory and nvidia-persistenced's unit through a stubbed systemctl, in the same run."""

from __future__ import annotations

import copy
import types
from unittest import mock

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers, driver_host
from ansible_collections.gpuops.nvidia.plugins.modules import driver_files

from ..harness import call
from .test_driver_host import FakeHost, request
from .test_node_files_module import Systemd

# A kernel the recorded package lists have precompiled modules for, running.
KERNEL = "6.8.0-151-generic"
NAMES = ("nvidia-headless-no-dkms-580-server-open", "nvidia-utils-580-server", "libnvidia-compute-580-server")
DPKG = "".join(f"{n}\t580.178.04-0ubuntu0.24.04.1\thi \n" for n in NAMES) + f"linux-modules-nvidia-580-server-open-{KERNEL}\t6.8.0-151.151\thi \n"
# What the driver role's node_files task wrote before driver_files did: the same text, so that a node converged by an
# earlier version sees no change (and no restart of nvidia-persistenced).
DROPIN = """\
# Managed by gpuops.nvidia (gpuops_driver_persistenced): keep the GPUs initialised between jobs.
[Service]
ExecStart=
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode --verbose
# Ubuntu's unit has no [Install] section (udev starts it when the driver binds); enabled, it
# also runs from boot everywhere.
[Install]
WantedBy=multi-user.target
"""


@pytest.fixture
def node(tmp_path, monkeypatch, info_of):
    root = tmp_path / "root"
    (root / "lib/modules" / KERNEL / "kernel").mkdir(parents=True)
    unit = root / "usr/lib/systemd/system/nvidia-persistenced.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Service]\nExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced\n")
    etc = tmp_path / "etc"
    monkeypatch.setattr(driver_host, "PERSISTENCED_DROPIN_DIR", str(etc / "nvidia-persistenced.service.d"))
    monkeypatch.setattr(driver_host, "PERSISTENCED_DROPIN", str(etc / "nvidia-persistenced.service.d/gpuops.conf"))
    fake = FakeHost("noble", DPKG, "Dual MIT/GPL\n")
    systemd = Systemd()

    def run_command(self, argv, environ_update=None, **_kw):
        return systemd(argv) if argv[0].endswith("systemctl") else fake.run(argv, environ_update)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/sbin/{name}")

    info = copy.deepcopy(info_of("hgx-h100"))
    info["node"]["kernel"]["running"] = KERNEL
    info["nvml"]["driver_version"] = info["node"]["modules"]["version"] = "580.178.04"

    def run(check=False, **args):
        params = request(state_dir=str(etc / "gpuops-nvidia"), gpu_info=info, root=str(root),
                         modprobe_file=str(etc / "modprobe.d/gpuops-nvidia.conf"))
        return call(driver_files.main, {**params, "_ansible_check_mode": check, "_ansible_diff": True, **args})

    return etc, run, systemd


def test_the_plan_puts_the_files_in_place_once_then_changes_nothing(node):
    etc, run, systemd = node
    first = run(module_options={"nvidia": {"NVreg_EnableGpuFirmware": 1}})
    assert not first["failed"], first
    assert not first["plan"]["install"] and first["changed"]
    assert (etc / "gpuops-nvidia/driver-method").read_text() == "host\n"
    assert (etc / "modprobe.d/gpuops-nvidia.conf").read_text().startswith("# Managed by gpuops.nvidia (gpuops_driver_module_options).\n")
    assert "NVreg_EnableGpuFirmware=1" in (etc / "modprobe.d/gpuops-nvidia.conf").read_text()
    assert (etc / "nvidia-persistenced.service.d/gpuops.conf").read_text() == DROPIN
    # The driver runs now (the installed one loaded, the planned kernel running): enabled and started. (No daemon-reload:
    # the drop-in is not under a systemd directory here.)
    assert not first["reboot_required"], first["reboot_reasons"]
    assert systemd.actions() == [["enable", "nvidia-persistenced.service"], ["start", "nvidia-persistenced.service"]]
    assert first["diff"]
    again = run(module_options={"nvidia": {"NVreg_EnableGpuFirmware": 1}})
    assert not again["changed"] and again["node_files"]["changed_paths"] == [] and "diff" not in again
    assert len(systemd.actions()) == 2
    # Without options the file goes.
    gone = run()
    assert gone["changed"] and gone["node_files"]["changed_paths"] == [str(etc / "modprobe.d/gpuops-nvidia.conf")]
    assert not (etc / "modprobe.d/gpuops-nvidia.conf").exists()


def test_check_mode_reports_the_files_and_writes_none(node):
    etc, run, systemd = node
    res = run(check=True)
    assert res["changed"] and str(etc / "gpuops-nvidia/driver-method") in res["node_files"]["changed_paths"]
    assert not etc.exists() and systemd.actions() == []


def test_plan_only_and_persistence_off(node):
    etc, run, systemd = node
    res = run(host_files=False)
    assert not res["changed"] and "node_files" not in res and not etc.exists()
    res = run(persistenced=False)
    assert res["changed"] and not (etc / "nvidia-persistenced.service.d").exists() and systemd.actions() == []


def test_a_driver_not_running_now_gets_its_unit_enabled_not_started(node):
    _etc, run, systemd = node
    res = run(image_build="true")
    assert res["changed"] and res["plan"]["image_build"]
    assert systemd.actions() == [["enable", "nvidia-persistenced.service"]]


def test_a_bad_request_is_refused_before_any_file(node):
    etc, run, _systemd = node
    res = run(branch="999")
    assert res["failed"] and res["variable"] == "gpuops_driver_branch" and not etc.exists()


def _answer(node_run_params, **args):
    """gpu_info's answer to the driver role's plan (answers.driver) with the fixture's request."""
    params = {**node_run_params, **args}
    info = params.pop("gpu_info")
    facts = {"distribution": params.pop("distribution"), "distribution_major_version": params.pop("major_version"),
             "architecture": params.pop("architecture", "x86_64")}
    module = types.SimpleNamespace(check_mode=False, _diff=True,
                                   run_command=basic.AnsibleModule.run_command.__get__(object()),
                                   get_bin_path=basic.AnsibleModule.get_bin_path.__get__(object()))
    return answers.driver(module, params, info, facts)


@pytest.fixture
def params(node):
    """The request the fixture's run makes, as the role would give it."""
    captured = {}
    with mock.patch.object(driver_files, "files_result", lambda module, diff: captured.update(module.params) or {"changed": False}):
        node[1]()
    return {k: v for k, v in captured.items() if not k.startswith("_ansible")}


@pytest.mark.parametrize("converged", [False, True])
def test_the_reads_driver_answer_is_the_modules_check_mode_result_and_changes_nothing(node, params, converged):
    """What gpu_info returns for the driver role stands for driver_files' run: the same result as its check mode, with
    nothing written and no unit touched, on a node to converge and on a converged one."""
    etc, run, systemd = node
    if converged:
        run()
    actions = len(systemd.actions())
    files = sorted(str(p) for p in etc.rglob("*")) if etc.exists() else []
    answer = _answer(params)
    assert (sorted(str(p) for p in etc.rglob("*")) if etc.exists() else []) == files and len(systemd.actions()) == actions
    checked = run(check=True, _ansible_diff=False)
    assert answer["result"] == {k: v for k, v in checked.items() if k not in ("failed", "invocation")}
    assert answer["result"]["changed"] is not converged
    assert answer["settings"]["branch"] == params["branch"] and answer["settings"]["distribution"] == params["distribution"]


def test_the_reads_driver_answer_is_none_where_the_plan_is_refused_or_the_settings_are_wrong(node, params):
    refused = _answer(params, branch="999")
    # The module's own refusal, word for word: the preflight names it before any role changes the node.
    assert refused["result"] is None and refused["refused"] == node[1](branch="999")["msg"]
    assert refused["refused"].startswith("gpuops_driver_branch: ")
    wrong = _answer(params, method="magic")
    assert wrong["result"] is None and "refused" not in wrong  # the role's input check names it first
