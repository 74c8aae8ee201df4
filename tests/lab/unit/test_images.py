from __future__ import annotations

import datetime as dt

from lab.distros import DISTROS
from lab.images import configure_root, image_name, list_images, pick_image

TODAY = dt.date(2026, 11, 21)


def _touch(directory, name):
    (directory / name).write_bytes(b"")


def test_image_name_carries_distro_recipe_and_date():
    noble = DISTROS["noble"]
    assert image_name(noble, TODAY) == f"noble-{noble.recipe_id}-20261121.tar.zst"


def test_pick_image_prefers_the_newest_fresh_image_of_the_same_recipe(tmp_path):
    noble = DISTROS["noble"]
    _touch(tmp_path, image_name(noble, dt.date(2026, 11, 10)))
    _touch(tmp_path, image_name(noble, dt.date(2026, 11, 20)))
    _touch(tmp_path, f"noble-000000000000-{TODAY:%Y%m%d}.tar.zst")  # another recipe
    _touch(tmp_path, image_name(DISTROS["jammy"], TODAY))  # another distribution
    _touch(tmp_path, "noble-garbage.tar.zst")  # not the cache's naming scheme
    hit = pick_image(list_images(tmp_path), noble, TODAY, max_age_days=14)
    assert hit is not None
    assert hit.built == dt.date(2026, 11, 20)


def test_pick_image_ignores_images_older_than_the_maximum_age(tmp_path):
    noble = DISTROS["noble"]
    _touch(tmp_path, image_name(noble, dt.date(2026, 11, 6)))
    assert pick_image(list_images(tmp_path), noble, TODAY, max_age_days=14) is None
    assert pick_image(list_images(tmp_path), noble, TODAY, max_age_days=15) is not None


def test_list_images_of_a_missing_directory_is_empty(tmp_path):
    assert list_images(tmp_path / "nope") == []


def test_configure_root_masks_units_and_makes_sshd_a_plain_service(tmp_path):
    root = tmp_path
    systemd = root / "etc/systemd/system"
    (systemd / "ssh.service.requires").mkdir(parents=True)
    (systemd / "ssh.service.requires/ssh.socket").symlink_to("/lib/systemd/system/ssh.socket")
    (systemd / "sockets.target.wants").mkdir()
    (systemd / "sockets.target.wants/ssh.socket").symlink_to("/lib/systemd/system/ssh.socket")
    (systemd / "systemd-resolved.service").symlink_to("/lib/systemd/system/systemd-resolved.service")
    (root / "etc/ssh").mkdir(parents=True)
    (root / "etc/ssh/ssh_host_ed25519_key").write_text("secret")
    (root / "etc/dpkg").mkdir()
    configure_root(root, DISTROS["noble"])
    assert (systemd / "systemd-resolved.service").readlink().as_posix() == "/dev/null"
    assert (systemd / "systemd-networkd.service").readlink().as_posix() == "/dev/null"
    assert not (systemd / "ssh.service.requires").exists()
    assert not (systemd / "sockets.target.wants/ssh.socket").is_symlink()
    assert (systemd / "multi-user.target.wants/ssh.service").is_symlink()
    assert not list((root / "etc/ssh").glob("ssh_host_*"))
    assert (root / "etc/machine-id").read_text() == ""
    # Running it twice is harmless.
    configure_root(root, DISTROS["noble"])


def test_a_build_step_whose_apt_update_could_not_fetch_fails(tmp_path):
    import pytest

    from lab.errors import LabError
    from lab.images import _APT_FETCH_FAILED, _run

    log = tmp_path / "log"
    log.write_text("")
    script = "echo 'Err:1 http://x noble InRelease'; echo \"W: Failed to fetch http://x/InRelease  Temporary failure resolving 'x'\""
    with pytest.raises(LabError, match=r"apt update failed \(exit 0\): W: Failed to fetch http://x/InRelease"):
        _run(["sh", "-c", script], log, "apt update", _APT_FETCH_FAILED)
    _run(["sh", "-c", "echo Hit:1 http://x noble InRelease"], log, "apt update", _APT_FETCH_FAILED)


def test_configure_root_replaces_a_resolver_stub_link_with_a_file(tmp_path):
    (tmp_path / "etc/dpkg").mkdir(parents=True)
    (tmp_path / "etc/resolv.conf").symlink_to("../run/systemd/resolve/stub-resolv.conf")
    configure_root(tmp_path, DISTROS["jammy"])
    resolv = tmp_path / "etc/resolv.conf"
    assert resolv.is_file() and not resolv.is_symlink()
