"""The collection's documentation as ansible-doc shows it: every module declares its attributes (check mode, diff
mode, idempotence, action group) through the shared fragment, and every filter has a document of its own; and the
prose docs (README, docs/, the roles' READMEs) name only files that exist."""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml
from ansible.utils.plugin_docs import merge_fragment

REPO = Path(__file__).resolve().parents[2]
COLLECTIONS = REPO / ".build" / "collections"
SUPPORT = ("full", "partial", "none")
ATTRIBUTES = "gpuops.nvidia.attributes"
FRAGMENTS = {"node": "gpuops.nvidia.attributes.actiongroup_node", "cluster": "gpuops.nvidia.attributes.actiongroup_cluster"}
# Actions that never connect to a host: a module file of documentation only, the work in the action plugin; no side group.
CONTROLLER = "gpuops.nvidia.attributes.controller"


# ---------------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------------

def _module_paths() -> list[Path]:
    return sorted(p for p in (REPO / "plugins/modules").glob("*.py") if p.stem != "__init__")


MODULES = [p.stem for p in _module_paths()]


@cache
def _module_tree(name: str) -> ast.Module:
    return ast.parse((REPO / "plugins/modules" / f"{name}.py").read_text(encoding="utf-8"))


def _module_doc(name: str) -> dict:
    """The module's own DOCUMENTATION, before fragments are merged in."""
    for node in _module_tree(name).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DOCUMENTATION" for t in node.targets):
            return yaml.safe_load(ast.literal_eval(node.value))
    raise AssertionError(f"plugins/modules/{name}.py has no DOCUMENTATION")


def _attributes(name: str) -> dict:
    """The module's attributes with the collection's attribute fragments merged in, as ansible-doc merges them
    (the module's own values win)."""
    from ansible_collections.gpuops.nvidia.plugins.doc_fragments.attributes import ModuleDocFragment

    doc = _module_doc(name)
    attributes = copy.deepcopy(doc.get("attributes") or {})
    for fragment in doc.get("extends_documentation_fragment") or []:
        if fragment != ATTRIBUTES and not fragment.startswith(ATTRIBUTES + "."):
            continue
        text = getattr(ModuleDocFragment, fragment[len(ATTRIBUTES) + 1:].upper() or "DOCUMENTATION")
        merge_fragment(attributes, yaml.safe_load(text).get("attributes") or {})
    return attributes


def _controller_only(name: str) -> bool:
    return CONTROLLER in (_module_doc(name).get("extends_documentation_fragment") or [])


def _supports_check_mode(name: str) -> bool:
    if _controller_only(name):
        # The action plugin's own flag.
        return bool(getattr(importlib.import_module(f"ansible_collections.gpuops.nvidia.plugins.action.{name}").ActionModule,
                            "_supports_check_mode", False))
    for node in ast.walk(_module_tree(name)):
        if isinstance(node, ast.keyword) and node.arg == "supports_check_mode":
            return bool(ast.literal_eval(node.value))
    return False


def _code_returns_diff(name: str) -> bool:
    """Whether the module's code (not its documentation strings) deals in diffs: a `diff` key, the diff-mode flag
    (`module._diff`), or a name of a diff helper it imports or calls."""
    for node in ast.walk(_module_tree(name)):
        if isinstance(node, ast.Constant) and node.value == "diff":
            return True
        names = (getattr(node, "id", None), getattr(node, "attr", None), getattr(node, "arg", None), getattr(node, "asname", None),
                 getattr(node, "name", None) if isinstance(node, ast.alias | ast.FunctionDef) else None)
        if any(isinstance(n, str) and "diff" in n.lower() for n in names):
            return True
    return False


def _action_groups() -> dict[str, set[str]]:
    """Group name to the modules in it, with groups that extend another one resolved (meta/runtime.yml)."""
    raw = yaml.safe_load((REPO / "meta/runtime.yml").read_text(encoding="utf-8"))["action_groups"]

    def members(group: str, seen: frozenset = frozenset()) -> set[str]:
        out: set[str] = set()
        for entry in raw[group]:
            if isinstance(entry, str):
                out.add(entry)
            elif isinstance(entry, dict):
                for parent in (entry.get("metadata") or {}).get("extend_group") or []:
                    short = parent.removeprefix("gpuops.nvidia.")
                    if short not in seen:
                        out |= members(short, seen | {group})
        return out

    return {f"gpuops.nvidia.{group}": members(group) for group in raw}


def _filter_functions() -> dict[str, object]:
    """Every filter the collection has, by name, from each plugins/filter/*.py FilterModule.filters()."""
    found: dict[str, object] = {}
    for path in sorted((REPO / "plugins/filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.gpuops.nvidia.plugins.filter.{path.stem}")
        for name, func in module.FilterModule().filters().items():
            assert name not in found, f"filter {name} is defined twice"
            found[name] = func
    return found


FILTERS = _filter_functions()


def _filter_doc_file(name: str) -> dict:
    return yaml.safe_load((REPO / "plugins/filter" / f"{name}.yml").read_text(encoding="utf-8"))


def _run_ansible_doc(*args: str) -> subprocess.CompletedProcess:
    binary = Path(sys.executable).parent / "ansible-doc"
    if not binary.exists():
        pytest.fail(f"{binary} is not installed: make venv installs it")
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(COLLECTIONS), "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    return subprocess.run([str(binary), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)


def _ansible_doc(*args: str) -> str:
    done = _run_ansible_doc(*args)
    assert done.returncode == 0, f"ansible-doc {' '.join(args)} failed: {done.stderr}"
    return done.stdout


def _sections(text: str, kind: str) -> dict[str, str]:
    """ansible-doc's text output for several plugins, split at each '> KIND name (path)' heading."""
    out: dict[str, str] = {}
    for part in text.split(f"> {kind} ")[1:]:
        out[part.split()[0]] = part
    return out


# ---------------------------------------------------------------------------------------------------
# Modules: the attributes fragment
# ---------------------------------------------------------------------------------------------------

def test_the_attributes_fragment_describes_every_attribute_modules_set():
    fragment = importlib.import_module("ansible_collections.gpuops.nvidia.plugins.doc_fragments.attributes").ModuleDocFragment
    base = yaml.safe_load(fragment.DOCUMENTATION)["attributes"]
    assert set(base) == {"check_mode", "diff_mode", "idempotent"}
    assert all(entry.get("description") and "support" not in entry for entry in base.values()), base
    for attr, group in (("ACTIONGROUP_NODE", "gpuops.nvidia.node"), ("ACTIONGROUP_CLUSTER", "gpuops.nvidia.cluster")):
        action_group = yaml.safe_load(getattr(fragment, attr))["attributes"]["action_group"]
        assert action_group["support"] == "full"
        assert action_group["membership"][0] == group


@pytest.mark.parametrize("name", MODULES)
def test_a_module_extends_the_attributes_fragment_and_its_side_group(name):
    extends = _module_doc(name).get("extends_documentation_fragment") or []
    assert "gpuops.nvidia.attributes" in extends
    groups = [g for g, members in _action_groups().items() if f"gpuops.nvidia.{name}" in members and g.endswith((".node", ".cluster"))]
    if _controller_only(name):
        assert groups == [], f"{name} never connects to a host: in no side's group"
        assert not [f for f in extends if f.startswith("gpuops.nvidia.attributes.actiongroup_")]
        assert "def main(" not in (REPO / "plugins/modules" / f"{name}.py").read_text()
        assert (REPO / "plugins/action" / f"{name}.py").exists()
        return
    assert len(groups) == 1, groups
    side = groups[0].rsplit(".", 1)[1]
    assert [f for f in extends if f.startswith("gpuops.nvidia.attributes.actiongroup_")] == [FRAGMENTS[side]]
    # Read-only modules take the info_module fragment (no diff, never changed), and only they do.
    assert ("gpuops.nvidia.attributes.info_module" in extends) == name.endswith("_info")


@pytest.mark.parametrize("name", MODULES)
def test_a_module_declares_its_support_of_each_attribute(name):
    attributes = _attributes(name)
    for key in ("check_mode", "diff_mode", "idempotent"):
        assert attributes.get(key, {}).get("support") in SUPPORT, f"{name}: attributes.{key}.support"
        if attributes[key]["support"] == "partial":
            assert attributes[key].get("details"), f"{name}: attributes.{key} is partial without details"


@pytest.mark.parametrize("name", MODULES)
def test_check_mode_support_matches_the_argument_spec(name):
    support = _attributes(name)["check_mode"]["support"]
    assert (support != "none") == _supports_check_mode(name), f"{name}: check_mode {support}, supports_check_mode {_supports_check_mode(name)}"


@pytest.mark.parametrize("name", MODULES)
def test_diff_mode_support_matches_the_code(name):
    support = _attributes(name)["diff_mode"]["support"]
    builds = _code_returns_diff(name)
    assert (support != "none") == builds, f"{name}: diff_mode {support}, but the code {'does' if builds else 'does not'} build a diff"


@pytest.fixture(scope="module")
def rendered_modules() -> dict:
    """FQCN to ansible-doc's JSON of the module, or to its error: one call for all, one per module if that fails."""
    names = [f"gpuops.nvidia.{m}" for m in MODULES]
    done = _run_ansible_doc("--json", *names)
    if done.returncode == 0:
        return json.loads(done.stdout)
    out = {}
    for name in names:
        one = _run_ansible_doc("--json", name)
        out[name] = json.loads(one.stdout)[name] if one.returncode == 0 else one.stderr
    return out


@pytest.mark.parametrize("name", MODULES)
def test_ansible_doc_shows_every_attribute_of_a_module(rendered_modules, name):
    rendered = rendered_modules[f"gpuops.nvidia.{name}"]
    assert isinstance(rendered, dict), f"ansible-doc gpuops.nvidia.{name} failed: {rendered}"
    attributes = rendered["doc"]["attributes"]
    assert set(attributes) >= {"check_mode", "diff_mode", "idempotent", "action_group"}
    for key, entry in attributes.items():
        assert entry.get("description") and entry.get("support") in (*SUPPORT, "N/A"), f"{name}: {key} = {entry}"
    member_of = {g for g, members in _action_groups().items() if f"gpuops.nvidia.{name}" in members}
    assert set(attributes["action_group"]["membership"]) == member_of


def test_ansible_doc_text_shows_the_attributes_of_every_module(rendered_modules):
    renderable = [name for name, doc in rendered_modules.items() if isinstance(doc, dict)]  # the others fail above
    sections = _sections(_ansible_doc(*renderable), "MODULE")
    assert sorted(sections) == sorted(renderable)
    for name, text in sections.items():
        assert "ATTRIBUTES:" in text and "action_group:" in text and "idempotent:" in text, name


# ---------------------------------------------------------------------------------------------------
# Filters: one document each
# ---------------------------------------------------------------------------------------------------

def test_the_filter_files_carry_no_shared_documentation():
    for path in (REPO / "plugins/filter").glob("*.py"):
        module = importlib.import_module(f"ansible_collections.gpuops.nvidia.plugins.filter.{path.stem}")
        for key in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
            assert not hasattr(module, key), f"{path.name} has a module-level {key}; each filter's goes in plugins/filter/<name>.yml"


def test_every_filter_document_belongs_to_a_filter():
    docs = {p.stem for p in (REPO / "plugins/filter").glob("*.yml")}
    assert docs == set(FILTERS), f"without a doc: {sorted(set(FILTERS) - docs)}, doc of no filter: {sorted(docs - set(FILTERS))}"


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_a_filter_has_its_own_document(name):
    path = REPO / "plugins/filter" / f"{name}.yml"
    assert path.exists(), f"filter {name} has no {path.relative_to(REPO)}"
    doc = _filter_doc_file(name)
    main = doc["DOCUMENTATION"]
    assert main["name"] == name
    assert str(main["version_added"]) and main["short_description"] and main["description"] and main["author"]
    assert main["options"]["_input"].get("required") is True
    assert f"gpuops.nvidia.{name}" in doc["EXAMPLES"]
    assert "_value" in doc["RETURN"] and doc["RETURN"]["_value"].get("type")


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_a_filter_document_names_the_arguments_the_filter_takes(name):
    main = _filter_doc_file(name)["DOCUMENTATION"]
    params = list(inspect.signature(FILTERS[name]).parameters.values())[1:]
    options = {k: v for k, v in main["options"].items() if k != "_input"}
    assert sorted(options) == sorted(p.name for p in params)
    positional = [s.strip() for s in str(main.get("positional") or "").split(",") if s.strip()]
    assert positional == [p.name for p in params]
    for p in params:
        if p.default is inspect.Parameter.empty:
            assert options[p.name].get("required") is True, f"{name}: {p.name} has no default, so it is required"
        else:
            assert not options[p.name].get("required") and options[p.name].get("default") == p.default, f"{name}: {p.name}"


def test_ansible_doc_lists_every_filter_with_its_own_short_description():
    listed = json.loads(_ansible_doc("-t", "filter", "-l", "gpuops.nvidia", "--json"))
    assert sorted(listed) == sorted(f"gpuops.nvidia.{n}" for n in FILTERS)
    for name in FILTERS:
        assert listed[f"gpuops.nvidia.{name}"] == _filter_doc_file(name)["DOCUMENTATION"]["short_description"]
    assert len(set(listed.values())) == len(listed), "two filters show the same short description"


def test_ansible_doc_shows_each_filter_its_own_document():
    names = [f"gpuops.nvidia.{n}" for n in sorted(FILTERS)]
    rendered = json.loads(_ansible_doc("-t", "filter", "--json", *names))
    for name in sorted(FILTERS):
        doc = rendered[f"gpuops.nvidia.{name}"]["doc"]
        mine = _filter_doc_file(name)["DOCUMENTATION"]
        assert doc["name"] == name
        assert doc["filename"].endswith(f"plugins/filter/{name}.yml")
        assert (doc["short_description"], doc["description"]) == (mine["short_description"], mine["description"])
    sections = _sections(_ansible_doc("-t", "filter", *names), "FILTER")
    assert sorted(sections) == names
    for name, text in sections.items():
        short = name.removeprefix("gpuops.nvidia.")
        assert f"plugins/filter/{short}.yml)" in text.splitlines()[0]
        assert f"NAME: {short}\n" in text


# ---------------------------------------------------------------------------------------------------
# The prose docs
# ---------------------------------------------------------------------------------------------------

PROSE = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "roles").glob("*/README.md")])
# A repository path in backquotes: `lab/sim/boot.py`, `tests/unit/node/`.
_DOC_PATH = re.compile(r"`((?:lab|tests|molecule|roles|playbooks|plugins|docs|inventories|changelogs)/[^`\s]*)`")
# Written at run time, not in the repository.
_GENERATED = {"inventories/lab/hosts.yml"}


def _named_paths(text: str) -> list[str]:
    """The repository paths a document names; a pattern (`roles/<role>/`, `*.yml`, `PROFILE.yml`) is not a path."""
    found = []
    for match in _DOC_PATH.finditer(text):
        path = match.group(1).split("::")[0].rstrip(".,:;")
        if any(c in path for c in "<>*{}$[") or re.search(r"[A-Z]{3,}", path):
            continue
        found.append(path)
    return found


def test_the_docs_path_reader_skips_patterns():
    assert _named_paths("`lab/sim/boot.py` and `tests/unit/x.py::test_y`, `roles/<role>/`, `lab/sim/profiles/PROFILE.yml`") \
        == ["lab/sim/boot.py", "tests/unit/x.py"]


@pytest.mark.parametrize("doc", PROSE, ids=lambda p: str(p.relative_to(REPO)))
def test_the_prose_docs_name_files_that_exist(doc):
    """A file moved or renamed takes the docs that name it along (the lab's stand-ins, the tests' layout)."""
    missing = [p for p in _named_paths(doc.read_text(encoding="utf-8")) if p not in _GENERATED and not (REPO / p).exists()]
    assert not missing, f"{doc.relative_to(REPO)} names files that are not there: {missing}"
