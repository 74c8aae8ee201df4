#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: container_runtime
short_description: Add the nvidia runtime and CDI to containerd or CRI-O without touching anything else
version_added: 0.1.0
description:
  - "containerd: reads the existing config (or C(containerd config default) when it has no runtime to copy
    from), the config version it is in and the one the installed containerd expects (1.6/1.7: version 2 with
    the CRI plugin C(io.containerd.grpc.v1.cri); 2.0 to 2.2: version 3 with C(io.containerd.cri.v1.runtime);
    2.3 and later: version 4, the same CRI plugin ids), and adds
    the runtime with C(runtime_type = io.containerd.runc.v2), C(options.BinaryName) the toolkit's runtime, and
    the options of the existing default runtime (so C(SystemdCgroup) survives)."
  - Either edits C(config.toml) in place, keeping every other key, comment and the order (tomlkit; the result
    is parsed again and must equal the old content plus our keys), or writes a drop-in under C(conf.d/) and
    adds it to C(imports) in C(config.toml). For containerd before 2.1 the drop-in carries a copy of the main
    file's CRI section, because those versions let an imported section replace the main file's.
  - Enables CDI (C(enable_cdi), optional C(cdi_spec_dirs)) where containerd supports it (1.7 and later).
  - "CRI-O: a drop-in in C(crio.conf.d/) with C([crio.runtime.runtimes.<name>]) (C(runtime_path),
    C(runtime_type = oci), the default runtime's other keys), optionally the default runtime; CDI is native."
  - The toolkit's C(/etc/nvidia-container-runtime/config.toml) (its C(mode) and any other key), in place.
  - Refuses, before writing anything, what cannot work - a runtime that is not installed, CDI on containerd older
    than 1.7, a runtime name that cannot be a RuntimeClass handler, a config version the installed containerd does
    not read, a file that does not parse (with its line), a runtime of the same name that is not runc-based (gVisor,
    Kata), a result whose default runtime would not be defined.
  - An edit in place is proven before it is written - the new text must parse to the old content plus exactly the
    wanted keys; where tomlkit cannot make it (tables out of order), the keys are put in line by line and proven the
    same way, else the file is refused, naming the drop-in alternative.
  - Atomic writes, a backup of each replaced file, diff and check mode. Does not restart the runtime; it
    returns RV(restart_required) and RV(rollback) for the handler that does.
  - A change the runtime has not read yet is remembered on the node (O(restart_marker), under C(/run), so a reboot
    forgets it with the runtime's old state). When a run ends before its restart (killed, or failed in a later
    task), the next run reports the restart as still required (RV(restart_pending)), unless the runtime was
    restarted since.
requirements:
  - tomlkit (python3-tomlkit) on the managed node
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  runtime:
    description: The container runtime to configure; C(auto) picks the one installed (containerd or CRI-O).
    type: str
    choices: [auto, containerd, crio]
    default: auto
  config:
    description:
      - The runtime's main config file.
      - Defaults to C(/etc/containerd/config.toml) for containerd and C(/etc/crio/crio.conf) for CRI-O.
    type: path
  drop_in:
    description:
      - The drop-in file to write; an empty string edits the containerd config in place (CRI-O always uses a
        drop-in).
      - Defaults to C(/etc/containerd/conf.d/99-nvidia.toml) and C(/etc/crio/crio.conf.d/99-nvidia.toml).
    type: str
  runtime_name:
    description: Name of the runtime, the handler a RuntimeClass refers to.
    type: str
    default: nvidia
  runtime_path:
    description: The NVIDIA Container Runtime executable.
    type: path
    default: /usr/bin/nvidia-container-runtime
  set_as_default:
    description:
      - C(keep) leaves the default runtime as it is (nodes whose images make C(nvidia) the default keep it);
        C(true) makes this runtime the default; C(false) takes the default from it when it has it, back to
        containerd's own (C(runc)), which is then defined too.
      - Whatever the choice, the CRI plugin's default runtime is defined in the result (containerd refuses to
        start the CRI plugin otherwise); a default that cannot be defined is refused before anything is written.
      - Booleans are accepted for C(true) and C(false).
    type: raw
    default: keep
  cdi:
    description:
      - C(auto) enables CDI where the runtime supports it; C(enable) requires it (refused on containerd before 1.7);
        C(skip) leaves the CDI settings as they are.
    type: str
    choices: [auto, enable, skip]
    default: auto
  cdi_spec_dirs:
    description: CDI spec directories to set; omitted, the runtime's default (C(/etc/cdi), C(/var/run/cdi)) applies.
    type: list
    elements: path
  runtime_config:
    description:
      - More keys of the runtime's table, merged over what is copied from the default runtime (containerd
        examples - C(privileged_without_host_devices), C(container_annotations), C(options) sub-keys).
    type: dict
    default: {}
  containerd_version:
    description: The containerd version, when C(containerd --version) cannot be run (an image being built elsewhere).
    type: str
  toolkit_config:
    description: The toolkit's config file.
    type: path
    default: /etc/nvidia-container-runtime/config.toml
  toolkit_mode:
    description:
      - C(nvidia-container-runtime.mode) to set, one of C(auto), C(cdi), C(legacy), C(jit-cdi), C(csv); omitted or null, the
        mode is left as it is (NRI mode, O(nri), passes null). Another value is refused before anything is written.
    type: str
  toolkit_settings:
    description: Other keys of the toolkit's config, as dotted keys (C(nvidia-container-cli.root)).
    type: dict
    default: {}
  nri:
    description:
      - NRI mode, where an NRI plugin injects the CDI devices (annotations C(nvidia.cdi.k8s.io/container.<name>)) and no
        RuntimeClass is needed. The runtime's config gets NRI and CDI enabled and nothing else - no nvidia runtime, the
        default runtime left as it is.
      - Refused, before anything is written, on containerd before 1.7.30, on 2.0, on CRI-O before 1.34, and with
        O(cdi=skip).
    type: bool
    default: false
    version_added: 0.2.0
  backup:
    description: Keep a backup of each file replaced.
    type: bool
    default: true
  backup_dir:
    description:
      - Where backups go. By default beside each file, except for CRI-O's drop-in directory, which CRI-O reads
        whole (a backup there would be loaded as configuration, and win) - those go to C(/etc/crio/gpuops-backups).
    type: path
  variables:
    description:
      - The names error messages give the options, as option name to name (a role passes its variables, so
        that a mistake is reported as the variable the user set, not as this module's option).
    type: dict
    default: {}
  validate_only:
    description:
      - Check the options against the node (the runtime installed, its version, the paths) and write nothing; a role
        runs it before it changes anything.
      - Where tomlkit is there (the toolkit installed), also plans the change as a real run would, reads the config
        files for it (a file the runtime cannot read fails here) and says in RV(up_to_date) whether that run would
        change nothing, so that the role can leave it out. Without tomlkit nothing is read and RV(up_to_date) is
        C(null).
      - O(files) and O(units) are still put in place, once the options pass the check (a role's repository source, in the
        same round trip).
    type: bool
    default: false
  packages:
    description:
      - Package names whose installed versions are returned in RV(packages) (dpkg's database, or rpm's), with
        O(validate_only) too; the container_toolkit role leaves out its apt round trip when its packages are all there.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
  state:
    description:
      - C(present) adds the runtime; C(absent) takes out what this module added, for an uninstall.
      - "C(absent), containerd: our drop-in is removed; the main config, when it still holds exactly what this module
        last wrote there, is put back whole (removed when this module created it, else restored from the backup made
        at the first change, when that backup is still the original); when somebody changed it since, each key this
        module set goes back to the value it had before, where it still holds ours, and our entry leaves C(imports) -
        what somebody else changed is left and named in a warning. Without a record (O(record); a change made by an
        older version), only the nvidia runtime table goes, and only when it is not the default runtime."
      - "C(absent), CRI-O: our drop-in is removed."
      - The toolkit's own config is left to its package. The runtime is not restarted; RV(restart_required) and
        RV(rollback) say what the caller's restart needs, as for C(present); the backups of this run go to
        O(backup_dir), by default C(/run/gpuops/uninstall-backups), for the caller to remove once the runtime runs.
    type: str
    choices: [present, absent]
    default: present
    version_added: 0.2.0
  record:
    description:
      - The file where C(present) records what it changed in containerd's main config (the original's digest and
        backup, each key's first value) and C(absent) reads it back; removed by C(absent). An empty string keeps no record.
    type: path
    default: /etc/gpuops-nvidia/container-runtime.json
    version_added: 0.2.0
  cdi_spec:
    description:
      - With O(validate_only), also answer the M(gpuops.nvidia.cdi_spec) module's check with these of its options, in
        this round trip and in check mode, where nothing is to change before it - the settings in place (RV(up_to_date)),
        CDI on, not an image build, every one of O(packages) installed and O(files) and O(units) unchanged. O(files) and
        O(units) among them are taken only where the toolkit has its refresh units (RV(cdi_refresh_unit)). RV(cdi_spec)
        is the answer; the container_toolkit role takes it instead of a module run of its own where it was asked with the
        role's settings and changes nothing.
      - Nothing is changed, whatever it finds. Options that module would refuse, and a spec it would refuse, are not
        answered (C(result) in RV(cdi_spec) is null). The warnings of a check answered are this module's, after
        C(the CDI spec's check:).
      - Answered only where its C(gpu_info) has GPUs (the role makes the spec only then).
    type: dict
    version_added: 0.2.0
  cdi_refresh:
    description:
      - With O(validate_only), the O(files) and O(units) of the toolkit's CDI refresh units, as the container_toolkit role
        keeps them with M(gpuops.nvidia.node_files) where it makes no CDI spec on the node. Where nothing is to change
        before it (as for O(cdi_spec)), the toolkit has its refresh units (RV(cdi_refresh_unit)) and O(cdi_spec) is not
        answered (no CDI in the runtime, as containerd 1.6, no GPUs in its C(gpu_info), or no O(cdi_spec)), answer that
        module's check with them, in this round trip and in check mode (RV(cdi_refresh)).
      - Nothing is changed, whatever it finds. Options that module would refuse are not answered (C(result) in
        RV(cdi_refresh) is null).
    type: dict
    version_added: 0.2.0
  restart_marker:
    description:
      - The file that records a config change the runtime has not been restarted for yet, written before the
        config files (so a run killed in between still leaves it) and removed by the caller once the runtime is
        back. When it is there and the runtime's unit last started before it was last written (its mtime), the
        module reports a change, RV(restart_required) and RV(restart_pending); when the unit started after it, the
        file is stale and removed.
      - By default C(/run/gpuops/<runtime>.restart-pending). An empty string turns it off (for a caller that does
        not restart the runtime). Never written in an image build.
    type: path
  image_build:
    description: C(auto) detects an image build (chroot, no running systemd), returned as RV(image_build) so the
      caller does not restart the runtime there; C(true)/C(false) force it.
    type: str
    choices: ["auto", "true", "false"]
    default: auto
extends_documentation_fragment:
  - gpuops.nvidia.node_files
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - The files are planned and compared as in a real run; nothing is written and no backup is made, so each
        entry of RV(rollback) has an empty C(backup).
  diff_mode:
    support: full
    details:
      - One before and after per file that changes (the runtime's config or drop-in, and the toolkit's config).
  idempotent:
    support: full
    details:
      - A file whose planned content equals what is there is not written, so a second run changes nothing and
        returns RV(restart_required=false).
notes:
  - Supports check mode and diff.
seealso:
  - module: gpuops.nvidia.cdi_spec
"""

EXAMPLES = r"""
- name: Add the nvidia runtime with CDI to the node's runtime, as a drop-in
  gpuops.nvidia.container_runtime:
    toolkit_mode: cdi
  register: runtime

- name: containerd, edited in place, nvidia as the default runtime
  gpuops.nvidia.container_runtime:
    runtime: containerd
    drop_in: ""
    set_as_default: true
"""

RETURN = r"""
node_files:
  description:
    - What O(files) and O(units) did (or would do, in check mode), after the check or the change, as
      M(gpuops.nvidia.node_files) returns it (C(changed), C(files), C(units), C(daemon_reloaded), C(changed_paths)).
  returned: when O(files) or O(units) are given
  type: dict
  sample: {"changed": false, "files": [{"path": "/etc/apt/keyrings", "state": "directory", "changed": false, "backup": "",
           "present": true}], "units": [], "daemon_reloaded": false, "changed_paths": []}
runtime:
  description: The runtime configured; C(none) for O(state=absent) with O(runtime=auto) on a node without containerd or CRI-O (nothing to take out).
  returned: always
  type: str
  sample: containerd
runtime_handler:
  description: The runtime's name, for a RuntimeClass handler.
  returned: always
  type: str
  sample: nvidia
runtime_version:
  description: The containerd version read (empty for CRI-O).
  returned: always
  type: str
  sample: 2.2.1
packages:
  description: The installed version of each package of O(packages), C(null) for one not installed.
  returned: always
  type: dict
  sample: {nvidia-container-toolkit: 1.18.2-1, python3-tomlkit: null}
config_version:
  description: The containerd config version written (0 for CRI-O).
  returned: always
  type: int
  sample: 3
cdi_enabled:
  description: Whether the runtime injects CDI devices after this change.
  returned: always
  type: bool
cdi_supported:
  description: Whether the runtime supports CDI at all.
  returned: always
  type: bool
files:
  description: The files written (or that would be, in check mode).
  returned: always
  type: list
  elements: str
cdi_refresh_unit:
  description: Whether the toolkit's C(nvidia-cdi-refresh.path) unit is installed (toolkit 1.18 and later).
  returned: always
  type: bool
image_build:
  description: Whether this is an image build, where nothing is restarted.
  returned: always
  type: bool
restart_required:
  description: A runtime config file changed, now or in an earlier run that ended before its restart; the runtime
    must restart to read it.
  returned: always
  type: bool
restart_pending:
  description: An earlier run changed the runtime's config and ended before the runtime restarted (O(restart_marker)).
  returned: always
  type: bool
restart_marker:
  description: The marker file in use (empty when off); the caller removes it after the restart.
  returned: always
  type: str
  sample: /run/gpuops/containerd.restart-pending
restored_from:
  description: With O(state=absent), the first backup put back whole over the main config (then removed), or empty.
  returned: with O(state=absent)
  type: str
removed_backups:
  description: With O(state=absent), the backups the module's earlier runs made, removed (or, in check mode, that would be).
  returned: when there were any
  type: list
  elements: str
removed_directories:
  description: With O(state=absent), the directories the module's earlier runs made, removed as nothing was left in them.
  returned: when there were any
  type: list
  elements: str
up_to_date:
  description:
    - With O(validate_only), whether a run with the same options would change nothing (no file to write, no restart
      pending, no restart marker of an earlier run left to remove); C(null) where that cannot be planned (tomlkit
      missing). The RV(cdi_enabled) and RV(config_version) of a planned check are the config's as it is.
  returned: with O(validate_only)
  type: bool
rollback:
  description:
    - For each runtime config file written - its path, its backup (empty when there is none) and whether it existed
      before, for restoring it.
  returned: always
  type: list
  elements: dict
  sample: [{path: /etc/containerd/config.toml, backup: /etc/containerd/config.toml.1234.2026-11-21@10:00:00~, existed: true}]
cdi_spec:
  description:
    - With O(cdi_spec) where nothing is to change before it, the settings it was asked with (C(settings), as given, the
      refresh units' files and units dropped where the toolkit has no such units, without C(gpu_info)) and what
      cdi_spec would return with them in check mode (C(result), null where that module would fail).
  returned: when O(validate_only) and O(cdi_spec) are set and nothing is to change before it
  type: dict
  sample: {settings: {path: /var/run/cdi/nvidia.yaml, files: [], units: []}, result: {changed: false, devices: ["0", all]}}
cdi_refresh:
  description:
    - With O(cdi_refresh) where it is answered, the options it was asked with (C(settings)) and what node_files would
      return with them in check mode (C(result), null where that module would fail).
  returned: when O(validate_only) and O(cdi_refresh) are set, nothing is to change before it, the toolkit has its refresh
    units and O(cdi_spec) is not answered
  type: dict
  sample: {settings: {files: [], units: [{name: nvidia-cdi-refresh.path, enabled: true, state: started}]}, result: {changed: false}}
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import FileResult, NotTextError, read_text, remove_file, write_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files as nf
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.container_runtime_run import (
    ARGUMENT_SPEC,
    MARKER_DIR,
    UNITS,
    begin,
    pending_restart,
    plan_present,
    restart_marker,
    validate,
)


def mark_restart_pending(marker: str, files: list[str]) -> None:
    """Record, atomically, that these runtime files change before the runtime has read them."""
    os.makedirs(os.path.dirname(marker), mode=0o755, exist_ok=True)
    tmp = f"{marker}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"files": sorted(files)}, f)
    os.replace(tmp, marker)


def read_record(path: str) -> dict:
    """The record of the changes made to containerd's main config ({} when there is none)."""
    text = read_text(path)
    data = json.loads(text) if text else {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def keep_record(module: AnsibleModule, path: str, record: dict) -> None:
    if record:
        write_text(module, path, json.dumps(record, indent=1, sort_keys=True) + "\n", mode=0o644)
    elif os.path.exists(path) and not module.check_mode:
        os.unlink(path)


def remove(module: AnsibleModule, runtime: str, config: str, drop_in: str, result: dict) -> None:
    """state=absent: takes out what this module added (see the option), then exits the module."""
    p = module.params
    try:
        record = read_record(p["record"]) if p["record"] else {}
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"record: {p['record']} cannot be read ({exc})", **result)
    try:
        if runtime == "containerd":
            entry = record.get(config)
            backup = str((entry or {}).get("backup") or "")
            plan = cr.plan_containerd_removal(
                main_path=config, main_text=read_text(config), drop_in_path=drop_in,
                drop_in_text=read_text(drop_in) if drop_in else None, entry=entry,
                backup_text=read_text(backup) if backup else None, name=p["runtime_name"], runtime_path=p["runtime_path"])
        else:
            text = read_text(drop_in)
            ours = text is not None and cr.OURS in text.split("\n", 1)[0]
            plan = {"files": {drop_in: None} if ours else {}, "restored_from": "",
                    "warnings": [f"{drop_in} was not written by this module: left as it is"] if text is not None and not ours else []}
    except cr.ConfigError as exc:
        module.fail_json(msg=exc.named(p["variables"]), **result)
    except (NotTextError, OSError) as exc:
        module.fail_json(msg=f"cannot read the runtime's config: {exc}", **result)
    for warning in plan["warnings"]:
        module.warn(warning)
    marker = restart_marker(module, runtime, result["image_build"])
    pending = bool(marker) and pending_restart(module, marker, UNITS[runtime])
    tracker = ChangeTracker(module._diff, always_list=True)
    done: list[FileResult] = []
    path = marker
    try:
        if marker and not module.check_mode and plan["files"]:
            mark_restart_pending(marker, list(plan["files"]))
        for path, text in plan["files"].items():
            # Kept for the caller's rollback only, and removed by it once the runtime runs: outside the runtime's
            # directories, so that what this run empties (a drop-in directory the install made) can go.
            backup_dir = p["backup_dir"] or os.path.join(MARKER_DIR, "uninstall-backups")
            if text is None:
                done.append(remove_file(module, path, backup=p["backup"], backup_dir=backup_dir))
            else:
                done.append(write_text(module, path, text, backup=p["backup"], backup_dir=backup_dir))
            tracker.add_file(done[-1])
        # The backups the installs made (the first change's is the file itself again), but for this run's own, which the
        # caller's rollback needs. In check mode, the ones that would go.
        this_run = {r.backup for r in done}
        for backup in sorted({*record.pop("backups", []), plan["restored_from"]} - this_run - {""}):
            if os.path.isfile(backup):
                result.setdefault("removed_backups", []).append(backup)
                if not module.check_mode:
                    os.unlink(backup)
        if not module.check_mode:
            # The directories the installs made, when nothing is left in them (deepest first).
            for directory in sorted(record.pop("directories", []), key=len, reverse=True):
                if os.path.isdir(directory) and not os.listdir(directory):
                    os.rmdir(directory)
                    result.setdefault("removed_directories", []).append(directory)
            record.pop(config, None)
            if p["record"]:
                keep_record(module, p["record"], record)
    except OSError as exc:
        module.fail_json(msg=f"writing {path} failed: {exc}", files=sorted(plan["files"]),
                         rollback=[r.rollback() for r in done], **result)
    result.update(changed=tracker.changed or pending or bool(result.get("removed_backups") or result.get("removed_directories")),
                  files=sorted(plan["files"]),
                  restart_required=bool(plan["files"]) or pending,
                  restart_pending=pending, restart_marker=marker, rollback=[r.rollback() for r in done], cdi_enabled=False,
                  cdi_supported=False, restored_from=plan["restored_from"])
    tracker.update(result)
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    p = module.params
    if p["state"] == "absent" and (p["files"] or p["units"]):
        module.fail_json(msg="files and units are put in place with state present only")
    if p["validate_only"]:
        module.exit_json(**validate(module))
    result, runtime, config, drop_in, version, _warnings = begin(module)
    # An uninstall needs tomlkit only to edit a file in place (remove says so): a second one runs after the toolkit's
    # packages, tomlkit among them, are gone.
    if p["state"] == "absent":
        remove(module, runtime, config, drop_in, result)
    if not cr.HAS_TOMLKIT:
        module.fail_json(msg=missing_required_lib("tomlkit (python3-tomlkit)"))
    plan, toolkit = plan_present(module, runtime, config, drop_in, version, result)
    for warning in plan["warnings"]:
        module.warn(warning)

    runtime_files = plan["files"]
    all_files = {**runtime_files, **toolkit["files"]}
    tracker = ChangeTracker(module._diff, always_list=True)
    written: list[FileResult] = []
    marker = restart_marker(module, runtime, result["image_build"])
    pending = bool(marker) and pending_restart(module, marker, UNITS[runtime])
    path = marker
    # Directories the writes may make (a drop-in directory containerd does not ship, CRI-O's backup directory), with
    # their missing parents: the ones that exist afterwards are recorded for the uninstall.
    missing_dirs: set[str] = set()
    for target in all_files:
        for directory in (os.path.dirname(target),
                          cr.backup_dir_for(target, runtime=runtime, drop_in=drop_in, backup_dir=p["backup_dir"]) or ""):
            while directory and directory != "/" and not os.path.isdir(directory):
                missing_dirs.add(directory)
                directory = os.path.dirname(directory)
    try:
        # The plan lists only the runtime files whose content changes.
        if marker and not module.check_mode and runtime_files:
            # Before the files: a run killed between the two still leaves the restart to the next run.
            mark_restart_pending(marker, list(runtime_files))
        for path, text in all_files.items():
            written.append(write_text(
                module, path, text, mode_from=config if runtime == "containerd" else None, backup=p["backup"],
                backup_dir=cr.backup_dir_for(path, runtime=runtime, drop_in=drop_in, backup_dir=p["backup_dir"])))
            tracker.add_file(written[-1])
    except OSError as exc:
        module.fail_json(msg=f"writing {path} failed: {exc}", files=sorted(all_files),
                         rollback=[r.rollback() for r in written if r.path in runtime_files], **result)
    main_written = next((r for r in written if r.path == config and r.changed), None)
    backups = [r.backup for r in written if r.backup]
    made_dirs = sorted(d for d in missing_dirs if os.path.isdir(d))
    if p["record"] and not module.check_mode and (backups or made_dirs or (runtime == "containerd" and main_written)):
        try:
            record = read_record(p["record"])
            if runtime == "containerd" and main_written:
                record = cr.recorded(record, main_path=config, before=main_written.before, after=main_written.after or "",
                                     backup=main_written.backup, edits=plan["edits"])
            # Every backup this module makes is its own file: the uninstall removes them.
            record["backups"] = sorted(set(record.get("backups") or []) | set(backups))
            record["directories"] = sorted(set(record.get("directories") or []) | set(made_dirs))
            keep_record(module, p["record"], record)
        except (OSError, ValueError) as exc:
            module.warn(f"could not record the change to {config} in {p['record']} ({exc}): an uninstall will only take out "
                        "the nvidia runtime table")
    result.update(
        changed=tracker.changed or pending, files=sorted(all_files), restart_required=bool(runtime_files) or pending,
        restart_pending=pending, restart_marker=marker,
        rollback=[r.rollback() for r in written if r.path in runtime_files],
        cdi_enabled=plan["cdi_enabled"], cdi_supported=plan["cdi_supported"])
    if p["files"] or p["units"]:
        result["node_files"] = nf.ensure(module, tracker, image_build=result["image_build"])
        result["changed"] = result["changed"] or result["node_files"]["changed"]
    tracker.update(result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
