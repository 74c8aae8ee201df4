"""_common/files.py: one reader with one meaning of missing, one atomic writer and remover with mode and backup."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.gpuops.nvidia.plugins.module_utils._common import files
from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import (
    FileResult,
    NotTextError,
    read_text,
    remove_file,
    write_text,
)

# Ansible's own backups: <path>.<pid>.<date>@<time>~
LOCAL_BACKUP = r"\.\d+\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~$"


def make_module(check: bool = False) -> AnsibleModule:
    with patch_module_args({"_ansible_check_mode": check}):
        return AnsibleModule(argument_spec={}, supports_check_mode=True)


def mode_of(path: Path) -> int:
    return path.stat().st_mode & 0o7777


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# ---------------------------------------------------------------------------------------------- read_text


def test_read_text_returns_the_content(tmp_path):
    (tmp_path / "f").write_text("a = 1\n")
    assert read_text(str(tmp_path / "f")) == "a = 1\n"


def test_an_empty_file_is_not_a_missing_one(tmp_path):
    (tmp_path / "f").write_text("")
    assert read_text(str(tmp_path / "f")) == ""
    assert read_text(str(tmp_path / "absent")) is None


def test_a_dangling_link_is_missing(tmp_path):
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    assert read_text(str(tmp_path / "link")) is None


def test_a_file_that_cannot_be_read_raises_instead_of_reading_as_missing(tmp_path):
    (tmp_path / "dir.conf").mkdir()
    with pytest.raises(IsADirectoryError):
        read_text(str(tmp_path / "dir.conf"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        read_text(str(tmp_path / "file" / "below"))


def test_content_that_is_not_utf8_raises_naming_the_file_unless_replaced(tmp_path):
    (tmp_path / "bin").write_bytes(b"vendor \xff\xfe\n")
    with pytest.raises(NotTextError, match=re.escape(str(tmp_path / "bin")) + " is not UTF-8 text"):
        read_text(str(tmp_path / "bin"))
    assert read_text(str(tmp_path / "bin"), errors="replace") == "vendor \ufffd\ufffd\n"


# ---------------------------------------------------------------------------------------------- write_text


def test_a_new_file_gets_the_default_mode_and_its_directories(tmp_path):
    path = tmp_path / "etc/modprobe.d/x.conf"
    res = write_text(make_module(), str(path), "blacklist nouveau\n")
    assert path.read_text() == "blacklist nouveau\n" and mode_of(path) == 0o644
    assert mode_of(path.parent) == 0o755 & ~_umask()
    assert res == FileResult(path=str(path), before=None, after="blacklist nouveau\n", backup="", mode=0o644)
    assert res.changed and res.created and not res.removed and not res.existed


def test_a_new_file_with_another_default_mode(tmp_path):
    path = tmp_path / "x"
    write_text(make_module(), str(path), "x\n", default_mode=0o640)
    assert mode_of(path) == 0o640


def test_an_existing_file_keeps_its_mode(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    path.chmod(0o600)
    res = write_text(make_module(), str(path), "new\n")
    assert path.read_text() == "new\n" and mode_of(path) == 0o600 and res.mode == 0o600
    assert res.before == "old\n" and res.after == "new\n" and res.changed and not res.created


def test_a_given_mode_wins_over_the_existing_one(tmp_path):
    path = tmp_path / "nvidia.yaml"
    path.write_text("old\n")
    path.chmod(0o600)
    res = write_text(make_module(), str(path), "new\n", mode=0o644)
    assert mode_of(path) == 0o644 and res.mode == 0o644


def test_a_new_file_takes_the_mode_of_mode_from(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text("secret\n")
    main.chmod(0o600)
    drop = tmp_path / "conf.d/99-nvidia.toml"
    write_text(make_module(), str(drop), "x\n", mode_from=str(main))
    assert mode_of(drop) == 0o600
    # mode_from that does not exist: the default.
    other = tmp_path / "conf.d/98.toml"
    write_text(make_module(), str(other), "x\n", mode_from=str(tmp_path / "absent"))
    assert mode_of(other) == 0o644


def test_an_existing_file_keeps_its_own_mode_not_mode_froms(tmp_path):
    main = tmp_path / "config.toml"
    main.write_text("x\n")
    main.chmod(0o600)
    drop = tmp_path / "drop.toml"
    drop.write_text("old\n")
    drop.chmod(0o640)
    write_text(make_module(), str(drop), "new\n", mode_from=str(main))
    assert mode_of(drop) == 0o640


def test_unchanged_content_is_not_written(tmp_path):
    path = tmp_path / "f"
    path.write_text("same\n")
    path.chmod(0o600)
    os.utime(path, (1, 1))
    res = write_text(make_module(), str(path), "same\n", mode=0o644, backup=True)
    assert not res.changed and res.backup == "" and res.mode is None
    assert path.stat().st_mtime == 1 and mode_of(path) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_check_mode_decides_everything_and_writes_nothing(tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    path.chmod(0o600)
    before = tree(tmp_path)
    res = write_text(make_module(check=True), str(path), "new\n", backup=True, backup_dir=str(tmp_path / "backups"))
    assert res.changed and res.before == "old\n" and res.after == "new\n" and res.mode == 0o600 and res.backup == ""
    assert tree(tmp_path) == before and not (tmp_path / "backups").exists()
    new = tmp_path / "sub/new"
    res = write_text(make_module(check=True), str(new), "x\n")
    assert res.created and res.mode == 0o644 and not (tmp_path / "sub").exists()


def test_backup_beside_the_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    res = write_text(make_module(), str(path), "new\n", backup=True)
    assert re.match(re.escape(str(path)) + LOCAL_BACKUP, res.backup)
    assert Path(res.backup).read_text() == "old\n" and path.read_text() == "new\n"


def test_backup_in_a_backup_directory(tmp_path):
    path = tmp_path / "crio.conf.d/99-nvidia.toml"
    path.parent.mkdir()
    path.write_text("old\n")
    path.chmod(0o600)
    backups = tmp_path / "gpuops-backups"
    res = write_text(make_module(), str(path), "new\n", backup=True, backup_dir=str(backups))
    assert re.match(re.escape(str(backups)) + r"/99-nvidia\.toml\.\d{4}-\d\d-\d\d@\d\d:\d\d:\d\d~$", res.backup)
    assert Path(res.backup).read_text() == "old\n" and mode_of(Path(res.backup)) == 0o600
    assert mode_of(backups) == 0o700 & ~_umask()
    assert sorted(p.name for p in path.parent.iterdir()) == ["99-nvidia.toml"], "nothing is left in the directory"


def test_two_files_of_one_name_keep_two_backups_in_a_backup_directory(tmp_path, monkeypatch):
    monkeypatch.setattr(files.time, "strftime", lambda fmt: "2026-11-21@10:00:00")
    backups = tmp_path / "backups"
    saved = []
    for side in ("containerd", "nvidia-container-runtime"):
        path = tmp_path / side / "config.toml"
        path.parent.mkdir()
        path.write_text(f"{side}\n")
        saved.append(write_text(make_module(), str(path), "new\n", backup=True, backup_dir=str(backups)).backup)
    assert [Path(s).name for s in saved] == ["config.toml.2026-11-21@10:00:00~", "config.toml.2026-11-21@10:00:00.1~"]
    assert [Path(s).read_text() for s in saved] == ["containerd\n", "nvidia-container-runtime\n"]


def test_no_backup_unless_asked_and_none_of_a_new_file(tmp_path):
    path = tmp_path / "f"
    path.write_text("old\n")
    assert write_text(make_module(), str(path), "new\n").backup == ""
    res = write_text(make_module(), str(tmp_path / "g"), "new\n", backup=True)
    assert res.backup == "" and sorted(p.name for p in tmp_path.iterdir()) == ["f", "g"]


def test_the_temporary_file_goes_where_asked_and_is_not_left(tmp_path, monkeypatch):
    spec_dir, work = tmp_path / "cdi", tmp_path / "work"
    spec_dir.mkdir()
    work.mkdir()
    module = make_module()
    moved = []
    real_move = module.atomic_move

    def atomic_move(src: str, dest: str, **kw: object) -> None:
        moved.append(os.path.dirname(src))
        real_move(src, dest, **kw)

    monkeypatch.setattr(module, "atomic_move", atomic_move)
    write_text(module, str(spec_dir / "nvidia.yaml"), "x\n", temp_dir=str(work))
    write_text(module, str(spec_dir / "other.yaml"), "y\n")
    assert moved == [str(work), str(spec_dir)]
    assert list(work.iterdir()) == [] and sorted(p.name for p in spec_dir.iterdir()) == ["nvidia.yaml", "other.yaml"]


def test_a_failed_move_leaves_no_temporary_file(tmp_path, monkeypatch):
    module = make_module()

    def fail(src: str, dest: str, **kw: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(module, "atomic_move", fail)
    (tmp_path / "f").write_text("old\n")
    with pytest.raises(OSError, match="No space left"):
        write_text(module, str(tmp_path / "f"), "new\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"] and (tmp_path / "f").read_text() == "old\n"


def test_a_directory_in_the_way_is_an_error_not_a_new_file(tmp_path):
    (tmp_path / "x.conf").mkdir()
    with pytest.raises(IsADirectoryError):
        write_text(make_module(), str(tmp_path / "x.conf"), "x\n")


def test_the_rollback_entry(tmp_path):
    path = tmp_path / "f"
    new = write_text(make_module(), str(path), "one\n", backup=True)
    assert new.rollback() == {"path": str(path), "backup": "", "existed": False}
    replaced = write_text(make_module(), str(path), "two\n", backup=True)
    assert replaced.rollback() == {"path": str(path), "backup": replaced.backup, "existed": True}
    assert Path(replaced.backup).read_text() == "one\n"


# ---------------------------------------------------------------------------------------------- remove_file


def test_remove_with_a_backup(tmp_path):
    path = tmp_path / "nvidia.yaml"
    path.write_text("spec\n")
    res = remove_file(make_module(), str(path), backup=True)
    assert not path.exists() and Path(res.backup).read_text() == "spec\n"
    assert re.match(re.escape(str(path)) + LOCAL_BACKUP, res.backup)
    assert res.changed and res.removed and res.existed and not res.created and res.before == "spec\n" and res.after is None


def test_remove_with_a_backup_in_a_backup_directory(tmp_path):
    path = tmp_path / "f"
    path.write_text("x\n")
    res = remove_file(make_module(), str(path), backup=True, backup_dir=str(tmp_path / "b"))
    assert not path.exists() and res.backup.startswith(str(tmp_path / "b/f.")) and Path(res.backup).read_text() == "x\n"


def test_remove_without_backup_and_of_a_missing_file(tmp_path):
    path = tmp_path / "f"
    path.write_text("x\n")
    res = remove_file(make_module(), str(path))
    assert res.changed and res.backup == "" and list(tmp_path.iterdir()) == []
    again = remove_file(make_module(), str(path), backup=True)
    assert not again.changed and again == FileResult(path=str(path), before=None, after=None)


def test_remove_in_check_mode_removes_nothing(tmp_path):
    path = tmp_path / "f"
    path.write_text("x\n")
    res = remove_file(make_module(check=True), str(path), backup=True)
    assert res.changed and res.removed and res.backup == "" and sorted(p.name for p in tmp_path.iterdir()) == ["f"]


def test_a_directory_is_not_removed(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(IsADirectoryError):
        remove_file(make_module(), str(tmp_path / "d"))
    assert (tmp_path / "d").is_dir()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
