# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Keeping nouveau off the NVIDIA GPUs: the blacklist file, who else blacklists it, whether it can go now.

Pure functions over file contents and paths; the nouveau module does the writing and the commands.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

FILE_NAME = "gpuops-blacklist-nouveau.conf"
CONTENT = (
    "# Managed by the gpuops.nvidia nouveau module: the NVIDIA driver needs nouveau off the GPUs.\n"
    "blacklist nouveau\n"
    "options nouveau modeset=0\n"
)
# kmod's configuration directories, in precedence order: a file name in an earlier directory hides
# the same name in the later ones (modprobe.d(5)).
MODPROBE_DIRS = ("etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "usr/lib/modprobe.d", "lib/modprobe.d")
_BLACKLIST = re.compile(r"^\s*blacklist\s+nouveau\s*$", re.M)
_INSTALL_FALSE = re.compile(r"^\s*install\s+nouveau\s+/bin/(false|true)\s*$", re.M)


def effective_conf_files(root: str) -> dict[str, str]:
    """name -> path of every modprobe .conf file kmod reads, after same-name hiding."""
    seen: dict[str, str] = {}
    for directory in MODPROBE_DIRS:
        base = os.path.join(root, directory)
        try:
            names = sorted(os.listdir(base))
        except OSError:
            continue
        real = os.path.realpath(base)
        for name in names:
            path = os.path.join(base, name)
            # /lib is a link to /usr/lib on merged-/usr systems: the same directory, not another one.
            if name.endswith(".conf") and name not in seen and os.path.isfile(path):
                seen[name] = os.path.join(real, name) if directory.startswith("lib") else path
    return seen


def blacklisted_by(files: dict[str, str], ours: str, read: Callable[[str], str | None]) -> list[str]:
    """Paths of the files, other than ours, that keep nouveau from loading."""
    found = []
    for path in sorted(set(files.values())):
        if os.path.basename(path) == os.path.basename(ours):
            continue
        text = read(path) or ""
        if _BLACKLIST.search(text) or _INSTALL_FALSE.search(text):
            found.append(path)
    return found


def module_use(proc_modules: str, name: str = "nouveau") -> dict | None:
    """The module's line in /proc/modules: use count and the modules using it; None when not loaded."""
    for line in proc_modules.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[0] == name:
            users = [u for u in fields[3].rstrip(",").split(",") if u and u != "-"]
            return {"refcnt": int(fields[2]) if fields[2].isdigit() else None, "used_by": users}
    return None


def unload_blocker(use: dict | None) -> str | None:
    """Why the loaded module cannot be removed now, None when it can (or is not loaded)."""
    if use is None:
        return None
    if use["used_by"]:
        return f"nouveau is used by {', '.join(use['used_by'])}"
    if use["refcnt"]:
        return f"nouveau is in use (use count {use['refcnt']}: a console or a display server holds it)"
    return None


def initramfs_images(root: str, tool: str | None) -> list[str]:
    """The initramfs images on the system, which a blacklist must be copied into."""
    boot = os.path.join(root, "boot")
    try:
        names = os.listdir(boot)
    except OSError:
        return []
    prefix = "initramfs-" if tool == "dracut" else "initrd.img-"
    return sorted(os.path.join(boot, n) for n in names if n.startswith(prefix) and not os.path.islink(os.path.join(boot, n)))


def stale_images(images: list[str], conf_mtime: float | None, mtime: Callable[[str], float]) -> list[str]:
    """Images older than the blacklist file: they were made without it (an interrupted earlier run)."""
    if conf_mtime is None:
        return []
    return [i for i in images if mtime(i) < conf_mtime]


def initramfs_command(tool: str | None, path: str | None) -> list[str] | None:
    """The distribution's tool to rebuild every initramfs; None when there is none."""
    if not path:
        return None
    if tool == "update-initramfs":
        return [path, "-u", "-k", "all"]
    return [path, "--force", "--regenerate-all"]
