#!/usr/bin/env python
"""Pin the NVIDIA packages whose newest version the archive lists but does not serve here.

Runs on a lab machine (the Python standard library only), after its last `apt-get update`. An archive's index can
name a version before its pool holds the files, or, from the lab's network, name one whose files answer 404 for
days (Ubuntu's 580.196.07 on 2026-12-03): apt then picks a candidate it cannot download, and an install fails on
the network, not on the collection. For each NVIDIA driver, Fabric Manager, NSCQ or IMEX source whose newest listed version
answers 404, this writes apt preferences that make the newest version the network serves the candidate of that
source's packages, and names the hole; where none is served, it says so and pins nothing. Where every newest
version downloads (a healed archive), it writes no pin and removes its own file: apt chooses as on any node.

Usage: archive_holes.py PREFERENCES_FILE. Prints one JSON object: changed, pinned ({source: [listed, pinned]}),
unserved ({source: listed}).
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable

SOURCE_NAMES = ("nvidia-graphics-drivers", "fabric-manager", "libnvidia-nscq", "nvidia-imex")
SOURCES = re.compile(rf"^({'|'.join(SOURCE_NAMES)})(-|$)")
HEADER = "# Written by the gpuops lab (lab/archive_holes.py): do not edit; it is rewritten or removed on each run.\n"


def index_files() -> list[tuple[str, str]]:
    """(file, repository URI) of each Packages index apt has fetched."""
    out = subprocess.run(["apt-get", "indextargets", "--format", "$(FILENAME)\t$(REPO_URI)", "Created-By: Packages"],
                         check=True, capture_output=True, text=True).stdout
    return [tuple(line.split("\t", 1)) for line in out.splitlines() if "\t" in line]  # type: ignore[misc]


def read_index(path: str) -> str:
    """An index as apt keeps it, compressed or not."""
    return subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True, capture_output=True, text=True).stdout


def stanzas(text: str) -> Iterable[dict[str, str]]:
    """The index's records of the NVIDIA sources: a record of one names its source in Source: or, without one, in
    Package:, so a block without any of their names is left unparsed (most of an index: main and universe)."""
    for block in text.split("\n\n"):
        if not any(name in block for name in SOURCE_NAMES):
            continue
        fields = dict(m.groups() for m in re.finditer(r"^([A-Za-z-]+):[ \t]*(.*)$", block, re.M))
        if fields.get("Package"):
            yield fields


def releases(indexes: Iterable[tuple[str, str]]) -> dict[str, dict[str, dict]]:
    """{source: {version: {"packages": set, "url": one file's URL}}} of the NVIDIA sources the indexes list."""
    found: dict[str, dict[str, dict]] = {}
    for text, uri in indexes:
        for fields in stanzas(text):
            source = fields.get("Source", fields["Package"]).split(" ")[0]
            if not SOURCES.match(source) or "Filename" not in fields:
                continue
            # Source: names the source, with its version in parentheses where the binary's differs.
            release = found.setdefault(source, {}).setdefault(fields["Version"], {"packages": set(), "url": None})
            release["packages"].add(fields["Package"])
            release["url"] = release["url"] or uri.rstrip("/") + "/" + fields["Filename"]
    return found


def dpkg_compare(a: str, b: str) -> int:
    if a == b:
        return 0
    return -1 if subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0 else 1


def served(url: str) -> bool:
    """Whether the archive serves this file here: a HEAD request; 404 (or 410) is a hole, anything else raises."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=30):
            return True
    except urllib.error.HTTPError as err:
        if err.code in (404, 410):
            return False
        raise


def upstream(version: str) -> str:
    """580.178.04 of 580.178.04-0ubuntu0.22.04.1 (and of an epoch's 1:580.178.04-1)."""
    return version.split(":", 1)[-1].rsplit("-", 1)[0]


def covers(packages: set[str], wanted: set[str], version: str, listed: str) -> bool:
    """Whether `packages` (of `version`) has each of `wanted` (of `listed`); names that carry the version
    (nvidia-firmware-580-server-580.196.07) are compared with it replaced."""
    return {p.replace(upstream(listed), upstream(version)) for p in wanted} <= packages


def plan(found: dict[str, dict[str, dict]], is_served: Callable[[str], bool],
         compare: Callable[[str, str], int] = dpkg_compare) -> tuple[dict[str, tuple[str, str, set]], dict[str, str]]:
    """({source: (listed newest, newest served, its packages)}, {source: listed newest}) for the sources with a hole."""
    pinned: dict[str, tuple[str, str, set]] = {}
    unserved: dict[str, str] = {}
    for source, versions in sorted(found.items()):
        ordered = sorted(versions, key=functools.cmp_to_key(compare), reverse=True)
        if is_served(versions[ordered[0]]["url"]):
            continue
        # An older version stands in only with every package of the listed one (the index may keep a few
        # architecture-independent ones of an older upload, which install nothing of the driver).
        wanted = versions[ordered[0]]["packages"]
        older = next((v for v in ordered[1:] if covers(versions[v]["packages"], wanted, v, ordered[0]) and is_served(versions[v]["url"])), None)
        if older is None:
            unserved[source] = ordered[0]
        else:
            pinned[source] = (ordered[0], older, versions[older]["packages"])
    return pinned, unserved


def preferences(pinned: dict[str, tuple[str, str, set]]) -> str:
    parts = [HEADER]
    for source, (listed, older, packages) in sorted(pinned.items()):
        parts.append(f"\nExplanation: {source} {listed} is in the index, but its files answer 404 from here: "
                     f"{older}, the newest served\nPackage: {' '.join(sorted(packages))}\nPin: version {older}\n"
                     "Pin-Priority: 990\n")
    return "".join(parts)


def write(path: str, content: str | None) -> bool:
    """Writes (or, for None, removes) the file; whether that changed it."""
    try:
        with open(path, encoding="utf-8") as f:
            old: str | None = f.read()
    except FileNotFoundError:
        old = None
    if old == content:
        return False
    if content is None:
        os.unlink(path)
    else:
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.write(content)
        os.chmod(path + ".tmp", 0o644)
        os.replace(path + ".tmp", path)
    return True


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} PREFERENCES_FILE", file=sys.stderr)
        return 2
    found = releases((read_index(path), uri) for path, uri in index_files() if os.path.exists(path))
    pinned, unserved = plan(found, served)
    changed = write(argv[1], preferences(pinned) if pinned else None)
    print(json.dumps({"changed": changed, "pinned": {s: [listed, older] for s, (listed, older, _packages) in pinned.items()},
                      "unserved": unserved}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
