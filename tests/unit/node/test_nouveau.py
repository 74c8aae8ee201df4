"""nouveau: who blacklists it, whether it can be unloaded, which initramfs images need a rebuild."""

from __future__ import annotations

import os

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import nouveau as nv


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def write(root, rel, text):
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return str(path)


def test_the_managed_file_blacklists_and_turns_modesetting_off():
    assert "blacklist nouveau\n" in nv.CONTENT and "options nouveau modeset=0\n" in nv.CONTENT


def test_other_blacklists_are_found_and_ours_is_not_counted(tmp_path):
    ours = write(tmp_path, "etc/modprobe.d/" + nv.FILE_NAME, nv.CONTENT)
    rhel = write(tmp_path, "usr/lib/modprobe.d/nvidia.conf", "blacklist nouveau\noptions nvidia NVreg_TemporaryFilePath=/var/tmp\n")
    write(tmp_path, "etc/modprobe.d/blacklist-framebuffer.conf", "blacklist nvidiafb\nblacklist rivafb\n")
    write(tmp_path, "etc/modprobe.d/commented.conf", "# blacklist nouveau\n")
    write(tmp_path, "etc/modprobe.d/not-read.txt", "blacklist nouveau\n")
    files = nv.effective_conf_files(str(tmp_path))
    assert nv.blacklisted_by(files, ours, _read) == [rhel]


def test_a_file_in_etc_hides_the_same_name_in_usr_lib(tmp_path):
    write(tmp_path, "usr/lib/modprobe.d/nvidia.conf", "blacklist nouveau\n")
    mask = write(tmp_path, "etc/modprobe.d/nvidia.conf", "# emptied by the admin\n")
    files = nv.effective_conf_files(str(tmp_path))
    assert files["nvidia.conf"] == mask
    assert nv.blacklisted_by(files, "/etc/modprobe.d/" + nv.FILE_NAME, _read) == []


def test_install_false_counts_as_a_blacklist(tmp_path):
    path = write(tmp_path, "etc/modprobe.d/deny.conf", "install nouveau /bin/false\n")
    assert nv.blacklisted_by(nv.effective_conf_files(str(tmp_path)), "x", _read) == [path]


# /proc/modules lines as the kernel writes them: name, size, use count, users, state, address.
@pytest.mark.parametrize(
    ("text", "use", "blocker"),
    [
        ("snd 139264 0 - Live 0x0000000000000000\n", None, None),
        ("nouveau 3096576 0 - Live 0x0000000000000000\n", {"refcnt": 0, "used_by": []}, None),
        ("nouveau 3096576 2 - Live 0x0000000000000000\n", {"refcnt": 2, "used_by": []}, "nouveau is in use (use count 2"),
        ("nouveau 3096576 1 nvidia_drm_shim, Live 0x0000000000000000\n", {"refcnt": 1, "used_by": ["nvidia_drm_shim"]},
         "nouveau is used by nvidia_drm_shim"),
    ],
)
def test_module_use_and_what_blocks_the_unload(text, use, blocker):
    got = nv.module_use(text)
    assert got == use
    reason = nv.unload_blocker(got)
    assert (reason is None) if blocker is None else reason.startswith(blocker)


def test_initramfs_images_and_staleness(tmp_path):
    old = write(tmp_path, "boot/initrd.img-6.8.0-149-generic", "x")
    new = write(tmp_path, "boot/initrd.img-6.8.0-151-generic", "x")
    os.symlink("initrd.img-6.8.0-151-generic", tmp_path / "boot/initrd.img")
    write(tmp_path, "boot/initramfs-5.14.0-503.el9.x86_64.img", "x")
    assert nv.initramfs_images(str(tmp_path), "update-initramfs") == [old, new]
    assert nv.initramfs_images(str(tmp_path), "dracut") == [str(tmp_path / "boot/initramfs-5.14.0-503.el9.x86_64.img")]
    assert nv.initramfs_images(str(tmp_path / "none"), "dracut") == []
    times = {old: 100.0, new: 300.0}
    assert nv.stale_images([old, new], 200.0, times.__getitem__) == [old]
    assert nv.stale_images([old, new], None, times.__getitem__) == []


def test_initramfs_commands():
    assert nv.initramfs_command("update-initramfs", "/usr/sbin/update-initramfs") == ["/usr/sbin/update-initramfs", "-u", "-k", "all"]
    assert nv.initramfs_command("dracut", "/usr/bin/dracut") == ["/usr/bin/dracut", "--force", "--regenerate-all"]
    assert nv.initramfs_command(None, None) is None
