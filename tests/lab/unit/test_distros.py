from __future__ import annotations

import hashlib

import pytest

from lab.distros import (
    DISTROS,
    KEYRING_DIR,
    get_distro,
    nspawn_environment,
    parse_debootstrap_sources,
    render_apt_sources,
    security_uri,
)
from lab.errors import LabError


@pytest.mark.parametrize(
    ("given", "expected"),
    [("noble", "noble"), ("Ubuntu24.04", "noble"), ("ubuntu-22.04", "jammy"), ("debian12", "bookworm"), ("BOOKWORM", "bookworm"),
     ("ubuntu26.04", "resolute")],
)
def test_get_distro_accepts_names_and_aliases(given, expected):
    assert get_distro(given).name == expected


def test_get_distro_unknown_names_what_is_accepted():
    with pytest.raises(LabError, match=r"unknown distribution 'focal' \(known: bookworm, jammy, noble, resolute\)"):
        get_distro("focal")


def test_only_a_systemd_without_cgroup_v1_boots_on_the_unified_hierarchy():
    """Ubuntu 26.04's systemd 259 refuses cgroup v1 ("Detected unsupported legacy cgroup hierarchy, refusing execution"):
    nspawn is told to give it cgroup v2. The others keep the layout nspawn picks on the host (hybrid on the lab's v1)."""
    assert nspawn_environment("resolute") == {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}
    assert [d for d in DISTROS if nspawn_environment(d)] == ["resolute"]


def test_parse_debootstrap_sources_takes_the_written_uri():
    text = "deb http://archive.example/ubuntu noble main\n"
    assert parse_debootstrap_sources(text) == "http://archive.example/ubuntu"


def test_parse_debootstrap_sources_strips_trailing_slash_and_skips_comments():
    text = "# comment\n\ndeb http://mirror.example/debian/ bookworm main\n"
    assert parse_debootstrap_sources(text) == "http://mirror.example/debian"


def test_parse_debootstrap_sources_without_deb_line_fails():
    with pytest.raises(LabError, match="no 'deb URI SUITE"):
        parse_debootstrap_sources("# nothing here\n")


def test_security_uri_for_ubuntu_is_the_archive_itself():
    assert security_uri(DISTROS["noble"], "http://a.example/ubuntu") == "http://a.example/ubuntu"


def test_security_uri_for_debian_is_debian_security_beside_the_archive():
    assert security_uri(DISTROS["bookworm"], "http://d.example/debian") == "http://d.example/debian-security"


def test_security_uri_for_debian_refuses_an_unexpected_path():
    with pytest.raises(LabError, match="expected a URI ending in /debian"):
        security_uri(DISTROS["bookworm"], "http://d.example/mirror")


def test_noble_sources_are_deb822_with_all_components_and_suites():
    path, text = render_apt_sources(DISTROS["noble"], "http://a.example/ubuntu", "/usr/share/keyrings/k.gpg")
    assert path == "/etc/apt/sources.list.d/ubuntu.sources"
    assert "Suites: noble noble-updates\n" in text
    assert "Suites: noble-security\n" in text
    assert text.count("Components: main restricted universe multiverse\n") == 2
    assert text.count("Signed-By: /usr/share/keyrings/k.gpg\n") == 2


def test_jammy_sources_are_one_line_per_suite():
    path, text = render_apt_sources(DISTROS["jammy"], "http://a.example/ubuntu", "")
    assert path == "/etc/apt/sources.list"
    lines = [ln for ln in text.splitlines() if ln.startswith("deb ")]
    assert lines == [
        "deb http://a.example/ubuntu jammy main restricted universe multiverse",
        "deb http://a.example/ubuntu jammy-updates main restricted universe multiverse",
        "deb http://a.example/ubuntu jammy-security main restricted universe multiverse",
    ]


def test_bookworm_sources_have_non_free_firmware_and_security_archive():
    text = render_apt_sources(DISTROS["bookworm"], "http://d.example/debian", "")[1]
    assert "deb http://d.example/debian bookworm-updates main contrib non-free non-free-firmware" in text
    assert "deb http://d.example/debian-security bookworm-security main contrib non-free non-free-firmware" in text


def test_recipe_id_changes_with_the_recipe():
    noble = DISTROS["noble"]
    assert noble.recipe_id != DISTROS["jammy"].recipe_id
    assert len(noble.recipe_id) == 12


def test_committed_keyrings_match_their_pinned_digest():
    for distro in DISTROS.values():
        if distro.keyring:
            digest = hashlib.sha256((KEYRING_DIR / distro.keyring).read_bytes()).hexdigest()
            assert digest == distro.keyring_sha256, distro.name
