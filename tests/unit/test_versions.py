"""versions.yml, the one place the collection's component versions are set (lab/versions.py writes them into the roles'
defaults and argument specs and renders docs/versions.md): every pin agrees with it, and the writer sets what it says."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from lab import versions

REPO = Path(__file__).resolve().parents[2]


def test_every_default_and_the_doc_agree_with_the_version_set():
    data = versions.load()
    assert versions.apply(data) == {}, "run make versions"
    assert (REPO / "docs/versions.md").read_text(encoding="utf-8") == versions.render_doc(data), "run make versions"


def test_the_roles_defaults_hold_the_sets_versions():
    # Read as Ansible reads them, not as the writer wrote them.
    data = versions.load()
    for key, component in data["components"].items():
        for pin in component["pins"]:
            role = REPO / "roles" / pin["role"]
            value = str(yaml.safe_load((role / "defaults/main.yml").read_text())[pin["variable"]])
            wanted = f"{pin['after']}{component['version']}" if pin.get("after") else str(component["version"])
            assert wanted in value if pin.get("after") else value == wanted, (key, pin)
            specs = yaml.safe_load((role / "meta/argument_specs.yml").read_text())["argument_specs"]
            defaults = {str(spec["options"][pin["variable"]].get("default")) for spec in specs.values()
                        if pin["variable"] in spec.get("options", {})}
            assert defaults and all(wanted in d for d in defaults), (key, pin, defaults)


@pytest.fixture
def role(tmp_path):
    (tmp_path / "roles/r/defaults").mkdir(parents=True)
    (tmp_path / "roles/r/meta").mkdir()
    (tmp_path / "roles/r/defaults/main.yml").write_text(
        '---\n# a comment\nr_version: v1.0.0\nr_image: "{{ reg }}/thing:v1.0.0"\nr_other: v1.0.0\n')
    (tmp_path / "roles/r/meta/argument_specs.yml").write_text(
        "---\nargument_specs:\n  main:\n    options:\n      r_version: &v\n        description: x\n        default: v1.0.0\n"
        "      r_image:\n        description:\n          - y\n        default: reg/thing:v1.0.0\n"
        "  other:\n    options:\n      r_version: *v\n")
    return tmp_path


def test_the_writer_sets_whole_values_and_tags_after_an_image_name_and_nothing_else(role):
    data = {"components": {"a": {"version": "v2.0.1", "pins": [{"role": "r", "variable": "r_version"}]},
                           "b": {"version": "v3.1", "pins": [{"role": "r", "variable": "r_image", "after": "thing:"}]}}}
    changes = versions.apply(data, role)
    defaults = changes[role / "roles/r/defaults/main.yml"]
    assert defaults == '---\n# a comment\nr_version: v2.0.1\nr_image: "{{ reg }}/thing:v3.1"\nr_other: v1.0.0\n'
    spec = yaml.safe_load(changes[role / "roles/r/meta/argument_specs.yml"])["argument_specs"]
    assert spec["main"]["options"]["r_version"]["default"] == "v2.0.1"
    assert spec["main"]["options"]["r_image"]["default"] == "reg/thing:v3.1"
    for path, text in changes.items():
        path.write_text(text)
    assert versions.apply(data, role) == {}  # a second write changes nothing


def test_a_pin_the_role_does_not_have_is_named(role):
    data = {"components": {"a": {"version": "1", "pins": [{"role": "r", "variable": "r_nothing"}]}}}
    with pytest.raises(ValueError, match=r"a: r_nothing is not in roles/r/defaults/main\.yml"):
        versions.apply(data, role)
