"""Every conditional in the collection's and the scenarios' YAML is a string.

A list item such as `- x == 'a: b'` is YAML's mapping {"x == 'a": "b'"}, not an expression: ansible-lint and a syntax
check pass it, and ansible-core 2.19 and later fail the task only when it runs ("Conditional expressions must be
strings"), in a scenario's verify after a long converge. This finds them in a second.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("that", "when", "failed_when", "changed_when", "until")
FILES = sorted(p for d in ("roles", "playbooks", "molecule") for p in (ROOT / d).rglob("*.yml"))


class _Loader(yaml.SafeLoader):
    """Safe loading, with Ansible's !unsafe and !vault tags read as plain strings."""


_Loader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))
_Loader.add_constructor("!vault", lambda loader, node: loader.construct_scalar(node))


def bad_conditionals(document, where=""):
    """(path, item) of each conditional list item that is not a string or a boolean."""
    found = []
    if isinstance(document, dict):
        for key, value in document.items():
            if key in KEYS and isinstance(value, list):
                found += [(f"{where}.{key}", item) for item in value if not isinstance(item, (str, bool))]
            found += bad_conditionals(value, f"{where}.{key}")
    elif isinstance(document, list):
        for index, item in enumerate(document):
            found += bad_conditionals(item, f"{where}[{index}]")
    return found


def test_a_colon_and_space_in_a_plain_item_is_found():
    document = yaml.safe_load("- assert:\n    that:\n      - x == 'a: b'\n      - \"y == 'c: d'\"\n")
    assert bad_conditionals(document) == [("[0].assert.that", {"x == 'a": "b'"})]


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_conditionals_are_strings(path):
    documents = list(yaml.load_all(path.read_text(), Loader=_Loader))
    assert [found for d in documents for found in bad_conditionals(d)] == []
