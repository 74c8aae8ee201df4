"""The objects_template lookup: what ansible.builtin.template's lookup renders, from the same variables, without
deep-copying them first (the cluster roles' renders on a thousand-node controller)."""

from __future__ import annotations

import copy
import warnings

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader, lookup_loader
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
    with warnings.catch_warnings():  # the collection finder may be set up already, by another test
        warnings.simplefilter("ignore")
        init_plugin_loader()
    (tmp_path / "templates").mkdir()
    (tmp_path / "templates/objects.yml.j2").write_text(TEMPLATE)
    loader = DataLoader()
    loader.set_basedir(str(tmp_path))

    def run(name: str, variables: dict, term: str = "objects.yml.j2") -> str:
        variables = {"ansible_search_path": [str(tmp_path)], **variables}
        templar = Templar(loader=loader, variables=variables)
        # Ours as the class itself (the unit tests' collection is on sys.path, not in the plugin loader's paths).
        lookup = (LookupModule(loader=loader, templar=templar) if name == "gpuops.nvidia.objects_template"
                  else lookup_loader.get(name, loader=loader, templar=templar))
        return lookup.run([term], variables)[0]

    return run


VARIABLES = {"namespace_name": "gpu-operator", "nodes": {"b": {"gpus": 2}, "a": {"gpus": 8}}}


def test_it_renders_what_the_builtin_lookup_renders(render):
    ours = render("gpuops.nvidia.objects_template", copy.deepcopy(VARIABLES))
    assert ours == render("ansible.builtin.template", copy.deepcopy(VARIABLES))
    assert yaml.safe_load(ours) == [
        {"name": "a", "namespace": "gpu-operator", "gpus": 8, "pattern": "a-b", "literal": "x\\y"},
        {"name": "b", "namespace": "gpu-operator", "gpus": 2, "pattern": "a-b", "literal": "x\\y"},
    ]


class Guard:
    """A variable that fails the test when deep-copied (a thousand nodes' facts, in the real run)."""

    def __deepcopy__(self, memo):
        raise AssertionError("deepcopy called")


def test_it_does_not_copy_the_variables(render):
    # The builtin lookup copies (what made each render take seconds on a thousand nodes); this one does not.
    with pytest.raises(AssertionError, match="deepcopy called"):
        render("ansible.builtin.template", {**VARIABLES, "facts": Guard()})
    variables = {**VARIABLES, "facts": Guard()}
    assert yaml.safe_load(render("gpuops.nvidia.objects_template", variables))[0]["name"] == "a"
    assert set(variables) == {"namespace_name", "nodes", "facts"}


def test_a_missing_template_is_named(render):
    with pytest.raises(AnsibleError, match=r"the template file nothing\.j2 could not be found"):
        render("gpuops.nvidia.objects_template", VARIABLES, term="nothing.j2")
