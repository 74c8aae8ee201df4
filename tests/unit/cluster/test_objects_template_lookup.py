"""The objects_template lookup: a role's template rendered as ansible.builtin.template's lookup renders it, without
deep-copying the variables first (the cluster roles' renders on a thousand-node controller). That both render the
same objects is checked on the lab cluster: objects applied with the builtin lookup, then a run with this one
changes nothing."""

from __future__ import annotations

import copy

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.gpuops.nvidia.plugins.lookup.objects_template import LookupModule

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
