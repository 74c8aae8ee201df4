"""The collection's shape: action groups cover every module once, and the Galaxy artifact holds only what users run."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _modules() -> set[str]:
    return {f"gpuops.nvidia.{p.stem}" for p in (REPO / "plugins/modules").glob("*.py") if p.stem != "__init__"}


def _controller_only() -> set[str]:
    """The actions that never connect to a host: a module file of documentation only, beside an action plugin that does
    the work (role_inputs). No side's module_defaults apply to them."""
    found = set()
    for path in (REPO / "plugins/modules").glob("*.py"):
        if "def main(" not in path.read_text():
            assert (REPO / "plugins/action" / path.name).exists(), f"{path.name}: no main() and no action plugin"
            found.add(f"gpuops.nvidia.{path.stem}")
    return found


def test_every_module_is_in_exactly_one_side_group():
    groups = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["action_groups"]
    node, cluster = set(groups["node"]), set(groups["cluster"])
    assert not node & cluster, f"in both groups: {sorted(node & cluster)}"
    sided = _modules() - _controller_only()
    assert _controller_only() == {"gpuops.nvidia.role_inputs"}
    assert node | cluster == sided, f"missing: {sorted(sided - node - cluster)}, unknown: {sorted((node | cluster) - sided)}"


def test_the_old_group_name_extends_the_node_group():
    groups = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["action_groups"]
    assert groups["gpu"] == [{"metadata": {"extend_group": ["gpuops.nvidia.node"]}}]


def test_module_utils_is_split_by_side():
    top = sorted(p.name for p in (REPO / "plugins/module_utils").iterdir() if p.name != "__pycache__")
    assert top == ["_common", "cluster", "node"], top


_MODULE_UTILS = "ansible_collections.gpuops.nvidia.plugins.module_utils."


def _module_utils_named(path: Path, root: Path = REPO) -> set[str]:
    """The module_utils modules a plugin file imports (absolute or relative) or names for LazyModule, dotted below
    module_utils (`cluster.rules`, `_common.mig`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = path.relative_to(root).with_suffix("").parts[:-1]
    named = set()
    for node in ast.walk(tree):
        full = None
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                full = ".".join(("ansible_collections", "gpuops", "nvidia", *base, *([node.module] if node.module else [])))
            else:
                full = node.module or ""
            names = [full] + [f"{full}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "LazyModule" and node.args:
            arg = node.args[0]
            text = arg.value if isinstance(arg, ast.Constant) else getattr(getattr(arg, "right", None), "value", None)
            assert isinstance(text, str), f"{path}: LazyModule of an argument this test cannot read"
            names = [text if text.startswith("ansible_collections.") else _MODULE_UTILS + text]
        else:
            continue
        named |= {n.removeprefix(_MODULE_UTILS) for n in names if n.startswith(_MODULE_UTILS)}
    return named


def _sides(path: Path) -> set[str]:
    return {n.split(".")[0] for n in _module_utils_named(path)} & {"node", "cluster"}


def _python_files(where: str) -> list[Path]:
    return sorted(p for p in (REPO / where).rglob("*.py") if "__pycache__" not in p.parts)


def test_the_side_reader_sees_every_way_a_file_names_module_utils(tmp_path):
    (tmp_path / "plugins/module_utils/node").mkdir(parents=True)
    sample = tmp_path / "plugins/module_utils/node/x.py"
    sample.write_text(f"from {_MODULE_UTILS}cluster.rules import a\nfrom ..cluster import facts\nfrom .. import node\n"
                      f'm = LazyModule(_MU + "cluster.gfd")\nn = LazyModule("{_MODULE_UTILS}_common.mig")\n')
    assert _module_utils_named(sample, tmp_path) == {"cluster.rules", "cluster.rules.a", "cluster", "cluster.facts", "node",
                                                     "cluster.gfd", "_common.mig"}


@pytest.mark.parametrize(("side", "other"), [("node", "cluster"), ("cluster", "node"), ("_common", "node"), ("_common", "cluster")])
def test_module_utils_of_one_side_never_import_the_other(side, other):
    """Host code runs on the nodes, cluster code on the controller against the API server: each ships and loads only its
    own side and _common, which imports neither (rules both sides apply, such as MIG configs, are _common's)."""
    leaks = {str(p.relative_to(REPO)): sorted(n for n in _module_utils_named(p) if n.split(".")[0] == other)
             for p in _python_files(f"plugins/module_utils/{side}")}
    assert len(leaks) > 5
    assert not {k: v for k, v in leaks.items() if v}, f"{side} code importing {other} code: { {k: v for k, v in leaks.items() if v} }"


def test_a_module_imports_only_the_module_utils_of_its_side_group():
    groups = yaml.safe_load((REPO / "meta/runtime.yml").read_text())["action_groups"]
    found = {}
    for side, other in (("node", "cluster"), ("cluster", "node")):
        for fqcn in groups[side]:
            path = REPO / "plugins/modules" / f"{fqcn.split('.')[-1]}.py"
            if other in _sides(path):
                found[fqcn] = sorted(_module_utils_named(path))
    assert len(groups["node"]) > 5 and len(groups["cluster"]) > 5
    assert not found, f"modules importing the other side's module_utils: {found}"


@pytest.mark.parametrize("where", ["plugins/filter", "plugins/action", "plugins/lookup", "plugins/plugin_utils"])
def test_a_controller_plugin_file_serves_one_side(where):
    both = {str(p.relative_to(REPO)): sorted(_module_utils_named(p)) for p in _python_files(where) if _sides(p) == {"node", "cluster"}}
    assert not both, f"plugin files importing both sides' module_utils (shared rules go to module_utils/_common): {both}"


def test_every_common_module_utils_file_says_it_is_private():
    for path in _python_files("plugins/module_utils/_common"):
        if path.name == "__init__.py":
            continue  # empty, as ansible-test sanity wants it
        assert "Private to the gpuops.nvidia collection" in path.read_text(encoding="utf-8"), path


def test_the_unit_tests_are_the_collections_and_the_lab_keeps_its_own_beside_its_other_tests():
    """tests/unit mirrors module_utils' sides; the lab's own unit tests are tests/lab/unit (its tests on machines are
    tests/integration), and the unit step (pytest's testpaths, `make unit`) runs both, no machine booted."""
    dirs = sorted({p.relative_to(REPO / "tests/unit").parts[0] for p in (REPO / "tests/unit").glob("*/**/test_*.py")})
    assert dirs == ["cluster", "common", "node"], dirs
    assert (REPO / "tests/lab/unit/sim").is_dir() and (REPO / "tests/integration/conftest.py").is_file()
    ini = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert ini["testpaths"] == ["tests/unit", "tests/lab/unit"]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory) -> list[str]:
    galaxy = shutil.which("ansible-galaxy", path=str(Path(sys.executable).parent)) or shutil.which("ansible-galaxy")
    if galaxy is None:
        pytest.fail("ansible-galaxy is not installed: make venv installs it")
    out = tmp_path_factory.mktemp("build")
    subprocess.run([galaxy, "collection", "build", "--output-path", str(out), str(REPO)], check=True, capture_output=True)
    (tarball,) = out.glob("gpuops-nvidia-*.tar.gz")
    with tarfile.open(tarball) as tar:
        return tar.getnames()


@pytest.mark.parametrize("path", ["lab", "tests", "molecule", "Makefile", "inventories/lab", ".venv", ".build"])
def test_the_artifact_leaves_out_developer_parts(artifact, path):
    assert not [n for n in artifact if n == path or n.startswith(path + "/")], f"{path} is in the Galaxy artifact"


@pytest.mark.parametrize("path", ["plugins/modules/gpu_info.py", "plugins/module_utils/node/gpu_info.py",
                                  "plugins/module_utils/_common/__init__.py", "roles/driver/tasks/main.yml",
                                  "meta/runtime.yml", "playbooks/site.yml", "inventories/example/hosts.yml"])
def test_the_artifact_holds_what_users_run(artifact, path):
    assert path in artifact


def test_the_filters_never_import_the_kubernetes_client():
    """A task that uses any of the collection's filters loads every filter file, in a fresh worker process each time:
    a filter file that imports the kubernetes client (0.2 s) through a module_util makes every such task that slower."""
    filters = sorted(p.stem for p in (REPO / "plugins/filter").glob("*.py") if p.stem != "__init__")
    code = ("import sys\n" + "".join(f"import ansible_collections.gpuops.nvidia.plugins.filter.{f}\n" for f in filters)
            + "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] == 'kubernetes'}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO / ".build/collections", check=True, capture_output=True, text=True)
    assert filters and out.stdout.strip() == "[]"


def _task_names(tasks: object, where: str, task_vars: dict[str, set[str]], facts: dict[str, set[str]]) -> None:
    """The task and block variables, and the facts (set_fact, register), of a list of tasks, by name."""
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for name in task.get("vars") or {}:
            task_vars.setdefault(name, set()).add(where)
        if "register" in task:
            facts.setdefault(task["register"], set()).add(where)
        for name in (task.get("ansible.builtin.set_fact") or {}) if isinstance(task.get("ansible.builtin.set_fact"), dict) else {}:
            if name != "cacheable":
                facts.setdefault(name, set()).add(where)
        for part in ("block", "rescue", "always"):
            _task_names(task.get(part), where, task_vars, facts)


def test_no_fact_shadows_a_task_or_role_variable():
    # A fact (set_fact, register) outranks a task, block or role variable of the same name everywhere after it is set:
    # the task would read the fact instead of the variable (cluster_common's nodes.yml compared against an unrelated
    # read that way once; a result the container toolkit's uninstall registered would have stood in for the role
    # variable derived from the install's results in a later run of the role in the same play).
    task_vars: dict[str, set[str]] = {}
    facts: dict[str, set[str]] = {}
    for path in sorted(REPO.glob("roles/*/vars/*.yml")):
        for name in yaml.safe_load(path.read_text()) or {}:
            task_vars.setdefault(name, set()).add(str(path.relative_to(REPO)))
    for path in sorted([*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/handlers/*.yml")]):
        _task_names(yaml.safe_load(path.read_text()), str(path.relative_to(REPO)), task_vars, facts)
    for path in sorted(REPO.glob("playbooks/*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            for part in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                _task_names(play.get(part), str(path.relative_to(REPO)), task_vars, facts)
    clashes = {name: (sorted(task_vars[name]), sorted(facts[name])) for name in sorted(set(task_vars) & set(facts))}
    assert not clashes, f"task or role variables also set as facts (variable: where it is a variable, where a fact): {clashes}"


# Entry points the collection's roles call, after cluster_common's main checked the shared settings, with values they
# computed themselves (or none: node_common's facts and refresh): validating those arguments at every call was a task
# each (20 in a no-op cluster.yml, 0.8 s).
# Their specs document them and validate a direct call. (read and unread run before main in cluster.yml: they validate.)
INTERNAL_ENTRY_POINTS = {("cluster_common", name) for name in ("apply_batch", "daemonsets", "nodes", "remove")} | {
    ("mig_manager", "record"), ("node_common", "facts"), ("node_common", "refresh")}


def _role_includes(tasks: object, where: str, found: list[tuple[str, dict]]) -> None:
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for call in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            if isinstance(task.get(call), dict):
                found.append((where, task[call]))
        for part in ("block", "rescue", "always"):
            _role_includes(task.get(part), where, found)


def test_the_roles_internal_calls_skip_argument_validation():
    found: list[tuple[str, dict]] = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        _role_includes(yaml.safe_load(path.read_text()), str(path.relative_to(REPO)), found)
    for path in sorted(REPO.glob("playbooks/*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            for part in ("pre_tasks", "tasks", "post_tasks"):
                _role_includes(play.get(part), str(path.relative_to(REPO)), found)
    internal = [(where, args) for where, args in found
                if (str(args.get("name", "")).removeprefix("gpuops.nvidia."), args.get("tasks_from")) in INTERNAL_ENTRY_POINTS]
    assert len(internal) >= 20
    validating = [(where, args["name"], args["tasks_from"]) for where, args in internal if args.get("rolespec_validate") is not False]
    assert not validating, f"internal calls that validate their arguments (rolespec_validate: false): {validating}"


def test_node_yml_checks_every_role_it_imports_first():
    """node.yml checks its roles' inputs in one task before the first role, then imports them without their own check."""
    (play,) = yaml.safe_load((REPO / "playbooks/node.yml").read_text())
    assert "roles" not in play
    assert play["vars"]["__gpuops_node_inputs_checked"] is True
    first, *rest = play["tasks"]
    assert first["tags"] == ["always"]
    checked = yaml.safe_load(first["gpuops.nvidia.role_inputs"]["roles"].replace("{{", "").replace("}}", "").split("+")[0])
    found: list[tuple[str, dict]] = []
    _role_includes(rest, "node.yml", found)
    imported = [str(args["name"]).removeprefix("gpuops.nvidia.") for _w, args in found]
    assert all(args.get("rolespec_validate") is False and "tasks_from" not in args for _w, args in found)
    assert imported == [*checked, "container_toolkit"]
    assert "['container_toolkit'] if gpuops_node_container_toolkit" in first["gpuops.nvidia.role_inputs"]["roles"]
    # The roles whose own checks are a task of theirs skip it in this play, where the first task made it.
    for role in ("preflight", "container_toolkit"):
        first_task = yaml.safe_load((REPO / "roles" / role / "tasks/main.yml").read_text())[0]
        assert first_task["gpuops.nvidia.role_inputs"] == {"roles": [role]}
        assert first_task["when"] == "not __gpuops_node_inputs_checked | default(false)"


def test_cluster_yml_skips_only_the_argument_checks_it_made_first():
    """cluster.yml checks every role's inputs in one task (gpuops.nvidia.role_inputs: each role's main argument spec and
    its own checks) before the first object is applied, then imports the roles without checking their arguments again:
    only sound where that task names every role imported so, and comes before them all."""
    play = next(p for p in yaml.safe_load((REPO / "playbooks/cluster.yml").read_text()) if p.get("name") == "Deploy the GPU components to the cluster")
    assert play["vars"]["__gpuops_cluster_inputs_checked"] is True
    checks = [i for i, t in enumerate(play["tasks"]) if "gpuops.nvidia.role_inputs" in t]
    assert len(checks) == 1, "one check of every role's inputs"
    checked = play["tasks"][checks[0]]["gpuops.nvidia.role_inputs"]["roles"]
    assert "entry_point" not in play["tasks"][checks[0]]["gpuops.nvidia.role_inputs"], "the roles' main argument specs"
    # As Ansible's own check at a role's start, it runs whatever --tags the run is given.
    assert play["tasks"][checks[0]]["tags"] == ["always"]
    found: list[tuple[str, dict]] = []
    _role_includes(play["tasks"][checks[0]:], "cluster.yml", found)
    unchecked = [str(args["name"]).removeprefix("gpuops.nvidia.") for _where, args in found if args.get("rolespec_validate") is False
                 and str(args["name"]).removeprefix("gpuops.nvidia.") != "cluster_common"]
    assert len(set(unchecked)) >= 9
    assert set(unchecked) == set(checked), f"imported unchecked but not checked first: {sorted(set(unchecked) - set(checked))}"
    # Nothing before the check but cluster_common's read (the shared settings and the connection).
    before: list[tuple[str, dict]] = []
    _role_includes(play["tasks"][:checks[0]], "cluster.yml", before)
    assert [(args["name"], args.get("tasks_from")) for _w, args in before] == [("gpuops.nvidia.cluster_common", "read")]
    for role in sorted(set(unchecked)):
        # A role's own checks are declared in one place, which the check reads and the role's validate checks alone.
        assert (REPO / "roles" / role / "meta/inputs.yml").exists()
        # The deploy entry point is main without its check of the inputs and its apply: main checks them, imports it
        # whole, then applies what it kept (cluster.yml applies every role's at once).
        deploy = REPO / "roles" / role / "tasks/deploy.yml"
        if deploy.exists():
            # Its validate entry point (for a playbook of the user's own) takes main's argument spec, which the check
            # above is.
            specs = yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]
            assert specs["validate"]["options"] == specs["main"]["options"], f"{role}: validate's argument spec is not main's"
            main = yaml.safe_load((REPO / "roles" / role / "tasks/main.yml").read_text())
            assert main[0].get("ansible.builtin.include_tasks") == "validate.yml", f"{role}: main does not check first"
            assert main[1].get("ansible.builtin.import_tasks") == "deploy.yml", f"{role}: main does not deploy after the check"
            assert main[2].get("ansible.builtin.include_role") == {
                "name": "gpuops.nvidia.cluster_common", "tasks_from": "apply_batch", "rolespec_validate": False}, f"{role}: main does not apply"
            assert [t.get("ansible.builtin.import_tasks") for t in main[3:]] in ([], ["record.yml"]), f"{role}: main does more"
