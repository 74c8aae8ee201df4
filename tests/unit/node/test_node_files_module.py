"""The node_files module end to end on a temporary directory, systemctl stubbed with the lab's recorded answers."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.modules import node_files

from ..harness import call

# What systemctl answered on the lab's machines (Ubuntu 24.04: systemd 255; Ubuntu 22.04: 249).
NOT_FOUND = {
    "255": (4, "not-found\n", ""),
    "249": (1, "", "Failed to get unit file state for nope.service: No such file or directory\n"),
}


class Systemd:
    """A unit table answering is-enabled / is-active as systemctl does, and recording every call."""

    def __init__(self) -> None:
        self.units = {"nvidia-persistenced.service": {"enabled": "disabled", "active": "inactive"},
                      "systemd-journald.service": {"enabled": "static", "active": "active"}}
        self.calls: list[list[str]] = []
        self.not_found = NOT_FOUND["255"]

    def __call__(self, argv):
        self.calls.append(argv[1:])
        verb, name = argv[1], argv[-1]
        unit = self.units.get(name)
        if verb == "daemon-reload":
            return 0, "", ""
        if unit is None:
            return self.not_found if verb == "is-enabled" else (4 if verb != "is-active" else 3, "inactive\n", "")
        if verb == "is-enabled":
            return (0 if unit["enabled"] in ("enabled", "static") else 1), unit["enabled"] + "\n", ""
        if verb == "is-active":
            return (0 if unit["active"] == "active" else 3), unit["active"] + "\n", ""
        changes = {"enable": ("enabled", "enabled"), "disable": ("enabled", "disabled"), "start": ("active", "active"),
                   "restart": ("active", "active"), "stop": ("active", "inactive")}
        key, value = changes[verb]
        unit[key] = value
        return 0, "", ""

    def actions(self) -> list[list[str]]:
        return [c for c in self.calls if c[0] not in ("is-enabled", "is-active")]


@pytest.fixture
def node(tmp_path, monkeypatch):
    systemd = Systemd()
    monkeypatch.setattr(basic.AnsibleModule, "run_command", lambda self, argv, **kw: systemd(argv))
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path", lambda self, name, required=False, opt_dirs=None: f"/usr/bin/{name}")

    def run(check=False, diff=True, image_build="false", **args):
        return call(node_files.main, {"image_build": image_build, "_ansible_check_mode": check, "_ansible_diff": diff, **args})

    return SimpleNamespace(root=tmp_path, run=run, systemd=systemd)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_writes_files_and_directories_once_then_changes_nothing(node):
    root = node.root
    run = node.run
    files = [{"path": f"{root}/state", "state": "directory", "mode": "0755"},
             {"path": f"{root}/state/driver-method", "content": "host\n", "mode": "0644"},
             {"path": f"{root}/modprobe.d/gpuops-nvidia.conf", "state": "absent"}]
    first = run(files=files)
    assert first["changed"] and first["changed_paths"] == [f"{root}/state", f"{root}/state/driver-method"]
    assert (root / "state/driver-method").read_text() == "host\n"
    assert _mode(root / "state") == 0o755 and _mode(root / "state/driver-method") == 0o644
    assert not first["daemon_reloaded"]
    second = run(files=files)
    assert not second["changed"] and second["changed_paths"] == [] and "diff" not in second


def test_check_mode_changes_nothing_and_shows_the_diff(node):
    root = node.root
    run = node.run
    systemd = node.systemd
    (root / "gone.conf").write_text("options nvidia x=1\n")
    res = run(check=True, files=[{"path": f"{root}/new/dir", "state": "directory"},
                                 {"path": f"{root}/new/dir/file", "content": "a\n"},
                                 {"path": f"{root}/gone.conf", "state": "absent"}],
              units=[{"name": "nvidia-persistenced.service", "enabled": True, "state": "started"}])
    assert res["changed"]
    assert not (root / "new").exists() and (root / "gone.conf").exists()
    assert [d["after_header"] for d in res["diff"]] == [f"{root}/new/dir/", f"{root}/new/dir/file", f"{root}/gone.conf",
                                                        "nvidia-persistenced.service"]
    assert res["diff"][3]["before"] == "enabled: false\nactive: false\n" and res["diff"][3]["after"] == "enabled: true\nactive: true\n"
    assert res["diff"][2]["before"] == "options nvidia x=1\n" and res["diff"][2]["after"] == ""
    assert res["units"] == [{"name": "nvidia-persistenced.service", "actions": ["enable", "start"]}]
    assert systemd.actions() == []


def test_mode_and_owner_of_an_unchanged_file_are_set(node):
    root = node.root
    run = node.run
    target = root / "f"
    target.write_text("x\n")
    os.chmod(target, 0o600)
    res = run(files=[{"path": str(target), "content": "x\n", "mode": "0644"}])
    assert res["changed"] and _mode(target) == 0o644
    assert res["diff"][0]["before_header"] == f"{target} (mode)" and res["diff"][0]["after"] == "0644\n"
    assert not run(files=[{"path": str(target), "content": "x\n", "mode": "0644"}])["changed"]


def test_an_existing_file_keeps_its_mode_when_none_is_given(node):
    root = node.root
    run = node.run
    target = root / "f"
    target.write_text("old\n")
    os.chmod(target, 0o640)
    run(files=[{"path": str(target), "content": "new\n"}])
    assert target.read_text() == "new\n" and _mode(target) == 0o640


def test_backup_of_a_replaced_file_is_returned(node):
    root = node.root
    run = node.run
    target = root / "sources.list"
    target.write_text("deb old /\n")
    res = run(files=[{"path": str(target), "content": "deb new /\n", "backup": True}])
    backup = res["files"][0]["backup"]
    assert backup and Path(backup).read_text() == "deb old /\n"


def test_a_drop_in_change_reloads_systemd_enables_and_restarts_the_running_unit(node, monkeypatch):
    root = node.root
    run = node.run
    systemd = node.systemd
    dropin = "/etc/systemd/system/nvidia-persistenced.service.d/gpuops.conf"
    # The systemd directory is the node's; in the test its files go under the temporary root.
    real = root / dropin.lstrip("/")
    monkeypatch.setattr(node_files.nf, "SYSTEMD_DIRS", (str(root / "etc/systemd/system") + "/",))
    systemd.units["nvidia-persistenced.service"] = {"enabled": "enabled", "active": "active"}
    units = [{"name": "nvidia-persistenced.service", "enabled": True, "state": "started", "restart_on": [str(real)]}]
    res = run(files=[{"path": str(real), "content": "[Service]\n"}], units=units)
    assert res["daemon_reloaded"] and res["units"][0]["actions"] == ["restart"]
    assert res["diff"][1]["after"] == f"enabled: true\nactive: true\nrestarted: {real} changed\n"
    assert systemd.actions() == [["daemon-reload"], ["restart", "nvidia-persistenced.service"]]
    systemd.calls.clear()
    again = run(files=[{"path": str(real), "content": "[Service]\n"}], units=units)
    assert not again["changed"] and systemd.actions() == []


def test_a_stopped_unit_is_started_not_restarted_and_static_counts_as_enabled(node):
    run = node.run
    systemd = node.systemd
    res = run(units=[{"name": "nvidia-persistenced.service", "enabled": True, "state": "started"},
                     {"name": "systemd-journald.service", "enabled": True}])
    assert [u["actions"] for u in res["units"]] == [["enable", "start"], []]
    assert systemd.actions() == [["enable", "nvidia-persistenced.service"], ["start", "nvidia-persistenced.service"]]


def test_an_image_build_enables_but_never_starts_or_reloads(node, monkeypatch):
    root = node.root
    run = node.run
    systemd = node.systemd
    monkeypatch.setattr(node_files.nf, "SYSTEMD_DIRS", (str(root) + "/",))
    res = run(image_build="true", files=[{"path": f"{root}/unit.conf", "content": "[Service]\n"}],
              units=[{"name": "nvidia-persistenced.service", "enabled": True, "state": "started",
                      "restart_on": [f"{root}/unit.conf"]}])
    assert not res["daemon_reloaded"] and res["units"][0]["actions"] == ["enable"]
    assert systemd.actions() == [["enable", "nvidia-persistenced.service"]]


@pytest.mark.parametrize("systemd_version", sorted(NOT_FOUND))
def test_a_unit_the_node_lacks_is_named(node, systemd_version):
    run = node.run
    systemd = node.systemd
    systemd.not_found = NOT_FOUND[systemd_version]
    res = run(units=[{"name": "nope.service", "enabled": True}])
    assert res["failed"] and res["msg"] == "nope.service: no such unit on this node"


@pytest.mark.parametrize("systemd_version", sorted(NOT_FOUND))
def test_a_unit_asked_to_be_disabled_and_stopped_that_the_node_lacks_is_already_so(node, systemd_version):
    """An uninstall's second run: the package that had the unit is purged; disabling it again is nothing to do."""
    systemd = node.systemd
    systemd.not_found = NOT_FOUND[systemd_version]
    res = node.run(units=[{"name": "nope.service", "enabled": False, "state": "stopped"},
                          {"name": "gone.service", "enabled": False}])
    assert not res.get("failed") and not res["changed"] and [u["actions"] for u in res["units"]] == [[], []]
    assert systemd.actions() == []
    # Asked to run, or only to stay as it is while enabled: still an error.
    res = node.run(units=[{"name": "nope.service", "enabled": False, "state": "started"}])
    assert res["failed"] and res["msg"] == "nope.service: no such unit on this node"


def test_unit_state_is_judged_as_the_units_option_judges_it(node):
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node.node_files import unit_state
    systemd = node.systemd
    assert unit_state(systemd, "/usr/bin/systemctl", "nvidia-persistenced.service") == {"enabled": False, "active": False}
    assert unit_state(systemd, "/usr/bin/systemctl", "systemd-journald.service") == {"enabled": True, "active": True}
    assert unit_state(systemd, "/usr/bin/systemctl", "nope.service") == {"enabled": None, "active": False}
    assert unit_state(systemd, None, "systemd-journald.service") == {"enabled": None, "active": False}
    # A unit the units option would leave alone (enabled: true, state: started) is one whose state says so.
    res = node.run(units=[{"name": "systemd-journald.service", "enabled": True, "state": "started"}])
    assert not res["changed"] and systemd.actions() == []


def test_a_file_without_content_keeps_its_text_and_is_not_made(node, tmp_path):
    key, missing = tmp_path / "key.asc", tmp_path / "missing.asc"
    key.write_text("KEY\n")
    key.chmod(0o600)
    entries = [{"path": str(key), "mode": "0644"}, {"path": str(missing), "mode": "0644"},
               {"path": str(tmp_path / "src.list"), "content": "deb x /\n"}, {"path": str(tmp_path / "gone"), "state": "absent"}]
    res = node.run(check=True, files=entries)
    assert [(f["present"], f["changed"]) for f in res["files"]] == [(True, True), (False, False), (True, True), (False, False)]
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and not (tmp_path / "src.list").exists()
    res = node.run(files=entries)
    assert [(f["present"], f["changed"]) for f in res["files"]] == [(True, True), (False, False), (True, True), (False, False)]
    assert key.read_text() == "KEY\n" and stat.S_IMODE(key.stat().st_mode) == 0o644 and not missing.exists()
    assert [f["present"] for f in node.run(files=entries)["files"]] == [True, False, True, False]
    assert not node.run(files=entries)["changed"]


@pytest.mark.parametrize(("files", "units", "message"), [
    ([{"path": "relative/path", "content": ""}], [], "files[0] (relative/path): path must be absolute"),
    ([{"path": "/a", "content": "x"}, {"path": "/a", "state": "absent"}], [], "files[1] (/a): /a is listed twice"),
    ([{"path": "/a", "backup": True}], [], "files[0] (/a): backup is for a file whose content this call writes"),
    ([{"path": "/a", "state": "directory", "content": "x"}], [], "files[0] (/a): content is for state file only, not directory"),
    ([{"path": "/a", "content": "x", "mode": "rw-r--r--"}], [], "files[0] (/a): mode 'rw-r--r--' is not an octal mode such as '0644'"),
    ([], [{"name": "x.service", "state": "started", "restart_on": ["/b"]}], "units[0] (x.service): restart_on names /b, "
     "which this call does not manage"),
    ([{"path": "/b", "content": ""}], [{"name": "x.service", "restart_on": ["/b"]}], "units[0] (x.service): restart_on needs state started"),
])
def test_entries_that_cannot_be_done_fail_before_anything_changes(node, files, units, message):
    run = node.run
    systemd = node.systemd
    res = run(files=files, units=units)
    assert res["failed"] and res["msg"] == message
    assert systemd.calls == []


def test_a_directory_where_a_file_is_wanted_is_refused(node):
    root = node.root
    run = node.run
    (root / "d").mkdir()
    res = run(files=[{"path": str(root / "d"), "content": "x"}])
    assert res["failed"] and res["msg"] == f"{root}/d: is a directory; this module writes and removes files only"


def test_a_failing_systemctl_names_the_command(node, monkeypatch):
    run = node.run
    systemd = node.systemd

    def failing(module, argv, **kw):
        if argv[1] == "start":
            return 1, "", "Job for nvidia-persistenced.service failed.\n"
        return systemd(argv)

    monkeypatch.setattr(basic.AnsibleModule, "run_command", failing)
    res = run(units=[{"name": "nvidia-persistenced.service", "state": "started"}])
    assert res["failed"] and res["rc"] == 1
    assert res["msg"] == "/usr/bin/systemctl start nvidia-persistenced.service failed (rc 1): Job for nvidia-persistenced.service failed."


def test_restarted_restarts_a_running_unit_and_starts_a_stopped_one(node):
    run = node.run
    systemd = node.systemd
    systemd.units["nvidia-persistenced.service"]["active"] = "active"
    res = run(units=[{"name": "nvidia-persistenced.service", "state": "restarted"}])
    assert res["changed"] and res["units"][0]["actions"] == ["restart"]
    systemd.units["nvidia-persistenced.service"]["active"] = "inactive"
    assert run(units=[{"name": "nvidia-persistenced.service", "state": "restarted"}])["units"][0]["actions"] == ["start"]


def test_a_directory_goes_only_when_this_calls_removals_leave_it_empty(node):
    ours = node.root / "svc.service.d"
    ours.mkdir()
    (ours / "50-gpuops.conf").write_text("[Service]\n")
    files = [{"path": str(ours / "50-gpuops.conf"), "state": "absent"}, {"path": str(ours), "state": "absent"}]
    check = node.run(check=True, files=files)
    # Check mode sees the directory empty after the file it would remove.
    assert check["changed"] and [f["changed"] for f in check["files"]] == [True, True] and ours.exists()
    res = node.run(files=files)
    assert res["changed"] and not ours.exists()
    assert not node.run(files=files)["changed"]


def test_a_directory_holding_somebody_elses_file_stays(node):
    shared = node.root / "svc.service.d"
    shared.mkdir()
    (shared / "50-gpuops.conf").write_text("[Service]\n")
    (shared / "10-site.conf").write_text("[Service]\n")
    res = node.run(files=[{"path": str(shared / "50-gpuops.conf"), "state": "absent"}, {"path": str(shared), "state": "absent"}])
    assert [f["changed"] for f in res["files"]] == [True, False]
    assert sorted(p.name for p in shared.iterdir()) == ["10-site.conf"]
