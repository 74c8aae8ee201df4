"""The nouveau module end to end on a file system root in a temporary directory, commands stubbed."""

from __future__ import annotations

import json
import os
import types
from pathlib import Path

import pytest
from ansible.module_utils import basic
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import answers, nouveau_run
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nouveau as nv
from ansible_collections.gpuops.nvidia.plugins.modules import gpu_info, nouveau

from ..harness import call


@pytest.fixture
def host(tmp_path, monkeypatch):
    """A root with a kernel's initramfs and /proc/modules; update-initramfs and modprobe recorded."""
    sysroot = tmp_path / "root"
    (sysroot / "boot").mkdir(parents=True)
    (sysroot / "boot/initrd.img-6.8.0-151-generic").write_text("old")
    os.utime(sysroot / "boot/initrd.img-6.8.0-151-generic", (1, 1))
    proc = tmp_path / "hw"
    (proc / "proc").mkdir(parents=True)
    calls = []

    def run_command(self, argv, **kw):
        calls.append(argv)
        if argv[0].endswith("update-initramfs"):
            (sysroot / "boot/initrd.img-6.8.0-151-generic").write_text("new")
        return 0, "", ""

    monkeypatch.setattr(basic.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(basic.AnsibleModule, "get_bin_path",
                        lambda self, name, required=False, opt_dirs=None: f"/usr/sbin/{name}" if name != "dracut" else None)

    def run(check=False, diff=True, **args):
        params = {"sysroot": str(sysroot), "root": str(proc), "image_build": "false", "_ansible_check_mode": check,
                  "_ansible_diff": diff, **args}
        return call(nouveau.main, params)

    def modules(text):
        (proc / "proc/modules").write_text(text)

    return sysroot, run, calls, modules


def test_check_mode_writes_nothing_and_says_what_would_change(host):
    sysroot, run, calls = host[:3]
    res = run(check=True)
    assert res["changed"] and res["initramfs"]["rebuilt"]
    assert res["diff"]["after"] == nv.CONTENT and res["diff"]["before"] == ""
    assert not (sysroot / "etc/modprobe.d" / nv.FILE_NAME).exists()
    assert calls == []


def test_writes_rebuilds_once_then_changes_nothing(host):
    sysroot, run, calls = host[:3]
    first = run()
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    assert first["changed"] and path.read_text() == nv.CONTENT
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert calls == [["/usr/sbin/update-initramfs", "-u", "-k", "all"]]
    second = run()
    assert not second["changed"] and "diff" not in second
    assert len(calls) == 1


def test_an_initramfs_older_than_the_file_is_rebuilt(host):
    sysroot, run, calls = host[:3]
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text(nv.CONTENT)  # an earlier run stopped before the rebuild
    res = run()
    assert res["changed"] and res["initramfs"]["rebuilt"] and "diff" not in res
    assert calls == [["/usr/sbin/update-initramfs", "-u", "-k", "all"]]


def test_another_blacklist_is_not_fought(host):
    sysroot, run, calls = host[:3]
    (sysroot / "usr/lib/modprobe.d").mkdir(parents=True)
    (sysroot / "usr/lib/modprobe.d/nvidia-graphics-drivers.conf").write_text("blacklist nouveau\n")
    res = run()
    assert not res["changed"] and calls == []
    assert res["blacklisted_by"] == [str(sysroot / "usr/lib/modprobe.d/nvidia-graphics-drivers.conf")]
    assert not (sysroot / "etc/modprobe.d" / nv.FILE_NAME).exists()


def test_absent_removes_only_ours(host):
    sysroot, run = host[:2]
    run()
    res = run(state="absent")
    assert res["changed"] and res["diff"]["after"] == ""
    assert not (sysroot / "etc/modprobe.d" / nv.FILE_NAME).exists()


def test_a_held_nouveau_asks_for_a_reboot_and_is_not_touched(host):
    _sysroot, run, calls, modules = host
    modules("nouveau 3096576 2 - Live 0x0000000000000000\n")
    res = run()
    assert res["loaded"] and res["reboot_required"] and not res["unloaded"]
    assert "use count 2" in res["reboot_reason"]
    assert not any("modprobe" in c[0] for c in calls)


def test_nouveau_read_from_another_root_is_not_unloaded(host):
    _sysroot, run, calls, modules = host
    modules("nouveau 3096576 0 - Live 0x0000000000000000\n")
    res = run()
    assert res["reboot_required"] and "not this kernel's /proc" in res["reboot_reason"]
    assert not any(c[0].endswith("modprobe") for c in calls)


def test_the_module_result_is_json(host):
    run = host[1]
    json.dumps(run())


def test_an_existing_file_keeps_its_mode_and_a_new_one_is_0644(host):
    sysroot, run = host[:2]
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text("blacklist nouveau\n")  # an older version of ours
    path.chmod(0o600)
    res = run()
    assert res["changed"] and path.read_text() == nv.CONTENT and oct(path.stat().st_mode & 0o777) == "0o600"
    path.unlink()
    run()
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_no_diff_without_diff_mode(host):
    sysroot, run = host[:2]
    res = run(diff=False)
    assert res["changed"] and "diff" not in res
    assert (sysroot / "etc/modprobe.d" / nv.FILE_NAME).read_text() == nv.CONTENT
    assert "diff" not in run(diff=False, state="absent")


def test_the_diff_names_the_file(host):
    sysroot, run = host[:2]
    path = str(sysroot / "etc/modprobe.d" / nv.FILE_NAME)
    res = run()
    assert res["diff"] == {"before_header": path, "after_header": path, "before": "", "after": nv.CONTENT}
    res = run(state="absent")
    assert res["diff"] == {"before_header": path, "after_header": path, "before": nv.CONTENT, "after": ""}


def test_backup_of_the_file_replaced_or_removed(host):
    sysroot, run = host[:2]
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text("blacklist nouveau\n")
    res = run(backup=True)
    saved = res["backup_file"]
    assert saved.startswith(str(path) + ".") and saved.endswith("~") and not saved.endswith(".conf")
    assert Path(saved).read_text() == "blacklist nouveau\n" and path.read_text() == nv.CONTENT
    assert "backup_file" not in run(backup=True), "an unchanged file is not copied"
    removed = run(backup=True, state="absent")
    assert not path.exists() and Path(removed["backup_file"]).read_text() == nv.CONTENT


def test_no_backup_unless_asked(host):
    sysroot, run = host[:2]
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text("blacklist nouveau\n")
    res = run()
    assert res["changed"] and "backup_file" not in res
    assert sorted(p.name for p in path.parent.iterdir()) == [nv.FILE_NAME]


def test_check_mode_makes_no_backup(host):
    sysroot, run = host[:2]
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text("blacklist nouveau\n")
    res = run(check=True, backup=True)
    assert res["changed"] and "backup_file" not in res
    assert sorted(p.name for p in path.parent.iterdir()) == [nv.FILE_NAME] and path.read_text() == "blacklist nouveau\n"


def test_a_managed_file_that_cannot_be_read_fails_before_anything_is_done(host):
    sysroot, run, calls = host[:3]
    (sysroot / "etc/modprobe.d" / nv.FILE_NAME).mkdir(parents=True)
    res = run()
    assert res["failed"] and "Is a directory" in res["msg"] and nv.FILE_NAME in res["msg"]
    assert calls == []


def test_another_blacklist_that_is_not_utf8_is_still_found(host):
    # kmod reads bytes: a comment in Latin-1 does not hide the blacklist line from it, nor from us.
    sysroot, run = host[:2]
    (sysroot / "usr/lib/modprobe.d").mkdir(parents=True)
    (sysroot / "usr/lib/modprobe.d/latin1.conf").write_bytes(b"# caf\xe9\nblacklist nouveau\n")
    res = run()
    assert res["blacklisted_by"] == [str(sysroot / "usr/lib/modprobe.d/latin1.conf")] and not res["changed"]


def _check(host_fixture, monkeypatch, **settings):
    """gpu_info's answer to the nouveau role's check (answers.nouveau), with the fixture's roots."""
    sysroot = host_fixture[0]
    module = types.SimpleNamespace(check_mode=False, get_bin_path=basic.AnsibleModule.get_bin_path.__get__(object()),
                                   run_command=basic.AnsibleModule.run_command.__get__(object()))
    monkeypatch.setattr(answers, "NOUVEAU_SETTINGS", (*answers.NOUVEAU_SETTINGS, "sysroot"))
    root = str(sysroot.parent / "hw")
    return answers.nouveau(module, {"sysroot": str(sysroot), "root": root, "image_build": "false", **settings})["result"]


@pytest.mark.parametrize("state", ["fresh", "converged", "stale initramfs", "other blacklist", "loaded", "absent wanted"])
def test_the_reads_check_is_the_modules_check_mode_result_and_changes_nothing(host, state, monkeypatch):
    """What gpu_info returns for the nouveau role stands for the module's run: it must be the same, case by case."""
    sysroot, run, calls, modules = host
    path = sysroot / "etc/modprobe.d" / nv.FILE_NAME
    settings = {"state": "absent"} if state == "absent wanted" else {}
    if state in ("converged", "stale initramfs", "loaded", "absent wanted"):
        run()
    if state == "stale initramfs":
        os.utime(sysroot / "boot/initrd.img-6.8.0-151-generic", (1, 1))
    if state == "other blacklist":
        (sysroot / "usr/lib/modprobe.d").mkdir(parents=True)
        (sysroot / "usr/lib/modprobe.d/nvidia-graphics-drivers.conf").write_text("blacklist nouveau\n")
    if state == "loaded":
        modules("nouveau 3096576 0 - Live 0x0000000000000000\n")
    before = sorted((str(p), p.stat().st_mtime) for p in sysroot.rglob("*"))
    done = len(calls)
    answer = _check(host, monkeypatch, **settings)
    assert sorted((str(p), p.stat().st_mtime) for p in sysroot.rglob("*")) == before and len(calls) == done
    ran = run(check=True, diff=False, **settings)
    assert answer == {key: value for key, value in ran.items() if key not in ("failed", "invocation")}
    assert answer["changed"] is (state in ("fresh", "stale initramfs", "absent wanted")), answer
    if state == "converged":
        assert path.exists() and not answer["reboot_required"]


def test_the_reads_check_is_none_where_the_module_would_fail(host, monkeypatch):
    sysroot = host[0]
    (sysroot / "etc/modprobe.d" / nv.FILE_NAME).mkdir(parents=True)
    assert _check(host, monkeypatch) is None


def test_gpu_info_answers_the_check_with_the_settings_it_was_given(tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr(nouveau_run, "run", lambda module, params, diff: seen.append((module.check_mode, params)) or {"changed": False})
    (tmp_path / "sys/bus/pci/devices").mkdir(parents=True)
    given = {"state": "present", "initramfs": "no", "unload": True, "root": "/x", "image_build": "auto"}
    res = call(gpu_info.main, {"root": str(tmp_path), "checks": [{"role": "nouveau", "settings": given}]})
    assert res["answers"] == {"nouveau": {"settings": dict(given, initramfs=False), "result": {"changed": False}}}
    assert seen == [(True, {**{k: v.get("default") for k, v in nouveau_run.ARGUMENT_SPEC.items()}, **given, "initramfs": False})]
    assert "answers" not in call(gpu_info.main, {"root": str(tmp_path)})
