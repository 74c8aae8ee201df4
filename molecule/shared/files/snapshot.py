"""What an uninstall must leave as it found it, read on the machine: every entry under /etc (type, mode, owner and
content digest), dpkg's package selections, the enabled unit files, and the runtime's own effective config
(`containerd config dump`, or `crio config`). Printed as one JSON object; with `--compare FILE [--ignore PATTERN ...]`,
what differs from the one kept in FILE instead (empty lists and `config_same: true` when nothing does). A pattern
(fnmatch: `*` crosses `/`) leaves out the /etc paths, packages and units it matches."""

from __future__ import annotations

import argparse
import difflib
import fnmatch
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess


def etc() -> dict[str, str]:
    out: dict[str, str] = {}
    for root, dirs, files in os.walk("/etc"):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            head = f"{stat.S_IFMT(st.st_mode):o} {stat.S_IMODE(st.st_mode):04o} {st.st_uid}:{st.st_gid}"
            if stat.S_ISLNK(st.st_mode):
                out[path] = f"{head} -> {os.readlink(path)}"
            elif path == "/etc/ld.so.cache":
                # Rebuilt by ldconfig on each library change, not byte for byte the same: what it lists is compared.
                listing = "\n".join(sorted(run(["ldconfig", "-p"]).splitlines()[1:]))
                out[path] = f"{head} ldconfig -p {hashlib.sha256(listing.encode()).hexdigest()}"
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as handle:
                    out[path] = f"{head} {hashlib.sha256(handle.read()).hexdigest()}"
            else:
                out[path] = head
    return out


def run(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    return res.stdout if res.returncode == 0 else f"rc {res.returncode}: {res.stderr.strip()}"


def read() -> dict:
    packages = dict(line.split(" ", 1) for line in run(["dpkg-query", "-W", "-f", "${Package} ${Version} ${Status}\n"]).splitlines())
    units = sorted(line.split()[0] for line in run(["systemctl", "list-unit-files", "--state=enabled", "--no-legend"]).splitlines())
    if shutil.which("containerd"):
        config = run(["containerd", "config", "dump"])
    elif os.path.exists("/usr/local/bin/crio"):
        config = run(["/usr/local/bin/crio", "config"])
    else:
        config = ""
    return {"etc": etc(), "packages": packages, "units": units, "config": config}


_IMPORTS = re.compile(r"^imports = \[(.*)\]$", re.M)


def normalise(config: str) -> str:
    """The config with its `imports` list sorted: containerd 1.x's `config dump` lists the files it loaded from a Go
    map (LoadConfig's "Fix up the list of config files loaded"), in a new order each time it runs."""
    return _IMPORTS.sub(lambda m: "imports = [" + ", ".join(sorted(i.strip() for i in m[1].split(",") if i.strip())) + "]",
                        config)


def same_config(before: str, now: str) -> bool:
    """The runtime's effective config the same: as TOML data where Python reads TOML (the order in which the runtime
    prints tables and keys is not part of its config), else as text; the imports in any order (normalise)."""
    before, now = normalise(before), normalise(now)
    if before == now:
        return True
    try:
        import tomllib
    except ImportError:  # Python 3.10 (Ubuntu 22.04): the text decides
        return False
    try:
        return tomllib.loads(before) == tomllib.loads(now)
    except tomllib.TOMLDecodeError:
        return False


def config_diff(before: str, now: str, limit: int = 60) -> list[str]:
    """What differs in the config's text, for the judge's message."""
    lines = list(difflib.unified_diff(normalise(before).splitlines(), normalise(now).splitlines(), "before", "now", n=1,
                                      lineterm=""))
    return lines[:limit]


def _installed(entry: str | None) -> bool:
    """A dpkg-query line ("VERSION WANT ok installed") of an installed package."""
    return entry is not None and entry.endswith(" ok installed")


def compare(before: dict, now: dict, ignore: list[str]) -> dict:
    def kept(name: str) -> bool:
        return not any(fnmatch.fnmatchcase(name, pattern) for pattern in ignore)

    def differ(a: dict, b: dict) -> list[str]:
        return sorted(k for k in set(a) | set(b) if kept(k) and a.get(k) != b.get(k))

    paths, names = differ(before["etc"], now["etc"]), differ(before["packages"], now["packages"])
    # A package installed before and after, at another version: apt upgraded it to satisfy an install's dependencies
    # (gcc for DKMS needs a newer libgcc-s1). An uninstall does not downgrade; these are reported, not judged.
    upgraded = [n for n in names if _installed(before["packages"].get(n)) and _installed(now["packages"].get(n))]
    return {"etc": {p: [before["etc"].get(p), now["etc"].get(p)] for p in paths},
            "packages": {n: [before["packages"].get(n), now["packages"].get(n)] for n in names if n not in upgraded},
            "upgraded": {n: [before["packages"][n].split()[0], now["packages"][n].split()[0]] for n in upgraded},
            "units": sorted(u for u in set(before["units"]) ^ set(now["units"]) if kept(u)),
            "config_same": same_config(before["config"], now["config"]),
            **({} if same_config(before["config"], now["config"]) else {"config_diff": config_diff(before["config"], now["config"])})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compare")
    parser.add_argument("--ignore", action="append", default=[])
    args = parser.parse_args()
    now = read()
    if args.compare:
        with open(args.compare, encoding="utf-8") as handle:
            print(json.dumps(compare(json.load(handle), now, args.ignore), sort_keys=True))
    else:
        print(json.dumps(now, sort_keys=True))


if __name__ == "__main__":
    main()
