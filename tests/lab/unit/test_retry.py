"""Retries of transient fetch failures: the helper, debootstrap's and apt's failure parsing, and go against a flaky proxy."""

from __future__ import annotations

import io
import json
import shutil
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lab import retry as retry_mod
from lab.errors import LabError
from lab.images import StepFailed, apt_fetch_failure, debootstrap_download_failure, debootstrap_missing_packages
from lab.retry import Backoff, RetriesExhausted, retry
from lab.toolchain import GoFailed, _go, failed_modules, go_download_failure


class Flaky(Exception):
    pass


def _flaky(failures: int, exc: Exception):
    calls = []

    def action():
        calls.append(1)
        if len(calls) <= failures:
            raise exc
        return "done"

    return action, calls


def test_backoff_doubles_and_is_capped():
    assert Backoff(attempts=6, first=2, factor=2, cap=10).delays() == [2, 4, 8, 10, 10]
    assert Backoff(attempts=1).delays() == []


def test_retry_succeeds_after_transient_failures_sleeping_the_backoff():
    slept, notes = [], []
    action, calls = _flaky(2, Flaky("503"))
    out = retry(action, what="fetching x", transient=lambda e: "could not download x", policy=Backoff(attempts=4, first=1, cap=3),
                sleep=slept.append, on_retry=lambda a, d, r: notes.append((a, d, r)))
    assert out == "done"
    assert len(calls) == 3
    assert slept == [1, 2]
    assert notes == [(1, 1, "could not download x"), (2, 2, "could not download x")]


def test_retry_gives_up_after_the_bound_and_names_what_failed():
    slept = []
    action, calls = _flaky(10, Flaky("503 Service Unavailable"))
    with pytest.raises(RetriesExhausted, match=r"^fetching x: could not download package foo, still failing after 3 attempts: 503") as err:
        retry(action, what="fetching x", transient=lambda e: "could not download package foo", policy=Backoff(attempts=3, first=5, cap=6),
              sleep=slept.append)
    assert len(calls) == 3
    assert slept == [5, 6]
    assert err.value.attempts == 3
    assert isinstance(err.value, LabError)


def test_retry_raises_a_real_error_at_once():
    slept = []
    action, calls = _flaky(10, Flaky("404"))
    with pytest.raises(Flaky):
        retry(action, what="x", transient=lambda e: None, sleep=slept.append)
    assert len(calls) == 1
    assert slept == []


def test_retry_uses_the_module_sleep_by_default(monkeypatch):
    slept = []
    monkeypatch.setattr(retry_mod, "SLEEP", slept.append)
    action, calls = _flaky(1, Flaky("x"))
    assert retry(action, what="x", transient=lambda e: "x") == "done"
    assert slept == [Backoff().first] and len(calls) == 2


# Lines as debootstrap's functions file prints them (warning COULDNTDL, error COULDNTDLPKGS).
DEBOOTSTRAP_LOG = """\
I: Retrieving libc6 2.35-0ubuntu3
W: Couldn't download package libssl3 (ver 3.0.2-0ubuntu1 arch amd64) at http://mirror.invalid/ubuntu/pool/main/o/openssl/libssl3_3.0.2-0ubuntu1_amd64.deb
W: Couldn't download package zlib1g (ver 1:1.2.11 arch amd64) at http://mirror.invalid/ubuntu/pool/main/z/zlib/zlib1g.deb
E: Couldn't download packages: libssl3 zlib1g
"""


def test_debootstrap_missing_packages_are_read_from_its_log():
    assert debootstrap_missing_packages(DEBOOTSTRAP_LOG) == ["libssl3", "zlib1g"]
    assert debootstrap_missing_packages("E: Couldn't download packages: dbus\n") == ["dbus"]
    assert debootstrap_missing_packages("I: Base system installed successfully.\n") == []


def test_a_debootstrap_download_failure_is_transient_and_named_other_failures_are_not():
    def failed(text):
        return StepFailed("debootstrap failed", 1, text.splitlines())

    assert debootstrap_download_failure(failed(DEBOOTSTRAP_LOG)) == "could not download packages libssl3, zlib1g"
    assert debootstrap_download_failure(failed("E: Failed getting release file http://m.invalid/dists/jammy/Release")) == (
        "could not download http://m.invalid/dists/jammy/Release"
    )
    assert debootstrap_download_failure(failed("E: Release signed by unknown key (key id 871920D1991BC93C)")) is None
    assert debootstrap_download_failure(LabError("debootstrap not found")) is None


def test_an_apt_fetch_failure_is_transient_unless_the_answer_is_final():
    def failed(*lines):
        return StepFailed("apt-get update failed", 0, list(lines))

    some = "W: Some index files failed to download. They have been ignored, or old ones used instead."
    assert apt_fetch_failure(failed("E: Failed to fetch http://m.invalid/dists/jammy/InRelease  503  Service Unavailable", some)) == (
        "could not fetch http://m.invalid/dists/jammy/InRelease"
    )
    assert apt_fetch_failure(failed("E: Failed to fetch http://m.invalid/dists/nope/InRelease  404  Not Found [IP: 127.0.0.1 80]", some)) is None
    assert apt_fetch_failure(failed("E: The repository 'http://m.invalid jammy Release' is not signed.")) is None


def test_go_errors_name_the_module_and_tell_network_from_real_errors():
    def failed(*lines):
        return GoFailed("go failed", list(lines))

    reset = "go: k8s.io/api@v0.36.3: Get \"https://proxy.invalid/k8s.io/api/@v/v0.36.3.zip\": read tcp 10.0.0.1:1->10.0.0.2:443: read: connection reset by peer"
    assert go_download_failure(failed(reset)) == "could not download module k8s.io/api@v0.36.3"
    assert go_download_failure(failed("reading http://p.invalid/github.com/!n!v!i!d!i!a/x/@v/v1.0.0.zip: 502 Bad Gateway")) == (
        "could not download module github.com/NVIDIA/x@v1.0.0"
    )
    assert go_download_failure(failed("go: example.test/tiny@v1.0.0: reading http://p.invalid/example.test/tiny/@v/v1.0.0.info: 404 Not Found")) is None
    assert go_download_failure(failed("go: example.test/tiny@v9.9.9: invalid version: unknown revision v9.9.9")) is None
    assert go_download_failure(failed("verifying example.test/tiny@v1.0.0: checksum mismatch")) is None
    assert go_download_failure(failed("./main.go:3:1: syntax error: non-declaration statement outside function body")) is None
    assert failed_modules(["go: a.test/b/v2@v2.0.0-20240101000000-abcdef123456: unexpected EOF"]) == ["a.test/b/v2@v2.0.0-20240101000000-abcdef123456"]


# A Go module proxy on 127.0.0.1 serving one tiny module, answering 503 to its first `fail` requests.
MODULE, VERSION = "example.test/tiny", "v1.0.0"


def _module_files() -> dict[str, bytes]:
    gomod = f"module {MODULE}\n\ngo 1.21\n".encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(f"{MODULE}@{VERSION}/go.mod", gomod)
        zf.writestr(f"{MODULE}@{VERSION}/tiny.go", "package tiny\n\nconst Answer = 42\n")
    base = f"/{MODULE}/@v"
    return {
        f"{base}/list": f"{VERSION}\n".encode(),
        f"{base}/{VERSION}.info": json.dumps({"Version": VERSION, "Time": "2026-01-01T00:00:00Z"}).encode(),
        f"{base}/{VERSION}.mod": gomod,
        f"{base}/{VERSION}.zip": buf.getvalue(),
    }


class FlakyProxy:
    def __init__(self, fail: int) -> None:
        self.fail = fail
        self.requests: list[tuple[str, int]] = []
        files = _module_files()
        lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with lock:
                    status = 503 if len(proxy.requests) < proxy.fail else (200 if self.path in files else 404)
                    proxy.requests.append((self.path, status))
                body = files[self.path] if status == 200 else b"unavailable\n"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> FlakyProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"


def _go_env(tmp_path, proxy: FlakyProxy) -> dict[str, str]:
    import os

    return {**os.environ, "GOPROXY": proxy.url, "GOSUMDB": "off", "GOFLAGS": "-mod=mod -modcacherw", "GOMODCACHE": str(tmp_path / "modcache"),
            "GOPATH": str(tmp_path / "gopath"), "GOTOOLCHAIN": "local", "GONOPROXY": "", "GOPRIVATE": "", "GOCACHE": str(tmp_path / "gocache"),
            "LC_ALL": "C"}


needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
DOWNLOAD = ["mod", "download", "-json", f"{MODULE}@{VERSION}"]


@needs_go
def test_go_itself_does_not_retry_a_503(tmp_path):
    import subprocess

    with FlakyProxy(fail=1) as proxy:
        res = subprocess.run(["go", *DOWNLOAD], cwd=tmp_path, env=_go_env(tmp_path, proxy), capture_output=True, text=True, check=False, timeout=60)
    assert res.returncode != 0
    assert "503 Service Unavailable" in res.stdout
    assert len(proxy.requests) == 1


@needs_go
def test_go_mod_download_is_retried_through_a_flaky_proxy(tmp_path, monkeypatch):
    slept = []
    monkeypatch.setattr(retry_mod, "SLEEP", slept.append)
    log = tmp_path / "go.log"
    with FlakyProxy(fail=2) as proxy:
        out = _go(DOWNLOAD, tmp_path, log, f"fetching {MODULE}", env=_go_env(tmp_path, proxy))
    info = json.loads(out)
    assert info["Version"] == VERSION and "Error" not in info
    assert [status for _path, status in proxy.requests[:3]] == [503, 503, 200]
    assert slept == [2.0, 4.0]
    assert "attempt 2 failed, trying again" in log.read_text()


@needs_go
def test_go_mod_download_gives_up_after_the_bound_and_names_the_module(tmp_path, monkeypatch):
    slept = []
    monkeypatch.setattr(retry_mod, "SLEEP", slept.append)
    with FlakyProxy(fail=100) as proxy, pytest.raises(RetriesExhausted) as err:
        _go(DOWNLOAD, tmp_path, tmp_path / "go.log", f"fetching {MODULE}", env=_go_env(tmp_path, proxy))
    message = str(err.value)
    assert message.startswith(f"fetching {MODULE}: could not download module {MODULE}@{VERSION}, still failing after 4 attempts")
    assert "503 Service Unavailable" in message
    assert len(proxy.requests) == 4
    assert slept == [2.0, 4.0, 8.0]


@needs_go
def test_a_module_the_proxy_does_not_have_is_not_retried(tmp_path, monkeypatch):
    slept = []
    monkeypatch.setattr(retry_mod, "SLEEP", slept.append)
    with FlakyProxy(fail=0) as proxy, pytest.raises(GoFailed, match="404 Not Found"):
        _go(["mod", "download", "-json", f"{MODULE}@v9.9.9"], tmp_path, tmp_path / "go.log", "fetching", env=_go_env(tmp_path, proxy))
    assert slept == []


def test_images_carry_apt_retries_and_the_recipe_covers_them(tmp_path):
    from lab.distros import APT_CONF, DISTROS
    from lab.images import configure_root

    (tmp_path / "etc/dpkg").mkdir(parents=True)
    configure_root(tmp_path, DISTROS["jammy"])
    conf = (tmp_path / "etc/apt/apt.conf.d" / APT_CONF[0]).read_text()
    assert 'Acquire::Retries "5";' in conf
    assert f"jammy {DISTROS['jammy'].recipe_id}" in (tmp_path / "etc/gpuops-lab-image").read_text()
