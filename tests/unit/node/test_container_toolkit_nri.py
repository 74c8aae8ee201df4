"""NRI mode in the container_toolkit role (issue 63): the plugin's source refused before anything changes where it is
unset, the unit templated from the role's variables, the tasks' order and guards (check mode, image build), the
uninstall's. The preflight's refusal: test_container_runtime_module.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.template import trust_as_template
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import inputs

from tests.unit.harness import role_templar

ROOT = Path(__file__).parents[3]
ROLE = ROOT / "roles/container_toolkit"
SPEC = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]
DEFAULTS = yaml.safe_load((ROLE / "defaults/main.yml").read_text())


def _tasks(name: str) -> list[dict]:
    return yaml.safe_load((ROLE / "tasks" / name).read_text())


def test_nri_is_a_choice_with_the_plugin_s_variables_documented_and_defaulted():
    options = SPEC["main"]["options"]
    assert "nri" in options["gpuops_container_toolkit_mode"]["choices"]
    for name in ("gpuops_container_toolkit_nri_plugin_source", "gpuops_container_toolkit_nri_plugin_checksum",
                 "gpuops_container_toolkit_nri_socket", "gpuops_container_toolkit_nri_plugin_index",
                 "gpuops_container_toolkit_nri_namespaces"):
        assert options[name]["default"] == DEFAULTS[name], name
    assert DEFAULTS["gpuops_container_toolkit_nri_plugin_source"] == ""


@pytest.mark.parametrize("source", ["", None, "plugin", "ftp://mirror/plugin", "relative/path", 3])
def test_nri_mode_refuses_a_plugin_source_it_cannot_take_naming_the_variable_value_and_what_is_accepted(source):
    (message,) = inputs.nri_plugin("nri", source, 10)
    expected = (f"gpuops_container_toolkit_nri_plugin_source: {json.dumps(source)} is not an https, http or file URL nor "
                "an absolute path on the controller")
    assert message.startswith(expected)
    assert "gpuops_container_toolkit_mode: nri" in message


@pytest.mark.parametrize("source", ["https://mirror.example/nri/gpuops-nvidia-nri-plugin", "http://127.0.0.1:8461/tools/x",
                                    "file:///srv/gpuops-nvidia-nri-plugin", "/srv/artifacts/gpuops-nvidia-nri-plugin"])
def test_nri_mode_takes_a_url_or_a_controller_path(source):
    assert inputs.nri_plugin("nri", source, 0) == []
    assert inputs.nri_plugin("nri", source, 99) == []


@pytest.mark.parametrize("index", [-1, 100, "10", True])
def test_the_plugin_index_is_nri_s_range(index):
    (message,) = inputs.nri_plugin("nri", "/srv/plugin", index)
    assert message.startswith("gpuops_container_toolkit_nri_plugin_index:") and "0 to 99" in message


def test_other_modes_ask_nothing_of_the_plugin_s_variables():
    for mode in ("auto", "cdi", "jit-cdi", "legacy", "csv"):
        assert inputs.nri_plugin(mode, "", 100) == []


def test_the_role_declares_the_rule_with_its_variables():
    declaration = yaml.safe_load((ROLE / "meta/inputs.yml").read_text())
    (rule,) = [r for r in declaration["rules"] if r["rule"] == "node.nri_plugin"]
    assert rule["args"] == {"mode": "gpuops_container_toolkit_mode", "source": "gpuops_container_toolkit_nri_plugin_source",
                            "index": "gpuops_container_toolkit_nri_plugin_index"}
    assert inputs.RULES["nri_plugin"] is inputs.nri_plugin


def _unit(**overrides) -> str:
    templar = role_templar(ROLE, role_path=str(ROLE), ansible_managed="Ansible managed", gpuops_container_toolkit_mode="nri",
                           **overrides)
    template = (ROLE / "templates/gpuops-nvidia-nri-plugin.service.j2").read_text()
    return templar.template(trust_as_template(template))


def _exec_start(unit: str) -> list[str]:
    (line,) = [line for line in unit.splitlines() if line.startswith("ExecStart=")]
    return line.removeprefix("ExecStart=").split()


def test_the_unit_runs_the_plugin_with_the_socket_index_and_namespaces():
    unit = _unit()
    assert unit.startswith("#") and "Ansible managed" in unit.splitlines()[1]
    assert _exec_start(unit) == ["/usr/local/bin/gpuops-nvidia-nri-plugin", "--nri-socket", "/var/run/nri/nri.sock",
                                 "--nri-plugin-index", "10", "--nri-namespace", "gpu-operator"]
    assert "Restart=always" in unit and "WantedBy=multi-user.target" in unit
    more = _exec_start(_unit(gpuops_container_toolkit_nri_namespaces=["gpu", "monitoring", "mig"],
                             gpuops_container_toolkit_nri_plugin_index=3, gpuops_container_toolkit_nri_socket="/run/nri.sock"))
    assert more[1:] == ["--nri-socket", "/run/nri.sock", "--nri-plugin-index", "3", "--nri-namespace", "gpu",
                        "--nri-management-cdi-device-namespaces", "monitoring,mig"]


def test_the_plugin_s_flags_are_those_its_main_parses():
    main = (ROOT / "lab/nri-plugin/main.go").read_text()
    for flag in ("--nri-socket", "--nri-plugin-index", "--nri-namespace", "--nri-management-cdi-device-namespaces"):
        assert f'"{flag[2:]}"' in main, flag


@pytest.mark.parametrize(("source", "url"), [("https://m/p", True), ("file:///srv/p", True), ("/srv/p", False)])
def test_a_url_is_fetched_by_the_node_and_a_path_copied_from_the_controller(source, url):
    templar = role_templar(ROLE, role_path=str(ROLE), gpuops_container_toolkit_nri_plugin_source=source)
    assert templar.template(trust_as_template("{{ __gpuops_container_toolkit_nri_plugin_url | bool }}")) is url
    fetch, copy, _unit_task = _tasks("nri.yml")
    assert fetch["when"] == "__gpuops_container_toolkit_nri_plugin_url | bool"
    assert copy["when"] == "not __gpuops_container_toolkit_nri_plugin_url | bool"
    for task in (fetch, copy):
        args = task.get("ansible.builtin.get_url") or task["ansible.builtin.copy"]
        assert args["dest"] == "{{ __gpuops_container_toolkit_nri_plugin_bin }}" and args["mode"] == "0755"


def test_the_unit_is_enabled_started_restarted_on_a_change_and_never_started_in_an_image_build():
    task = _tasks("nri.yml")[-1]
    args = task["gpuops.nvidia.node_files"]
    (unit,) = args["units"]
    assert unit["enabled"] is True
    assert unit["state"] == "{{ 'restarted' if __gpuops_container_toolkit_nri_binary is changed else 'started' }}"
    # restart_on only with started, as node_files takes it (the first run with rt-nri failed on that).
    assert unit["restart_on"] == ("{{ [] if __gpuops_container_toolkit_nri_binary is changed else "
                                  "[__gpuops_container_toolkit_nri_unit_path] }}")
    for changed, state, restart_on in ((True, "restarted", []), (False, "started", ["/etc/systemd/system/x.service"])):
        templar = role_templar(ROLE, role_path=str(ROLE), __gpuops_container_toolkit_nri_plugin_url=True,
                               __gpuops_container_toolkit_nri_fetched={"changed": changed},
                               __gpuops_container_toolkit_nri_unit_path="/etc/systemd/system/x.service")
        assert templar.template(trust_as_template(unit["state"])) == state
        assert templar.template(trust_as_template(unit["restart_on"])) == restart_on
    # node_files starts or restarts nothing in an image build; the role passes it the runtime module's detection.
    assert args["image_build"] == "{{ __gpuops_container_toolkit_runtime.image_build | string | lower }}"
    # In check mode on a node without the binary there is no unit for systemd to answer about yet.
    assert task["when"] == "not (ansible_check_mode and __gpuops_container_toolkit_nri_binary is changed)"


def test_the_plugin_comes_after_the_runtime_s_config_and_only_in_nri_mode():
    main = _tasks("main.yml")
    names = [t["name"] for t in main]
    include = main[names.index("Install and run the NRI plugin")]
    assert include["ansible.builtin.include_tasks"] == "nri.yml"
    assert include["when"] == "__gpuops_container_toolkit_nri | bool"
    assert names.index("Add the nvidia runtime to the node's container runtime") < names.index("Install and run the NRI plugin")
    # The runtime module is told NRI mode, and no nvidia-container-runtime mode then.
    templar = role_templar(ROLE, role_path=str(ROLE), gpuops_container_toolkit_mode="nri")
    args = templar.template(trust_as_template("{{ __gpuops_container_toolkit_runtime_args }}"))
    assert args["nri"] is True and args["toolkit_mode"] is None
    assert templar.template(trust_as_template("{{ __gpuops_container_toolkit_package }}")) == "nvidia-container-toolkit-base"


def test_the_uninstall_stops_the_unit_before_its_file_goes():
    tasks = _tasks("uninstall.yml")
    names = [t["name"] for t in tasks]
    stop = tasks[names.index("Stop and disable the NRI plugin's unit")]["gpuops.nvidia.node_files"]
    remove = tasks[names.index("Remove the NRI plugin's unit and binary")]["gpuops.nvidia.node_files"]
    assert names.index("Stop and disable the NRI plugin's unit") < names.index("Remove the NRI plugin's unit and binary")
    assert stop["units"] == [{"name": "{{ __gpuops_container_toolkit_nri_unit }}", "enabled": False, "state": "stopped"}]
    assert "files" not in stop
    assert [f["path"] for f in remove["files"]] == ["{{ __gpuops_container_toolkit_nri_unit_path }}",
                                                    "{{ __gpuops_container_toolkit_nri_plugin_bin }}"]
    assert all(f["state"] == "absent" for f in remove["files"])
