"""lab/archive_holes.py: which NVIDIA sources the archive lists at a version it does not serve, and the pin around it."""

from __future__ import annotations

import http.server
import threading

import pytest

from lab import archive_holes as holes

URI = "http://archive.example/ubuntu"


def stanza(package: str, version: str, source: str | None = None) -> str:
    src = f"Source: {source}\n" if source else ""
    return (f"Package: {package}\n{src}Version: {version}\nArchitecture: amd64\n"
            f"Filename: pool/restricted/n/x/{package}_{version}_amd64.deb\nDescription: d\n")


# As Ubuntu 22.04's indexes listed them on 2026-12-04: the updates pocket at 580.196.07, security still at 580.178.04.
NEW, OLD = "580.196.07-0ubuntu0.22.04.1", "580.178.04-0ubuntu0.22.04.1"
NEW_UPSTREAM, OLD_UPSTREAM = "580.196.07", "580.178.04"
SRC = "nvidia-graphics-drivers-580-server"
UPDATES = "\n".join([stanza("nvidia-headless-580-server", NEW, SRC), stanza("nvidia-utils-580-server", NEW, SRC),
                     stanza(f"nvidia-firmware-580-server-{NEW_UPSTREAM}", NEW, f"{SRC} ({NEW})"),
                     stanza("bash", "5.1-6ubuntu1")])
SECURITY = "\n".join([stanza("nvidia-headless-580-server", OLD, SRC), stanza("nvidia-utils-580-server", OLD, SRC),
                      stanza(f"nvidia-firmware-580-server-{OLD_UPSTREAM}", OLD, SRC)])


def test_releases_group_the_nvidia_sources_binaries_by_version():
    found = holes.releases([(UPDATES, URI + "/"), (SECURITY, URI)])
    assert set(found) == {SRC}
    assert found[SRC][NEW]["packages"] == {"nvidia-headless-580-server", "nvidia-utils-580-server", "nvidia-firmware-580-server-580.196.07"}
    assert found[SRC][OLD]["url"] == f"{URI}/pool/restricted/n/x/nvidia-headless-580-server_{OLD}_amd64.deb"


def test_a_hole_is_pinned_to_the_newest_version_served_with_every_package():
    found = holes.releases([(UPDATES, URI), (SECURITY, URI)])
    pinned, unserved = holes.plan(found, lambda url: NEW not in url)
    assert unserved == {}
    assert pinned == {SRC: (NEW, OLD, {"nvidia-headless-580-server", "nvidia-utils-580-server", "nvidia-firmware-580-server-580.178.04"})}
    text = holes.preferences(pinned)
    assert "Package: nvidia-firmware-580-server-580.178.04 nvidia-headless-580-server nvidia-utils-580-server\n" in text
    assert f"Pin: version {OLD}\nPin-Priority: 990\n" in text
    assert f"Explanation: {SRC} {NEW} is in the index, but its files answer 404 from here" in text


def test_a_served_source_is_left_alone_and_nothing_is_probed_beyond_its_newest():
    probed = []
    found = holes.releases([(UPDATES, URI), (SECURITY, URI)])
    assert holes.plan(found, lambda url: probed.append(url) or True) == ({}, {})
    assert len(probed) == 1 and probed[0].endswith(f"_{NEW}_amd64.deb")


def test_an_older_version_with_only_a_few_packages_does_not_stand_in():
    """Ubuntu 24.04's case: the index kept two architecture-independent packages of 580.178.04, not the driver."""
    security = stanza(f"nvidia-firmware-580-server-{OLD_UPSTREAM}", OLD, SRC)
    found = holes.releases([(UPDATES, URI), (security, URI)])
    assert holes.plan(found, lambda url: NEW not in url) == ({}, {SRC: NEW})


def test_versions_are_ordered_as_dpkg_orders_them():
    """580.196.07 is newer than 580.178.04 and 580.65.06 (a string order would put 65 first)."""
    text = "\n".join(stanza("nvidia-utils-580-server", v, SRC) for v in ("580.65.06-0ubuntu1", NEW, OLD))
    found = holes.releases([(text, URI)])
    probed = []
    holes.plan(found, lambda url: probed.append(url) is None and False)
    assert [u.rsplit("_", 2)[1] for u in probed] == [NEW, OLD, "580.65.06-0ubuntu1"]


def test_write_is_idempotent_and_removes_the_file_when_nothing_is_pinned(tmp_path):
    path = str(tmp_path / "holes")
    assert holes.write(path, "x\n") is True
    assert holes.write(path, "x\n") is False
    assert (tmp_path / "holes").stat().st_mode & 0o777 == 0o644
    assert holes.write(path, None) is True
    assert not (tmp_path / "holes").exists()
    assert holes.write(path, None) is False


@pytest.fixture
def archive():
    """A local HTTP server: /here answers HEAD with 200, anything else 404; /broken 500."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response({"/here": 200, "/broken": 500}.get(self.path, 404))
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_served_asks_with_head_and_tells_a_hole_from_a_failure(archive):
    assert holes.served(f"{archive}/here") is True
    assert holes.served(f"{archive}/gone") is False
    with pytest.raises(Exception, match="500"):
        holes.served(f"{archive}/broken")
