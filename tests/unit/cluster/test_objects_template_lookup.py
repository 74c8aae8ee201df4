"""The objects_template lookup: a role's template rendered as ansible.builtin.template's lookup renders it, without
deep-copying the variables first (the cluster roles' renders on a thousand-node controller). That both render the
same objects is checked on the lab cluster: objects applied with the builtin lookup, then a run with this one
changes nothing."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.gpuops.nvidia.plugins.lookup.objects_template import LookupModule

REPO = Path(__file__).resolve().parents[3]

TEMPLATE = """{# a comment #}
{% set ns = namespace_name %}
{% for name, row in nodes.items() | sort %}
- name: {{ name }}
  namespace: {{ ns }}
  gpus: {{ row.gpus }}
  pattern: "{{ 'a.b' | regex_replace('\\\\.', '-') }}"
  literal: "x\\\\y"
{% endfor %}
"""


@pytest.fixture
def render(tmp_path):
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/objects.yml.j2").write_text(TEMPLATE)
    loader = DataLoader()
    loader.set_basedir(str(tmp_path))

    def run(variables: dict, term: str = "objects.yml.j2") -> str:
        # The class itself: the plugin loader is not set up here (setting it up would change how the other unit
        # tests import the collection).
        variables = {"ansible_search_path": [str(tmp_path)], **variables}
        return LookupModule(loader=loader, templar=Templar(loader=loader, variables=variables)).run([term], variables)[0]

    return run


VARIABLES = {"namespace_name": "gpu-operator", "nodes": {"b": {"gpus": 2}, "a": {"gpus": 8}}}


def test_it_renders_the_template_with_the_tasks_variables(render):
    assert yaml.safe_load(render(copy.deepcopy(VARIABLES))) == [
        {"name": "a", "namespace": "gpu-operator", "gpus": 8, "pattern": "a-b", "literal": "x\\y"},
        {"name": "b", "namespace": "gpu-operator", "gpus": 2, "pattern": "a-b", "literal": "x\\y"},
    ]


class Guard:
    """A variable that fails the test when deep-copied (a thousand nodes' facts, in the real run)."""

    def __deepcopy__(self, memo):
        raise AssertionError("deepcopy called")


def test_it_does_not_copy_the_variables(render):
    # ansible.builtin.template's lookup copies them (what made each render take seconds on a thousand nodes).
    variables = {**VARIABLES, "facts": Guard()}
    assert yaml.safe_load(render(variables))[0]["name"] == "a"
    assert set(variables) == {"namespace_name", "nodes", "facts"}


def test_a_missing_template_is_named(render):
    with pytest.raises(AnsibleError, match=r"the template file nothing\.j2 could not be found"):
        render(VARIABLES, term="nothing.j2")


# The container_toolkit role's refresh drop-ins (its vars render them with this lookup, where the read's answers are
# compared): byte for byte what ansible.builtin.template's lookup made of them, so nodes converged before keep theirs.
# Rendered by ansible-playbook on this machine (the builtin lookup needs the plugin loader, which these tests do not set
# up), each host with its own settings.
TOOLKIT_TEMPLATES = REPO / "roles/container_toolkit/templates"
HOSTS = {
    "defaults": {},
    "driver-container": {"gpuops_container_toolkit_cdi_spec_path": "/etc/cdi/nvidia.json",
                         "__gpuops_container_toolkit_driver_root": "/run/nvidia/driver",
                         "__gpuops_container_toolkit_driver_container": True},
    "dev-root": {"gpuops_container_toolkit_dev_root": "/", "gpuops_container_toolkit_device_name_strategy": ["index", "uuid"]},
    "own-ansible-managed": {"ansible_managed": "Set by the inventory for {{ inventory_hostname }}"},
}
SETTINGS = {
    "gpuops_container_toolkit_cdi_spec_path": "/var/run/cdi/nvidia.yaml",
    "gpuops_container_toolkit_device_name_strategy": ["index"],
    "gpuops_container_toolkit_dev_root": "",
    "__gpuops_container_toolkit_driver_root": "",
    "__gpuops_container_toolkit_driver_container": False,
}


def test_the_toolkit_drop_ins_render_as_the_builtin_lookup_renders_them(tmp_path):
    templates = [str(TOOLKIT_TEMPLATES / name) for name in ("nvidia-cdi-refresh.conf.j2", "nvidia-cdi-refresh-path.conf.j2")]
    play = [{"hosts": "all", "connection": "local", "gather_facts": False, "tasks": [{
        "ansible.builtin.copy": {
            "dest": str(tmp_path / "{{ inventory_hostname }}.json"),
            "content": "{{ {'ours': [lookup('gpuops.nvidia.objects_template', t0), lookup('gpuops.nvidia.objects_template', t1)],"
                       " 'builtin': [lookup('ansible.builtin.template', t0), lookup('ansible.builtin.template', t1)]} | to_json }}"},
        "delegate_to": "localhost", "vars": {"t0": templates[0], "t1": templates[1]}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump({"all": {"vars": SETTINGS, "hosts": HOSTS}}))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(REPO / ".build/collections"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_LOCALHOST_WARNING": "false"}
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml"), "-i", str(tmp_path / "hosts.yml")],
                         capture_output=True, text=True, env=env, timeout=300, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for host in HOSTS:
        rendered = json.loads((tmp_path / f"{host}.json").read_text())
        assert rendered["ours"] == rendered["builtin"], host
        service, path = rendered["ours"]
        assert service.startswith("#") and path.startswith("#")
        assert ("for " + host in service) == (host == "own-ansible-managed")
        assert ("NVIDIA_CTK_DRIVER_ROOT=/run/nvidia/driver" in service) == (host == "driver-container")
