# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """node_files' options, which a module that also puts a role's plain files and units in place in its own run takes as
    they are (cdi_spec, container_runtime). Their argument spec is ARGUMENT_SPEC in module_utils/node/node_files.py."""

    DOCUMENTATION = r"""
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
            are set) and a missing file is not made; C(present) in the entry's result says whether it is there, so that a role can
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
"""

    IMAGE_BUILD = r"""
options:
  image_build:
    description:
      - C(auto) detects an image build (a chroot, no systemd running); C(true)/C(false) force it. In an image build units
        are enabled or disabled but never started, stopped or reloaded.
    type: str
    choices: ["auto", "true", "false"]
    default: auto
"""
