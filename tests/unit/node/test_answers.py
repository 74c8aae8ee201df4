"""The checks of later roles answered in an earlier module's round trip (module_utils/node/answers.py): what is asked, how
it is resolved, and when nothing is answered. Each module's own answer is compared with its module's result in that
module's tests (test_nouveau_module, test_gpu_info_module, test_driver_files_module, test_cdi_spec_module)."""

from __future__ import annotations

import types

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers, fabric_manager_run
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError

FACTS = {"distribution": "Ubuntu", "distribution_major_version": "24", "architecture": "x86_64", "os_family": "Debian"}
DRIVER = {"result": {"changed": False, "plan": {"install": [], "image_build": False}, "installed": {"version": "580.95.05"}}}
ASKED = {"repository": "distro", "mode": "auto", "driver_version": None, "config": {}, "image_build": None}


def test_a_borrowed_module_runs_in_check_mode_and_its_failure_and_warnings_stay_here():
    module = types.SimpleNamespace(check_mode=False, _diff=True, run_command=lambda *_a, **_k: (0, "", ""), tmpdir="/tmp/x")
    view = answers.ModuleView(module, {"a": 1})
    assert view.check_mode is True and view._diff is False and view.params == {"a": 1} and view.tmpdir == "/tmp/x"
    view.warn("careful")
    assert view.warnings == ["careful"]
    with pytest.raises(answers.Refused, match="no"):
        view.fail_json(msg="no", rc=1)


def test_an_answer_s_warnings_are_the_answering_module_s_named_and_only_with_the_answer():
    warned = []
    module = types.SimpleNamespace(warn=warned.append)

    def answered(view):
        view.warn("containerd 1.6.20 has no CDI support")
        return {"changed": False}

    assert answers._answer({"s": 1}, module, {}, answered, "the toolkit's check") == {"settings": {"s": 1}, "result": {"changed": False}}
    assert warned == ["the toolkit's check: containerd 1.6.20 has no CDI support"]

    def refused(view):
        view.warn("said before failing")
        view.fail_json(msg="no")

    # No answer but the refusal: the role's own run warns (and fails), not this one.
    assert answers._answer({}, module, {}, refused, "the toolkit's check") == {"settings": {}, "result": None, "refused": "no"}
    assert len(warned) == 1
    # Nested: a check answered inside a borrowed run warns through it, each naming whose check it is.
    outer = answers._answer({}, module, {}, lambda view: answers._answer({}, view, {}, answered, "the spec's check")["result"],
                            "the role's check")
    assert outer["result"] == {"changed": False}
    assert warned[1:] == ["the role's check: the spec's check: containerd 1.6.20 has no CDI support"]


@pytest.fixture
def fm_runs(monkeypatch):
    runs = []

    def run(module, params, _host=None):
        runs.append((module.check_mode, params))
        return {"changed": False, "plan": {"mode": "fabricmanager", "install": False}, "start": True, "service": {}}

    monkeypatch.setattr(fabric_manager_run, "run", run)
    return runs


def test_the_fabric_manager_plan_takes_the_driver_answers_version_and_image_build(fm_runs):
    answer = answers.fabric_manager(object(), dict(ASKED), {"gpu": 1}, FACTS, DRIVER)
    assert answer["result"]["plan"]["mode"] == "fabricmanager"
    check_mode, params = fm_runs[0]
    assert check_mode and params["driver_version"] == "580.95.05" and params["image_build"] is False
    assert params["gpu_info"] == {"gpu": 1} and params["distribution"] == "Ubuntu" and params["major_version"] == "24"
    # What the role compares: the settings it gave, resolved, with the distribution.
    assert answer["settings"] == {**ASKED, "driver_version": "580.95.05", "image_build": False, "distribution": "Ubuntu",
                                  "major_version": "24", "architecture": "x86_64"}
    # A version the user set stays.
    assert answers.fabric_manager(object(), dict(ASKED, driver_version="580.82.07"), {}, FACTS, DRIVER)["settings"]["driver_version"] == "580.82.07"


@pytest.mark.parametrize("driver", [None, {"result": None},
                                    {"result": dict(DRIVER["result"], changed=True)},
                                    {"result": dict(DRIVER["result"], plan={"install": ["nvidia-driver-580"], "image_build": False})}])
def test_no_fabric_manager_answer_where_the_driver_role_will_not_take_its_own(fm_runs, driver):
    assert answers.fabric_manager(object(), dict(ASKED), {}, FACTS, driver)["result"] is None and fm_runs == []


def test_no_answer_without_the_distribution_or_for_settings_the_module_refuses(fm_runs):
    assert answers.fabric_manager(object(), dict(ASKED), {}, {}, DRIVER)["result"] is None
    assert answers.fabric_manager(object(), dict(ASKED, mode="magic"), {}, FACTS, DRIVER)["result"] is None
    assert answers.rdma(object(), {"stack": "auto"}, {"derived": {}}, {})["result"] is None
    assert answers.driver(object(), {"method": "dkms"}, {}, {})["result"] is None
    assert fm_runs == []


def test_a_refused_fabric_manager_plan_is_not_answered(monkeypatch):
    def refuse(_module, _params, _host=None):
        raise PlanError("gpuops_fabric_manager_driver_version", "no such version")

    monkeypatch.setattr(fabric_manager_run, "run", refuse)
    assert answers.fabric_manager(object(), dict(ASKED), {}, FACTS, DRIVER)["result"] is None


def test_a_refused_plan_is_answered_with_the_refusal_the_role_would_fail_with(monkeypatch, fm_runs):
    """No result, so the role runs its own module (and fails); the refusal itself is in the answer, for the preflight to
    name before any role changes the node."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver_host

    def refuse(view, _diff, _host=None):
        view.fail_json(msg="gpuops_driver_branch: '999': no such branch", variable="gpuops_driver_branch")

    monkeypatch.setattr(driver_host, "files_result", refuse)
    answer = answers.driver(object(), {"method": "dkms"}, {}, FACTS)
    assert answer["result"] is None and answer["refused"] == "gpuops_driver_branch: '999': no such branch"

    def plan_error(_module, _params, _host=None):
        raise PlanError("gpuops_fabric_manager_driver_version", "no such version")

    monkeypatch.setattr(fabric_manager_run, "run", plan_error)
    answer = answers.fabric_manager(object(), dict(ASKED), {}, FACTS, DRIVER)
    assert answer["result"] is None and answer["refused"] == "gpuops_fabric_manager_driver_version: no such version"


def test_a_check_that_cannot_be_made_here_is_not_a_refusal(monkeypatch):
    """An error of the read itself (a command that cannot run in this process) leaves the check to the role: no refusal."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import driver_host

    def broken(_view, _diff, _host=None):
        raise OSError("cannot run apt-cache")

    monkeypatch.setattr(driver_host, "files_result", broken)
    answer = answers.driver(object(), {"method": "dkms"}, {}, FACTS)
    assert answer["result"] is None and "refused" not in answer
    # Settings the module would refuse are not asked (the role's own input check names them): no refusal either.
    assert "refused" not in answers.driver(object(), {"method": 3}, {}, FACTS)
