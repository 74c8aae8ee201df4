# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The nvidia runtime in containerd's and CRI-O's configuration, and the toolkit's own config.toml.

Pure functions over file contents: each `plan_*` takes what is on disk (text, or None for a missing file)
and returns the files to write, so unit tests feed them recorded configs and the module only reads,
writes and restarts. Files we edit in place go through tomlkit, which keeps every other key, comment and
the order; after each edit the result is parsed again and compared, as plain data, with the original plus
our changes, so a formatting surprise in tomlkit can never drop or change a key of someone else's.
Files that are wholly ours (drop-ins) are written by `dump_toml`, the same on every tomlkit version.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any

try:
    import tomlkit
    from tomlkit.exceptions import ParseError

    HAS_TOMLKIT = True
except ImportError:  # pragma: no cover - the module reports missing_required_lib
    HAS_TOMLKIT = False
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 and before: tomlkit alone
    tomllib = None

__all__ = ["HAS_TOMLKIT"]

CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3_RUNTIME = "io.containerd.cri.v1.runtime"
DEFAULT_RUNTIME_TYPE = "io.containerd.runc.v2"
CDI_MIN = (1, 7, 0)
# containerd before 2.1 merges an imported file's plugin section over the main file's by key (the whole
# section is replaced, containerd issue #5837), so a drop-in for it carries a copy of the section.
DEEP_MERGE_MIN = (2, 1, 0)
# containerd 2.3 reads and writes config version 4 (and converts 2 and 3 when it starts).
CONFIG_V4_MIN = (2, 3, 0)
# A RuntimeClass handler must be a DNS-1123 label.
RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
CDI_CHOICES = ("auto", "enable", "skip")
TOOLKIT_MODES = ("auto", "cdi", "legacy", "jit-cdi", "csv")
# NRI mode: CDI devices injected by an NRI plugin, no nvidia runtime. The runtime must apply an NRI plugin's CDI device
# adjustment (containerd/nri's ContainerAdjustment.AddCDIDevice): containerd 1.7.30 and later 1.7 releases, 2.1 and
# later (2.0 has none); CRI-O 1.34 and later (docs/nri.md).
NRI_PLUGIN = "io.containerd.nri.v1.nri"
NRI_CONTAINERD_17_MIN = (1, 7, 30)
NRI_CONTAINERD_MIN = (2, 1, 0)
NRI_CRIO_MIN = (1, 34, 0)


class ConfigError(Exception):
    """Input or a file that cannot work; the message names it.

    `option` is the module option the message is about (the message is then shown as "<option>: <message>");
    `named` shows it under the name the user set instead (a role's variable).
    """

    def __init__(self, message: str, option: str = "") -> None:
        super().__init__(f"{option}: {message}" if option else message)
        self.message = message
        self.option = option

    def named(self, names: Mapping[str, str] | None) -> str:
        if self.option and names and names.get(self.option):
            return f"{names[self.option]}: {self.message}"
        return str(self)


def detect_runtime(wanted: str, found: list[str]) -> str:
    """The runtime to configure: the one named, which must be installed, or the one installed."""
    if wanted != "auto":
        if wanted not in found:
            raise ConfigError(f"{wanted} is not installed on this node (no {wanted} executable in PATH; found: "
                              f"{', '.join(found) or 'none'}); name the runtime kubelet uses, or auto", "runtime")
        return wanted
    if len(found) == 1:
        return found[0]
    if not found:
        raise ConfigError("auto found neither containerd nor crio on this node; install one, or name it", "runtime")
    raise ConfigError("auto found both containerd and crio on this node; name the one kubelet uses", "runtime")


# ----------------------------------------------------------------------------------------------
# TOML helpers


def parse(text: str | None, path: str) -> Any:
    """The tomlkit document of a file's text (an empty document for a missing file)."""
    try:
        return tomlkit.parse(text or "")
    except ParseError as exc:
        raise ConfigError(f"{path} does not parse as TOML at line {exc.line}, column {exc.col}: {exc}") from exc


def read(text: str | None, path: str) -> dict:
    """A file's text as plain data, for reading only (an empty dict for a missing file). tomllib where the Python has
    it: it parsed `containerd config default` 25 times faster than tomlkit, and gpu_info's read of a node parses
    containerd's files on every run. A text tomllib refuses goes to tomlkit, whose answer (or message) stands."""
    if tomllib is not None:
        try:
            return tomllib.loads(text or "")
        except tomllib.TOMLDecodeError:
            pass
    return plain(parse(text, path))


def plain(value: Any) -> Any:
    """tomlkit items as plain Python values (dict, list, bool, int, float, str)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, bool):
        return value
    if type(value).__name__ == "Bool":  # tomlkit < 0.11: not a bool subclass
        return bool(value.value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def get_path(data: Any, path: tuple[str, ...]) -> Any:
    """The value at a key path of plain data, or None."""
    node = data
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def merged(base: Mapping, over: Mapping) -> dict:
    """A deep merge of two plain tables, `over` winning (how containerd and CRI-O merge their files)."""
    out = copy.deepcopy(dict(base))
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _set_plain(data: dict, path: tuple[str, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data.setdefault(key, {})
    if value is None:
        data.pop(path[-1], None)
    else:
        data[path[-1]] = copy.deepcopy(value)


def _apply(table: Any, desired: Mapping) -> None:
    """Make a tomlkit table hold `desired`'s keys, touching only the keys whose value differs."""
    for key, value in desired.items():
        current = table.get(key)
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            _apply(current, value)
        elif current is None or plain(current) != value:
            table[key] = value


def _table_at(doc: Any, path: tuple[str, ...]) -> Any:
    """The tomlkit table at a key path, created (as implicit super tables where possible) when missing."""
    node = doc
    for key in path:
        child = node.get(key)
        if child is None:
            child = tomlkit.table()
            node[key] = child
        elif not isinstance(child, Mapping):
            raise ConfigError(f"{'.'.join(path)}: {key} is a {type(plain(child)).__name__}, not a table")
        node = child
    return node


class Editor:
    """In-place edits of one TOML file, proven by `finish`.

    Each edit is recorded and applied to plain data (`expected`: the old content plus exactly our changes).
    `finish` first lets tomlkit make the edits (it keeps comments, order and layout); when tomlkit raises or
    its text does not parse back to `expected` (tomlkit versions differ with tables written out of order: a
    sub-table before its parent, one table's sub-tables apart), the same edits are made on the text's lines
    (a key line replaced or put under its table's header, a missing table appended). The text that parses
    back to `expected` wins; if neither does, the file is refused, never written half-right.
    """

    def __init__(self, text: str | None, path: str) -> None:
        self.path = path
        self.text = text
        self.before = read(text, path)
        self.expected = copy.deepcopy(self.before)
        self.edits: list[tuple[str, tuple[str, ...], Any]] = []

    def set(self, path: tuple[str, ...], value: Any) -> None:
        current = get_path(self.expected, path)
        new = merged(current, value) if isinstance(value, Mapping) and isinstance(current, Mapping) else value
        if current == new:
            return
        self.edits.append(("set", path, value))
        _set_plain(self.expected, path, new)

    def remove(self, path: tuple[str, ...]) -> None:
        if get_path(self.expected, path) is None:
            return
        self.edits.append(("remove", path, None))
        _set_plain(self.expected, path, None)

    def prepend(self, key: str, value: Any) -> None:
        """A top-level key placed before the first table (TOML requires it there)."""
        if self.expected.get(key) == value:
            return
        self.edits.append(("top", (key,), value))
        self.expected[key] = copy.deepcopy(value)

    def finish(self) -> str:
        """The new text, after proving that it parses to the old content plus exactly our changes."""
        if not self.edits:
            return self.text if self.text is not None else ""
        tried = []
        for method in (self._with_tomlkit, self._with_lines):
            try:
                text = method()
            except (ConfigError, tomlkit.exceptions.TOMLKitError, KeyError, ValueError, TypeError) as exc:
                tried.append(f"{exc}")
                continue
            try:
                again = plain(tomlkit.parse(text))
            except tomlkit.exceptions.TOMLKitError as exc:
                tried.append(f"the result does not parse: {exc}")
                continue
            if again == self.expected:
                return text
            tried.append("the result differs from the old content plus our keys")
        raise ConfigError(f"cannot edit {self.path} in place without changing what else it holds ({tried[-1]}); "
                          "write the nvidia runtime to a drop-in file instead")

    # -- tomlkit: keeps the layout exactly, but its handling of out-of-order tables varies by version.
    def _with_tomlkit(self) -> str:
        doc = tomlkit.parse(self.text or "")
        for op, path, value in self.edits:
            if op == "top":
                doc = _tomlkit_prepend(doc, path[0], value)
                continue
            parent = _table_at(doc, path[:-1])
            if op == "remove":
                del parent[path[-1]]
                continue
            current = parent.get(path[-1])
            if isinstance(value, Mapping) and isinstance(current, Mapping):
                _apply(current, value)
            else:
                parent[path[-1]] = value
        return tomlkit.dumps(doc)

    # -- lines: every edit is a line replaced, removed or added under the table's one header, or a new table.
    def _with_lines(self) -> str:
        lines = (self.text or "").splitlines()
        appended: dict[tuple[str, ...], list[str]] = {}
        for op, path, value in self.edits:
            if op == "top":
                _line_set(lines, (), path[0], value, top=True)
            elif op == "remove":
                if not _line_remove(lines, path[:-1], path[-1]):
                    raise ConfigError(f"{'.'.join(path)} is not a one-line key under its own table header")
            else:
                for leaf, leaf_value in _leaves(path, value):
                    table, key = leaf[:-1], leaf[-1]
                    if table in appended:
                        appended[table].append(f"  {_key(key)} = {_scalar(leaf_value, '.'.join(leaf))}")
                    elif not _line_set(lines, table, key, leaf_value):
                        appended[table] = [f"  {_key(key)} = {_scalar(leaf_value, '.'.join(leaf))}"]
        for table, body in appended.items():
            lines += ["", f"[{'.'.join(_key(k) for k in table)}]", *body]
        return "\n".join(lines) + "\n"


def _tomlkit_prepend(doc: Any, key: str, value: Any) -> Any:
    if key in doc:
        doc[key] = value
        return doc
    body = doc.body
    index = next((i for i, (k, item) in enumerate(body) if k is not None and isinstance(item, Mapping)), len(body))
    fresh = tomlkit.document()
    fresh[key] = value
    body.insert(index, fresh.body[0])
    # Re-parse so tomlkit's key map knows the inserted key.
    return tomlkit.parse(tomlkit.dumps(doc))


def _leaves(path: tuple[str, ...], value: Any) -> list[tuple[tuple[str, ...], Any]]:
    if not isinstance(value, Mapping):
        return [(path, value)]
    return [leaf for k, v in value.items() for leaf in _leaves((*path, k), v)]


_HEADER = re.compile(r"^\s*\[(?!\[)(.*)\]\s*(#.*)?$")


def _header_path(line: str) -> tuple[str, ...] | None:
    """The key path of a `[table]` header line, None for any other line."""
    m = _HEADER.match(line)
    if not m:
        return None
    try:
        node: Any = plain(tomlkit.parse(f"[{m.group(1)}]\n"))
    except tomlkit.exceptions.TOMLKitError:
        return None
    path: list[str] = []
    while isinstance(node, Mapping) and len(node) == 1:
        key = next(iter(node))
        path.append(key)
        node = node[key]
    return tuple(path)


def _table_lines(lines: list[str], table: tuple[str, ...], top: bool = False) -> tuple[int, int] | None:
    """The line range (start, end) of a table's own keys: after its one header, up to the next header."""
    headers = [(i, _header_path(line)) for i, line in enumerate(lines)]
    headers = [(i, p) for i, p in headers if p is not None or lines[i].lstrip().startswith("[[")]
    if top:
        return 0, headers[0][0] if headers else len(lines)
    own = [i for i, p in headers if p == table]
    if len(own) != 1:
        return None
    start = own[0] + 1
    end = next((i for i, _path in headers if i > own[0]), len(lines))
    return start, end


def _key_line(lines: list[str], start: int, end: int, key: str) -> int | None:
    pattern = re.compile(r"^\s*(" + re.escape(key) + "|" + re.escape(json.dumps(key)) + r")\s*=")
    return next((i for i in range(start, end) if pattern.match(lines[i])), None)


def _line_set(lines: list[str], table: tuple[str, ...], key: str, value: Any, top: bool = False) -> bool:
    """Set a one-line key under the table's header; False when the table has no header of its own."""
    span = _table_lines(lines, table, top)
    if span is None:
        return False
    start, end = span
    text = f"{_key(key)} = {_scalar(value, '.'.join((*table, key)))}"
    found = _key_line(lines, start, end, key)
    if found is not None:
        indent = lines[found][: len(lines[found]) - len(lines[found].lstrip())]
        lines[found] = indent + text
        return True
    if top:
        lines.insert(start if start == 0 else end, text)
        return True
    # Indented like the table's first key, or the header plus two spaces.
    first = next((lines[i] for i in range(start, end) if lines[i].strip() and not lines[i].lstrip().startswith("#")), None)
    header = lines[start - 1]
    indent = (first[: len(first) - len(first.lstrip())] if first is not None
              else header[: len(header) - len(header.lstrip())] + "  ")
    lines.insert(start, indent + text)
    return True


def _line_remove(lines: list[str], table: tuple[str, ...], key: str) -> bool:
    span = _table_lines(lines, table)
    found = _key_line(lines, *span, key) if span else None
    if found is None:
        return False
    del lines[found]
    return True


def _key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key)


def _scalar(value: Any, where: str) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v, where) for v in value) + "]"
    raise ConfigError(f"{where}: a {type(value).__name__} value cannot be written to a drop-in")


def dump_toml(data: Mapping, header: str = "") -> str:
    """Plain nested tables as TOML: dotted table headers, indented two spaces a level like containerd's."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]

    def emit(table: Mapping, path: list[str], level: int) -> None:
        indent = "  " * level
        scalars = [(k, v) for k, v in table.items() if not isinstance(v, Mapping)]
        tables = [(k, v) for k, v in table.items() if isinstance(v, Mapping)]
        if path and (scalars or not tables):
            lines.append("")
            lines.append(f"{indent}[{'.'.join(_key(k) for k in path)}]")
            level += 1
        for k, v in scalars:
            lines.append(f"{'  ' * level}{_key(k)} = {_scalar(v, '.'.join([*path, k]))}")
        for k, v in tables:
            emit(v, [*path, k], level)

    emit(data, [], -1)
    return "\n".join(lines).lstrip("\n") + "\n"


# ----------------------------------------------------------------------------------------------
# containerd


def containerd_version(output: str) -> tuple[int, int, int]:
    """(major, minor, patch) from `containerd --version`."""
    # "containerd github.com/containerd/containerd/v2 2.2.1 <rev>", "containerd containerd.io 1.7.27 <rev>",
    # Debian: "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3".
    for word in output.split()[1:]:
        m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", word)
        if m:
            return int(m.group(1)), int(m.group(2)), int(m.group(3))
    raise ConfigError(f"cannot read a version from `containerd --version`: {output.strip()!r}")


def crio_version(output: str) -> tuple[int, int, int]:
    """(major, minor, patch) from `crio --version` ("crio version 1.34.1") or `crio version` ("Version:  1.33.4")."""
    m = re.search(r"(?im)^\s*(?:crio\s+)?version:?\s+v?(\d+)\.(\d+)\.(\d+)", output)
    if not m:
        raise ConfigError(f"cannot read a version from `crio --version`: {output.strip()!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def check_nri_support(runtime: str, version: tuple[int, int, int], cdi: str) -> list[str]:
    """NRI mode's refusals, before anything is written: a runtime that cannot inject an NRI plugin's CDI devices, and
    CDI left off (the plugin's devices are CDI devices). Returns the warnings (none)."""
    text = ".".join(map(str, version))
    if runtime == "containerd":
        supported = version >= NRI_CONTAINERD_MIN or (version[:2] == (1, 7) and version >= NRI_CONTAINERD_17_MIN)
        if not supported:
            raise ConfigError(f"nri needs containerd 1.7.30 or a later 1.7, or 2.1 or later (their NRI applies a plugin's "
                              f"CDI devices); this node has containerd {text}. Upgrade containerd, or use another mode",
                              "nri")
    elif version < NRI_CRIO_MIN:
        raise ConfigError(f"nri needs CRI-O 1.34 or later (its NRI applies a plugin's CDI devices); this node has CRI-O "
                          f"{text}. Upgrade CRI-O, or use another mode", "nri")
    if cdi == "skip":
        raise ConfigError("skip leaves CDI as the runtime has it, and NRI mode injects CDI devices: use auto or enable "
                          "with nri", "cdi")
    return []


def config_version(data: Mapping) -> int | None:
    """The `version` of a containerd config: None for an empty file, 1 for content without one."""
    if not data:
        return None
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ConfigError(f"version = {version!r} is not an integer")
    return version


def expected_config_version(version: tuple[int, int, int]) -> int:
    """The config version this containerd writes: 4 from 2.3 on, 3 for 2.0 to 2.2, 2 for 1.x.

    Version 4 moves the server settings ([grpc], [ttrpc], [debug], [metrics]) into plugins; the CRI plugins keep
    version 3's ids, so the nvidia runtime is written the same way in both.
    """
    if version >= CONFIG_V4_MIN:
        return 4
    return 3 if version >= (2, 0, 0) else 2


def runtime_plugin(cfg_version: int) -> str:
    return CRI_V3_RUNTIME if cfg_version >= 3 else CRI_V2


def runtime_to_copy(runtimes: Mapping, candidates: tuple[str, ...], name: str) -> dict | None:
    """A copy of the first candidate runtime table that exists and is not nvidia's own - what nvidia-ctk
    copies the nvidia runtime's options from, so SystemdCgroup, Root, the monitor carry over."""
    for candidate in candidates:
        if candidate != name and not candidate.startswith("nvidia") and isinstance(runtimes.get(candidate), Mapping):
            return copy.deepcopy(dict(runtimes[candidate]))
    return None


def inherited_runtime(data: Mapping, plugin: str, name: str) -> dict | None:
    """containerd's runtime to copy: the default runtime, else runc, else crun."""
    containerd = get_path(data, ("plugins", plugin, "containerd")) or {}
    default = containerd.get("default_runtime_name") or "runc"
    return runtime_to_copy(containerd.get("runtimes") or {}, (default, "runc", "crun"), name)


def without_zero_values(table: Mapping | None) -> dict | None:
    """A table without its empty, false and zero keys: in containerd's defaults those are Go's zero values,
    the same as leaving the key out, and copying them would only pin today's defaults into the file."""
    if table is None:
        return None
    out = {}
    for key, value in table.items():
        if isinstance(value, Mapping):
            value = without_zero_values(value)
        if value not in ("", 0, False, [], {}, None) or value is True:
            out[key] = value
    return out


def nvidia_runtime(inherited: Mapping | None, runtime_path: str, extra: Mapping) -> dict:
    table = dict(copy.deepcopy(inherited)) if inherited else {}
    table["runtime_type"] = table.get("runtime_type") or DEFAULT_RUNTIME_TYPE
    options = dict(table.get("options") or {})
    options["BinaryName"] = runtime_path
    table["options"] = options
    return merged(table, extra)


def _check_runtime_name(name: str, what: str = "runtime_name") -> None:
    if not RUNTIME_NAME.match(name):
        raise ConfigError(f"{name!r} is not a valid runtime handler name; a RuntimeClass handler is a "
                          "DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)", what)


def _check_path(value: str, what: str) -> None:
    if not value.startswith("/"):
        raise ConfigError(f"{value!r} is not an absolute path", what)


DEFAULT_CHOICES = ("keep", "true", "false")
# Runtime types that run runc (or a runc-compatible binary through BinaryName): an existing runtime of our name
# with another type (gVisor's io.containerd.runsc.v1, Kata's shims) is somebody else's sandbox, never rewritten.
RUNC_TYPES = ("", "io.containerd.runc.v2", "io.containerd.runc.v1", "io.containerd.runtime.v1.linux")


def default_choice(value: Any) -> str:
    """set_as_default as one of keep/true/false (YAML booleans accepted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = str(value).strip().lower()
    text = {"yes": "true", "on": "true", "1": "true", "no": "false", "off": "false", "0": "false"}.get(text, text)
    if text not in DEFAULT_CHOICES:
        raise ConfigError(f"{value!r} is not one of keep (leave the default runtime as it is), true, false", "set_as_default")
    return text


def check_existing_runtime(data: Mapping, plugin: str, name: str, where: str) -> None:
    """Refuse to turn a runtime of our name that is not runc-based into ours."""
    existing = get_path(data, ("plugins", plugin, "containerd", "runtimes", name))
    if not isinstance(existing, Mapping):
        return
    kind = existing.get("runtime_type") or ""
    if kind not in RUNC_TYPES:
        options = sorted((existing.get("options") or {}).keys()) if isinstance(existing.get("options"), Mapping) else []
        raise ConfigError(
            f"{where} already defines a runtime {name!r} of type {kind}" + (f" (options {', '.join(options)})" if options else "")
            + ", which is not runc-based: it is not ours to rewrite. Name the nvidia runtime differently, or remove that "
            "runtime first", "runtime_name")


def check_containerd_inputs(*, version: tuple[int, int, int], drop_in_path: str = "", name: str = "nvidia",
                            runtime_path: str = "/usr/bin/nvidia-container-runtime", set_as_default: bool | str = "keep",
                            cdi: str = "auto", cdi_spec_dirs: list[str] | None = None,
                            runtime_config: Mapping | None = None, nri: bool = False) -> list[str]:
    """The inputs of `plan_containerd` that can be judged without reading the config (no tomlkit needed): raises
    ConfigError for one that cannot work; returns the warnings."""
    _check_runtime_name(name)
    _check_path(runtime_path, "runtime_path")
    default_choice(set_as_default)
    if cdi not in CDI_CHOICES:
        raise ConfigError(f"{cdi!r} is not one of {', '.join(CDI_CHOICES)}", "cdi")
    for d in cdi_spec_dirs or []:
        _check_path(d, "cdi_spec_dirs")
    if drop_in_path:
        _check_path(drop_in_path, "drop_in")
        if not drop_in_path.endswith(".toml"):
            raise ConfigError(f"{drop_in_path!r} must end in .toml", "drop_in")
    extra = dict(runtime_config or {})
    if "options" in extra and not isinstance(extra["options"], Mapping):
        raise ConfigError(f"options must be a table, not {extra['options']!r}", "runtime_config")
    version_text = ".".join(map(str, version))
    if nri:
        check_nri_support("containerd", version, cdi)
    if cdi == "enable" and version < CDI_MIN:
        raise ConfigError(f"enable needs containerd 1.7 or later; this node has containerd {version_text}, "
                          "which has no CDI support (use auto or skip, or upgrade containerd)", "cdi")
    if cdi == "auto" and version < CDI_MIN:
        return [f"containerd {version_text} has no CDI support: the nvidia runtime is configured without it"]
    return []


def plan_containerd(*, version: tuple[int, int, int], main_path: str, main_text: str | None,
                    defaults: Callable[[], str | None] | None = None, drop_in_path: str = "", drop_in_text: str | None = None,
                    name: str = "nvidia", runtime_path: str = "/usr/bin/nvidia-container-runtime",
                    set_as_default: bool | str = "keep", cdi: str = "auto", cdi_spec_dirs: list[str] | None = None,
                    runtime_config: Mapping | None = None, imports: list[tuple[str, str | None]] | None = None,
                    nri: bool = False) -> dict:
    """The containerd files to write for the nvidia runtime; with `nri`, for NRI mode instead: NRI and CDI enabled,
    no runtime added and the default runtime left as it is.

    `imports`: the files containerd reads after the main one through its imports (containerd 2.x also reads
    /etc/containerd/conf.d/*.toml), in order, as (path, text or None when missing); our drop-in among them is
    skipped unless somebody else wrote it. Decisions rest on what containerd reads from all of them, and the
    result is checked the same way: our runtime as wanted, the default runtime defined.

    Returns files (path -> new text), config_version, plugin, cdi_enabled, cdi_supported and warnings.
    Raises ConfigError, before anything is written, for input that cannot work and for a result containerd
    would refuse (its CRI plugin's default runtime not defined) or would not apply (an import overriding it).
    """
    warnings = check_containerd_inputs(version=version, drop_in_path=drop_in_path, name=name, runtime_path=runtime_path,
                                       set_as_default=set_as_default, cdi=cdi, cdi_spec_dirs=cdi_spec_dirs,
                                       runtime_config=runtime_config, nri=nri)
    as_default = default_choice(set_as_default)
    extra = dict(runtime_config or {})
    version_text = ".".join(map(str, version))
    cdi_supported = version >= CDI_MIN
    main = Editor(main_text, main_path)
    cfg = config_version(main.before)
    wanted = expected_config_version(version)
    if cfg is None:
        cfg = wanted
    elif cfg == 1:
        raise ConfigError(f"{main_path} is a version 1 config (no `version` key); migrate it first with "
                          f"`containerd config migrate` (containerd {version_text} writes version {wanted})")
    elif cfg > wanted:
        raise ConfigError(f"{main_path} is a version {cfg} config, which containerd {version_text} does not read "
                          f"(it reads version {wanted} and older)")
    elif cfg < wanted:
        warnings.append(f"{main_path} is a version {cfg} config; containerd {version_text} converts it to version "
                        f"{wanted} when it starts, so the nvidia runtime is written in version {cfg} form")
    plugin = runtime_plugin(cfg)
    if cfg == 2 and version >= (2, 0, 0) and isinstance(get_path(main.before, ("plugins", CRI_V3_RUNTIME)), Mapping):
        # A version 2 file that already uses 2.x's plugin ids (AKS writes such files): containerd 2.x reads the
        # runtimes from that section, and what sits under the old id is not migrated into it.
        plugin = CRI_V3_RUNTIME
        warnings.append(f"{main_path} is a version 2 config with containerd 2.x's {CRI_V3_RUNTIME} section: the nvidia "
                        "runtime is written there, where containerd 2.x reads runtimes")
    disabled = [p for p in (main.before.get("disabled_plugins") or []) if p in (plugin, CRI_V2, "cri")]
    if disabled:
        raise ConfigError(f"{main_path} disables containerd's CRI plugin (disabled_plugins: {', '.join(disabled)}): kubelet "
                          "cannot run pods through this containerd, so there is no runtime of it to add nvidia to; enable the "
                          "CRI plugin (remove it from disabled_plugins) first")
    base = ("plugins", plugin)
    containerd_path = (*base, "containerd")
    # Decisions rest on what containerd reads: the main file and its imports. Our drop-in is written afresh each
    # run; a file at its path that somebody else wrote (nvidia-ctk's own 99-nvidia.toml) is never replaced.
    if drop_in_path and drop_in_text and OURS not in drop_in_text.split("\n", 1)[0]:
        raise ConfigError(f"{drop_in_path} exists and was not written by this module (nvidia-ctk writes its drop-in there): "
                          "it is not ours to replace. Name another drop-in, loaded after it, or remove it", "drop_in")
    others = [(path, read(text, path)) for path, text in imports or []
              if text is not None and path != drop_in_path and text.strip()]
    before = effective(main.before, [data for _path, data in others], version)
    missing = [path for path, text in imports or [] if text is None and "*" not in path]
    if drop_in_path and missing:
        raise ConfigError(f"{main_path} imports {', '.join(missing)}, which does not exist: containerd stops reading imports "
                          f"there, so the drop-in {drop_in_path} would not be read. Create the file, or edit the main file in "
                          "place", "drop_in")
    if not nri:
        check_existing_runtime(before, plugin, name, main_path)
    if cdi == "skip":
        current = get_path(before, (*base, "enable_cdi"))
        enable_cdi = bool(current) if current is not None else version >= (2, 0, 0)
    else:
        enable_cdi = cdi_supported

    default_data: dict | None = None

    def containerd_defaults() -> dict:
        nonlocal default_data
        if default_data is None:
            text = defaults() if defaults is not None else None
            default_data = read(text, "containerd config default") if text else {}
        return default_data

    def default_runtime_table(runtime: str) -> dict | None:
        data = containerd_defaults()
        table = get_path(data, ("plugins", runtime_plugin(config_version(data) or wanted), "containerd", "runtimes", runtime))
        if isinstance(table, Mapping):
            return without_zero_values(table)
        # Without `containerd config default` (an image built elsewhere), runc as containerd defines it.
        return {"runtime_type": DEFAULT_RUNTIME_TYPE} if runtime == "runc" and not data else None

    # Options come from the main file's default runtime, or from containerd's defaults when it has none.
    changes: list[tuple[tuple[str, ...], Any]] = []
    runtime: dict = {}
    if nri:
        # NRI mode: the runtime's NRI plugin on (containerd 2.x has it on by default, 1.7 off), nothing else but CDI.
        changes.append((("plugins", NRI_PLUGIN, "disable"), False))
    else:
        inherited = inherited_runtime(before, plugin, name)
        if inherited is None:
            inherited = default_runtime_table("runc")
        runtime = nvidia_runtime(inherited, runtime_path, extra)
        changes.append(((*containerd_path, "runtimes", name), runtime))
    current_default = get_path(before, (*containerd_path, "default_runtime_name"))
    if nri:
        pass  # the default runtime is not ours to change in NRI mode
    elif as_default == "true":
        changes.append(((*containerd_path, "default_runtime_name"), name))
    elif as_default == "false" and current_default == name:
        # Fall back to containerd's own default, named, so the drop-in layout overrides the main file too.
        changes.append(((*containerd_path, "default_runtime_name"), "runc"))
    if enable_cdi and cdi != "skip":
        changes.append(((*base, "enable_cdi"), True))
        if cdi_spec_dirs:
            changes.append(((*base, "cdi_spec_dirs"), list(cdi_spec_dirs)))

    # The CRI plugin's default runtime must stay defined: a config that names any runtime replaces containerd's
    # built-in ones, so once ours is written, a default that was only built in (runc) is written too.
    after = copy.deepcopy(before)
    for path, value in changes:
        _set_plain(after, path, merged(get_path(after, path) or {}, value) if isinstance(value, Mapping) else value)
    fallback = get_path(after, (*containerd_path, "default_runtime_name")) or "runc"
    if not nri and not isinstance(get_path(after, (*containerd_path, "runtimes", fallback)), Mapping):
        table = default_runtime_table(fallback)
        if table is None:
            raise ConfigError(
                f"the CRI plugin's default runtime {fallback!r} ({'.'.join((*containerd_path, 'default_runtime_name'))}) "
                f"is not defined in {main_path}"
                + (" nor in containerd's defaults" if defaults is not None else "")
                + ": containerd would refuse to start the CRI plugin. Define that runtime, or set the default runtime")
        changes.insert(0, ((*containerd_path, "runtimes", fallback), table))

    what = "NRI and CDI for NRI mode" if nri else f"the {name} runtime"
    files: dict[str, str] = {}
    # The main file's keys changed, with their value before (None: absent): what a removal puts back.
    edits: list[tuple[tuple[str, ...], Any, Any]] = []
    if not drop_in_path and not main.before:
        # No config yet: the file is wholly ours.
        whole: dict = {"version": cfg}
        for path, value in changes:
            _set_plain(whole, path, value)
        files[main_path] = dump_toml(whole, header=f"Written by gpuops.nvidia container_runtime: {what}.")
    elif not drop_in_path:
        for path, value in changes:
            if path[-1] == "default_runtime_name" and value == "runc" and as_default == "false":
                main.remove(path)  # in place, containerd's own default needs no key
            else:
                main.set(path, value)
            edits.append((path, get_path(main.before, path), None if path[-1] == "default_runtime_name" and value == "runc"
                          and as_default == "false" else value))
        files[main_path] = main.finish()
    else:
        drop: dict = {"version": cfg}
        if version < DEEP_MERGE_MIN:
            for copied in (base, ("plugins", NRI_PLUGIN)) if nri else (base,):
                section = get_path(before, copied)
                if isinstance(section, Mapping):
                    _set_plain(drop, copied, section)
        for path, value in changes:
            current = get_path(drop, path)
            _set_plain(drop, path, merged(current, value) if isinstance(current, Mapping) else value)
        files[drop_in_path] = dump_toml(drop, header=(
            f"Written by gpuops.nvidia container_runtime: {what} for containerd.\n"
            + (f"It carries a copy of the {'CRI and NRI sections' if nri else 'CRI section'} containerd read from the main "
               "config and its imports, because\n"
               "containerd before 2.1 lets an imported file's section replace the earlier ones (containerd issue #5837).\n"
               if version < DEEP_MERGE_MIN else "")))
        imports = main.before.get("imports") or []
        if not any(fnmatch.fnmatch(drop_in_path, pattern) for pattern in imports):
            pattern = os.path.join(os.path.dirname(drop_in_path), "*.toml")
            if not main.before:
                main.prepend("version", cfg)
            main.prepend("imports", [*imports, pattern])
            edits.append((("imports",), main.before.get("imports"), [*imports, pattern]))
        files[main_path] = main.finish()
    check_result(files, main_path=main_path, main_text=main_text, drop_in_path=drop_in_path, others=others,
                 version=version, base=base, name=name, changes=changes)
    files = {p: t for p, t in files.items() if t != (drop_in_text if p == drop_in_path else main_text)}
    if main_path not in files:
        edits = []
    return {"files": files, "config_version": cfg, "plugin": plugin, "cdi_enabled": enable_cdi,
            "cdi_supported": cdi_supported, "warnings": warnings, "runtime": runtime, "edits": edits, "nri": nri}


OURS = "Written by gpuops.nvidia container_runtime"


# ----------------------------------------------------------------------------------------------
# Removal: the record of what was changed, and putting it back


def digest(text: str | None) -> str | None:
    """The SHA-256 of a file's text, None for a missing file."""
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def recorded(record: Mapping | None, *, main_path: str, before: str | None, after: str, backup: str,
             edits: list[tuple[tuple[str, ...], Any, Any]]) -> dict:
    """The record after a write of the main file: its first state (digest and backup) and each key's first value are
    kept from the first change on; the digest of what was last written and the values set are updated."""
    out = copy.deepcopy(dict(record or {}))
    entry = out.get(main_path) or {"original": digest(before), "backup": backup, "keys": {}}
    entry["written"] = digest(after)
    for path, old, value in edits:
        key = json.dumps(list(path))
        if key in entry["keys"]:
            entry["keys"][key]["ours"] = value
        else:
            entry["keys"][key] = {"before": old, "ours": value}
    out[main_path] = entry
    return out


def _ours_now(current: Any, key: Mapping) -> bool:
    """Whether a key still holds what was set (a table merged over what was there)."""
    ours = key.get("ours")
    if isinstance(ours, Mapping):
        return isinstance(current, Mapping) and current == merged(key.get("before") or {}, ours)
    return current == ours


def plan_containerd_removal(*, main_path: str, main_text: str | None, drop_in_path: str, drop_in_text: str | None,
                            entry: Mapping | None, backup_text: str | None, name: str = "nvidia",
                            runtime_path: str = "/usr/bin/nvidia-container-runtime") -> dict:
    """What puts containerd's config back as it was: files (path -> text, or None to remove), restored_from (the backup
    put back whole, or ""), warnings.

    The drop-in goes when it is ours. The main file: when it still holds exactly what was last written (the record's
    digest), it is put back whole (removed when it did not exist, else its backup when that is the original); when
    somebody changed it since, each key goes back to its first value where it still holds ours, and our entry leaves
    `imports`; without a record (a change made before records were kept), only our runtime table goes, and only when it
    is not the default runtime.
    """
    files: dict[str, str | None] = {}
    warnings: list[str] = []
    if drop_in_path and drop_in_text is not None:
        if OURS in drop_in_text.split("\n", 1)[0]:
            files[drop_in_path] = None
        else:
            warnings.append(f"{drop_in_path} was not written by this module: left as it is")
    if main_text is None:
        return {"files": files, "restored_from": "", "warnings": warnings}
    if entry and digest(main_text) == entry.get("written"):
        if entry.get("original") is None:
            files[main_path] = None
            return {"files": files, "restored_from": "", "warnings": warnings}
        if backup_text is not None and digest(backup_text) == entry.get("original"):
            files[main_path] = backup_text
            return {"files": files, "restored_from": str(entry.get("backup") or ""), "warnings": warnings}
    if not entry and runtime_path not in main_text:
        # Nothing of ours in it (an uninstall that already ran: tomlkit may be gone with the toolkit's packages).
        return {"files": files, "restored_from": "", "warnings": warnings}
    if not HAS_TOMLKIT:
        raise ConfigError(f"{main_path} holds changes of this module that only tomlkit (python3-tomlkit) can take out")
    main = Editor(main_text, main_path)
    if entry:
        for key, value in (entry.get("keys") or {}).items():
            path = tuple(json.loads(key))
            current = get_path(main.before, path)
            if current == value.get("before"):
                continue
            if _ours_now(current, value):
                main.remove(path)
                if value.get("before") is not None:
                    main.set(path, value["before"])
            elif path == ("imports",) and isinstance(current, list):
                ours = [p for p in value.get("ours") or [] if p not in (value.get("before") or [])]
                left = [p for p in current if p not in ours]
                if left != current:
                    main.set(path, left)
            else:
                warnings.append(f"{main_path}: {'.'.join(path)} was changed since this module set it: left as it is")
    else:
        for plugin in (CRI_V2, CRI_V3_RUNTIME):
            runtimes = ("plugins", plugin, "containerd", "runtimes")
            table = get_path(main.before, (*runtimes, name))
            if not isinstance(table, Mapping) or get_path(table, ("options", "BinaryName")) != runtime_path:
                continue
            if get_path(main.before, ("plugins", plugin, "containerd", "default_runtime_name")) == name:
                warnings.append(f"{main_path}: the {name} runtime is the default runtime; left as it is (no record of what "
                                "the default was before)")
                continue
            main.remove((*runtimes, name))
        if drop_in_path:
            warnings.append(f"{main_path}: its imports are left as they are (no record of which entry this module added)")
    text = main.finish()
    if text != main_text:
        files[main_path] = text
    return {"files": files, "restored_from": "", "warnings": warnings}


def effective(main: Mapping, imported: list[Mapping], version: tuple[int, int, int]) -> dict:
    """What containerd reads from a main file and its imports, in order: before 2.1 an imported file's plugin
    section replaces the earlier one whole (containerd issue #5837); from 2.1 they merge key by key."""
    out = copy.deepcopy(dict(main))
    for data in imported:
        if version >= DEEP_MERGE_MIN:
            out = merged(out, data)
            continue
        plugins = {**dict(out.get("plugins") or {}), **copy.deepcopy(dict(data.get("plugins") or {}))}
        out = merged({k: v for k, v in out.items() if k != "plugins"}, {k: v for k, v in data.items() if k != "plugins"})
        if plugins:
            out["plugins"] = plugins
    return out


def check_result(files: Mapping[str, str], *, main_path: str, main_text: str | None, drop_in_path: str,
                 others: list[tuple[str, dict]], version: tuple[int, int, int], base: tuple[str, ...], name: str,
                 changes: list[tuple[tuple[str, ...], Any]]) -> None:
    """What containerd would read after the change: every key we set as planned (our runtime, CDI, the default
    runtime), and the default runtime defined."""
    main_after = read(files.get(main_path, main_text), main_path)
    chain = [(p, d) for p, d in others if p != drop_in_path]
    if drop_in_path and drop_in_path in files:
        chain.append((drop_in_path, read(files[drop_in_path], drop_in_path)))
    after = effective(main_after, [d for _p, d in chain], version)
    containerd = get_path(after, (*base, "containerd")) or {}
    wrong = [".".join(leaf[len(base):]) for path, value in changes for leaf, want in _leaves(path, value)
             if (get_path(after, leaf) if leaf[-1] != "default_runtime_name" else get_path(after, leaf) or "runc") != want]
    if wrong:
        overriding = [p for p, d in chain if get_path(d, base) is not None and p != drop_in_path]
        raise ConfigError(f"containerd would not read the {name} runtime as written ({', '.join(wrong[:3])} differ): "
                          + (f"{', '.join(overriding)}, imported after {'it' if drop_in_path else main_path}, "
                             f"{'replaces' if version < DEEP_MERGE_MIN else 'overrides'} the CRI section. "
                             if overriding else "")
                          + ("Edit that file, or write a drop-in loaded after it" if not drop_in_path
                             else "Edit that file, or edit the main file in place"))
    default = containerd.get("default_runtime_name") or "runc"
    if containerd.get("runtimes") and default not in containerd["runtimes"]:
        raise ConfigError(f"containerd would not start its CRI plugin: the default runtime {default!r} is not defined in "
                          f"what it reads ({', '.join([main_path, *[p for p, _d in chain]])})")


# ----------------------------------------------------------------------------------------------
# CRI-O


def check_crio_inputs(*, drop_in_path: str, name: str = "nvidia", runtime_path: str = "/usr/bin/nvidia-container-runtime",
                      set_as_default: bool | str = "keep", cdi_spec_dirs: list[str] | None = None) -> list[str]:
    """The inputs of `plan_crio` that can be judged without reading the config: raises ConfigError."""
    _check_runtime_name(name)
    _check_path(runtime_path, "runtime_path")
    _check_path(drop_in_path, "drop_in")
    default_choice(set_as_default)
    for d in cdi_spec_dirs or []:
        _check_path(d, "cdi_spec_dirs")
    return []


def plan_crio(*, sources: list[tuple[str, str]], drop_in_path: str, drop_in_text: str | None,
              name: str = "nvidia", runtime_path: str = "/usr/bin/nvidia-container-runtime",
              set_as_default: bool | str = "keep", cdi_spec_dirs: list[str] | None = None,
              runtime_config: Mapping | None = None, nri: bool = False) -> dict:
    """CRI-O's drop-in for the nvidia runtime. `sources` are CRI-O's other config files in the order it
    reads them (crio.conf, then crio.conf.d/* by name); options are copied from the default runtime. With `nri`, for
    NRI mode instead: NRI enabled (CDI is always on in CRI-O), no runtime added, the default runtime left as it is."""
    check_crio_inputs(drop_in_path=drop_in_path, name=name, runtime_path=runtime_path, set_as_default=set_as_default,
                      cdi_spec_dirs=cdi_spec_dirs)
    as_default = default_choice(set_as_default)
    if nri:
        nri_drop: dict = {"crio": {"nri": {"enable_nri": True}}}
        if cdi_spec_dirs:
            nri_drop["crio"]["runtime"] = {"cdi_spec_dirs": list(cdi_spec_dirs)}
        text = dump_toml(nri_drop, header="Written by gpuops.nvidia container_runtime: NRI for NRI mode, for CRI-O "
                                          "(CDI is native to it).")
        return {"files": {} if text == drop_in_text else {drop_in_path: text}, "cdi_enabled": True, "cdi_supported": True,
                "warnings": [], "runtime": {}, "nri": True}
    effective: dict = {}
    for path, text in sources:
        effective = merged(effective, read(text, path))
    runtime_section = get_path(effective, ("crio", "runtime")) or {}
    runtimes = runtime_section.get("runtimes") or {}
    default = runtime_section.get("default_runtime") or "crun"
    inherited = runtime_to_copy(runtimes, (default, "crun", "runc"), name) or {}
    table = merged(inherited, {"runtime_path": runtime_path, "runtime_type": "oci"})
    table = merged(table, dict(runtime_config or {}))
    runtime: dict = {"runtimes": {name: table}}
    if as_default == "true":
        runtime["default_runtime"] = name
    elif as_default == "false" and default == name:
        runtime["default_runtime"] = "crun"  # CRI-O's own default, which it always defines
    if cdi_spec_dirs:
        runtime["cdi_spec_dirs"] = list(cdi_spec_dirs)
    text = dump_toml({"crio": {"runtime": runtime}},
                     header=f"Written by gpuops.nvidia container_runtime: the {name} runtime for CRI-O (CDI is native to it).")
    files = {} if text == drop_in_text else {drop_in_path: text}
    return {"files": files, "cdi_enabled": True, "cdi_supported": True, "warnings": [], "runtime": table, "nri": False}


def backup_dir_for(path: str, *, runtime: str, drop_in: str, backup_dir: str | None) -> str | None:
    """Where the backup of a file written goes: backup_dir when given; None (beside the file) otherwise,
    except for a file in CRI-O's drop-in directory, which CRI-O reads whole whatever the names (a backup
    there would be loaded as configuration, and win): those go to `gpuops-backups` beside that directory."""
    if backup_dir:
        return backup_dir
    if runtime == "crio" and drop_in and os.path.dirname(path) == os.path.dirname(drop_in):
        return os.path.join(os.path.dirname(os.path.dirname(drop_in)), "gpuops-backups")
    return None


# ----------------------------------------------------------------------------------------------
# /etc/nvidia-container-runtime/config.toml


def plan_toolkit(*, path: str, text: str | None, mode: str | None, settings: Mapping | None) -> dict:
    """In-place edits of the toolkit's config.toml: `mode`, then each dotted key of `settings`."""
    if mode is not None and mode not in TOOLKIT_MODES:
        raise ConfigError(f"{mode!r} is not one of {', '.join(TOOLKIT_MODES)}", "toolkit_mode")
    wanted: list[tuple[tuple[str, ...], object]] = []
    if mode is not None:
        wanted.append((("nvidia-container-runtime", "mode"), mode))
    for key, value in (settings or {}).items():
        parts = tuple(key.split("."))
        if not all(parts) or value is None:
            raise ConfigError(f"{key!r} must be a dotted key with a value, e.g. "
                              "nvidia-container-cli.root: /run/nvidia/driver", "toolkit_settings")
        wanted.append((parts, value))
    editor = Editor(text, path)
    for parts, value in wanted:
        editor.set(parts, value)
    if not editor.edits:
        return {"files": {}}
    new = editor.finish()
    return {"files": {} if new == text else {path: new}}
