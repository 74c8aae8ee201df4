#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: fabric_manager_config
short_description: Set Fabric Manager settings in fabricmanager.cfg, in place
version_added: 0.1.0
description:
  - Changes the line of each setting in O(path) in place, keeping every other line, the comments and the order; a
    setting the file lacks is appended. Settings not named are left as they are.
  - Refuses, before writing, a key C(fabricmanager.cfg) does not have (listing the known ones) and a value the key
    does not take (C(FABRIC_MODE) is 0, 1 or 2).
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  path:
    description: The configuration file, installed by the Fabric Manager package.
    type: path
    default: /usr/share/nvidia/nvswitch/fabricmanager.cfg
  settings:
    description: "Keys and values, as in the file (C({FABRIC_MODE: 0, LOG_LEVEL: 4}))."
    type: dict
    required: true
  backup:
    description: Keep a timestamped copy of the file before changing it.
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - Reports the change it would make; a file not installed yet is reported as a change in check mode (the package
        install before it did not run) and is an error otherwise.
  diff_mode:
    support: full
    details:
      - The file's text before and after.
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Run Fabric Manager for shared NVSwitch multitenancy
  gpuops.nvidia.fabric_manager_config:
    settings:
      FABRIC_MODE: 1
"""

RETURN = r"""
path:
  description: The file.
  returned: always
  type: str
settings:
  description: The settings as written.
  returned: success
  type: dict
backup_file:
  description: The copy made before the change, with O(backup).
  returned: changed and backup
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text, write_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.driver import PlanError
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.fabric_manager import check_config, edit_config


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": "/usr/share/nvidia/nvswitch/fabricmanager.cfg"},
            "settings": {"type": "dict", "required": True},
            "backup": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    result: dict = {"path": path}
    try:
        settings = check_config(module.params["settings"])
    except PlanError as exc:
        module.fail_json(msg=str(exc), variable=exc.variable, **result)
    result["settings"] = settings
    tracker = ChangeTracker(module._diff)
    try:
        current = read_text(path, errors="replace")
        if current is None:
            if module.check_mode:
                tracker.add(path, None, f"the package's file with {settings}")
                module.exit_json(changed=tracker.changed, **tracker.update(result))
            module.fail_json(msg=f"{path} does not exist: the Fabric Manager package installs it", **result)
        done = write_text(module, path, edit_config(current or "", settings), backup=module.params["backup"])
    except OSError as exc:
        module.fail_json(msg=f"{path} cannot be read or written: {exc}", **result)
    tracker.add_file(done)
    if done.backup:
        result["backup_file"] = done.backup
    module.exit_json(changed=tracker.changed, **tracker.update(result))


if __name__ == "__main__":
    main()
