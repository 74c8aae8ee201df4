"""The container_runtime module on files in a temporary directory; `containerd` answers with recorded output."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers, container_runtime_run, preflight
from ansible_collections.gpuops.nvidia.plugins.modules import container_runtime

from ..harness import call

RECORDED = Path(__file__).parent / "recorded"
PLANTED = Path(__file__).parents[3] / "molecule/runtime/files"


@pytest.fixture
def node(tmp_path, monkeypatch):
    etc = tmp_path / "etc"
    (etc / "containerd").mkdir(parents=True)
    calls = []
    version = {"out": "containerd github.com/containerd/containerd/v2 2.2.1 \n", "installed": {"containerd", "systemctl"},
               # The runtime's unit last started after any marker (as the role's handler restarts it); tests of the
               # marker set it back to 0 (never restarted since).
               "unit_started_usec": str(10**15),
               # dpkg-query's answer on the lab's Ubuntu 24.04 machine (one package held, one removed but configured).
               "dpkg": "nvidia-container-toolkit\t1.18.2-1\tii \npython3-tomlkit\t0.12.4-1\thi \n"
                       "nvidia-container-toolkit-base\t1.17.0-1\trc \nlibc6:amd64\t2.39-0ubuntu8.4\tii \n"}

    def run_command(self, argv, **kw):
        calls.append(argv[1:])
        if argv[0].endswith("systemctl"):
            return 0, version["unit_started_usec"] + "\n", ""
        if argv[1:] == ["--version"]:
            return 0, version["out"], ""
        if argv[1:] == ["config", "default"]:
            return 0, (RECORDED / version.get("default", "containerd-2.2.1-default.toml")).read_text(), ""
        if argv[0].endswith("dpkg-query"):
            return 0, version["dpkg"], ""
        return 1, "", f"unexpected {argv}"

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    # containerd 2.x's default imports, here under the test's own /etc.
    monkeypatch.setattr(container_runtime_run, "DEFAULT_IMPORTS_2X", str(etc / "containerd/conf.d/*.toml"))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}" if name in version["installed"] else None)

    def run(check=False, **args):
        params = {"config": str(etc / "containerd/config.toml"), "drop_in": str(etc / "containerd/conf.d/99-nvidia.toml"),
                  "toolkit_config": str(etc / "nvidia-container-runtime/config.toml"), "image_build": "false",
                  "restart_marker": str(tmp_path / "run/gpuops/containerd.restart-pending"),
                  "record": str(etc / "gpuops-nvidia/container-runtime.json"),
                  "_ansible_check_mode": check, "_ansible_diff": True, **args}
        return call(container_runtime.main, params)

    return etc, run, calls, version


def files(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def test_check_mode_writes_nothing_and_shows_the_diff(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    before = files(etc)
    res = run(check=True, toolkit_mode="cdi")
    assert res["changed"] and res["restart_required"] and not res["failed"]
    assert files(etc) == before
    after = {d["after_header"]: d["after"] for d in res["diff"]}
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in after[str(etc / "containerd/conf.d/99-nvidia.toml")]
    assert 'mode = "cdi"' in after[str(etc / "nvidia-container-runtime/config.toml")]


def test_writes_with_backup_and_rollback_then_nothing(node):
    etc, run, calls, _v = node
    main = etc / "containerd/config.toml"
    main.write_text((PLANTED / "planted-v3.toml").read_text())
    main.chmod(0o600)
    res = run()
    drop = etc / "containerd/conf.d/99-nvidia.toml"
    assert res["runtime_version"] == "2.2.1" and res["config_version"] == 3 and res["cdi_enabled"]
    rollback = {r["path"]: r for r in res["rollback"]}
    assert rollback[str(drop)] == {"path": str(drop), "backup": "", "existed": False}
    backup = Path(rollback[str(main)]["backup"])
    assert backup.read_text() == (PLANTED / "planted-v3.toml").read_text() and rollback[str(main)]["existed"]
    assert "imports = [" in main.read_text() and (main.stat().st_mode & 0o777) == 0o600
    # The drop-in may carry what the main file holds: it gets the main file's mode.
    assert (drop.stat().st_mode & 0o777) == 0o600
    # The planted runc has options to copy, so containerd's defaults were never asked for.
    assert ["config", "default"] not in calls
    again = run()
    assert not again["changed"] and again["rollback"] == [] and not again["restart_required"]


def test_no_config_asks_containerd_for_its_defaults(node):
    etc, run, calls, _v = node
    res = run(drop_in="")
    assert ["config", "default"] in calls
    assert 'sandboxer = "podsandbox"' in (etc / "containerd/config.toml").read_text()
    assert res["rollback"] == [{"path": str(etc / "containerd/config.toml"), "backup": "", "existed": False}]


def test_containerd_2_3_takes_a_version_4_config_as_a_drop_in_and_in_place(node):
    etc, run, _calls, version = node
    version["out"] = "containerd github.com/containerd/containerd/v2 2.3.7 \n"
    main, drop = etc / "containerd/config.toml", etc / "containerd/conf.d/99-nvidia.toml"
    main.write_text((PLANTED / "planted-v4.toml").read_text())
    res = run(toolkit_mode="cdi")
    assert not res["failed"] and res["runtime_version"] == "2.3.7" and res["config_version"] == 4
    assert drop.read_text().count("version = 4") == 1 and "imports = [" in main.read_text()
    assert not run(toolkit_mode="cdi")["changed"]
    # In place, and with no config at all: containerd 2.3's own defaults, written as version 4.
    drop.unlink()
    main.write_text((PLANTED / "planted-v4.toml").read_text())
    res = run(toolkit_mode="cdi", drop_in="")
    assert not res["failed"] and res["config_version"] == 4 and 'BinaryName = "/usr/bin/nvidia-container-runtime"' in main.read_text()
    main.unlink()
    version["default"] = "containerd-2.3.7-default.toml"
    res = run(toolkit_mode="cdi", drop_in="")
    assert not res["failed"] and res["config_version"] == 4 and main.read_text().count("version = 4") == 1


def test_a_version_4_config_on_containerd_2_2_is_refused_before_writing(node):
    etc, run, _calls, _version = node
    main = etc / "containerd/config.toml"
    main.write_text((PLANTED / "planted-v4.toml").read_text())
    res = run(toolkit_mode="cdi")
    assert res["failed"] and "is a version 4 config, which containerd 2.2.1 does not read (it reads version 3 and older)" in res["msg"]
    assert main.read_text() == (PLANTED / "planted-v4.toml").read_text() and not (etc / "containerd/conf.d").exists()


def test_cdi_on_containerd_16_is_refused_before_writing(node):
    etc, run, _calls, version = node
    version["out"] = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n"
    res = run(cdi="enable")
    assert res["failed"] and "containerd 1.6.20" in res["msg"] and "cdi: enable" in res["msg"]
    assert files(etc) == {}


def test_unknown_runtime_name_is_refused_before_writing(node):
    etc, run, _calls, _v = node
    res = run(runtime_name="Nvidia GPU")
    assert res["failed"] and "runtime_name: 'Nvidia GPU'" in res["msg"]
    assert files(etc) == {}


def test_crio_drop_in_backups_stay_out_of_the_directory_crio_reads_whole(node):
    etc, run, _calls, v = node
    v["installed"] = {"crio"}
    conf_d = etc / "crio/crio.conf.d"
    conf_d.mkdir(parents=True)
    (etc / "crio/crio.conf").write_text('[crio.runtime]\ndefault_runtime = "runc"\n[crio.runtime.runtimes.runc]\n'
                                        'runtime_path = "/usr/bin/runc"\nruntime_root = "/run/runc"\n')
    # CRI-O reads every file of the directory: a site file without .toml counts too, and comes later.
    (conf_d / "50-site").write_text('[crio.runtime.runtimes.runc]\nmonitor_path = "/usr/libexec/crio/conmon"\n')
    args = {"runtime": "crio", "config": str(etc / "crio/crio.conf"), "drop_in": str(conf_d / "99-nvidia.toml")}
    first = run(**args)
    assert first["rollback"] == [{"path": str(conf_d / "99-nvidia.toml"), "backup": "", "existed": False}]
    text = (conf_d / "99-nvidia.toml").read_text()
    assert 'monitor_path = "/usr/libexec/crio/conmon"' in text and 'runtime_root = "/run/runc"' in text
    second = run(**args, runtime_config={"runtime_type": "vm"})
    saved = second["rollback"][0]["backup"]
    assert saved.startswith(str(etc / "crio/gpuops-backups") + "/99-nvidia.toml.")
    assert sorted(p.name for p in conf_d.iterdir()) == ["50-site", "99-nvidia.toml"]
    assert Path(saved).read_text() == text


def test_no_diff_without_diff_mode(node):
    etc, run, _calls, _v = node
    res = run(_ansible_diff=False, toolkit_mode="cdi")
    assert res["changed"] and "diff" not in res
    assert 'mode = "cdi"' in (etc / "nvidia-container-runtime/config.toml").read_text()


def test_the_diff_is_a_list_even_for_one_file(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    run()
    res = run(toolkit_mode="legacy")
    toolkit = str(etc / "nvidia-container-runtime/config.toml")
    assert res["diff"] == [{"before_header": toolkit, "after_header": toolkit, "before": "",
                            "after": (etc / "nvidia-container-runtime/config.toml").read_text()}]
    assert not res["restart_required"] and res["rollback"] == []
    assert "diff" not in run(toolkit_mode="legacy")


def test_two_files_of_one_name_get_two_backups_in_backup_dir(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    (etc / "nvidia-container-runtime").mkdir()
    (etc / "nvidia-container-runtime/config.toml").write_text('[nvidia-container-runtime]\nmode = "auto"\n')
    backups = etc.parent / "backups"
    res = run(backup_dir=str(backups), toolkit_mode="cdi")
    (main,) = [r for r in res["rollback"] if r["path"] == str(etc / "containerd/config.toml")]
    assert Path(main["backup"]).parent == backups
    # Both config.toml files are saved, under two names, whatever second they are saved in.
    assert sorted(p.read_text() for p in backups.iterdir()) == sorted(
        [(PLANTED / "planted-v3.toml").read_text(), '[nvidia-container-runtime]\nmode = "auto"\n'])


def test_no_backup_when_off(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    res = run(backup=False)
    assert sorted(res["rollback"], key=lambda r: r["path"]) == [
        {"path": str(etc / "containerd/conf.d/99-nvidia.toml"), "backup": "", "existed": False},
        {"path": str(etc / "containerd/config.toml"), "backup": "", "existed": True}]
    assert sorted(p.name for p in (etc / "containerd").iterdir()) == ["conf.d", "config.toml"]


def test_check_mode_rollback_has_no_backup_and_nothing_is_written(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    before = files(etc)
    res = run(check=True)
    assert sorted(res["rollback"], key=lambda r: r["path"]) == [
        {"path": str(etc / "containerd/conf.d/99-nvidia.toml"), "backup": "", "existed": False},
        {"path": str(etc / "containerd/config.toml"), "backup": "", "existed": True}]
    assert files(etc) == before and not (etc / "containerd/conf.d").exists()


def test_a_config_that_cannot_be_read_is_refused_before_writing(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").mkdir()
    res = run()
    assert res["failed"] and "Is a directory" in res["msg"] and str(etc / "containerd/config.toml") in res["msg"]
    assert files(etc) == {}
    (etc / "containerd/config.toml").rmdir()
    (etc / "containerd/config.toml").write_bytes(b"version = 3\n# \xff\n")
    res = run()
    assert res["failed"] and "is not UTF-8 text" in res["msg"]
    assert sorted(p.name for p in etc.rglob("*")) == ["config.toml", "containerd"]


TOOLKIT_NAMES = {"runtime": "gpuops_container_toolkit_runtime", "runtime_name": "gpuops_container_toolkit_runtime_name",
                 "drop_in": "gpuops_container_toolkit_drop_in_path", "cdi": "gpuops_container_toolkit_cdi_mode",
                 "set_as_default": "gpuops_container_toolkit_set_as_default"}


@pytest.mark.parametrize(("args", "installed", "message"), [
    # A forced runtime that is not installed: the CRI-O drop-in was written and a missing service "restarted".
    ({"runtime": "crio"}, {"containerd"}, "gpuops_container_toolkit_runtime: crio is not installed on this node "
                                          "(no crio executable in PATH; found: containerd)"),
    ({"runtime": "auto"}, set(), "gpuops_container_toolkit_runtime: auto found neither containerd nor crio"),
    ({"runtime": "auto"}, {"containerd", "crio"}, "gpuops_container_toolkit_runtime: auto found both"),
    ({"runtime_name": "NVIDIA"}, {"containerd"}, "gpuops_container_toolkit_runtime_name: 'NVIDIA' is not a valid runtime"),
    ({"drop_in": "DIR"}, {"containerd"}, "gpuops_container_toolkit_drop_in_path: 'ETC/containerd/conf.d' is a directory"),
    ({"set_as_default": "always"}, {"containerd"}, "gpuops_container_toolkit_set_as_default: 'always' is not one of keep"),
    ({"cdi": "enable", "containerd_version": "1.6.20"}, {"containerd"},
     "gpuops_container_toolkit_cdi_mode: enable needs containerd 1.7 or later; this node has containerd 1.6.20"),
])
@pytest.mark.parametrize("validate_only", [True, False])
def test_inputs_are_refused_naming_the_role_variable_before_anything_is_written(node, args, installed, message, validate_only):
    etc, run, _calls, v = node
    v["installed"] = installed
    (etc / "containerd/conf.d").mkdir(parents=True)
    if args.get("drop_in") == "DIR":
        args = {**args, "drop_in": str(etc / "containerd/conf.d")}
    before = files(etc)
    # The role's repository source rides on the check: it is not written either.
    source = [{"path": str(etc / "apt/sources.list.d/nvidia-container-toolkit.list"), "content": "deb x /\n"}]
    res = run(variables=TOOLKIT_NAMES, validate_only=validate_only, files=source, **args)
    assert res["failed"] and res["msg"].startswith(message.replace("ETC", str(etc))), res["msg"]
    assert files(etc) == before


def test_validate_only_without_tomlkit_reads_and_writes_no_config(node, monkeypatch):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text("this is not TOML [")
    monkeypatch.setattr(container_runtime.cr, "HAS_TOMLKIT", False)  # a fresh node has no python3-tomlkit yet
    res = run(validate_only=True, toolkit_mode="cdi")
    assert not res["failed"] and not res["changed"] and res["runtime"] == "containerd" and res["runtime_version"] == "2.2.1"
    assert res["up_to_date"] is None
    assert files(etc) == {"containerd/config.toml": "this is not TOML ["}


def test_the_check_puts_the_files_in_place_once_the_settings_pass(node, monkeypatch):
    """The repository's source in the check's round trip, on a fresh node (no tomlkit yet) as on a converged one."""
    etc, run, _calls, _v = node
    monkeypatch.setattr(container_runtime.cr, "HAS_TOMLKIT", False)
    source = etc / "apt/sources.list.d/nvidia-container-toolkit.list"
    entries = [{"path": str(source.parent), "state": "directory", "mode": "0755"},
               {"path": str(source), "content": "deb [signed-by=/k.asc] https://repo.example/stable/deb/$(ARCH) /\n", "backup": True},
               {"path": str(etc / "k.asc"), "mode": "0644"}]
    check = run(check=True, validate_only=True, files=entries)
    assert check["changed"] and not source.parent.exists()
    first = run(validate_only=True, files=entries)
    assert first["changed"] and first["node_files"]["changed_paths"] == [str(source.parent), str(source)]
    assert not first["node_files"]["files"][2]["present"] and first["up_to_date"] is None
    assert source.read_text().startswith("deb [signed-by=/k.asc]") and "containerd/conf.d/99-nvidia.toml" not in files(etc)
    again = run(validate_only=True, files=entries)
    assert not again["changed"] and again["node_files"]["changed_paths"] == []
    assert run(state="absent", files=entries)["failed"]


def test_validate_only_says_whether_the_real_run_would_change_anything(node, tmp_path):
    etc, run, _calls, version = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    before = files(etc)
    first = run(validate_only=True, toolkit_mode="cdi")
    # The plan is the real run's: files to write, so not up to date; nothing written.
    assert first["up_to_date"] is False and not first["changed"] and files(etc) == before
    assert str(etc / "containerd/conf.d/99-nvidia.toml") in first["files"] and first["cdi_enabled"]
    assert run(toolkit_mode="cdi")["changed"]
    marker = tmp_path / "run/gpuops/containerd.restart-pending"
    # The role's handler restarts the runtime and removes the marker the change wrote.
    assert marker.exists()
    marker.unlink()
    again = run(validate_only=True, toolkit_mode="cdi")
    assert again["up_to_date"] is True and again["files"] == [] and again["cdi_enabled"] and again["config_version"] == 3
    # Another toolkit mode is a change the check sees.
    assert run(validate_only=True, toolkit_mode="legacy")["up_to_date"] is False
    # A restart still pending (the runtime not started since the marker) is not up to date either, and the check
    # leaves the marker where it is.
    marker.write_text("{}")
    version["unit_started_usec"] = "0"
    pending = run(validate_only=True, toolkit_mode="cdi")
    assert pending["up_to_date"] is False and pending["restart_pending"] and marker.exists()
    # A stale marker (the runtime restarted after it, and the run that wrote it was killed before removing it) is not
    # pending, but it is left for the real run to remove: the check does not remove it, and is not up to date.
    version["unit_started_usec"] = str(10**15)
    stale = run(validate_only=True, toolkit_mode="cdi")
    assert stale["up_to_date"] is False and not stale["restart_pending"] and marker.exists()
    tidy = run(toolkit_mode="cdi")
    assert not tidy["changed"] and not marker.exists()
    assert run(validate_only=True, toolkit_mode="cdi")["up_to_date"] is True


def test_validate_only_refuses_a_config_the_real_run_could_not_read(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text("this is not TOML [")
    res = run(validate_only=True, toolkit_mode="cdi")
    assert res["failed"] and str(etc / "containerd/config.toml") in res["msg"]
    assert files(etc) == {"containerd/config.toml": "this is not TOML ["}


def test_the_packages_asked_for_come_with_their_installed_versions(node):
    _etc, run, calls, version = node
    version["installed"].add("dpkg-query")
    asked = ["nvidia-container-toolkit", "python3-tomlkit", "python3-yaml", "nvidia-container-toolkit-base"]
    res = run(validate_only=True, packages=asked)
    assert res["packages"] == {"nvidia-container-toolkit": "1.18.2-1", "python3-tomlkit": "0.12.4-1", "python3-yaml": None,
                               "nvidia-container-toolkit-base": None}
    assert run(validate_only=True)["packages"] == {}
    assert sum(1 for c in calls if c[:1] == ["-W"]) == 1


def test_a_change_the_runtime_has_not_read_is_remembered_until_it_restarts(node, tmp_path):
    etc, run, _calls, version = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    marker = tmp_path / "run/gpuops/containerd.restart-pending"
    version["unit_started_usec"] = "0"
    # Check mode writes no marker.
    assert run(check=True)["changed"] and not marker.exists()
    first = run()
    assert first["changed"] and first["restart_required"] and not first["restart_pending"]
    assert first["restart_marker"] == str(marker) and marker.exists()
    # The run ended before its restart (killed, or a later task failed): the next run, with nothing to write,
    # still asks for the restart - in check mode too, which leaves the marker.
    for check in (True, False):
        again = run(check=check)
        assert again["changed"] and again["restart_required"] and again["restart_pending"] and again["rollback"] == []
        assert marker.exists()
    # The unit started after the marker was written (the handler, or someone else, restarted it): stale, removed.
    version["unit_started_usec"] = str(10**15)
    settled = run()
    assert not settled["changed"] and not settled["restart_required"] and not settled["restart_pending"]
    assert not marker.exists()


def test_a_marker_the_unit_started_after_in_check_mode_is_left(node, tmp_path):
    etc, run, _calls, version = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    version["unit_started_usec"] = "0"
    run()
    version["unit_started_usec"] = str(10**15)
    res = run(check=True)
    assert not res["changed"] and not res["restart_pending"]
    assert (tmp_path / "run/gpuops/containerd.restart-pending").exists()


@pytest.mark.parametrize("args", [{"restart_marker": ""}, {"image_build": "true"}], ids=["off", "image-build"])
def test_no_marker_when_off_or_in_an_image_build(node, tmp_path, args):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    res = run(**args)
    assert res["changed"] and res["restart_marker"] == "" and not res["restart_pending"]
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("drop_in", ["in place", "drop-in"])
def test_absent_puts_back_the_file_as_it_was_and_a_second_run_changes_nothing(node, drop_in, monkeypatch):
    etc, run, _calls, _v = node
    # Runs of one test share a process and a second: Ansible's backup names (pid and time) would collide.
    made = []
    real_backup = basic.AnsibleModule.backup_local

    def backup_local(self, fn):
        made.append(real_backup(self, fn))
        os.rename(made[-1], f"{made[-1]}{len(made)}")
        return f"{made[-1]}{len(made)}"

    monkeypatch.setattr(basic.AnsibleModule, "backup_local", backup_local)
    main = etc / "containerd/config.toml"
    planted = (PLANTED / "planted-v3.toml").read_text()
    main.write_text(planted)
    original = files(etc)
    layout = {"drop_in": ""} if drop_in == "in place" else {}
    assert run(set_as_default=True, **layout)["changed"]
    # A later run that changes a setting: more backups, the record keeps the first state.
    assert run(set_as_default=True, runtime_config={"privileged_without_host_devices": True}, **layout)["changed"]
    assert (etc / "gpuops-nvidia/container-runtime.json").exists()
    away = {"backup_dir": str(etc.parent / "run/gpuops/uninstall-backups")}
    check = run(check=True, state="absent", **away, **layout)
    assert check["changed"] and check["restart_required"] and files(etc) != original
    # Check mode names the backups the installs made that would go, and removes none.
    assert check["removed_backups"] and all(os.path.exists(b) for b in check["removed_backups"])
    res = run(state="absent", **away, **layout)
    assert res["changed"] and res["restart_required"] and not res["failed"], res
    # Byte for byte: the backup was the original and nothing changed the file since. The backups the installs made are
    # gone (the first one is the file again), the record too; this run's own, for the caller's rollback, are outside /etc.
    assert main.read_text() == planted and res["restored_from"]
    assert files(etc) == original
    assert res["rollback"] and all(r["backup"].startswith(away["backup_dir"]) for r in res["rollback"] if r["backup"])
    assert not (etc / "gpuops-nvidia/container-runtime.json").exists()
    again = run(state="absent", **away, **layout)
    assert not again["changed"] and not again["restart_required"]


def test_absent_after_somebody_edited_the_file_keeps_their_edit(node):
    etc, run, _calls, _v = node
    main = etc / "containerd/config.toml"
    main.write_text((PLANTED / "planted-v3.toml").read_text())
    run(drop_in="", set_as_default=True)
    main.write_text(main.read_text() + '\n[debug]\n  level = "info"\n')
    res = run(drop_in="", state="absent", backup=False)
    assert res["changed"] and not res["restored_from"]
    text = main.read_text()
    assert 'level = "info"' in text and "nvidia-container-runtime" not in text and "enable_cdi" not in text


def test_absent_removes_a_config_this_module_created(node):
    etc, run, _calls, _v = node
    run()
    assert (etc / "containerd/config.toml").exists()
    assert (etc / "containerd/conf.d").is_dir()
    res = run(state="absent", backup=False)
    assert files(etc) == {}
    # The drop-in directory it made goes too; the one that was there stays.
    assert not (etc / "containerd/conf.d").exists() and (etc / "containerd").is_dir()
    assert res["removed_directories"] == [str(etc / "containerd/conf.d")]


def test_absent_on_crio_removes_our_drop_in_only(node):
    etc, run, _calls, v = node
    v["installed"] = {"crio"}
    conf_d = etc / "crio/crio.conf.d"
    conf_d.mkdir(parents=True)
    (etc / "crio/crio.conf").write_text('[crio.runtime]\ndefault_runtime = "runc"\n[crio.runtime.runtimes.runc]\n'
                                        'runtime_path = "/usr/bin/runc"\n')
    (conf_d / "50-site").write_text('[crio.runtime.runtimes.runc]\nmonitor_path = "/usr/libexec/crio/conmon"\n')
    crio = {"config": str(etc / "crio/crio.conf"), "drop_in": str(conf_d / "99-nvidia.toml"), "backup": False}
    before = files(etc)
    assert run(**crio)["changed"]
    res = run(state="absent", **crio)
    assert res["changed"] and files(etc) == before


def test_the_cdi_spec_is_answered_only_where_nothing_is_to_change_before_it(node, monkeypatch):
    """The container_toolkit role takes the check's answer for the spec instead of its own run: the check gives one only
    where the settings are in place, CDI is on and every package is installed."""
    etc, run, _calls, version = node
    asked = []
    monkeypatch.setattr(answers, "cdi_spec", lambda module, given, refresh_unit: asked.append((module.check_mode, given, refresh_unit))
                        or {"settings": given, "result": {"changed": False}})
    version["installed"].add("dpkg-query")
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    settings = {"path": "/var/run/cdi/nvidia.yaml", "files": [], "units": [],
                "gpu_info": {"nvml": {"status": "ok", "gpus": [{"index": 0}]}}}
    assert "cdi_spec" not in run(validate_only=True, toolkit_mode="cdi", cdi_spec=settings), "settings to change first"
    run(toolkit_mode="cdi")
    (etc.parent / "run/gpuops/containerd.restart-pending").unlink()
    checked = run(validate_only=True, toolkit_mode="cdi", cdi_spec=settings, packages=["nvidia-container-toolkit"])
    assert checked["up_to_date"] and checked["cdi_spec"] == {"settings": settings, "result": {"changed": False}}
    assert len(asked) == 1 and asked[0][1] == settings
    # A package the role installs that is not there yet: its install comes first.
    assert "cdi_spec" not in run(validate_only=True, toolkit_mode="cdi", cdi_spec=settings, packages=["nvidia-container-toolkit-base"])
    # Without CDI in the runtime, or without GPUs, there is no spec to answer.
    assert "cdi_spec" not in run(validate_only=True, toolkit_mode="cdi", cdi="skip", cdi_spec=settings)
    assert "cdi_spec" not in run(validate_only=True, toolkit_mode="cdi", cdi_spec=dict(settings, gpu_info={"nvml": {"status": "ok", "gpus": []}}),
                                 packages=["nvidia-container-toolkit"])
    assert len(asked) == 1


def test_without_cdi_in_the_runtime_the_refresh_units_are_answered_instead_of_the_spec(node, tmp_path, monkeypatch):
    """containerd 1.6 (Debian 12) has no CDI: the role makes no spec there but keeps the toolkit's refresh units with
    node_files; the check answers that module's check-mode run (the real one, on files here), on the same terms as the
    spec's, and only where the toolkit has the units and the spec is not answered."""
    etc, run, _calls, version = node
    version["installed"].add("dpkg-query")
    version["out"] = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n"
    units = tmp_path / "lib/systemd/system"
    monkeypatch.setattr(container_runtime_run, "UNIT_DIRS", (str(units),))
    (etc / "containerd/config.toml").write_text((RECORDED / "containerd-1.6.20-debian-config.toml").read_text())
    drop = tmp_path / "etc/systemd/system/nvidia-cdi-refresh.service.d/50-gpuops.conf"
    settings = {"units": [], "files": [{"path": str(drop.parent), "state": "directory", "mode": "0755"},
                                       {"path": str(drop), "content": "[Service]\n", "mode": "0644"}]}
    spec = {"path": "/var/run/cdi/nvidia.yaml", **settings, "gpu_info": {"nvml": {"status": "ok", "gpus": [{"index": 0}]}}}
    asked = {"validate_only": True, "toolkit_mode": "cdi", "cdi_spec": spec, "cdi_refresh": settings,
             "packages": ["nvidia-container-toolkit"]}
    assert not run(toolkit_mode="cdi")["failed"]
    (tmp_path / "run/gpuops/containerd.restart-pending").unlink()
    checked = run(**asked)
    assert checked["up_to_date"] and not checked["cdi_enabled"] and "cdi_spec" not in checked
    assert "cdi_refresh" not in checked, "the toolkit has no refresh units: none to keep"
    units.mkdir(parents=True)
    (units / "nvidia-cdi-refresh.path").write_text("[Path]\n")
    # The drop-in not there yet: the answer says node_files would write it, and nothing is written.
    checked = run(**asked)
    assert checked["cdi_refresh"]["settings"] == settings
    assert checked["cdi_refresh"]["result"]["changed"] is True and not drop.exists()
    # In place: unchanged, as node_files' own run says.
    drop.parent.mkdir(parents=True)
    drop.write_text("[Service]\n")
    drop.chmod(0o644)
    assert run(**asked)["cdi_refresh"]["result"]["changed"] is False
    # Without the spec's settings (gpuops_container_toolkit_cdi_spec: false) the same; no refresh units asked for
    # (gpuops_container_toolkit_cdi_refresh: false): nothing to answer.
    assert run(**dict(asked, cdi_spec=None))["cdi_refresh"]["result"]["changed"] is False
    assert "cdi_refresh" not in run(**dict(asked, cdi_refresh=None))
    # A package the role installs that is not there yet: its install comes first.
    assert "cdi_refresh" not in run(**dict(asked, packages=["nvidia-container-toolkit-base"]))


def _answer(given, info, warned=None):
    """gpu_info's answer to the container_toolkit role's check, on the fixture's node (its warnings into `warned`)."""
    import types

    module = types.SimpleNamespace(check_mode=False, _diff=True, warn=(warned if warned is not None else []).append,
                                   run_command=basic.AnsibleModule.run_command.__get__(object()),
                                   get_bin_path=basic.AnsibleModule.get_bin_path.__get__(object()))
    return answers.container_runtime(module, given, info)


NVML_OK = {"nvml": {"status": "ok", "gpus": [{"index": 0}]}}


def test_the_read_answers_the_settings_check_as_the_module_s_own_run_would(node, tmp_path, monkeypatch):
    """The preflight's read gives the container_toolkit role the result its check would have had, made in check mode:
    the same dict, the settings given back as asked, the CDI spec's check with the read's GPUs only where NVML has some."""
    etc, run, _calls, version = node
    version["installed"].add("dpkg-query")
    asked = []
    monkeypatch.setattr(answers, "cdi_spec", lambda module, given, refresh_unit: asked.append(given)
                        or {"settings": given, "result": {"changed": False}})
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    paths = {"config": str(etc / "containerd/config.toml"), "drop_in": str(etc / "containerd/conf.d/99-nvidia.toml"),
             "toolkit_config": str(etc / "nvidia-container-runtime/config.toml"), "image_build": "false",
             "restart_marker": str(tmp_path / "run/gpuops/containerd.restart-pending")}
    given = {**paths, "toolkit_mode": "cdi", "packages": ["nvidia-container-toolkit"], "validate_only": True,
             "cdi_spec": {"path": "/var/run/cdi/nvidia.yaml", "files": [], "units": []}}
    # Settings to change: the answer says so, as the module's check does, and changes nothing.
    before = files(etc)
    answer = _answer(given, NVML_OK)
    assert answer["settings"] == given and answer["result"]["up_to_date"] is False and files(etc) == before
    run(toolkit_mode="cdi")
    (tmp_path / "run/gpuops/containerd.restart-pending").unlink()
    answer = _answer(given, NVML_OK)
    # The role's own check: the spec's settings with the GPUs.
    own = run(**dict(given, cdi_spec={**given["cdi_spec"], "gpu_info": NVML_OK}))
    assert own.pop("failed") is False and answer["result"] == own and answer["result"]["up_to_date"] is True
    assert answer["result"]["cdi_spec"]["result"] == {"changed": False} and asked[-1]["gpu_info"] == NVML_OK
    # Without GPUs in NVML's answer the role makes no spec: none is checked.
    assert "cdi_spec" not in _answer(given, {"nvml": {"status": "driver_not_loaded", "gpus": []}})["result"]
    # A check that fails, or refuses the settings, is not answered (nor are its warnings shown): the module's own run
    # says why.
    warned = []
    assert _answer({**given, "runtime": "crio"}, NVML_OK, warned)["result"] is None
    assert _answer({**given, "toolkit_mode": "nonsense"}, NVML_OK, warned)["result"] is None
    assert warned == []
    # A version 2 config under containerd 2.x: in place, but the check warns that containerd converts it. The answer
    # is given all the same, its warning the read's, named as the role's check's.
    (etc / "containerd/config.toml").write_text("version = 2\n")
    run(toolkit_mode="cdi")
    (tmp_path / "run/gpuops/containerd.restart-pending").unlink()
    own_warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda _self, warning: own_warnings.append(warning))
    assert run(**given)["up_to_date"] and any("converts it" in warning for warning in own_warnings)
    answer = _answer(given, NVML_OK, warned)
    assert answer["result"]["up_to_date"] is True
    assert warned == [f"the container_toolkit role's settings check: {warning}" for warning in own_warnings]


def test_absent_on_a_node_without_a_runtime_has_nothing_to_take_out(node):
    """uninstall.yml on a node without containerd or CRI-O: nothing of ours in a runtime config, so nothing fails; where a
    runtime is asked for by name, or on install, the missing runtime still fails."""
    _etc, run, _calls, version = node
    version["installed"] = {"systemctl"}
    res = run(state="absent", runtime="auto")
    assert not res["failed"] and not res["changed"] and res["runtime"] == "none" and not res["restart_required"]
    assert "nothing to take out" in res["msg"]
    assert run(runtime="auto")["failed"]
    assert run(state="absent", runtime="containerd")["failed"]


NRI_NAMES = {**TOOLKIT_NAMES, "nri": "gpuops_container_toolkit_mode"}


@pytest.mark.parametrize(("installed", "out", "message"), [
    ({"containerd"}, "containerd github.com/containerd/containerd/v2 2.0.5 abc\n",
     "gpuops_container_toolkit_mode: nri needs containerd 1.7.30 or a later 1.7, or 2.1 or later (their NRI applies a "
     "plugin's CDI devices); this node has containerd 2.0.5"),
    ({"containerd"}, "containerd containerd.io 1.7.27 abc\n", "gpuops_container_toolkit_mode: nri needs containerd 1.7.30"),
    ({"crio"}, "crio version 1.33.4\n", "gpuops_container_toolkit_mode: nri needs CRI-O 1.34 or later"),
])
@pytest.mark.parametrize("validate_only", [True, False])
def test_nri_is_refused_where_the_runtime_cannot_inject_its_cdi_devices(node, installed, out, message, validate_only):
    etc, run, _calls, v = node
    v["installed"], v["out"] = installed, out
    (etc / "crio/crio.conf.d").mkdir(parents=True)
    before = files(etc)
    args = {"runtime": "crio", "config": str(etc / "crio/crio.conf"),
            "drop_in": str(etc / "crio/crio.conf.d/99-nvidia.toml")} if "crio" in installed else {}
    res = run(variables=NRI_NAMES, validate_only=validate_only, nri=True, **args)
    assert res["failed"] and res["msg"].startswith(message), res["msg"]
    assert files(etc) == before


def test_nri_with_cdi_skipped_is_refused_naming_the_cdi_variable(node):
    etc, run, _calls, _v = node
    res = run(variables=NRI_NAMES, nri=True, cdi="skip")
    assert res["failed"] and res["msg"].startswith("gpuops_container_toolkit_cdi_mode: skip leaves CDI"), res["msg"]
    assert not (etc / "containerd/conf.d").exists()


def test_nri_writes_nri_and_cdi_only_then_nothing(node):
    etc, run, _calls, _v = node
    (etc / "containerd/config.toml").write_text((PLANTED / "planted-v3.toml").read_text())
    checked = run(check=True, nri=True)
    assert checked["changed"] and files(etc) == {"containerd/config.toml": (PLANTED / "planted-v3.toml").read_text()}
    res = run(nri=True)
    assert res["changed"] and res["cdi_enabled"]
    drop = (etc / "containerd/conf.d/99-nvidia.toml").read_text()
    assert "[plugins.'io.containerd.nri.v1.nri']" in drop or '[plugins."io.containerd.nri.v1.nri"]' in drop
    assert "nvidia-container-runtime" not in drop and "runtimes" not in drop
    assert not run(nri=True)["changed"]


def test_the_preflight_blocks_nri_mode_with_the_module_s_refusal_through_the_read_s_answer(node, info_of):
    """node.yml's read answers the container_toolkit role's check in NRI mode; where the runtime cannot inject an NRI
    plugin's CDI devices (containerd 1.7.12), that answer is the module's own refusal (check_nri_support, not a copy),
    and the preflight blocks on it before any role changes the node. Where it can (2.3.7), nothing blocks."""
    etc, _run, _calls, version = node
    version["out"] = "containerd github.com/containerd/containerd 1.7.12 \n"
    # As the role passes them in NRI mode: toolkit_mode null (the toolkit's mode left as it is).
    given = {"config": str(etc / "containerd/config.toml"), "drop_in": str(etc / "containerd/conf.d/99-nvidia.toml"),
             "toolkit_config": str(etc / "nvidia-container-runtime/config.toml"), "image_build": "false", "nri": True,
             "toolkit_mode": None, "variables": NRI_NAMES, "packages": [], "validate_only": True}
    before = files(etc)
    answer = _answer(given, NVML_OK)
    assert answer["result"] is None and files(etc) == before
    assert answer["refused"].startswith("gpuops_container_toolkit_mode: nri needs containerd 1.7.30 or a later 1.7, or "
                                        "2.1 or later"), answer
    info = info_of("hgx-h100")
    info["node"]["container_runtimes"] = ["containerd"]
    settings = {"driver_method": "none", "container_runtime": "auto"}
    found = preflight.findings(info, "Ubuntu", "24", {**settings, "answers": {"container_toolkit": answer}})
    assert [(f["id"], f["severity"]) for f in found] == [("container_toolkit_refuses", "blocker")]
    assert found[0]["message"] == f"the container_toolkit role would refuse: {answer['refused']}"
    version["out"] = "containerd github.com/containerd/containerd/v2 v2.3.7 \n"
    answer = _answer(given, NVML_OK)
    assert "refused" not in answer and answer["result"]["cdi_enabled"] is True
    assert preflight.findings(info, "Ubuntu", "24", {**settings, "answers": {"container_toolkit": answer}}) == []


def test_nri_mode_s_null_toolkit_mode_is_taken_and_another_mode_refused_naming_the_variable(node):
    """The role passes toolkit_mode null in NRI mode (the toolkit's mode left as it is): the module takes it, where an
    argument spec's choices would refuse it; a mode that is none of the toolkit's is still refused before any write."""
    etc, run, _calls, _v = node
    res = run(nri=True, toolkit_mode=None)
    assert not res["failed"] and res["changed"], res.get("msg")
    assert not (etc / "nvidia-container-runtime/config.toml").exists()
    before = files(etc)
    res = run(variables={**TOOLKIT_NAMES, "toolkit_mode": "gpuops_container_toolkit_mode"}, toolkit_mode="bogus")
    assert res["failed"] and res["msg"].startswith("gpuops_container_toolkit_mode: 'bogus' is not one of auto, cdi"), res["msg"]
    assert files(etc) == before
