# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# Private to the gpuops.nvidia collection: its API may change in any release without notice, and other
# collections must not import it.
"""Reading and writing the files a module manages, one way for every module.

- `read_text`: a file's text, None when (and only when) the file does not exist.
- `write_text`: replace a file atomically (a temporary file, then `module.atomic_move`), with the mode kept
  from the file, given, taken from another file or a default, and an optional backup beside it or in a
  backup directory. An unchanged file is not touched; in check mode everything is decided and nothing is
  written.
- `remove_file`: the same for removing a file.

Each returns a `FileResult` (before and after content, backup), which feeds the module's diff (see
`changes.ChangeTracker.add_file`) and the rollback entries a handler restores from.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

DEFAULT_MODE = 0o644
DIR_MODE = 0o755
BACKUP_DIR_MODE = 0o700
TEMP_PREFIX = ".gpuops-"


class NotTextError(ValueError):
    """A file whose content does not decode as text; the message names the file."""


@dataclass
class FileResult:
    """What happened (or would, in check mode) to one file.

    before/after: the content before and after; None when the file does not exist (then or now).
    backup: the backup made of the file replaced or removed, "" when none was made.
    mode: the permission bits the written file got (or would get); None when nothing is written.
    """

    path: str
    before: str | None
    after: str | None
    backup: str = ""
    mode: int | None = None

    @property
    def changed(self) -> bool:
        return self.before != self.after

    @property
    def existed(self) -> bool:
        return self.before is not None

    @property
    def created(self) -> bool:
        return self.before is None and self.after is not None

    @property
    def removed(self) -> bool:
        return self.before is not None and self.after is None

    def rollback(self) -> dict[str, object]:
        """How to undo it: restore `backup` over `path`, or remove `path` when it did not exist."""
        return {"path": self.path, "backup": self.backup, "existed": self.existed}


def read_text(path: str, *, errors: str = "strict") -> str | None:
    """The text of a file (UTF-8); None only when it does not exist.

    Any other OSError (permission, a directory, I/O) is raised. Content that does not decode raises
    NotTextError, unless `errors` says how to decode it anyway (`replace` for sysfs values, or for a file
    that is about to be replaced and only needs to be shown).
    """
    try:
        with open(path, encoding="utf-8", errors=errors) as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except UnicodeDecodeError as exc:
        raise NotTextError(f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def file_mode(path: str | None) -> int | None:
    """The permission bits of a file, None when there is no such file."""
    if not path:
        return None
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        return None


def backup_file(module: AnsibleModule, path: str, backup_dir: str | None = None) -> str:
    """A copy of path; returns the copy's path.

    Without backup_dir the copy is Ansible's own, beside the file (`<path>.<pid>.<date>@<time>~`). With one,
    it is `<backup_dir>/<name>.<date>@<time>~` (the directory made 0700 when missing), with a counter added
    when two files of the same name are saved in the same second.
    """
    if not backup_dir:
        return module.backup_local(path)
    os.makedirs(backup_dir, mode=BACKUP_DIR_MODE, exist_ok=True)
    stem = f"{os.path.basename(path)}.{time.strftime('%Y-%m-%d@%H:%M:%S')}"
    dest = os.path.join(backup_dir, f"{stem}~")
    count = 0
    while os.path.lexists(dest):
        count += 1
        dest = os.path.join(backup_dir, f"{stem}.{count}~")
    shutil.copy2(path, dest)
    return dest


def write_text(module: AnsibleModule, path: str, content: str, *, mode: int | None = None, mode_from: str | None = None,
               default_mode: int = DEFAULT_MODE, backup: bool = False, backup_dir: str | None = None,
               temp_dir: str | None = None) -> FileResult:
    """Make `path` hold `content`, atomically.

    The mode is `mode` when given; else the existing file's; else that of `mode_from` when it exists (a
    drop-in that may carry the main file's secrets); else `default_mode`. It is set when the file is
    written; an unchanged file is left as it is. With `backup`, a file that is replaced is copied first
    (see `backup_file`). The temporary file goes in the destination directory, or in `temp_dir` (same file
    system) where something watches the destination directory. Missing directories are made 0755. In check
    mode nothing is written.
    """
    before = read_text(path, errors="replace")
    result = FileResult(path=path, before=before, after=content)
    if not result.changed:
        return result
    result.mode = mode if mode is not None else file_mode(path if before is not None else mode_from)
    if result.mode is None:
        result.mode = default_mode
    if module.check_mode:
        return result
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=DIR_MODE, exist_ok=True)
    if backup and before is not None:
        result.backup = backup_file(module, path, backup_dir)
    fd, tmp = tempfile.mkstemp(dir=temp_dir or directory, prefix=TEMP_PREFIX)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.chmod(tmp, result.mode)
        module.atomic_move(tmp, path, unsafe_writes=False)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    # atomic_move gives a new file the umask's mode and a replaced one the old file's: set ours.
    os.chmod(path, result.mode)
    return result


def remove_file(module: AnsibleModule, path: str, *, backup: bool = False, backup_dir: str | None = None) -> FileResult:
    """Remove `path` when it exists, after a backup when asked; in check mode nothing is removed."""
    before = read_text(path, errors="replace")
    result = FileResult(path=path, before=before, after=None)
    if before is None or module.check_mode:
        return result
    if backup:
        result.backup = backup_file(module, path, backup_dir)
    os.unlink(path)
    return result
