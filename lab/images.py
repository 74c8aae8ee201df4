"""Build and cache the lab's root file system images.

An image is a debootstrap (variant minbase) of one distribution, configured to boot under
systemd-nspawn on the host's network without touching it, and stored as a zstd tarball in the
cache directory, keyed by distribution, recipe and build date. A warm run reuses the newest image
whose recipe matches and that is younger than the maximum age; a cold run builds it.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .distros import APT_CONF, IMAGE_PACKAGES, KEYRING_DIR, MASKED_UNITS, Distro, parse_debootstrap_sources, render_apt_sources
from .errors import LabError
from .retry import Backoff, note_retry, retry

DEFAULT_MAX_AGE_DAYS = 14
# Options for every systemd-nspawn the lab runs. There is no systemd on the host to register with;
# the machines share the host's network, so they use its resolver (their own is masked).
NSPAWN_COMMON = ("--register=no", "--keep-unit", "--resolv-conf=replace-host")
_IMAGE_RE = re.compile(r"^(?P<name>[a-z0-9]+)-(?P<recipe>[0-9a-f]{12})-(?P<date>\d{8})\.tar\.zst$")


def lab_dir(override: str, xdg: str, default: str) -> Path:
    """$override if set, else $xdg (or ~/default) /gpuops-lab: where the lab keeps a kind of file."""
    env = os.environ.get(override)
    if env:
        return Path(env)
    return Path(os.environ.get(xdg) or str(Path.home() / default)) / "gpuops-lab"


def cache_dir() -> Path:
    """The cache directory, outside the repository: $GPUOPS_LAB_CACHE or ~/.cache/gpuops-lab."""
    return lab_dir("GPUOPS_LAB_CACHE", "XDG_CACHE_HOME", ".cache")


@dataclass(frozen=True)
class CachedImage:
    """One image tarball in the cache."""

    path: Path
    distro: str
    recipe: str
    built: dt.date


def list_images(directory: Path) -> list[CachedImage]:
    """Every image tarball in the directory whose name follows the cache's naming scheme."""
    found = []
    if not directory.is_dir():
        return found
    for entry in directory.iterdir():
        m = _IMAGE_RE.match(entry.name)
        if not m:
            continue
        built = dt.datetime.strptime(m["date"], "%Y%m%d").date()
        found.append(CachedImage(entry, m["name"], m["recipe"], built))
    return found


def pick_image(images: list[CachedImage], distro: Distro, today: dt.date, max_age_days: int) -> CachedImage | None:
    """The newest cached image of this distribution and recipe that is not older than max_age_days."""
    fresh = [i for i in images if i.distro == distro.name and i.recipe == distro.recipe_id and (today - i.built).days <= max_age_days]
    return max(fresh, key=lambda i: i.built, default=None)


def image_name(distro: Distro, today: dt.date) -> str:
    """The cache file name of an image built today."""
    return f"{distro.name}-{distro.recipe_id}-{today:%Y%m%d}.tar.zst"


# apt-get update exits 0 when an index cannot be fetched; these lines mean it failed all the same.
_APT_FETCH_FAILED = re.compile(r"^(W|E): (Failed to fetch|Some index files failed)")
# An answer that another try will not change (the URL is wrong, not the network).
_APT_PERMANENT = re.compile(r"\b(401|403|404|410)\s+\S")
_APT_FETCH_URL = re.compile(r"^(?:W|E): Failed to fetch (\S+)")
# What debootstrap prints (its functions file, warning/error) when a download fails.
_DEBOOTSTRAP_PACKAGE = re.compile(r"^W: Couldn't download package (\S+) \(")
_DEBOOTSTRAP_PACKAGES = re.compile(r"^E: Couldn't download packages: (.+)$")
_DEBOOTSTRAP_FILE = re.compile(r"^E: (?:Couldn't download|Failed getting release file|Failed getting release signature file) (\S+)")
# Retries of the network steps of a build: debootstrap starts over in a fresh root, apt-get update runs again.
DEBOOTSTRAP_RETRY = Backoff(attempts=3, first=15.0, cap=120.0)
APT_UPDATE_RETRY = Backoff(attempts=3, first=10.0, cap=60.0)


class StepFailed(LabError):
    """A build step that failed; carries the step's output so a caller can tell a download failure."""

    def __init__(self, message: str, rc: int, lines: list[str]) -> None:
        super().__init__(message)
        self.rc = rc
        self.lines = lines


def debootstrap_missing_packages(output: str) -> list[str]:
    """The packages debootstrap could not download, in the order it reported them (from its output)."""
    found: list[str] = []
    for line in output.splitlines():
        line = line.strip()
        m = _DEBOOTSTRAP_PACKAGE.match(line)
        names = [m.group(1)] if m else []
        m = _DEBOOTSTRAP_PACKAGES.match(line)
        if m:
            names = m.group(1).split()
        found += [n for n in names if n not in found]
    return found


def debootstrap_download_failure(exc: Exception) -> str | None:
    """What a failed debootstrap could not download, or None when it failed for another reason."""
    if not isinstance(exc, StepFailed):
        return None
    packages = debootstrap_missing_packages("\n".join(exc.lines))
    if packages:
        return f"could not download package{'s' if len(packages) > 1 else ''} {', '.join(packages)}"
    files = [m.group(1) for m in map(_DEBOOTSTRAP_FILE.match, exc.lines) if m]
    if files:
        return f"could not download {files[0]}"
    return None


def apt_fetch_failure(exc: Exception) -> str | None:
    """What a failed apt-get update could not fetch, or None when another try would not help."""
    if not isinstance(exc, StepFailed):
        return None
    failed = [ln for ln in exc.lines if _APT_FETCH_FAILED.match(ln)]
    if not failed or any(_APT_PERMANENT.search(ln) for ln in failed if _APT_FETCH_URL.match(ln)):
        return None
    urls = [m.group(1) for m in map(_APT_FETCH_URL.match, failed) if m]
    return f"could not fetch {', '.join(urls)}" if urls else "could not fetch every index"


def _run(cmd: list[str], log: Path, what: str, fail_on: re.Pattern[str] | None = None) -> None:
    """Run a build step with its output appended to the log; a failure names the step and its last line."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        start = out.tell()
        rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False).returncode
    with log.open(errors="replace") as inp:
        inp.seek(start)
        output = inp.read()
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    bad = [ln for ln in lines if fail_on and fail_on.match(ln)]
    if rc != 0 or bad:
        detail = bad[0] if bad else (lines[-1] if lines else "no output")
        raise StepFailed(f"{what} failed (exit {rc}): {detail} (full log: {log})", rc, lines)


def _check_keyring(distro: Distro) -> str | None:
    if distro.keyring is None:
        return None
    path = KEYRING_DIR / distro.keyring
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != distro.keyring_sha256:
        raise LabError(f"keyring {path} has SHA-256 {digest}, expected {distro.keyring_sha256}: refusing to trust it")
    return str(path)


def _in_root(root: Path, *cmd: str) -> list[str]:
    """A command run inside a root file system with systemd-nspawn (no boot): /proc, /dev and DNS set up."""
    return ["systemd-nspawn", *NSPAWN_COMMON, "--quiet", "--pipe", "-D", str(root), *cmd]


def configure_root(root: Path, distro: Distro) -> None:
    """Make a fresh debootstrap bootable as a lab machine. Pure file edits, no commands."""
    systemd_dir = root / "etc/systemd/system"
    systemd_dir.mkdir(parents=True, exist_ok=True)
    for unit in MASKED_UNITS:
        link = systemd_dir / unit
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to("/dev/null")
    # sshd runs as a plain service on every distribution. Ubuntu 24.04 starts it from ssh.socket
    # and makes ssh.service require the socket; the lab gives each machine its own port in
    # sshd_config, which the plain service reads directly.
    shutil.rmtree(systemd_dir / "ssh.service.requires", ignore_errors=True)
    socket_link = systemd_dir / "sockets.target.wants/ssh.socket"
    if socket_link.is_symlink():
        socket_link.unlink()
    wants = systemd_dir / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    service = wants / "ssh.service"
    if not service.is_symlink():
        service.symlink_to("/lib/systemd/system/ssh.service")
    # systemd-resolved is masked (and Ubuntu 22.04's systemd points resolv.conf at its stub): a plain
    # file, which systemd-nspawn fills with the host's resolver at every start.
    resolv = root / "etc/resolv.conf"
    if resolv.is_symlink():
        resolv.unlink()
        resolv.write_text("")
    # Host keys and the machine id are made per machine, so no two machines share them.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    # Keep man pages and docs the minbase may pull in from growing the images; nothing reads them.
    (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/dpkg/dpkg.cfg.d/01-gpuops-lab-nodoc").write_text(
        "path-exclude /usr/share/man/*\npath-exclude /usr/share/doc/*\npath-include /usr/share/doc/*/copyright\n"
    )
    # apt retries transient download failures in the build and in the machines (see APT_CONF).
    apt_conf_dir = root / "etc/apt/apt.conf.d"
    apt_conf_dir.mkdir(parents=True, exist_ok=True)
    (apt_conf_dir / APT_CONF[0]).write_text(APT_CONF[1])
    (root / "etc/gpuops-lab-image").write_text(f"{distro.name} {distro.recipe_id}\n")


def build_image(distro: Distro, directory: Path, today: dt.date) -> Path:
    """Build one image into the cache directory and return the tarball's path."""
    for tool in ("debootstrap", "systemd-nspawn", "zstd", "tar"):
        if shutil.which(tool) is None:
            raise LabError(f"{tool} not found: install the lab's host packages with 'make lab-deps'")
    directory.mkdir(parents=True, exist_ok=True)
    logs = directory / "logs"
    logs.mkdir(exist_ok=True)
    log = logs / f"{distro.name}.log"
    log.write_text("")
    work = directory / f"build-{distro.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    root = work / "root"
    keyring = _check_keyring(distro)
    try:
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(IMAGE_PACKAGES)}"]
        if keyring:
            cmd.append(f"--keyring={keyring}")
        # An empty mirror argument makes debootstrap use its own default mirror for the suite.
        cmd += [distro.suite, str(root), ""]
        if distro.script:
            cmd.append(f"/usr/share/debootstrap/scripts/{distro.script}")

        def debootstrap() -> None:
            # Each attempt starts from an empty root: debootstrap does not resume a half-made one.
            shutil.rmtree(root, ignore_errors=True)
            _run(cmd, log, f"debootstrap of {distro.name}")

        what = f"debootstrap of {distro.name}"
        retry(debootstrap, what=what, transient=debootstrap_download_failure, policy=DEBOOTSTRAP_RETRY, on_retry=note_retry(log, what))

        sources_list = root / "etc/apt/sources.list"
        archive_uri = parse_debootstrap_sources(sources_list.read_text())
        keyring_in_image = "/usr/share/keyrings/ubuntu-archive-keyring.gpg" if distro.family == "ubuntu" else ""
        path, content = render_apt_sources(distro, archive_uri, keyring_in_image)
        sources_list.write_text("" if path != "/etc/apt/sources.list" else content)
        (root / path.lstrip("/")).write_text(content)

        configure_root(root, distro)
        # Fetch the package lists with the new sources: proves the sources and their signatures
        # are right, and spares every test run the download.
        what = f"apt-get update in the {distro.name} image"
        retry(
            lambda: _run(_in_root(root, "apt-get", "-q", "update"), log, what, _APT_FETCH_FAILED),
            what=what,
            transient=apt_fetch_failure,
            policy=APT_UPDATE_RETRY,
            on_retry=note_retry(log, what),
        )
        _run(_in_root(root, "apt-get", "clean"), log, f"apt-get clean in the {distro.name} image")

        final = directory / image_name(distro, today)
        partial = final.with_suffix(".partial")
        _run(
            ["tar", "--numeric-owner", "-C", str(root), "-I", "zstd -T0 -3", "-cf", str(partial), "."],
            log,
            f"packing the {distro.name} image",
        )
        partial.rename(final)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    # Older images of the same distribution are superseded.
    for old in list_images(directory):
        if old.distro == distro.name and old.path != final:
            old.path.unlink(missing_ok=True)
    return final


def ensure_images(distros: list[Distro], max_age_days: int = DEFAULT_MAX_AGE_DAYS) -> dict[str, Path]:
    """Return an image for each distribution, building (in parallel) the ones the cache lacks."""
    from concurrent.futures import ThreadPoolExecutor

    directory = cache_dir() / "images"
    today = dt.date.today()
    result: dict[str, Path] = {}
    missing: list[Distro] = []
    images = list_images(directory)
    for distro in {d.name: d for d in distros}.values():
        hit = pick_image(images, distro, today, max_age_days)
        if hit:
            result[distro.name] = hit.path
        else:
            missing.append(distro)
    if missing:
        with ThreadPoolExecutor(max_workers=len(missing)) as pool:
            futures = {d.name: pool.submit(build_image, d, directory, today) for d in missing}
            errors = []
            for name, fut in futures.items():
                try:
                    result[name] = fut.result()
                except LabError as exc:
                    errors.append(str(exc))
            if errors:
                raise LabError("; ".join(errors))
    return result
