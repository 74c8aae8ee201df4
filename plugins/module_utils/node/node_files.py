# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A role's plain node state in one call: files, directories and systemd units (the node_files module).

A no-op run of a role used to spend one SSH round trip per file, directory and unit (copy, file,
systemd_service); this does them all in one, through the collection's one writer (`_common.files`) and one
change tracker. Order: files and directories as listed, then one `daemon-reload` when a unit file or drop-in
changed, then each unit's enablement, then its state.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import DIR_MODE, remove_file, write_text

if TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

Runner = Callable[[list[str]], tuple[int, str, str]]

FILE_STATES = ("file", "directory", "absent")
UNIT_STATES = ("started", "restarted", "stopped")
# Where systemd reads units and drop-ins from: a change there takes a daemon-reload.
SYSTEMD_DIRS = ("/etc/systemd/system/", "/run/systemd/system/", "/usr/lib/systemd/system/", "/lib/systemd/system/")
# systemctl's environment for answers in a fixed form: C locale, no pager, no colours.
SYSTEMCTL_ENV = {"LC_ALL": "C", "LANG": "C", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}
# `systemctl is-enabled` states that exit 0 but that `enable` does change (as ansible's systemd_service reads them).
NOT_ENABLED = ("enabled-runtime",)
RUNNING = ("active", "activating", "reloading")

# node_files' options (documented in doc_fragments/node_files.py). A module that puts a role's plain files and units in place
# in its own run, after its own work, takes them as they are (ensure() below): one round trip for the two.
ARGUMENT_SPEC: dict[str, Any] = {
    "files": {"type": "list", "elements": "dict", "default": [], "options": {
        "path": {"type": "path", "required": True},
        "state": {"type": "str", "choices": list(FILE_STATES), "default": "file"},
        "content": {"type": "str"},
        "mode": {"type": "str"},
        "owner": {"type": "str"},
        "group": {"type": "str"},
        "backup": {"type": "bool", "default": False},
    }},
    "units": {"type": "list", "elements": "dict", "default": [], "options": {
        "name": {"type": "str", "required": True},
        "enabled": {"type": "bool"},
        "state": {"type": "str", "choices": list(UNIT_STATES)},
        "restart_on": {"type": "list", "elements": "path", "default": []},
    }},
}


class SpecError(ValueError):
    """An entry of `files` or `units` that cannot be done; the message names the entry."""


@dataclass(frozen=True)
class FileSpec:
    path: str
    state: str = "file"
    content: str | None = None
    mode: int | None = None
    owner: str | None = None
    group: str | None = None
    backup: bool = False


@dataclass(frozen=True)
class UnitSpec:
    name: str
    enabled: bool | None = None
    state: str | None = None
    restart_on: tuple[str, ...] = ()


@dataclass
class Outcome:
    """What one call did (or would do, in check mode)."""

    files: list[dict[str, Any]] = field(default_factory=list)
    units: list[dict[str, Any]] = field(default_factory=list)
    daemon_reloaded: bool = False
    changed_paths: set[str] = field(default_factory=set)

    @property
    def changed(self) -> bool:
        return bool(self.changed_paths) or any(u["actions"] for u in self.units)


def parse_mode(value: object, where: str) -> int | None:
    """An octal mode given as text ('0644', '644'); None when not given."""
    if value in (None, ""):
        return None
    text = str(value)
    try:
        mode = int(text, 8)
    except ValueError:
        raise SpecError(f"{where}: mode {text!r} is not an octal mode such as '0644'") from None
    if mode < 0 or mode > 0o7777:
        raise SpecError(f"{where}: mode {text!r} is not an octal mode such as '0644'")
    return mode


def file_specs(entries: Sequence[Mapping[str, Any]]) -> list[FileSpec]:
    """The `files` option, checked: absolute paths, each once, content exactly for files."""
    specs: list[FileSpec] = []
    seen: set[str] = set()
    for index, entry in enumerate(entries):
        path = str(entry.get("path") or "")
        where = f"files[{index}] ({path or 'no path'})"
        state = entry.get("state") or "file"
        if not path.startswith("/"):
            raise SpecError(f"{where}: path must be absolute")
        if path in seen:
            raise SpecError(f"{where}: {path} is listed twice")
        seen.add(path)
        if state not in FILE_STATES:
            raise SpecError(f"{where}: state {state!r} is not one of {', '.join(FILE_STATES)}")
        content = entry.get("content")
        if state == "file" and content is None and entry.get("backup"):
            raise SpecError(f"{where}: backup is for a file whose content this call writes")
        if state != "file" and content is not None:
            raise SpecError(f"{where}: content is for state file only, not {state}")
        specs.append(FileSpec(path=os.path.normpath(path), state=state, content=None if content is None else str(content),
                              mode=parse_mode(entry.get("mode"), where), owner=entry.get("owner") or None,
                              group=entry.get("group") or None, backup=bool(entry.get("backup"))))
    return specs


def unit_specs(entries: Sequence[Mapping[str, Any]], files: list[FileSpec]) -> list[UnitSpec]:
    """The `units` option, checked: a name, a known state, and `restart_on` naming files of this call."""
    paths = {f.path for f in files}
    specs: list[UnitSpec] = []
    for index, entry in enumerate(entries):
        name = str(entry.get("name") or "")
        where = f"units[{index}] ({name or 'no name'})"
        if not name or "/" in name:
            raise SpecError(f"{where}: a unit's name, such as nvidia-persistenced.service")
        state = entry.get("state") or None
        if state is not None and state not in UNIT_STATES:
            raise SpecError(f"{where}: state {state!r} is not one of {', '.join(UNIT_STATES)}")
        restart_on = tuple(os.path.normpath(str(p)) for p in entry.get("restart_on") or [])
        unknown = [p for p in restart_on if p not in paths]
        if unknown:
            raise SpecError(f"{where}: restart_on names {', '.join(unknown)}, which this call does not manage")
        if restart_on and state != "started":
            raise SpecError(f"{where}: restart_on needs state started")
        enabled = entry.get("enabled")
        specs.append(UnitSpec(name=name, enabled=None if enabled is None else bool(enabled), state=state, restart_on=restart_on))
    return specs


def _ids(spec: FileSpec) -> tuple[int, int]:
    """The uid and gid the spec asks for (-1: leave as it is)."""
    try:
        uid = pwd.getpwnam(spec.owner).pw_uid if spec.owner else -1
    except KeyError:
        raise SpecError(f"{spec.path}: owner {spec.owner!r} is not a user on this node") from None
    try:
        gid = grp.getgrnam(spec.group).gr_gid if spec.group else -1
    except KeyError:
        raise SpecError(f"{spec.path}: group {spec.group!r} is not a group on this node") from None
    return uid, gid


def _attributes(module: AnsibleModule, spec: FileSpec, tracker: ChangeTracker, *, skip_mode: bool) -> bool:
    """Mode and ownership of an existing path, set where they differ; returns whether any did."""
    try:
        st = os.lstat(spec.path)
    except FileNotFoundError:
        # Only in check mode: the path is not there yet, and would be made with these attributes.
        return False
    uid, gid = _ids(spec)
    changed = False
    if spec.mode is not None and not skip_mode and stat.S_IMODE(st.st_mode) != spec.mode:
        changed |= tracker.add(f"{spec.path} (mode)", f"{stat.S_IMODE(st.st_mode):04o}\n", f"{spec.mode:04o}\n")
        if not module.check_mode:
            os.chmod(spec.path, spec.mode)
    if (uid != -1 and st.st_uid != uid) or (gid != -1 and st.st_gid != gid):
        after = f"{uid if uid != -1 else st.st_uid}:{gid if gid != -1 else st.st_gid}\n"
        changed |= tracker.add(f"{spec.path} (owner)", f"{st.st_uid}:{st.st_gid}\n", after)
        if not module.check_mode:
            os.chown(spec.path, uid, gid)
    return changed


def apply_file(module: AnsibleModule, spec: FileSpec, tracker: ChangeTracker, gone: set[str] | None = None) -> dict[str, Any]:
    """One entry of `files`, done; its result (path, state, changed, backup, present). `gone`: the paths earlier entries of
    this call removed (or would, in check mode), so that a directory they leave empty is seen as empty. A file without
    content is left as it is, but for its mode and ownership, and is not made when missing."""
    result: dict[str, Any] = {"path": spec.path, "state": spec.state, "changed": False, "backup": "",
                              "present": spec.state != "absent"}
    gone = set() if gone is None else gone
    if spec.state == "absent" and os.path.isdir(spec.path) and not os.path.islink(spec.path):
        # A directory goes only when nothing but what this call removed is in it: anything else keeps it.
        left = [name for name in os.listdir(spec.path) if os.path.join(spec.path, name) not in gone]
        if not left:
            result["changed"] = tracker.add(f"{spec.path}/", "(directory)\n", None)
            gone.add(spec.path)
            if not module.check_mode:
                os.rmdir(spec.path)
        return result
    if spec.state == "directory":
        if os.path.lexists(spec.path) and not os.path.isdir(spec.path):
            raise SpecError(f"{spec.path}: wanted a directory, found something else there")
        if not os.path.isdir(spec.path):
            result["changed"] = tracker.add(f"{spec.path}/", None, "(directory)\n")
            if not module.check_mode:
                os.makedirs(spec.path, mode=spec.mode if spec.mode is not None else DIR_MODE)
                # makedirs applies the umask: the mode asked for is set as it is.
                os.chmod(spec.path, spec.mode if spec.mode is not None else DIR_MODE)
        result["changed"] |= _attributes(module, spec, tracker, skip_mode=False)
        return result
    if os.path.isdir(spec.path) and not os.path.islink(spec.path):
        raise SpecError(f"{spec.path}: is a directory; this module writes and removes files only")
    if spec.state == "absent":
        done = remove_file(module, spec.path, backup=spec.backup)
        result.update(changed=tracker.add_file(done), backup=done.backup)
        if done.changed:
            gone.add(spec.path)
        return result
    if spec.content is None:
        result["present"] = os.path.isfile(spec.path)
        result["changed"] = result["present"] and _attributes(module, spec, tracker, skip_mode=False)
        return result
    done = write_text(module, spec.path, spec.content, mode=spec.mode, backup=spec.backup)
    result.update(changed=tracker.add_file(done), backup=done.backup)
    # A file just written has the mode asked for; one left as it was may not.
    result["changed"] |= _attributes(module, spec, tracker, skip_mode=done.changed)
    return result


def needs_daemon_reload(changed_paths: set[str]) -> bool:
    """Whether systemd must read its unit files again: a unit file or drop-in was written or removed."""
    return any(p.startswith(SYSTEMD_DIRS) for p in changed_paths)


def _enabled(run: Runner, systemctl: str, name: str) -> bool:
    rc, out, err = run([systemctl, "is-enabled", name])
    state = out.strip()
    if rc != 0 and state in ("", "not-found") and ("No such file" in err or "not-found" in state or "not found" in err):
        raise SpecError(f"{name}: no such unit on this node")
    return rc == 0 and state not in NOT_ENABLED


def _active(run: Runner, systemctl: str, name: str) -> bool:
    _rc, out, _err = run([systemctl, "is-active", name])
    return out.strip() in RUNNING


def unit_state(run: Runner, systemctl: str | None, name: str) -> dict[str, bool | None]:
    """A unit's state as this module's units option judges it: enabled (None where the node has no such unit) and active,
    so that a caller can leave out a call that would change nothing."""
    if not systemctl:
        return {"enabled": None, "active": False}
    try:
        enabled: bool | None = _enabled(run, systemctl, name)
    except SpecError:
        enabled = None
    return {"enabled": enabled, "active": _active(run, systemctl, name)}


def apply_units(module: AnsibleModule, units: list[UnitSpec], outcome: Outcome, tracker: ChangeTracker, *, image_build: bool,
                run: Runner, systemctl: str) -> None:
    """daemon-reload when needed, then each unit's enablement and state; none started or stopped in an image build.

    Each unit that changes is one diff entry, named by the unit: what was asked of it, before and after.
    """
    if not image_build and needs_daemon_reload(outcome.changed_paths):
        outcome.daemon_reloaded = True
        if not module.check_mode:
            _checked(run, [systemctl, "daemon-reload"])
    for unit in units:
        actions: list[str] = []
        before: list[str] = []
        after: list[str] = []
        if unit.enabled is not None:
            try:
                enabled = _enabled(run, systemctl, unit.name)
            except SpecError:
                # A unit asked to be disabled (and stopped, or left as it is) that is not there at all (its package is
                # gone: a second uninstall) is already what was asked.
                if unit.enabled or unit.state not in (None, "stopped"):
                    raise
                outcome.units.append({"name": unit.name, "actions": []})
                continue
            before.append(f"enabled: {str(enabled).lower()}")
            after.append(f"enabled: {str(unit.enabled).lower()}")
            if enabled != unit.enabled:
                actions.append("enable" if unit.enabled else "disable")
        if unit.state is not None and not image_build:
            active = _active(run, systemctl, unit.name)
            before.append(f"active: {str(active).lower()}")
            after.append(f"active: {str(unit.state != 'stopped').lower()}")
            if unit.state in ("started", "restarted") and not active:
                actions.append("start")
            elif unit.state == "restarted":
                actions.append("restart")
                after.append("restarted: asked")
            elif unit.state == "started" and outcome.changed_paths.intersection(unit.restart_on):
                actions.append("restart")
                after.append("restarted: " + ", ".join(sorted(outcome.changed_paths.intersection(unit.restart_on))) + " changed")
            elif unit.state == "stopped" and active:
                actions.append("stop")
        if actions:
            tracker.add(unit.name, "\n".join(before) + "\n", "\n".join(after) + "\n")
        if not module.check_mode:
            for action in actions:
                _checked(run, [systemctl, action, unit.name])
        outcome.units.append({"name": unit.name, "actions": actions})


def _checked(run: Runner, argv: list[str]) -> None:
    rc, out, err = run(argv)
    if rc != 0:
        raise CommandError(argv, rc, out, err)


class CommandError(RuntimeError):
    def __init__(self, argv: list[str], rc: int, out: str, err: str) -> None:
        super().__init__(f"{' '.join(argv)} failed (rc {rc}): {(err or out).strip()}")
        self.argv, self.rc, self.out, self.err = argv, rc, out, err


def apply(module: AnsibleModule, files: list[FileSpec], units: list[UnitSpec], tracker: ChangeTracker, *, image_build: bool,
          run: Runner, systemctl: str | None) -> Outcome:
    """Everything, in order; raises SpecError or CommandError (the files done before stay done)."""
    outcome = Outcome()
    gone: set[str] = set()
    for spec in files:
        result = apply_file(module, spec, tracker, gone)
        outcome.files.append(result)
        if result["changed"]:
            outcome.changed_paths.add(spec.path)
    if units:
        if systemctl is None:
            raise SpecError("systemctl is not on this node: the units cannot be managed")
        apply_units(module, units, outcome, tracker, image_build=image_build, run=run, systemctl=systemctl)
    return outcome


def module_result(module: AnsibleModule, *, diff: bool, image_build: bool) -> dict[str, Any]:
    """The node_files module's result for the module's `files` and `units`, with its diff where `diff` (the module's
    diff mode) asks for it (the container_runtime check's answer for the toolkit's refresh units is this, run in check
    mode)."""
    tracker = ChangeTracker(diff, always_list=True)
    return tracker.update(ensure(module, tracker, image_build=image_build))


def ensure(module: AnsibleModule, tracker: ChangeTracker, *, image_build: bool, files_entries: Sequence[Mapping[str, Any]] | None = None,
           units_entries: Sequence[Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The files and units given (else the module's `files` and `units` options), node_files' way: what node_files returns
    (changed, files, units, daemon_reloaded, changed_paths). A failure fails the module with what was done (the entries
    before stay done)."""
    result: dict[str, Any] = {"changed": False, "files": [], "units": [], "daemon_reloaded": False, "changed_paths": []}
    try:
        files = file_specs(module.params["files"] if files_entries is None else files_entries)
        units = unit_specs(module.params["units"] if units_entries is None else units_entries, files)
    except SpecError as exc:
        module.fail_json(msg=str(exc), **result)
    systemctl = module.get_bin_path("systemctl") if units else None

    def run(argv: list[str]) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update=SYSTEMCTL_ENV)

    outcome = Outcome()
    try:
        outcome = apply(module, files, units, tracker, image_build=image_build, run=run, systemctl=systemctl)
    except CommandError as exc:
        module.fail_json(msg=str(exc), rc=exc.rc, stdout=exc.out, stderr=exc.err, cmd=exc.argv, **result)
    except (SpecError, OSError) as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(changed=outcome.changed, files=outcome.files, units=outcome.units, daemon_reloaded=outcome.daemon_reloaded,
                  changed_paths=[f["path"] for f in outcome.files if f["changed"]])
    return result
