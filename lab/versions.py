"""The version set (versions.yml): write each pin into the roles' defaults and argument specs, render docs/versions.md,
or (--check) say where they differ.

    python -m lab.versions            # write (make versions)
    python -m lab.versions --check    # exit 1 naming each pin that differs

A pin is a role variable: in `roles/<role>/defaults/main.yml` its line `<variable>: ...`, in the role's
`meta/argument_specs.yml` the first `default:` of the variable's entry (every entry point that declares it). Without
`after` the whole value is the version; with it, the version is what follows that text (an image name and its colon).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
VERSIONS = REPO / "versions.yml"
DOC = REPO / "docs/versions.md"
_TAG = r"[A-Za-z0-9][A-Za-z0-9._-]*"


def load(path: Path = VERSIONS) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _set_value(line: str, prefix: str, version: str, after: str | None) -> str:
    """`line` (which starts with `prefix`) with its version set to `version`."""
    value = line[len(prefix):]
    if after is None:
        return prefix + version
    new, count = re.subn(re.escape(after) + _TAG, lambda _m: after + version, value, count=1)
    if not count:
        raise ValueError(f"no {after!r} followed by a version in {line.strip()!r}")
    return prefix + new


def _pin_lines(text: str, variable: str, in_spec: bool) -> list[int]:
    """The indexes of the lines that hold the variable's value: its defaults line, or the first `default:` of each of
    its argument-spec entries."""
    lines = text.split("\n")
    if not in_spec:
        return [i for i, line in enumerate(lines) if line.startswith(f"{variable}: ")]
    found = []
    for i, line in enumerate(lines):
        m = re.match(rf"^(\s+){re.escape(variable)}:(\s+&\w+)?\s*$", line)
        if not m:
            continue
        indent = len(m.group(1))
        for j in range(i + 1, len(lines)):
            stripped = lines[j].lstrip()
            if stripped and len(lines[j]) - len(stripped) <= indent:
                break
            if re.match(r"^\s+default: ", lines[j]) and len(lines[j]) - len(stripped) == indent + 2:
                found.append(j)
                break
    return found


def apply(versions: dict[str, Any], repo: Path = REPO) -> dict[Path, str]:
    """Each file a pin is in -> its text with every pin set (only the files that change)."""
    texts: dict[Path, str] = {}
    for key, component in versions["components"].items():
        for pin in component["pins"]:
            role = repo / "roles" / pin["role"]
            for path, in_spec in ((role / "defaults/main.yml", False), (role / "meta/argument_specs.yml", True)):
                text = texts.get(path) or path.read_text(encoding="utf-8")
                lines = text.split("\n")
                where = _pin_lines(text, pin["variable"], in_spec)
                if not where:
                    raise ValueError(f"{key}: {pin['variable']} is not in {path.relative_to(repo)}")
                for i in where:
                    prefix = re.match(r"^\s*(default|[\w]+): ", lines[i])
                    assert prefix is not None
                    lines[i] = _set_value(lines[i], prefix.group(0), str(component["version"]), pin.get("after"))
                texts[path] = "\n".join(lines)
    return {path: text for path, text in texts.items() if text != path.read_text(encoding="utf-8")}


def render_doc(versions: dict[str, Any]) -> str:
    rows = []
    for component in versions["components"].values():
        variables = ", ".join(f"`{p['variable']}`" for p in component["pins"])
        source = " ".join(str(component["source"]).split())
        rows.append(f"| {component['name']} | `{component['version']}` | {variables} | {source} |")
    return "\n".join([
        "# Component versions",
        "",
        "<!-- Rendered from versions.yml by `make versions`; edit that file, not this one. -->",
        "",
        f"The versions the collection deploys by default, aligned with the {versions['set']} set. Each is the default of",
        "the role variables named; set the variable to deploy another version. A bump is one edit of `versions.yml`",
        "followed by `make versions`; the unit tests fail while a default differs from it.",
        "",
        *([" ".join(str(versions["note"]).split()), ""] if versions.get("note") else []),
        "| Component | Version | Role variables | Source |",
        "|---|---|---|---|",
        *rows,
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.versions", description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each file that differs")
    args = parser.parse_args(argv)
    versions = load()
    try:
        changes = apply(versions)
    except ValueError as exc:
        print(f"versions.yml: {exc}", file=sys.stderr)
        return 2
    doc = render_doc(versions)
    if not DOC.exists() or DOC.read_text(encoding="utf-8") != doc:
        changes[DOC] = doc
    if args.check:
        for path in sorted(changes):
            print(f"{path.relative_to(REPO)} differs from versions.yml: run make versions", file=sys.stderr)
        return 1 if changes else 0
    for path, text in sorted(changes.items()):
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
