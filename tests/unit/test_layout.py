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


def _role_includes(tasks: object, where: str, found: list[tuple[str, dict]]) -> None:
    for task in tasks if isinstance(tasks, list) else []:
        if not isinstance(task, dict):
            continue
        for call in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
            if isinstance(task.get(call), dict):
                found.append((where, task[call]))
        for part in ("block", "rescue", "always"):
            _role_includes(task.get(part), where, found)


def _specs(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "meta/argument_specs.yml").read_text())["argument_specs"]


def _short(name: object) -> str:
    return str(name).removeprefix("gpuops.nvidia.")


def _plays(path: Path) -> list[dict]:
    return [play for play in yaml.safe_load(path.read_text()) or [] if "import_playbook" not in play]


def _playbook_calls() -> list[tuple[str, dict, dict]]:
    """(playbook, the play, the include_role or import_role arguments) of every call of a role in playbooks/."""
    out = []
    for path in sorted(REPO.glob("playbooks/*.yml")):
        for play in _plays(path):
            found: list[tuple[str, dict]] = []
            for part in ("pre_tasks", "tasks", "post_tasks"):
                _role_includes(play.get(part), path.name, found)
            out += [(where, play, args) for where, args in found]
    return out


def test_every_entry_point_a_playbook_uses_is_declared():
    """A playbook of the user's own uses what ours use: each tasks_from is an entry point of the role's argument spec,
    so ansible-doc -t role shows it and Ansible checks its options."""
    calls = _playbook_calls()
    assert len([args for _w, _p, args in calls if args.get("tasks_from")]) >= 15
    for where, _play, args in calls:
        entry = args.get("tasks_from", "main")
        assert entry in _specs(_short(args["name"])), f"{where}: {args['name']} entry point {entry} is not in its argument_specs"


def _vars_set(tasks: object, named: set[str]) -> None:
    """The names of the variables the tasks (and the roles they include or import) are given."""
    for task in tasks if isinstance(tasks, list) else []:
        if isinstance(task, dict):
            named.update(task.get("vars") or {})
            for call in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if isinstance(task.get(call), dict):
                    named.update(task[call].get("vars") or {})
            for part in ("block", "rescue", "always"):
                _vars_set(task.get(part), named)


def test_no_playbook_sets_a_roles_private_variable():
    """The playbooks steer the roles through documented variables only (gpuops_cluster_batch, gpuops_node_inputs_checked),
    never a role's private __gpuops_* ones."""
    for path in sorted(REPO.glob("playbooks/*.yml")):
        for play in _plays(path):
            named = set(play.get("vars") or {})
            for part in ("pre_tasks", "tasks", "post_tasks"):
                _vars_set(play.get(part), named)
            for role in play.get("roles") or []:
                if isinstance(role, dict):
                    named.update(role.get("vars") or {})
            assert not sorted(n for n in named if n.startswith("_")), f"{path.name}: {play.get('name')} sets {sorted(named)}"


def _options(role: str, entry: str) -> dict:
    return _specs(role)[entry].get("options") or {}


def test_argument_validation_is_skipped_only_where_the_same_spec_was_checked_or_is_empty():
    """rolespec_validate: false leaves out Ansible's check of an entry point's spec. That is sound only where nothing is
    left unchecked: (a) in a play whose gpuops.nvidia.role_inputs task, before the call, checked the role's main spec,
    and the entry point's options are main's (the same definitions); (b) for cluster_common, whose main (a dependency of
    every role checked so) checked the same definitions; (c) an entry point without options (node_common's facts and
    refresh), whose check would be an empty task. Anywhere else, Ansible checks."""
    skipped = []
    for where, play, args in _playbook_calls():
        if args.get("rolespec_validate") is not False:
            continue
        role, entry = _short(args["name"]), args.get("tasks_from", "main")
        tasks = play["tasks"]
        checks = [i for i, t in enumerate(tasks) if "gpuops.nvidia.role_inputs" in t]
        assert len(checks) == 1, f"{where}: one check of every role's inputs"
        check = tasks[checks[0]]
        assert check["tags"] == ["always"] and "entry_point" not in check["gpuops.nvidia.role_inputs"]
        before: list[tuple[str, dict]] = []
        _role_includes(tasks[:checks[0]], where, before)
        assert args not in [a for _w, a in before], f"{where}: {role} {entry} is imported before the check of its inputs"
        main = _options(role, "main")
        options = _options(role, entry)
        for name, spec in options.items():
            assert main.get(name) == spec, f"{where}: {role} {entry}'s option {name} is not main's"
        if role != "cluster_common":
            assert role in str(check["gpuops.nvidia.role_inputs"]["roles"]), f"{where}: {role} is not checked first"
        skipped.append((where, role, entry))
    assert len([s for s in skipped if s[0] == "cluster.yml"]) == 13 and len([s for s in skipped if s[0] == "node.yml"]) == 6
    in_roles: list[tuple[str, dict]] = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        _role_includes(yaml.safe_load(path.read_text()), str(path.relative_to(REPO)), in_roles)
    empty = [(w, _short(a["name"]), a.get("tasks_from", "main")) for w, a in in_roles if a.get("rolespec_validate") is False]
    assert {(role, entry) for _w, role, entry in empty} == {("node_common", "facts"), ("node_common", "refresh")}
    for where, role, entry in empty:
        assert entry in _specs(role) and not _options(role, entry), f"{where}: {role} {entry} has options to check"


def test_the_roles_call_each_others_internal_task_files_without_a_spec_to_check():
    """What a cluster role includes of cluster_common that no playbook uses (nodes, daemonsets, remove, apply) is
    internal: not an entry point, so no argument check is made or skipped."""
    found: list[tuple[str, dict]] = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        _role_includes(yaml.safe_load(path.read_text()), str(path.relative_to(REPO)), found)
    internal = {(_short(a["name"]), a.get("tasks_from")) for _w, a in found
                if _short(a["name"]) == "cluster_common" and a.get("tasks_from") not in _specs("cluster_common")}
    assert internal == {("cluster_common", name) for name in ("apply", "daemonsets", "nodes", "remove")}
    used = {(_short(a["name"]), a.get("tasks_from", "main")) for _w, _p, a in _playbook_calls()}
    assert not internal & used


def test_node_yml_checks_every_role_it_imports_first():
    """node.yml checks its roles' inputs in one task before the first role, then imports them without their own check."""
    play, summary = yaml.safe_load((REPO / "playbooks/node.yml").read_text())
    # Then the run's summary (set_stats for AWX, gpuops_report_path), a play on the controller.
    assert summary["ansible.builtin.import_playbook"] == "report.yml"
    assert "roles" not in play
    assert play["vars"] == {"gpuops_node_inputs_checked": True}
    first, *rest = play["tasks"]
    assert first["tags"] == ["always"]
    checked = yaml.safe_load(first["gpuops.nvidia.role_inputs"]["roles"].replace("{{", "").replace("}}", "").split("+")[0])
    found: list[tuple[str, dict]] = []
    _role_includes(rest, "node.yml", found)
    imported = [str(args["name"]).removeprefix("gpuops.nvidia.") for _w, args in found]
    assert all(args.get("rolespec_validate") is False and "tasks_from" not in args for _w, args in found)
    assert imported == [*checked, "container_toolkit"]
    assert "['container_toolkit'] if gpuops_node_container_toolkit" in first["gpuops.nvidia.role_inputs"]["roles"]
    # The roles whose own checks are a task of theirs skip it in this play, where the first task made it: a documented
    # option of each (false by default: a role run otherwise checks itself).
    for role in ("preflight", "container_toolkit"):
        first_task = yaml.safe_load((REPO / "roles" / role / "tasks/main.yml").read_text())[0]
        assert first_task["gpuops.nvidia.role_inputs"] == {"roles": [role]}
        assert first_task["when"] == "not gpuops_node_inputs_checked | bool"
        assert _options(role, "main")["gpuops_node_inputs_checked"]["default"] is False
        assert yaml.safe_load((REPO / "roles" / role / "defaults/main.yml").read_text())["gpuops_node_inputs_checked"] is False


CLUSTER_ROLES = ["cluster_prereqs", "driver_container", "device_plugin", "dra", "node_feature_discovery", "gpu_feature_discovery",
                 "dcgm_exporter", "mig_manager"]


def test_cluster_yml_batches_through_documented_entry_points():
    """cluster.yml: cluster_common's read, every role's inputs in one task, the checks of the cluster, each role's deploy
    entry point, one apply_batch, mig_manager's record and validation's nodes; the play batches by the public
    gpuops_cluster_batch."""
    play = next(p for p in yaml.safe_load((REPO / "playbooks/cluster.yml").read_text()) if p.get("name") == "Deploy the GPU components to the cluster")
    assert play["vars"] == {"gpuops_cluster_batch": True}
    found: list[tuple[str, dict]] = []
    _role_includes(play["tasks"], "cluster.yml", found)
    calls = [(_short(args["name"]), args.get("tasks_from", "main")) for _w, args in found]
    assert calls == [("cluster_common", "read"), ("dra", "in_cluster"), ("node_feature_discovery", "in_cluster")] + [
        (role, "deploy") for role in CLUSTER_ROLES] + [("cluster_common", "apply_batch"), ("mig_manager", "record"), ("validation", "nodes")]
    checked = next(t for t in play["tasks"] if "gpuops.nvidia.role_inputs" in t)["gpuops.nvidia.role_inputs"]["roles"]
    assert sorted(checked) == sorted([*CLUSTER_ROLES, "validation"])
    assert _options("cluster_common", "main")["gpuops_cluster_batch"]["default"] is False
    assert yaml.safe_load((REPO / "roles/cluster_common/defaults/main.yml").read_text())["gpuops_cluster_batch"] is False


@pytest.mark.parametrize("role", CLUSTER_ROLES)
def test_a_cluster_roles_main_is_its_validate_deploy_and_apply(role):
    """A role's main: its validate (the check of its inputs, role_inputs on its meta/inputs.yml), its deploy entry point
    (main's spec), then cluster_common's apply of what it kept; cluster.yml imports the deploy of every role, then one
    apply_batch."""
    # Its own checks are declared in one place, which cluster.yml's check reads and its validate checks alone.
    assert (REPO / "roles" / role / "meta/inputs.yml").exists()
    specs = _specs(role)
    assert specs["validate"]["options"] == specs["main"]["options"], f"{role}: validate's argument spec is not main's"
    assert specs["deploy"]["options"] == specs["main"]["options"], f"{role}: deploy's argument spec is not main's"
    main = yaml.safe_load((REPO / "roles" / role / "tasks/main.yml").read_text())
    assert main[0].get("ansible.builtin.include_tasks") == "validate.yml", f"{role}: main does not check first"
    assert main[1].get("ansible.builtin.import_tasks") == "deploy.yml", f"{role}: main does not deploy after the check"
    assert main[2].get("ansible.builtin.include_role") == {
        "name": "gpuops.nvidia.cluster_common", "tasks_from": "apply"}, f"{role}: main does not apply"
    assert [t.get("ansible.builtin.import_tasks") for t in main[3:]] in ([], ["record.yml"]), f"{role}: main does more"


def test_the_cluster_checks_are_the_validate_entry_points_without_the_input_check():
    """dra's and node_feature_discovery's in_cluster entry points are what their validate checks of the cluster, without the
    input check (which role_inputs made), and validation's nodes entry point is its main without the input check."""
    nfd = yaml.safe_load((REPO / "roles/node_feature_discovery/tasks/validate.yml").read_text())
    assert nfd[-1].get("ansible.builtin.import_tasks") == "in_cluster.yml"
    dra = yaml.safe_load((REPO / "roles/dra/tasks/validate_dra.yml").read_text())
    assert dra[-1].get("ansible.builtin.import_tasks") == "in_cluster_dra.yml"
    (include,) = yaml.safe_load((REPO / "roles/dra/tasks/in_cluster.yml").read_text())
    assert include["ansible.builtin.include_tasks"] == "in_cluster_dra.yml" and include["when"] == "gpuops_gpu_scheduling == 'dra'"
    validation = yaml.safe_load((REPO / "roles/validation/tasks/main.yml").read_text())
    assert [t.get("ansible.builtin.include_tasks") or t.get("ansible.builtin.import_tasks") for t in validation] == ["validate.yml", "nodes.yml"]
    for role, entry in (("dra", "in_cluster"), ("node_feature_discovery", "in_cluster"), ("validation", "nodes")):
        assert _specs(role)[entry]["options"] == _specs(role)["main"]["options"]
