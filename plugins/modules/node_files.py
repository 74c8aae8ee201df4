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
extends_documentation_fragment:
  - gpuops.nvidia.node_files
  - gpuops.nvidia.node_files.image_build
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
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import node_files as nf
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import IMAGE_BUILD_ARG, image_build_setting


def main() -> None:
    module = AnsibleModule(argument_spec={**nf.ARGUMENT_SPEC, "image_build": IMAGE_BUILD_ARG}, supports_check_mode=True)
    module.exit_json(**nf.module_result(module, diff=module._diff, image_build=image_build_setting(module.params["image_build"])))


if __name__ == "__main__":
    main()
