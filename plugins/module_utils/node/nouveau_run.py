# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nouveau module's work: the blacklist file, the initramfs, the unload; in check mode what it would do.

Shared by the nouveau module and by gpu_info, which answers the nouveau role's check in its own round trip
(module_utils/node/answers.py).
"""

from __future__ import annotations

import os
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.changes import ChangeTracker
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text, remove_file, write_text
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nouveau as nv
from ansible_collections.gpuops.nvidia.plugins.module_utils.node.hardware import IMAGE_BUILD_ARG, image_build_setting

_C_ENV = {"LC_ALL": "C", "LANG": "C"}

ARGUMENT_SPEC: dict[str, dict[str, Any]] = {
    "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
    "directory": {"type": "path", "default": "/etc/modprobe.d"},
    "initramfs": {"type": "bool", "default": True},
    "unload": {"type": "bool", "default": True},
    "root": {"type": "path", "default": "/"},
    "sysroot": {"type": "path", "default": "/"},
    "image_build": IMAGE_BUILD_ARG,
    "backup": {"type": "bool", "default": False},
}


class NouveauError(Exception):
    """What failed, with the result so far (the module fails with both)."""

    def __init__(self, msg: str, result: dict[str, Any]) -> None:
        super().__init__(msg)
        self.msg = msg
        self.result = result


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


def run(module: Any, p: dict[str, Any], diff: bool) -> dict[str, Any]:
    """Do what the options ask (nothing where `module.check_mode`); the module's result, with `changed` and any diff.

    `p` holds every option of ARGUMENT_SPEC. Raises NouveauError where the module fails."""
    ours = os.path.join(p["sysroot"], p["directory"].lstrip("/"), nv.FILE_NAME)
    result: dict[str, Any] = {"path": ours, "blacklisted_by": [], "loaded": False, "unloaded": False,
                              "reboot_required": False, "reboot_reason": ""}
    tracker = ChangeTracker(diff)
    try:
        current = read_text(ours, errors="replace")
        others = nv.blacklisted_by(nv.effective_conf_files(p["sysroot"]), ours, _read_info)
        # Written unless somebody else already blacklists nouveau; kept once it is ours.
        wanted_here = current is not None or not others
        want = nv.CONTENT if p["state"] == "present" and wanted_here else None
        # A new file is 0644; an existing one keeps its mode.
        done = write_text(module, ours, want, backup=p["backup"]) if want is not None else remove_file(module, ours, backup=p["backup"])
    except OSError as exc:
        raise NouveauError(f"the managed file {ours} cannot be read or written: {exc}", result) from exc
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
                raise NouveauError(f"{tool} failed: the initramfs may still load nouveau",
                                   dict(result, rc=rc, stdout=out, stderr=err, cmd=command))
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
    return tracker.update(result)
