# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The package manager's answers the host-side plans read (installed packages, candidates, versions, dependencies, the
installed nvidia module's flavour), through one command runner, and the arguments every plan module takes.

Apart from the driver's own plan (driver_host), so that the modules that only read packages (rdma_info,
fabric_manager_info, container_runtime) do not import, send and compile the driver plan with it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.files import read_text

if TYPE_CHECKING:  # pragma: no cover
    from ansible.module_utils.basic import AnsibleModule

Runner = Callable[..., tuple[int, str, str]]
C_ENV = {"LC_ALL": "C", "LANG": "C"}
# DNF4's versionlock plugin list (DNF5 keeps /etc/dnf/versionlock.toml, not read yet).
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
DPKG_FORMAT = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n"
# The same, with the package names an installed package's Pre-Depends and Depends fields name.
DPKG_DEPENDS_FORMAT = "${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\t${Pre-Depends}, ${Depends}\\n"


def parse_dpkg(text: str) -> dict[str, dict]:
    """Installed packages from dpkg-query -W: name -> {version, held}; 'h' first means held."""
    packages = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 3:
            continue
        name, version, status = fields
        if len(status) < 2 or status[1] not in "iHUFWt":
            continue
        if status[1] != "i":
            continue
        packages[name.split(":")[0]] = {"version": version, "held": status[0] == "h"}
    return packages


def parse_rpm(text: str, locked: str = "") -> dict[str, dict]:
    """Installed packages from rpm -qa (name<TAB>version-release); held when the versionlock list names them."""
    held = set(re.findall(r"^(?:\d+:)?([A-Za-z0-9_.+-]+?)-\d", locked, re.M))
    packages = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 2:
            packages[fields[0]] = {"version": fields[1], "held": fields[0] in held}
    return packages


def parse_policy(text: str) -> dict[str, str | None]:
    """Candidate versions from apt-cache policy: name -> version, None for '(none)'."""
    candidates: dict[str, str | None] = {}
    name = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            name = line[:-1].split(":")[0]
            candidates[name] = None
        elif name and line.strip().startswith("Candidate:"):
            value = line.split(":", 1)[1].strip()
            candidates[name] = None if value == "(none)" else value
    return candidates


def parse_depends(text: str) -> dict[str, list[str]]:
    """Dependencies from apt-cache depends: name -> the packages its Depends and PreDepends lines name."""
    depends: dict[str, list[str]] = {}
    name = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            name = line.strip()
            depends.setdefault(name, [])
        elif name and line.strip().lstrip("|").startswith(("Depends:", "PreDepends:")):
            depends[name].append(line.split(":", 1)[1].strip().strip("<>"))
    return depends


def parse_dpkg_depends(text: str) -> dict[str, tuple[str, list[str]]]:
    """Installed packages from dpkg-query -W (DPKG_DEPENDS_FORMAT): name -> (version, the names its Pre-Depends and
    Depends name, alternatives too, without versions or architectures)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) != 4 or len(fields[2]) < 2 or fields[2][1] != "i":
            continue
        name, version, _status, depends = fields
        names = [alt.split()[0].split(":")[0] for part in depends.split(",") for alt in part.split("|") if alt.strip()]
        found[name.split(":")[0]] = (version, names)
    return found


def parse_policy_versions(text: str) -> dict[str, list[str]]:
    """Every version apt knows of each package, from apt-cache policy's version tables (newest first)."""
    versions: dict[str, list[str]] = {}
    name = None
    in_table = False
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            name, in_table = line[:-1].split(":")[0], False
            versions[name] = []
        elif name and line.strip() == "Version table:":
            in_table = True
        elif name and in_table and line.startswith(" *** "):
            versions[name].append(line.split()[1])
        elif name and in_table and re.match(r"^ {5}\S", line):
            versions[name].append(line.split()[0])
    return versions


def parse_repoquery(text: str) -> dict[str, list[str]]:
    """dnf repoquery --qf '%{name} %{version}-%{release}': name -> versions."""
    versions: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) == 2:
            versions.setdefault(fields[0], []).append(fields[1])
    return versions


def module_type_of(license_text: str) -> str | None:
    """The flavour of an nvidia.ko from its license: the open modules are dual MIT/GPL."""
    text = license_text.strip()
    if not text:
        return None
    return "open" if "MIT" in text or "GPL" in text else "proprietary"


# The arguments every host-side plan module takes (documented by the gpuops.nvidia.node_plan fragment).
PLAN_ARGS: dict[str, dict[str, Any]] = {
    "gpu_info": {"type": "dict", "required": True},
    "distribution": {"type": "str", "required": True},
    "major_version": {"type": "str", "required": True},
    "architecture": {"type": "str", "default": "x86_64"},
}


class Host:
    """The commands the plan needs, run through one runner (for one module run: the package lists do not change in it)."""

    def __init__(self, run: Runner, which: Callable[[str], str | None]) -> None:
        self._run = run
        self._which = which
        # Candidates apt-cache policy already gave: the plan and the dependency read ask about the same packages.
        self._candidates: dict[str, str | None] = {}
        # The package database's listing, as its tool printed it: every plan made through this Host (the node's read
        # answers several) reads it once; each gets its own parse.
        self._listings: dict[str, str] = {}

    @classmethod
    def of(cls, module: AnsibleModule) -> Host:
        """The host a module runs on: its commands through the module, found in sbin too."""
        return cls(module.run_command, lambda name: module.get_bin_path(name, opt_dirs=["/usr/sbin", "/sbin"]))

    def _cmd(self, argv: list[str]) -> tuple[int, str, str]:
        return self._run(argv, environ_update=C_ENV)

    def _listing(self, family: str) -> str:
        """rpm's listing for the rhel family, dpkg's for any other (each family name of the plans: ubuntu, debian, deb)."""
        tool, argv = (("rpm -qa", ["rpm", "-qa", "--qf", "%{NAME}\\t%{VERSION}-%{RELEASE}\\n"]) if family == "rhel"
                      else ("dpkg-query", ["dpkg-query", "-W", "-f", DPKG_FORMAT]))
        if tool not in self._listings:
            rc, out, err = self._cmd(argv)
            if rc != 0:
                raise RuntimeError(f"{tool} failed: {err.strip()}")
            self._listings[tool] = out
        return self._listings[tool]

    def packages(self, family: str) -> dict[str, dict]:
        if family == "rhel":
            return parse_rpm(self._listing(family), read_text(VERSIONLOCK_LIST) or "")
        return parse_dpkg(self._listing(family))

    def candidates(self, names: list[str]) -> dict[str, str | None]:
        unknown = [n for n in dict.fromkeys(names) if n not in self._candidates]
        if unknown:
            rc, out, err = self._cmd(["apt-cache", "policy", *unknown])
            if rc != 0:
                raise RuntimeError(f"apt-cache policy failed: {err.strip()}")
            # A name apt does not know is absent from its answer: no candidate.
            self._candidates |= dict.fromkeys(unknown) | parse_policy(out)
        return {n: self._candidates[n] for n in names}

    def depends(self, names: list[str]) -> dict[str, list[str]]:
        """What each package's candidate depends on; nothing for a package apt cannot say about.

        A package installed at its candidate's version depends on what dpkg recorded when it was installed: dpkg-query
        answers in milliseconds, where apt-cache depends (as apt-cache show) reads every package list, a third of a second
        on the lab. A converged node asks apt only about the others.
        """
        if not names:
            return {}
        # dpkg-query exits 1 when one of the names is not installed, and still lists the others.
        _rc, out, _err = self._cmd(["dpkg-query", "-W", "-f", DPKG_DEPENDS_FORMAT, *names])
        installed = {n: v for n, v in parse_dpkg_depends(out).items() if n in names}
        candidates = self.candidates(sorted(installed))
        found = {n: deps for n, (version, deps) in installed.items() if candidates.get(n) == version}
        rest = [n for n in names if n not in found]
        if rest:
            rc, out, _err = self._cmd(["apt-cache", "depends", "--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks",
                                       "--no-replaces", "--no-enhances", *rest])
            if rc == 0:
                found |= parse_depends(out)
        return found

    def versions(self, family: str, names: list[str]) -> dict[str, list[str]]:
        """Every version the repositories offer of each package (apt-cache policy's tables, dnf repoquery)."""
        if not names:
            return {}
        if family == "rhel":
            rc, out, err = self._cmd(["dnf", "-q", "repoquery", "--qf", "%{name} %{version}-%{release}", *names])
            if rc != 0:
                raise RuntimeError(f"dnf repoquery failed: {err.strip()}")
            return parse_repoquery(out)
        rc, out, err = self._cmd(["apt-cache", "policy", *names])
        if rc != 0:
            raise RuntimeError(f"apt-cache policy failed: {err.strip()}")
        return parse_policy_versions(out)

    def package_names(self, prefix: str) -> list[str]:
        rc, out, _err = self._cmd(["apt-cache", "pkgnames", prefix])
        return sorted(out.split()) if rc == 0 else []

    def module_type(self, kernel: str) -> str | None:
        """The flavour of the nvidia module installed for the kernel, None when there is none."""
        modinfo = self._which("modinfo")
        if not modinfo:
            return None
        # Debian renames the module nvidia-current (and aliases it nvidia in modprobe.d, which
        # modinfo does not read).
        for name in ("nvidia", "nvidia-current"):
            rc, out, _err = self._cmd([modinfo, "-k", kernel, "-F", "license", name])
            if rc == 0:
                return module_type_of(out)
        return None


def installed_versions(host: Host, which: Callable[[str], str | None], names: list[str]) -> dict[str, str | None]:
    """The installed version of each named package (dpkg's database, else rpm's), None where it is not installed.

    Every name is None when neither package manager answers.
    """
    family = "deb" if which("dpkg-query") else ("rhel" if which("rpm") else None)
    try:
        installed = host.packages(family) if family and names else {}
    except RuntimeError:
        installed = {}
    return {name: installed[name]["version"] if name in installed else None for name in names}
