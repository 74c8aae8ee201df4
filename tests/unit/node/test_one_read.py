"""The node's one read (module_utils/node/one_read.py, docs/node-read.md): which answers hold, what a role leaves to the
roles after it, where an answer plans nothing to do; and that every host role publishes its check in the one shape and
decides with the one filter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from ansible.template import trust_as_template
from ansible_collections.gpuops.nvidia.plugins.filter import node_read
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import one_read

from tests.unit.harness import role_templar

ROLES_DIR = Path(__file__).parents[3] / "roles"
FACTS = {"distribution": "Ubuntu", "distribution_major_version": "24", "architecture": "x86_64", "os_family": "Debian"}
PLANNED = {"distribution": "Ubuntu", "major_version": "24", "architecture": "x86_64"}
SETTINGS = {"branch": "580", "method": "dkms"}


def answers_for(role: str, result: dict | None, settings: dict | None = None) -> dict:
    given = dict(SETTINGS if settings is None else settings)
    if one_read.TERMS[role].planned:
        given.update(PLANNED)
    return {role: {"settings": given, "result": result}}


@pytest.mark.parametrize("role", list(one_read.TERMS))
def test_an_answer_asked_with_the_settings_the_role_plans_with_holds(role):
    result = {"changed": False, "plan": {}}
    assert one_read.holds(answers_for(role, result), role, SETTINGS, FACTS) == result


@pytest.mark.parametrize("role", list(one_read.TERMS))
def test_no_answer_with_other_settings_not_open_or_not_answered(role):
    result = {"changed": False}
    assert one_read.holds(answers_for(role, result), role, dict(SETTINGS, branch="595"), FACTS) is None
    assert one_read.holds({}, role, SETTINGS, FACTS) is None, "taken, or none left after a change"
    assert one_read.holds(answers_for(role, None), role, SETTINGS, FACTS) is None, "the module would fail or warn"
    assert one_read.holds(None, role, SETTINGS, FACTS) is None
    other = "driver" if role != "driver" else "rdma"
    assert one_read.holds(answers_for(other, result), role, SETTINGS, FACTS) is None, "another role's answer"


@pytest.mark.parametrize("role", [r for r, t in one_read.TERMS.items() if t.planned])
def test_an_answer_planned_from_the_package_lists_holds_only_for_the_distribution_it_was_planned_for(role):
    answers = answers_for(role, {"changed": False})
    assert one_read.holds(answers, role, SETTINGS, dict(FACTS, distribution_major_version="22")) is None
    assert one_read.holds(answers, role, SETTINGS, dict(FACTS, architecture="aarch64")) is None
    assert one_read.holds(answers, role, SETTINGS, {}) is None and one_read.holds(answers, role, SETTINGS, None) is None


@pytest.mark.parametrize("role", list(one_read.TERMS))
def test_an_answer_that_would_change_the_node_holds_only_for_a_role_that_applies_its_plan_itself(role):
    answers = answers_for(role, {"changed": True})
    held = one_read.holds(answers, role, SETTINGS, FACTS)
    assert (held is None) is one_read.TERMS[role].unchanged
    assert one_read.TERMS["driver"].unchanged and not one_read.TERMS["rdma"].unchanged


def test_a_nouveau_answer_with_a_reboot_due_does_not_hold():
    assert one_read.holds(answers_for("nouveau", {"changed": False, "reboot_required": True}), "nouveau", SETTINGS) is None
    assert one_read.holds(answers_for("nouveau", {"changed": False, "reboot_required": False}), "nouveau", SETTINGS) is not None


def test_an_unknown_role_is_refused_by_name():
    with pytest.raises(ValueError, match="'dcgm' is not a role whose check is answered"):
        one_read.holds({}, "dcgm", {}, FACTS)
    with pytest.raises(node_read.AnsibleFilterError, match="dcgm"):
        node_read.node_answer({}, "dcgm", {}, FACTS)


def test_a_role_leaves_every_other_answer_where_it_changed_nothing_and_none_where_it_did():
    answers = {role: {"settings": {}, "result": {"changed": False}} for role in one_read.ROLES}
    left = one_read.after(answers, "nouveau", False)
    assert set(left) == set(one_read.ROLES) - {"nouveau"}, "its own taken, once a run"
    assert one_read.after(left, "rdma", True) == {}, "after a change the read no longer says what the node is"
    assert node_read.node_answers_after(answers, "driver", None) == {r: answers[r] for r in one_read.ROLES if r != "driver"}
    assert one_read.after(None, "driver", False) == {}
    assert set(answers) == set(one_read.ROLES), "the input is left as it was"


def test_gpu_info_refuses_a_role_asked_twice():
    checks = [{"role": "driver"}, {"role": "rdma"}, {"role": "driver"}, {"role": "rdma"}, {"role": "nouveau"}]
    assert one_read.asked_twice(checks) == ["driver", "rdma"] and one_read.asked_twice(checks[:2]) == []


# ---------------------------------------------------------------------------------------------------
# Where an answer plans nothing to do
# ---------------------------------------------------------------------------------------------------

def driver_answer(**plan):
    base = {"install": [], "method": "dkms", "repository": "distro", "module_type": "open", "kernel": "6.8.0-45-generic",
            "boot_kernel": None}
    installed = {"not_held": plan.pop("not_held", []), "module_types": plan.pop("module_types", {"6.8.0-45-generic": "open"})}
    return {"changed": False, "plan": {**base, **plan}, "installed": installed}


@pytest.mark.parametrize(("answer", "hold", "converged"), [
    (driver_answer(), True, True),
    (driver_answer(install=["nvidia-driver-580-open"]), True, False),
    (driver_answer(method="containerized"), True, False),
    (driver_answer(repository="cuda"), True, False),
    # A package released from its hold: the hold is to do, unless the role does not hold.
    (driver_answer(not_held=["nvidia-utils-580"]), True, False),
    (driver_answer(not_held=["nvidia-utils-580"]), False, True),
    # The module of the planned flavour for the kernel the plan is for, and for the one the node boots next.
    (driver_answer(module_types={"6.8.0-45-generic": "proprietary"}), True, False),
    (driver_answer(module_types={}), True, False),
    (driver_answer(boot_kernel="6.8.0-50-generic"), True, False),
    (driver_answer(boot_kernel="6.8.0-50-generic", module_types={"6.8.0-45-generic": "open", "6.8.0-50-generic": "open"}), True, True),
    (None, True, False),
])
def test_the_driver_s_answer_is_converged_only_where_the_role_has_nothing_to_do(answer, hold, converged):
    assert (node_read.driver_converged(answer, hold) is not None) is converged


FABRIC_OK = {"nvml": {"status": "ok", "gpus": [{"fabric": {"state": "completed", "status": "success"}},
                                               {"fabric": {"state": "not_supported", "status": None}}]}}


def fm_answer(mode="fabricmanager", start=True, **changes):
    plan = {"mode": mode, "install": False, "unhold": [], "remove": [], "not_held": []}
    service = {"enabled": True, "active": True}
    service.update(changes.pop("service", {}))
    plan.update(changes)
    return {"changed": False, "plan": plan, "start": start, "service": service}


@pytest.mark.parametrize(("answer", "hold", "config", "gpu_info", "converged"), [
    (fm_answer(), True, {}, FABRIC_OK, True),
    (fm_answer(mode="none", install=True), True, {"LOG_LEVEL": "4"}, {}, True),
    (fm_answer(install=True), True, {}, FABRIC_OK, False),
    (fm_answer(unhold=["nvidia-fabricmanager-580"]), True, {}, FABRIC_OK, False),
    (fm_answer(remove=["nvidia-fabricmanager-575"]), True, {}, FABRIC_OK, False),
    (fm_answer(not_held=["nvidia-fabricmanager-580"]), True, {}, FABRIC_OK, False),
    (fm_answer(not_held=["nvidia-fabricmanager-580"]), False, {}, FABRIC_OK, True),
    # Settings to write each run (fabricmanager.cfg), an IMEX node (its service masked or unmasked).
    (fm_answer(), True, {"LOG_LEVEL": "4"}, FABRIC_OK, False),
    (fm_answer(mode="nvlsm"), True, {"LOG_LEVEL": "4"}, FABRIC_OK, False),
    (fm_answer(mode="imex"), True, {}, FABRIC_OK, False),
    (fm_answer(service={"enabled": False}), True, {}, FABRIC_OK, False),
    # Running with the fabric complete, or not to be started now.
    (fm_answer(service={"active": False}), True, {}, FABRIC_OK, False),
    (fm_answer(start=False, service={"active": False}), True, {}, FABRIC_OK, True),
    (fm_answer(), True, {}, {"nvml": {"status": "ok", "gpus": [{"fabric": {"state": "in_progress", "status": None}}]}}, False),
    (fm_answer(), True, {}, {"nvml": {"status": "driver_not_loaded", "gpus": []}}, False),
    (None, True, {}, FABRIC_OK, False),
])
def test_the_fabric_manager_answer_is_converged_only_where_the_role_has_nothing_to_do(answer, hold, config, gpu_info, converged):
    assert (node_read.fabric_manager_converged(answer, hold, config, gpu_info) is not None) is converged


@pytest.mark.parametrize(("gpus", "complete"), [
    ([], True),
    ([{"fabric": {"state": "completed", "status": "success"}}], True),
    ([{"fabric": {"state": "completed", "status": "NVML_ERROR_UNKNOWN"}}], False),
    ([{"fabric": {"state": "not_started", "status": None}}], False),
])
def test_the_fabric_is_complete_where_every_gpu_s_fabric_completed_with_success_or_has_none(gpus, complete):
    assert node_read.fabric_complete({"nvml": {"status": "ok", "gpus": gpus}}) is complete
    assert node_read.fabric_complete({"nvml": {"status": "binding_missing", "gpus": gpus}}) is False


@pytest.mark.parametrize(("plan", "boot_list", "applies"), [
    ({}, False, False),
    ({"doca_repo": {"url": "https://x"}}, False, True),
    ({"install": ["rdma-core"]}, False, True),
    ({"hold": ["doca-ofed"]}, False, True),
    ({"not_held": ["doca-ofed"]}, False, True),
    ({"modules": ["nvidia-peermem"]}, False, True),
    ({}, True, True),
])
def test_the_rdma_plan_applies_where_it_asks_for_something(plan, boot_list, applies):
    full = {"doca_repo": None, "install": [], "hold": [], "not_held": [], "modules": [], **plan}
    assert node_read.rdma_applies({"plan": full, "boot_list": {"present": boot_list}}) is applies
    assert node_read.rdma_applies(None) is False


# ---------------------------------------------------------------------------------------------------
# The roles: one shape, one filter
# ---------------------------------------------------------------------------------------------------

def role_vars(role: str) -> dict:
    return yaml.safe_load((ROLES_DIR / role / "vars/main.yml").read_text())


@pytest.mark.parametrize("role", one_read.ROLES)
def test_every_answerable_role_publishes_its_check_and_takes_its_answer_through_the_one_filter(role):
    variables = role_vars(role)
    published = variables[f"__gpuops_{role}_read_check"]
    assert f"'role': '{role}'" in str(published) or (isinstance(published, dict) and published["role"] == role)
    answer_expressions = [v for v in variables.values() if isinstance(v, str) and "node_answer(" in v]
    assert [e for e in answer_expressions if f"node_answer('{role}'" in e], f"{role} takes its answer through gpuops.nvidia.node_answer"
    tasks = "".join(p.read_text() for p in (ROLES_DIR / role / "tasks").glob("*.yml"))
    assert f"node_answers_after('{role}'" in tasks, f"{role} leaves the read's answers to the roles after it"
    assert "__gpuops_preflight_read" not in tasks + str(variables), "a role reads the answers it is left, not the preflight's read"


@pytest.mark.parametrize("role", one_read.ROLES)
def test_a_published_check_templates_to_the_one_shape(role):
    overrides = {"gpuops_gpu_info": {"derived": {"kernel_module_type": {"type": "open"}}, "pci": {"network": []}},
                 "ansible_facts": FACTS, "gpuops_container_toolkit_cdi_refresh": False}
    published = role_templar(ROLES_DIR / role, **overrides).template(trust_as_template(f"{{{{ __gpuops_{role}_read_check }}}}"))
    assert set(published) == {"role", "settings"} and published["role"] == role and isinstance(published["settings"], dict)


def test_a_disabled_role_publishes_no_check():
    assert role_templar(ROLES_DIR / "rdma", gpuops_rdma_enabled=False).template(
        trust_as_template("{{ __gpuops_rdma_read_check }}")) is None
    assert role_templar(ROLES_DIR / "fabric_manager", gpuops_fabric_manager_enabled=False).template(
        trust_as_template("{{ __gpuops_fabric_manager_read_check }}")) is None


@pytest.fixture
def builtin_lookups(monkeypatch):
    """ansible.builtin's lookups by their full names, as a play finds them (the collection loader is not set up here)."""
    from ansible.plugins import loader

    get = loader.lookup_loader.get
    monkeypatch.setattr(loader.lookup_loader, "get", lambda name, *a, **k: get(name.removeprefix("ansible.builtin."), *a, **k))


def test_the_preflight_asks_the_published_checks_of_the_roles_it_is_given(builtin_lookups):
    checks = {"__gpuops_driver_read_check": {"role": "driver", "settings": SETTINGS},
              "__gpuops_rdma_read_check": None, "__gpuops_nouveau_read_check": {"role": "nouveau", "settings": {"state": "present"}}}
    templar = role_templar(ROLES_DIR / "preflight", gpuops_preflight_answer_checks=["nouveau", "rdma", "driver"], **checks)
    asked = templar.template(trust_as_template("{{ __gpuops_preflight_checks }}"))
    assert asked == [checks["__gpuops_nouveau_read_check"], checks["__gpuops_driver_read_check"]], "the disabled rdma role is not asked"
    assert role_templar(ROLES_DIR / "preflight", **checks).template(trust_as_template("{{ __gpuops_preflight_checks }}")) == []
    # A role named but not in the play (its variables absent): not asked.
    assert role_templar(ROLES_DIR / "preflight", gpuops_preflight_answer_checks=["fabric_manager"]).template(
        trust_as_template("{{ __gpuops_preflight_checks }}")) == []


def test_node_yml_names_every_answerable_role_it_runs():
    node = (Path(__file__).parents[3] / "playbooks/node.yml").read_text()
    named = re.search(r"gpuops_preflight_answer_checks: >-\n(.*?)\n    - name", node, re.S)
    assert named and all(f"'{role}'" in named.group(1) for role in one_read.ROLES)
