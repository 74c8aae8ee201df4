"""The distributions the lab can boot, and how an image of each is made.

Everything here is data or a pure function, so the unit tests cover it without root or network.
No mirror host is written anywhere: debootstrap picks its own default mirror for each distribution,
and the extra components and suites are derived from the sources list it wrote.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import LabError

KEYRING_DIR = Path(__file__).resolve().parent / "keyrings"

# Packages every lab machine gets on top of the minbase variant.
IMAGE_PACKAGES = (
    "systemd",
    "systemd-sysv",
    "dbus",
    "openssh-server",
    "python3",
    "sudo",
    "ca-certificates",
    "gnupg",
)

# Units masked in every image: they would reconfigure the network, DNS or clock of the host, whose
# network namespace the machines share, or (apt timers) take the dpkg lock in the middle of a test.
MASKED_UNITS = (
    "systemd-networkd.service",
    "systemd-networkd.socket",
    "systemd-networkd-wait-online.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "networking.service",
    "networkd-dispatcher.service",
    "NetworkManager.service",
    "ModemManager.service",
    "wpa_supplicant.service",
    "chrony.service",
    "ntp.service",
    "console-getty.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "motd-news.timer",
    "unattended-upgrades.service",
)

# apt configuration every image carries (file under /etc/apt/apt.conf.d, content). apt retries a download
# that failed on the network (connection refused or reset, timeout, name resolution), waiting longer before
# each retry (Acquire::Retries::Delay, on by default) up to Delay::Maximum seconds; it does not retry an
# HTTP error answer such as 503 (apt 2.6). It applies to the image build's own apt-get update and to every
# package the roles install in a lab machine.
APT_CONF = (
    "80-gpuops-lab-retries",
    "// Written by the gpuops lab image builder: retry transient download failures, backing off.\n"
    'Acquire::Retries "5";\n'
    'Acquire::Retries::Delay "true";\n'
    'Acquire::Retries::Delay::Maximum "30";\n',
)

# Bump when the way an image is made changes in a way the fields below do not show.
IMAGE_FORMAT = 2


@dataclass(frozen=True)
class Distro:
    """One distribution release the lab can make an image of."""

    name: str
    family: str
    version: str
    suite: str
    components: tuple[str, ...]
    # debootstrap script to use when the installed debootstrap has none named after the suite.
    script: str | None = None
    # Keyring file in KEYRING_DIR, pinned by SHA-256; None uses debootstrap's own default
    # (the host's debian-archive-keyring for Debian).
    keyring: str | None = None
    keyring_sha256: str | None = None
    # Whether the distribution's installer writes deb822 sources (.sources) or a sources.list.
    deb822: bool = False

    @property
    def recipe_id(self) -> str:
        """A short hash of everything that goes into the image; part of the cache key."""
        recipe = {
            "distro": asdict(self),
            "packages": IMAGE_PACKAGES,
            "masked": MASKED_UNITS,
            "apt_conf": APT_CONF,
            "format": IMAGE_FORMAT,
        }
        blob = json.dumps(recipe, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:12]


# The Ubuntu archive keyring (ubuntu-keyring 2023.11.28.1, noble), committed because Debian, where
# the lab runs, no longer packages it. Its keys, checked against Ubuntu's published fingerprints:
#   790B C727 7767 219C 42C8  6F93 3B4F E6AC C0B2 1F32  Ubuntu Archive Automatic Signing Key (2012)
#   F6EC B376 2474 EDA9 D21B  7022 8719 20D1 991B C93C  Ubuntu Archive Automatic Signing Key (2018)
#   8439 38DF 228D 22F7 B374  2BC0 D94A A3F0 EFE2 1092  Ubuntu CD Image Automatic Signing Key (2012)
_UBUNTU_KEYRING = "ubuntu-archive-keyring.gpg"
_UBUNTU_KEYRING_SHA256 = "80a36b0a6de2f69f49d2df75ef473ccde121e9e190b9ea01d20a4f63778d5c31"
_UBUNTU_COMPONENTS = ("main", "restricted", "universe", "multiverse")

DISTROS: dict[str, Distro] = {
    d.name: d
    for d in (
        Distro(
            name="resolute",
            family="ubuntu",
            version="26.04",
            suite="resolute",
            components=_UBUNTU_COMPONENTS,
            # Its Release is signed by the 2018 key of the keyring above; its Python is 3.14, a target ansible-core
            # supports from 2.20 (docs/lab.md, "Ubuntu 26.04").
            script="gutsy",
            keyring=_UBUNTU_KEYRING,
            keyring_sha256=_UBUNTU_KEYRING_SHA256,
            deb822=True,
        ),
        Distro(
            name="noble",
            family="ubuntu",
            version="24.04",
            suite="noble",
            components=_UBUNTU_COMPONENTS,
            # Debian 12's debootstrap has no script named noble; gutsy's serves every later Ubuntu.
            script="gutsy",
            keyring=_UBUNTU_KEYRING,
            keyring_sha256=_UBUNTU_KEYRING_SHA256,
            deb822=True,
        ),
        Distro(
            name="jammy",
            family="ubuntu",
            version="22.04",
            suite="jammy",
            components=_UBUNTU_COMPONENTS,
            keyring=_UBUNTU_KEYRING,
            keyring_sha256=_UBUNTU_KEYRING_SHA256,
        ),
        Distro(
            name="bookworm",
            family="debian",
            version="12",
            suite="bookworm",
            components=("main", "contrib", "non-free", "non-free-firmware"),
        ),
    )
}

# The distributions whose systemd refuses to boot on the cgroup v1 hierarchy (systemd 256 deprecated it, 258 removed it;
# Ubuntu 26.04 has 259). On a cgroup v1 host, such as the lab's, systemd-nspawn gives a machine the hybrid or legacy
# layout unless told otherwise: these machines boot with SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1, which gives them cgroup v2
# (the host's unified hierarchy, without controllers where the host binds them all to v1). A boot setting, not part of
# the image: it is not in recipe_id.
UNIFIED_CGROUP_ONLY = frozenset({"resolute"})


def nspawn_environment(distro: str) -> dict[str, str]:
    """What systemd-nspawn's environment needs for a machine of this distribution, over the caller's."""
    return {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"} if distro in UNIFIED_CGROUP_ONLY else {}


# Accepted spellings for a distribution on the command line and in molecule platforms.
ALIASES = {
    "ubuntu26.04": "resolute",
    "ubuntu-26.04": "resolute",
    "ubuntu24.04": "noble",
    "ubuntu-24.04": "noble",
    "ubuntu22.04": "jammy",
    "ubuntu-22.04": "jammy",
    "debian12": "bookworm",
    "debian-12": "bookworm",
}


def get_distro(name: str) -> Distro:
    """Look a distribution up by release name or alias; a clear error names what is accepted."""
    key = ALIASES.get(name.lower(), name.lower())
    try:
        return DISTROS[key]
    except KeyError:
        known = ", ".join(sorted(DISTROS))
        raise LabError(f"unknown distribution {name!r} (known: {known})") from None


def parse_debootstrap_sources(text: str) -> str:
    """Return the archive URI from the one-line sources.list that debootstrap writes."""
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == "deb" and "://" in fields[1]:
            return fields[1].rstrip("/")
    raise LabError("debootstrap wrote no 'deb URI SUITE ...' line to /etc/apt/sources.list")


def security_uri(distro: Distro, archive_uri: str) -> str:
    """Where the -security suite lives, derived from the archive URI debootstrap used.

    Ubuntu's archive carries the -security pocket itself; Debian publishes it beside the archive,
    under debian-security.
    """
    if distro.family == "ubuntu":
        return archive_uri
    head, sep, last = archive_uri.rpartition("/")
    if not sep or last != "debian":
        raise LabError(f"cannot derive Debian's security archive from {archive_uri!r}: expected a URI ending in /debian")
    return f"{head}/debian-security"


def render_apt_sources(distro: Distro, archive_uri: str, keyring_path: str) -> tuple[str, str]:
    """Return (path inside the image, content) of the apt sources the image should carry.

    The layout follows what each distribution's own installer writes: deb822 for Ubuntu 24.04,
    a one-line sources.list otherwise.
    """
    suites = [distro.suite, f"{distro.suite}-updates"]
    sec_uri = security_uri(distro, archive_uri)
    components = " ".join(distro.components)
    header = "# Written by the gpuops lab image builder from debootstrap's default mirror.\n"
    if distro.deb822:
        blocks = [
            f"Types: deb\nURIs: {archive_uri}\nSuites: {' '.join(suites)}\nComponents: {components}\nSigned-By: {keyring_path}\n",
            f"Types: deb\nURIs: {sec_uri}\nSuites: {distro.suite}-security\nComponents: {components}\nSigned-By: {keyring_path}\n",
        ]
        return f"/etc/apt/sources.list.d/{distro.family}.sources", header + "\n".join(blocks)
    lines = [f"deb {archive_uri} {suite} {components}" for suite in suites]
    lines.append(f"deb {sec_uri} {distro.suite}-security {components}")
    return "/etc/apt/sources.list", header + "\n".join(lines) + "\n"
