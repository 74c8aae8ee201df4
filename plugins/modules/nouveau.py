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

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text, remove_file, write_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nouveau as nv
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import IMAGE_BUILD_ARG, image_build_setting

_C_ENV = {"LC_ALL": "C", "LANG": "C"}


def _read_info(path: str) -> str | None:
    """A file read only to learn something (another package's modprobe file, /proc/modules): one that
    cannot be read counts as absent. The managed file itself is read with read_text: an error there fails."""
    try:
        return read_text(path, errors="replace")
    except OSError:
        return None


def _mtime(path: str) -> float:
    return os.stat(path).st_mtime


def _initramfs_tool(module: AnsibleModule) -> tuple[str | None, str | None]:
    for tool in ("update-initramfs", "dracut"):
        path = module.get_bin_path(tool, opt_dirs=["/usr/sbin", "/sbin"])
        if path:
            return tool, path
    return None, None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "directory": {"type": "path", "default": "/etc/modprobe.d"},
            "initramfs": {"type": "bool", "default": True},
            "unload": {"type": "bool", "default": True},
            "root": {"type": "path", "default": "/"},
            "sysroot": {"type": "path", "default": "/"},
            "image_build": IMAGE_BUILD_ARG,
            "backup": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    ours = os.path.join(p["sysroot"], p["directory"].lstrip("/"), nv.FILE_NAME)
    result: dict = {"path": ours, "blacklisted_by": [], "loaded": False, "unloaded": False,
                    "reboot_required": False, "reboot_reason": ""}
    tracker = ChangeTracker(module._diff)
    try:
        current = read_text(ours, errors="replace")
        others = nv.blacklisted_by(nv.effective_conf_files(p["sysroot"]), ours, _read_info)
        # Written unless somebody else already blacklists nouveau; kept once it is ours.
        wanted_here = current is not None or not others
        want = nv.CONTENT if p["state"] == "present" and wanted_here else None
        # A new file is 0644; an existing one keeps its mode.
        done = write_text(module, ours, want, backup=p["backup"]) if want is not None else remove_file(module, ours, backup=p["backup"])
    except OSError as exc:
        module.fail_json(msg=f"the managed file {ours} cannot be read or written: {exc}", **result)
    result["blacklisted_by"] = others
    file_changed = tracker.add_file(done)
    if done.backup:
        result["backup_file"] = done.backup

    tool, tool_path = _initramfs_tool(module)
    images = nv.initramfs_images(p["sysroot"], tool)
    kept = want is not None and not file_changed
    stale = nv.stale_images(images, _mtime(ours) if kept else None, _mtime)
    rebuild = p["initramfs"] and bool(images) and (file_changed or bool(stale))
    result["initramfs"] = {"tool": tool, "images": images, "rebuilt": False}
    if rebuild:
        command = nv.initramfs_command(tool, tool_path)
        if command and not module.check_mode:
            rc, out, err = module.run_command(command, environ_update=_C_ENV)
            if rc != 0:
                module.fail_json(msg=f"{tool} failed: the initramfs may still load nouveau", rc=rc, stdout=out, stderr=err,
                                 cmd=command, **result)
        result["initramfs"]["rebuilt"] = bool(command)

    image_build = image_build_setting(p["image_build"])
    use = nv.module_use(_read_info(os.path.join(p["root"], "proc/modules")) or "")
    result["loaded"] = use is not None
    if p["state"] == "present" and use is not None and not image_build:
        blocker = nv.unload_blocker(use)
        if blocker is None and p["root"] != "/":
            blocker = f"nouveau is loaded as read under {p['root']}, which is not this kernel's /proc"
        if blocker is None and not p["unload"]:
            blocker = "nouveau is loaded and unloading is off"
        if blocker is None:
            if not module.check_mode:
                modprobe = module.get_bin_path("modprobe", required=True, opt_dirs=["/usr/sbin", "/sbin"])
                rc, _out, err = module.run_command([modprobe, "-r", "nouveau"], environ_update=_C_ENV)
                if rc != 0:
                    blocker = f"modprobe -r nouveau failed: {err.strip()}"
            if blocker is None:
                result["unloaded"] = True
        if blocker:
            result.update(reboot_required=True, reboot_reason=blocker + "; it goes at the next boot")
    result["changed"] = file_changed or result["initramfs"]["rebuilt"] or result["unloaded"]
    module.exit_json(**tracker.update(result))


if __name__ == "__main__":
    main()
