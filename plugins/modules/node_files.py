#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: node_files
short_description: Files, directories and systemd units of a node, in one call
version_added: 0.2.0
description:
  - Makes the listed files hold their content (written atomically, mode and owner set), the listed directories
    exist and the paths marked absent go; then, when a unit file or drop-in under a systemd directory changed, one
    C(systemctl daemon-reload); then each listed unit enabled or disabled, and started, restarted or stopped.
  - It is what a role would otherwise do with one C(copy), C(file) or C(systemd_service) task per item, in one SSH round
    trip. The roles of this collection use it for their plain files; their configuration edits keep their own modules.
  - Entries are done in the order given. An entry that cannot be done fails the task, naming the entry; the entries
    before it stay done.
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  files:
    description: The paths to manage, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path.
        type: path
        required: true
      state:
        description:
          - C(file) writes O(files[].content); C(directory) makes the directory (parents too); C(absent) removes a file,
            or a directory left empty (by this call's own removals, in check mode too; anything else in it keeps it).
        type: str
        choices: [file, directory, absent]
        default: file
      content:
        description:
          - The text of the file (state C(file) only).
          - Without it, the file's text is left as it is (only O(files[].mode), O(files[].owner) and O(files[].group)
            are set) and a missing file is not made; C(present) in RV(files) says whether it is there, so that a role can
            make it another way (a key downloaded) only when it is missing.
        type: str
      mode:
        description:
          - Octal mode, such as C("0644"). Without it a new file is 0644 and a new directory 0755, and an existing one
            keeps its mode.
        type: str
      owner:
        description: User owning the path; left as it is when not given (a new one is the connecting user's).
        type: str
      group:
        description: Group owning the path; left as it is when not given.
        type: str
      backup:
        description: Keep a copy of a file before it is replaced or removed, beside it (Ansible's backup name).
        type: bool
        default: false
  units:
    description: The systemd units to manage, after the files.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Unit name, with its suffix.
        type: str
        required: true
      enabled:
        description:
          - Enabled at boot, or not; left as it is when not given.
          - A unit the node does not have fails the call, unless it is asked to be disabled and stopped (or disabled
            only), which is already so.
        type: bool
      state:
        description:
          - C(started) starts the unit when it does not run, and restarts it when a path of O(units[].restart_on)
            changed in this call; C(restarted) restarts it (starts it when it does not run); C(stopped) stops it. Left
            as it is when not given, and always in an image build.
        type: str
        choices: [started, restarted, stopped]
      restart_on:
        description: Paths of O(files) whose change restarts the running unit (needs state C(started)).
        type: list
        elements: path
        default: []
  image_build:
    description:
      - C(auto) detects an image build (a chroot, no systemd running); C(true)/C(false) force it. In an image build units
        are enabled or disabled but never started, stopped or reloaded.
    type: str
    choices: ["auto", "true", "false"]
    default: auto
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - Reports each file, directory and unit change it would make, and makes none.
  diff_mode:
    support: full
    details:
      - Each changed file's text before and after; a mode or owner change as its own entry; a new directory as one.
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Run nvidia-persistenced in persistence mode
  gpuops.nvidia.node_files:
    files:
      - path: /etc/systemd/system/nvidia-persistenced.service.d/gpuops.conf
        content: |
          [Service]
          ExecStart=
          ExecStart=/usr/bin/nvidia-persistenced --user root --persistence-mode
        mode: "0644"
    units:
      - name: nvidia-persistenced.service
        enabled: true
        state: started
        restart_on: [/etc/systemd/system/nvidia-persistenced.service.d/gpuops.conf]
"""

RETURN = r"""
files:
  description:
    - Each entry of O(files), with whether it changed, the backup made (an empty string when none) and whether the path
      is there after the call (C(present); in check mode, as it would be).
  returned: always
  type: list
  elements: dict
  sample: [{"path": "/etc/modprobe.d/gpuops-nvidia.conf", "state": "absent", "changed": false, "backup": "", "present": false}]
units:
  description: Each entry of O(units), with the systemctl actions taken (or that would be, in check mode).
  returned: always
  type: list
  elements: dict
  sample: [{"name": "nvidia-persistenced.service", "actions": ["enable", "restart"]}]
daemon_reloaded:
  description: Whether systemd read its units again (or would, in check mode).
  returned: always
  type: bool
changed_paths:
  description: The paths of O(files) that changed (or would), in order.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files as nf
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import is_image_build


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "state": {"type": "str", "choices": list(nf.FILE_STATES), "default": "file"},
                "content": {"type": "str"},
                "mode": {"type": "str"},
                "owner": {"type": "str"},
                "group": {"type": "str"},
                "backup": {"type": "bool", "default": False},
            }},
            "units": {"type": "list", "elements": "dict", "default": [], "options": {
                "name": {"type": "str", "required": True},
                "enabled": {"type": "bool"},
                "state": {"type": "str", "choices": list(nf.UNIT_STATES)},
                "restart_on": {"type": "list", "elements": "path", "default": []},
            }},
            "image_build": {"type": "str", "choices": ["auto", "true", "false"], "default": "auto"},
        },
        supports_check_mode=True,
    )
    p = module.params
    tracker = ChangeTracker(module._diff, always_list=True)
    result: dict = {"changed": False, "files": [], "units": [], "daemon_reloaded": False, "changed_paths": []}
    try:
        files = nf.file_specs(p["files"])
        units = nf.unit_specs(p["units"], files)
    except nf.SpecError as exc:
        module.fail_json(msg=str(exc), **result)
    image_build = is_image_build() if p["image_build"] == "auto" else p["image_build"] == "true"
    systemctl = module.get_bin_path("systemctl") if units else None

    def run(argv: list[str]) -> tuple[int, str, str]:
        return module.run_command(argv, environ_update=nf.SYSTEMCTL_ENV)

    outcome = nf.Outcome()
    try:
        outcome = nf.apply(module, files, units, tracker, image_build=image_build, run=run, systemctl=systemctl)
    except nf.CommandError as exc:
        module.fail_json(msg=str(exc), rc=exc.rc, stdout=exc.out, stderr=exc.err, cmd=exc.argv, **result)
    except (nf.SpecError, OSError) as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(changed=outcome.changed, files=outcome.files, units=outcome.units, daemon_reloaded=outcome.daemon_reloaded,
                  changed_paths=[f["path"] for f in outcome.files if f["changed"]])
    module.exit_json(**tracker.update(result))


if __name__ == "__main__":
    main()
