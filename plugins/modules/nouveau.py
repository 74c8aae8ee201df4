#!/usr/bin/python
# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nouveau
short_description: Keep the nouveau driver off the NVIDIA GPUs
version_added: 0.1.0
description:
  - Writes one managed modprobe file, C(blacklist nouveau) and C(options nouveau modeset=0), atomically, with diff
    and check mode.
  - Does not write it when another modprobe file already blacklists nouveau (the RHEL packages of the driver
    ship their own); keeps managing it once written.
  - Rebuilds every initramfs with the distribution's tool (C(update-initramfs) or C(dracut)) when the file
    changed, or when an initramfs is older than the file (a run interrupted before the rebuild).
  - Unloads nouveau when it is loaded and nothing holds it; otherwise returns RV(reboot_required) with the reason.
    In an image build (chroot, no running systemd) nothing is unloaded and no reboot is asked for.
author:
  - gpuops.nvidia maintainers (@gpuops)
options:
  state:
    description: C(present) blacklists nouveau; C(absent) removes the managed file (files of others are left alone).
    type: str
    choices: [present, absent]
    default: present
  directory:
    description: Directory of the managed file.
    type: path
    default: /etc/modprobe.d
  initramfs:
    description: Rebuild the initramfs images when needed.
    type: bool
    default: true
  unload:
    description: Unload nouveau when it is loaded and nothing holds it.
    type: bool
    default: true
  root:
    description:
      - Directory under which C(proc/modules) is read; C(/) on a server.
      - With another root the loaded modules are a simulated or foreign view, so nothing is unloaded.
    type: path
    default: /
  sysroot:
    description: Root of the file system whose C(modprobe.d) directories and C(/boot) are read; C(/) but for tests.
    type: path
    default: /
  image_build:
    description: C(auto) detects an image build; C(true)/C(false) force it.
    type: str
    choices: ["auto", "true", "false"]
    default: auto
  backup:
    description:
      - Keep a copy of the managed file before it is replaced or removed, beside it, named
        C(<file>.<pid>.<date>@<time>~) (kmod reads only C(.conf) files, so the copy is not read as configuration).
    type: bool
    default: false
extends_documentation_fragment:
  - gpuops.nvidia.attributes
  - gpuops.nvidia.attributes.actiongroup_node
attributes:
  check_mode:
    support: full
    details:
      - Reports the file change, the initramfs rebuild and the unload it would make, and makes none of them; a
        C(modprobe -r) that would fail (a holder appearing in between) cannot be foreseen.
  diff_mode:
    support: full
    details:
      - The managed modprobe file's text before and after.
  idempotent:
    support: full
    details:
      - Once the file is written, the initramfs images are newer than it and nouveau is unloaded, a second run
        changes nothing; a nouveau that cannot be unloaded is reported again in RV(reboot_required), not as a change.
"""

EXAMPLES = r"""
- name: Blacklist nouveau, rebuild the initramfs, unload it if possible
  gpuops.nvidia.nouveau:
  register: nouveau

- name: Reboot when it could not be unloaded
  ansible.builtin.reboot:
  when: nouveau.reboot_required
"""

RETURN = r"""
path:
  description: The managed file.
  returned: always
  type: str
  sample: /etc/modprobe.d/gpuops-blacklist-nouveau.conf
blacklisted_by:
  description: Other modprobe files that blacklist nouveau.
  returned: always
  type: list
  elements: str
initramfs:
  description: The tool, the images, and whether they were rebuilt (or would be, in check mode).
  returned: always
  type: dict
  sample: {tool: update-initramfs, images: [/boot/initrd.img-6.8.0-151-generic], rebuilt: true}
loaded:
  description: Whether nouveau was loaded when the module ran.
  returned: always
  type: bool
unloaded:
  description: Whether the module unloaded it (or would, in check mode).
  returned: always
  type: bool
reboot_required:
  description: Whether nouveau stays loaded until a reboot.
  returned: always
  type: bool
reboot_reason:
  description: Why.
  returned: always
  type: str
backup_file:
  description: The copy of the managed file made before it was replaced or removed.
  returned: when O(backup=true) and the file was replaced or removed
  type: str
  sample: /etc/modprobe.d/gpuops-blacklist-nouveau.conf.2041.2026-11-21@10:00:00~
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.nouveau_run import ARGUMENT_SPEC, NouveauError, run


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run(module, module.params, module._diff)
    except NouveauError as exc:
        module.fail_json(msg=exc.msg, **exc.result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
