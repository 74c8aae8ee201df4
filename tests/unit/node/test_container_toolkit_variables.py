"""The names container_runtime's messages give its options when the container_toolkit role runs it: each maps an
option the module can name in a refusal to the role variable the role passes it from (a typo here would name a
variable the user cannot set)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from ansible_collections.gpuops.nvidia.plugins.modules import container_runtime

from tests.unit.harness import role_templar

ROOT = Path(__file__).parents[3]
ROLE = ROOT / "roles/container_toolkit"
RAW_VARS = yaml.safe_load((ROLE / "vars/main.yml").read_text())
NAMES = RAW_VARS["__gpuops_container_toolkit_variables"]
ROLE_VARS = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
OPTIONS = yaml.safe_load(container_runtime.DOCUMENTATION)["options"]


def options_named_in_refusals() -> set[str]:
    """The option given as ConfigError's second argument anywhere in the module and its module_utils."""
    named = set()
    for path in (ROOT / "plugins/module_utils/node/container_runtime.py", ROOT / "plugins/modules/container_runtime.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "ConfigError"
                    and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
                named.add(node.args[1].value)
    named |= {"runtime_name", "runtime_path", "cdi_spec_dirs", "drop_in"}  # through _check_runtime_name / _check_path
    return named


def test_every_option_a_refusal_names_maps_to_a_role_variable():
    passed_by_role = set(NAMES) | {"runtime_path"}  # the role never sets runtime_path: the module's default
    assert options_named_in_refusals() - passed_by_role == set()
    assert set(NAMES) <= set(OPTIONS), set(NAMES) - set(OPTIONS)
    assert set(NAMES.values()) <= set(ROLE_VARS), set(NAMES.values()) - set(ROLE_VARS)


def test_the_role_passes_each_option_from_the_variable_it_names():
    tasks = (ROLE / "tasks/main.yml").read_text() + (ROLE / "vars/main.yml").read_text()
    for option, variable in NAMES.items():
        assert re.search(rf"\b{option}: .*{variable}", tasks) or re.search(rf"{variable}", tasks), (option, variable)
    # Both runs (the settings' check and the change) pass the role's runtime settings, each option from its entry; the
    # check also every other entry of the arguments the preflight's read is asked with (cdi_spec: with the GPUs).
    run = [t for t in yaml.safe_load((ROLE / "tasks/main.yml").read_text()) if "gpuops.nvidia.container_runtime" in t]
    runtime_args = RAW_VARS["__gpuops_container_toolkit_runtime_args"]
    assert len(run) == 2
    for task in run:
        args = task["gpuops.nvidia.container_runtime"]
        assert {k: v for k, v in args.items() if k in runtime_args} == {
            k: f"{{{{ __gpuops_container_toolkit_runtime_args.{k} }}}}" for k in runtime_args}
    check = run[0]["gpuops.nvidia.container_runtime"]
    assert set(check) == set(runtime_args) | {"validate_only", "packages", "files", "cdi_spec", "cdi_refresh"}
    assert check["cdi_refresh"] == "{{ __gpuops_container_toolkit_check_args.cdi_refresh }}"
    assert check["packages"] == "{{ __gpuops_container_toolkit_check_args.packages }}" and check["validate_only"] is True
    assert check["files"] == "{{ __gpuops_container_toolkit_check_args.files }}"
    assert check["cdi_spec"].startswith("{{ __gpuops_container_toolkit_check_args.cdi_spec | combine({'gpu_info'")
    assert set(RAW_VARS["__gpuops_container_toolkit_check_only"]) == {"validate_only", "packages", "files", "cdi_spec", "cdi_refresh"}
    assert "combine(__gpuops_container_toolkit_check_only)" in RAW_VARS["__gpuops_container_toolkit_check_args"]
    assert runtime_args["variables"] == "{{ __gpuops_container_toolkit_variables }}"
    for option, variable in NAMES.items():
        if option == "drop_in":  # through __gpuops_container_toolkit_drop_in, which reads both drop-in variables
            continue
        if option in runtime_args:
            assert variable in runtime_args[option], (option, runtime_args[option])


def _role_templar(**overrides):
    """The role's defaults and variables as a play holds them; the CDI refresh units (their drop-ins are templates, which
    need a play's loader) off unless set."""
    overrides.setdefault("gpuops_container_toolkit_cdi_refresh", False)
    return role_templar(ROLE, **overrides)


def test_the_check_s_arguments_are_the_module_s_options_and_read_the_same_each_time():
    """The preflight's read answers the check with __gpuops_container_toolkit_check_args and gives them back; the role
    takes the answer only where they equal its own: every key an option of the module, no omit (which would drop out of
    one side only), and the same value templated twice."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.container_runtime_run import ARGUMENT_SPEC

    templar = _role_templar(gpuops_driver_method="auto")
    args = templar.template(trust_as_template("{{ __gpuops_container_toolkit_check_args }}"))
    assert set(args) <= set(ARGUMENT_SPEC), set(args) - set(ARGUMENT_SPEC)
    assert args["validate_only"] is True and args["restart_marker"] is None and args["drop_in"] is None
    assert args["cdi_spec"]["path"] == "/var/run/cdi/nvidia.yaml" and "gpu_info" not in args["cdi_spec"]
    assert args["cdi_refresh"] is None, "the refresh units off (the templar's default): none to check"
    assert "omit" not in json.dumps(args)
    assert json.loads(json.dumps(args)) == templar.template(trust_as_template("{{ __gpuops_container_toolkit_check_args }}"))
    args = _role_templar(gpuops_container_toolkit_cdi_spec=False, gpuops_container_toolkit_restart=False).template(
        trust_as_template("{{ __gpuops_container_toolkit_check_args }}"))
    assert args["cdi_spec"] is None and args["restart_marker"] == ""


@pytest.mark.parametrize(("read", "open_", "answered"), [
    ({"settings": "same", "result": {"changed": False, "up_to_date": True}}, True, True),
    # Not open: something changed on the node since the read (a role before this one changed it, a binding installed),
    # or the role took it before in this run (it checks again when run again in the play): none is left to it.
    ({"settings": "same", "result": {"changed": False, "up_to_date": True}}, False, False),
    # The answer would put the repository's files in place: the check's own run does.
    ({"settings": "same", "result": {"changed": True, "up_to_date": True}}, True, False),
    # Asked with other settings (the driver role's method moved the driver's root), or not answered.
    ({"settings": "other", "result": {"changed": False, "up_to_date": True}}, True, False),
    ({"settings": "same", "result": None}, True, False),
    (None, True, False),
])
def test_the_read_s_answer_is_taken_only_where_it_was_asked_with_these_settings_and_is_still_open(read, open_, answered):
    templar = _role_templar(gpuops_driver_method="auto")
    args = json.loads(json.dumps(templar.template(trust_as_template("{{ __gpuops_container_toolkit_check_args }}"))))
    overrides = {"gpuops_driver_method": "auto", "__gpuops_node_answers": {}}
    if read is not None and open_:
        settings = args if read["settings"] == "same" else dict(args, drop_in="/etc/containerd/conf.d/50-other.toml")
        overrides["__gpuops_node_answers"] = {"container_toolkit": {"settings": settings, "result": read["result"]}}
    answer = _role_templar(**overrides).template(trust_as_template("{{ __gpuops_container_toolkit_answer }}"))
    assert (answer is not None) is answered
    if answered:
        assert answer == read["result"]


def test_the_role_publishes_its_check_in_the_read_s_shape_with_the_arguments_it_compares():
    """What the preflight passes to gpu_info (docs/node-read.md) is the role's check with the arguments its answer is
    compared with."""
    templar = _role_templar(gpuops_driver_method="auto")
    published = templar.template(trust_as_template("{{ __gpuops_container_toolkit_read_check }}"))
    assert published == {"role": "container_toolkit",
                         "settings": templar.template(trust_as_template("{{ __gpuops_container_toolkit_check_args }}"))}


@pytest.mark.parametrize(("here", "answer", "registered", "want"), [
    # The check answered the spec: its result stands (the spec's task was left out, a skipped result).
    (True, {"changed": False, "devices": ["nvidia.com/gpu=0"]}, {"skipped": True, "changed": False}, "answer"),
    # Not answered: the spec's own run.
    (True, None, {"changed": True, "devices": ["nvidia.com/gpu=0", "nvidia.com/gpu=all"]}, "registered"),
    # No spec made here: the skipped task, whatever an answer said (no devices, not changed).
    (False, {"changed": False, "devices": ["nvidia.com/gpu=0"]}, {"skipped": True, "changed": False}, "registered"),
])
def test_the_spec_s_result_is_the_check_s_answer_where_it_stands_else_the_spec_task_s(here, answer, registered, want):
    """The role's last task reads the CDI devices and whether the spec changed from __gpuops_container_toolkit_cdi_result
    (no task of its own sets it)."""
    got = _role_templar(__gpuops_container_toolkit_cdi_spec_here=here, __gpuops_container_toolkit_cdi_answer=answer,
                        __gpuops_container_toolkit_cdi_spec=registered).template(
        trust_as_template("{{ __gpuops_container_toolkit_cdi_result }}"))
    assert got == (answer if want == "answer" else registered)
    last = yaml.safe_load((ROLE / "tasks/main.yml").read_text())[-1]["ansible.builtin.set_fact"]
    assert "__gpuops_container_toolkit_cdi_result.devices" in last["gpuops_container_toolkit_cdi_devices"]
    assert "__gpuops_container_toolkit_cdi_result," in last["gpuops_node_changed"]
    # NRI mode's plugin unit counts too (started empty at the role's start, so an earlier run's result does not).
    assert "__gpuops_container_toolkit_nri_unit_result | default({})]" in last["gpuops_node_changed"]


REFRESH_FILES = [{"path": "/etc/systemd/system/nvidia-cdi-refresh.service.d/50-gpuops.conf", "content": "x", "mode": "0644"}]
REFRESH_UNITS = [{"name": "nvidia-cdi-refresh.path", "enabled": True, "state": "started"}]


@pytest.mark.parametrize(("answer", "since", "taken"), [
    ({"settings": {"files": REFRESH_FILES, "units": REFRESH_UNITS}, "result": {"changed": False}}, {}, True),
    # The units would change: node_files' own run changes them.
    ({"settings": {"files": REFRESH_FILES, "units": REFRESH_UNITS}, "result": {"changed": True}}, {}, False),
    # Asked with other files (the spec's options changed the drop-in), not answered, or not asked.
    ({"settings": {"files": [], "units": REFRESH_UNITS}, "result": {"changed": False}}, {}, False),
    ({"settings": {"files": REFRESH_FILES, "units": REFRESH_UNITS}, "result": None}, {}, False),
    (None, {}, False),
    # Something changed since the check: the runtime's config, the repository, the packages.
    ({"settings": {"files": REFRESH_FILES, "units": REFRESH_UNITS}, "result": {"changed": False}},
     {"__gpuops_container_toolkit_apply": {"changed": True}}, False),
    ({"settings": {"files": REFRESH_FILES, "units": REFRESH_UNITS}, "result": {"changed": False}},
     {"__gpuops_container_toolkit_repo_changed": True}, False),
    ({"settings": {"files": REFRESH_FILES, "units": REFRESH_UNITS}, "result": {"changed": False}},
     {"__gpuops_container_toolkit_install": {"changed": True}}, False),
])
def test_the_check_s_refresh_units_answer_is_taken_where_asked_with_these_units_and_nothing_changed_since(answer, since, taken):
    """Where the spec is not made here (containerd 1.6), the check answers node_files' run for the refresh units; the
    role leaves that run out only on the terms it leaves out the spec's."""
    check = {"up_to_date": True} if answer is None else {"up_to_date": True, "cdi_refresh": answer}
    overrides = {"__gpuops_container_toolkit_check": check, "__gpuops_container_toolkit_refresh_files": REFRESH_FILES,
                 "gpuops_container_toolkit_cdi_refresh": True,
                 "__gpuops_container_toolkit_refresh_units": REFRESH_UNITS, "__gpuops_container_toolkit_repo_changed": False,
                 "__gpuops_container_toolkit_apply": {"skipped": True, "changed": False},
                 "__gpuops_container_toolkit_install": {"skipped": True, "changed": False}, **since}
    got = _role_templar(**overrides).template(trust_as_template("{{ __gpuops_container_toolkit_refresh_answer }}"))
    assert (got is not None) is taken
    if taken:
        assert got == answer["result"]


@pytest.mark.parametrize(("version", "packages", "installed"), [
    ("", {"nvidia-container-toolkit": "1.18.2-1", "python3-tomlkit": "0.12.4-1", "python3-yaml": "6.0.1-2"}, True),
    ("", {"nvidia-container-toolkit": "1.18.2-1", "python3-tomlkit": None, "python3-yaml": "6.0.1-2"}, False),
    # A pinned upstream version matches any package revision, as apt's 1.18.2-* does; a full one only itself.
    ("1.18.2", {"nvidia-container-toolkit": "1.18.2-1", "python3-tomlkit": "0.12.4-1", "python3-yaml": "6.0.1-2"}, True),
    ("1.18.2", {"nvidia-container-toolkit": "1.18.20-1", "python3-tomlkit": "0.12.4-1", "python3-yaml": "6.0.1-2"}, False),
    ("1.18.2-1", {"nvidia-container-toolkit": "1.18.2-1", "python3-tomlkit": "0.12.4-1", "python3-yaml": "6.0.1-2"}, True),
    ("1.18.1", {"nvidia-container-toolkit": "1.18.2-1", "python3-tomlkit": "0.12.4-1", "python3-yaml": "6.0.1-2"}, False),
    ("1.18.1", {"nvidia-container-toolkit": None, "python3-tomlkit": "0.12.4-1", "python3-yaml": "6.0.1-2"}, False),
    (None, None, False),  # the check did not run (skipped): unknown, so apt runs
])
def test_the_install_is_left_out_only_when_every_package_is_there_at_the_pinned_version(version, packages, installed):
    variables = {"gpuops_container_toolkit_version": version or ""}
    if packages is not None:
        variables["__gpuops_container_toolkit_check"] = {"packages": packages}
    templar = _role_templar(**variables)
    assert templar.template(trust_as_template("{{ __gpuops_container_toolkit_installed }}")) is installed


def test_the_record_of_an_install_names_every_package_dpkg_newly_selected():
    """node_common's record_packages, on the apt module's output recorded on the lab's Ubuntu 22.04 machine: dpkg's
    progress leaves a carriage return at the end of each line it reads (the first version of this expression missed
    them all, and an uninstall purged nothing)."""
    task = yaml.safe_load((ROOT / "roles/node_common/tasks/record_packages.yml").read_text())[0]
    output = json.loads((Path(__file__).parent / "recorded/jammy-apt-install-toolkit.json").read_text())["stdout"]
    assert "\r" in output
    templar = Templar(loader=DataLoader(), variables={"gpuops_node_packages_output": output})
    assert templar.template(trust_as_template(task["vars"]["__gpuops_node_record_names"])) == [
        "libyaml-0-2", "nvidia-container-toolkit-base", "python3-tomlkit", "python3-yaml"]


# apt-get install -s on the lab's Ubuntu 24.04 machine, cut down: new packages, an upgraded one (its installed version in
# brackets), a removal, and the Conf lines that follow.
SIMULATED = """\
NOTE: This is only a simulation!
      apt-get needs root privileges for real execution.
Reading package lists...
The following NEW packages will be installed:
  dkms nvidia-dkms-580-server
Inst libc6-dev [2.39-0ubuntu8.5] (2.39-0ubuntu8.6 Ubuntu:24.04/noble-updates [amd64])
Remv nvidia-fabricmanager-570 [570.195.03-0ubuntu0.24.04.1]
Inst dkms (3.0.11-1ubuntu13 Ubuntu:24.04/noble [all])
Inst nvidia-dkms-580-server (580.95.05-0ubuntu0.24.04.2 Ubuntu:24.04/noble-updates [amd64])
Inst libnvidia-compute-580-server:i386 (580.95.05-0ubuntu0.24.04.2 Ubuntu:24.04/noble-updates [i386])
Conf dkms (3.0.11-1ubuntu13 Ubuntu:24.04/noble [all])
Conf nvidia-dkms-580-server (580.95.05-0ubuntu0.24.04.2 Ubuntu:24.04/noble-updates [amd64])
"""


def test_the_record_of_a_planned_install_names_the_new_packages_only():
    """node_common's record_planned, on apt-get's simulation: an upgrade of a package that was there and a removal are
    not ours to purge."""
    task = yaml.safe_load((ROOT / "roles/node_common/tasks/record_planned.yml").read_text())[1]
    templar = Templar(loader=DataLoader(), variables={"__gpuops_node_simulated": {"stdout": SIMULATED}})
    assert templar.template(trust_as_template(task["vars"]["__gpuops_node_record_names"])) == [
        "dkms", "nvidia-dkms-580-server", "libnvidia-compute-580-server"]
    templar = Templar(loader=DataLoader(), variables={"__gpuops_node_simulated": {"skipped": True}})
    assert templar.template(trust_as_template(task["vars"]["__gpuops_node_record_names"])) == []


def test_the_record_command_adds_each_name_once_and_says_what_it_added(tmp_path):
    """record_write.yml's command, run here: the record and its directory are made, a name already there is not added
    again, and its output (what changed_when reads) names the new ones only."""
    import subprocess

    task = yaml.safe_load((ROOT / "roles/node_common/tasks/record_write.yml").read_text())[0]
    record = tmp_path / "gpuops-nvidia" / "driver-packages"
    records = {"__gpuops_node_records": {"driver": str(record)}, "gpuops_node_packages_record": "driver"}
    templar = Templar(loader=DataLoader(), variables={**records, "__gpuops_node_record_names": ["dkms", "gcc"]})
    argv = templar.template(trust_as_template(task["ansible.builtin.command"]["argv"]))
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split("\n")[:2] == ["added dkms", "added gcc"]
    templar = Templar(loader=DataLoader(), variables={**records, "__gpuops_node_record_names": ["gcc", "make"]})
    argv = templar.template(trust_as_template(task["ansible.builtin.command"]["argv"]))
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout == "added make\n"
    assert record.read_text() == "dkms\ngcc\nmake\n"
    assert oct(record.stat().st_mode & 0o777) == "0o644"


def test_the_uninstall_reads_each_recorded_package_once():
    """packages_purge reads a record as one package per line (a first version split on a "\\n" that the template never
    turned into a newline: apt got one name with the newlines in it, and purged nothing)."""
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.packages import read_record

    assert read_record("libyaml-0-2\npython3-yaml\n\nnvidia-container-toolkit-base\npython3-yaml\r\n") == [
        "libyaml-0-2", "python3-yaml", "nvidia-container-toolkit-base"]


@pytest.mark.parametrize(("recommends", "flag"), [(None, True), (False, True), (True, False)])
def test_the_simulation_installs_recommended_packages_as_the_install_does(recommends, flag):
    """record_planned's apt-get -s: without --no-install-recommends for an install with apt's default (the rdma role's),
    else ibverbs-providers (recommended by libibverbs1) went unrecorded, and the uninstall left it and what it needs."""
    task = yaml.safe_load((ROOT / "roles/node_common/tasks/record_planned.yml").read_text())[0]
    variables = {"gpuops_node_packages_planned": ["rdma-core"]}
    if recommends is not None:
        variables["gpuops_node_packages_recommends"] = recommends
    argv = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(task["ansible.builtin.command"]["argv"]))
    assert ("--no-install-recommends" in argv) is flag and argv[-1] == "rdma-core" and argv[:3] == ["apt-get", "install", "-s"]


def _node_common_vars(**inventory):
    """node_common's vars/main.yml, templated as a play would, with the inventory's variables."""
    raw = yaml.safe_load((ROOT / "roles/node_common/vars/main.yml").read_text())
    templar = Templar(loader=DataLoader(), variables={**raw, **inventory})
    return {name: templar.template(trust_as_template(path)) for name, path in raw["__gpuops_node_records"].items()}


def test_each_record_path_is_written_once_and_the_driver_s_follows_its_state_dir():
    """The roles name their records; node_common's vars hold the paths. The driver's record sits in
    gpuops_driver_state_dir where the inventory moves it: the uninstall role, which never loads the driver role's
    defaults, must purge it from there (a list of literal paths missed it)."""
    assert _node_common_vars()["driver"] == "/etc/gpuops-nvidia/driver-packages"
    moved = _node_common_vars(gpuops_driver_state_dir="/var/lib/site/gpu")
    assert moved["driver"] == "/var/lib/site/gpu/driver-packages"
    assert moved["fabric_manager"] == "/etc/gpuops-nvidia/fabric-manager-packages"
    names = set(yaml.safe_load((ROOT / "roles/node_common/meta/argument_specs.yml").read_text())
                ["argument_specs"]["record_packages"]["options"]["gpuops_node_packages_record"]["choices"])
    assert names == set(moved)
    literal = [str(p.relative_to(ROOT)) for p in (ROOT / "roles").rglob("tasks/*.yml")
               if "-packages" in p.read_text() and "/etc/gpuops-nvidia" in p.read_text()]
    assert literal == []


@pytest.mark.parametrize(("manage_repo", "check", "changed", "installed", "key_missing", "include"), [
    # A converged node: the key there, nothing changed, every package in: the install's include is left out.
    (True, {"node_files": {"changed": False, "files": [{}, {}, {"present": True}]}}, False, True, False, False),
    (True, {"node_files": {"changed": False, "files": [{}, {}, {"present": False}]}}, False, True, True, True),
    # The check changed the source: the packages are read from it again.
    (True, {"node_files": {"changed": True, "files": [{}, {}, {"present": True}]}}, False, True, False, True),
    (True, {"node_files": {"changed": False, "files": [{}, {}, {"present": True}]}}, False, False, False, True),
    # The repository left to the user: no files to look at, only the packages.
    (False, {}, False, True, False, False),
    (False, {}, False, False, False, True),
])
def test_the_install_s_include_runs_where_one_of_its_tasks_would(manage_repo, check, changed, installed, key_missing, include):
    templar = _role_templar(gpuops_container_toolkit_manage_repo=manage_repo, __gpuops_container_toolkit_check=check,
                            __gpuops_container_toolkit_key={"changed": changed}, __gpuops_container_toolkit_installed=installed)
    assert templar.template(trust_as_template("{{ __gpuops_container_toolkit_key_missing }}")) is key_missing
    tasks = yaml.safe_load((ROLE / "tasks/main.yml").read_text())
    condition = next(t["when"] for t in tasks if t.get("ansible.builtin.include_tasks") == "install.yml")
    assert templar.template(trust_as_template("{{ " + condition + " }}")) is include
