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
import json
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

try:
    import tomlkit
    from tomlkit.exceptions import ParseError

    HAS_TOMLKIT = True
except ImportError:  # pragma: no cover - the module reports missing_required_lib
    HAS_TOMLKIT = False

__all__ = ["HAS_TOMLKIT"]

CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3_RUNTIME = "io.containerd.cri.v1.runtime"
DEFAULT_RUNTIME_TYPE = "io.containerd.runc.v2"
CDI_MIN = (1, 7, 0)
# containerd before 2.1 merges an imported file's plugin section over the main file's by key (the whole
# section is replaced, containerd issue #5837), so a drop-in for it carries a copy of the section.
DEEP_MERGE_MIN = (2, 1, 0)
# A RuntimeClass handler must be a DNS-1123 label.
RUNTIME_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")
CDI_CHOICES = ("auto", "enable", "skip")
TOOLKIT_MODES = ("auto", "cdi", "legacy", "jit-cdi", "csv")


class ConfigError(Exception):
    """Input or a file that cannot work; the message names it."""


# ----------------------------------------------------------------------------------------------
# TOML helpers


def parse(text: str | None, path: str) -> Any:
    """The tomlkit document of a file's text (an empty document for a missing file)."""
    try:
        return tomlkit.parse(text or "")
    except ParseError as exc:
        raise ConfigError(f"{path} does not parse as TOML at line {exc.line}, column {exc.col}: {exc}") from exc


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
    """In-place edits of one TOML file that record what they change, checked by `finish`."""

    def __init__(self, text: str | None, path: str) -> None:
        self.path = path
        self.text = text
        self.doc = parse(text, path)
        self.before = plain(self.doc)
        self.expected = copy.deepcopy(self.before)

    def set(self, path: tuple[str, ...], value: Any) -> None:
        if get_path(self.expected, path) == value:
            return
        parent = _table_at(self.doc, path[:-1])
        current = parent.get(path[-1])
        if isinstance(value, Mapping) and isinstance(current, Mapping):
            _apply(current, value)
        else:
            parent[path[-1]] = value
        _set_plain(self.expected, path, merged(get_path(self.expected, path) or {}, value)
                   if isinstance(value, Mapping) else value)

    def remove(self, path: tuple[str, ...]) -> None:
        if get_path(self.expected, path) is None:
            return
        parent = get_path(self.doc, path[:-1]) if len(path) > 1 else self.doc
        del parent[path[-1]]
        _set_plain(self.expected, path, None)

    def prepend(self, key: str, value: Any) -> None:
        """A top-level key placed before the first table (TOML requires it there)."""
        if get_path(self.expected, (key,)) == value:
            return
        if key in self.doc:
            self.doc[key] = value
        else:
            body = self.doc.body
            index = next((i for i, (k, item) in enumerate(body) if k is not None and isinstance(item, Mapping)), len(body))
            fresh = tomlkit.document()
            fresh[key] = value
            body.insert(index, fresh.body[0])
            # Re-parse so tomlkit's key map knows the inserted key.
            self.doc = tomlkit.parse(tomlkit.dumps(self.doc))
        self.expected[key] = copy.deepcopy(value)

    def finish(self) -> str:
        """The new text, after proving that it parses to the old content plus exactly our changes."""
        text = tomlkit.dumps(self.doc)
        if plain(self.doc) == self.before:
            return self.text if self.text is not None else text
        again = plain(tomlkit.parse(text))
        if again != self.expected:
            raise ConfigError(f"editing {self.path} in place would not give the expected content (a tomlkit "
                              "formatting case we cannot handle); use a drop-in file instead")
        return text


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


def config_version(data: Mapping) -> int | None:
    """The `version` of a containerd config: None for an empty file, 1 for content without one."""
    if not data:
        return None
    version = data.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        raise ConfigError(f"version = {version!r} is not an integer")
    return version


def expected_config_version(version: tuple[int, int, int]) -> int:
    """The config version this containerd writes: 3 from 2.0 on, 2 for 1.x."""
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
        raise ConfigError(f"{what}: {name!r} is not a valid runtime handler name; a RuntimeClass handler is a "
                          "DNS-1123 label (lower-case letters, digits and '-', at most 63 characters)")


def _check_path(value: str, what: str) -> None:
    if not value.startswith("/"):
        raise ConfigError(f"{what}: {value!r} is not an absolute path")


def plan_containerd(*, version: tuple[int, int, int], main_path: str, main_text: str | None,
                    defaults: Callable[[], str | None] | None = None, drop_in_path: str = "", drop_in_text: str | None = None,
                    name: str = "nvidia", runtime_path: str = "/usr/bin/nvidia-container-runtime",
                    set_as_default: bool = False, cdi: str = "auto", cdi_spec_dirs: list[str] | None = None,
                    runtime_config: Mapping | None = None) -> dict:
    """The containerd files to write for the nvidia runtime.

    Returns files (path -> new text), config_version, plugin, cdi_enabled, cdi_supported and warnings.
    Raises ConfigError, before anything is written, for input that cannot work.
    """
    _check_runtime_name(name)
    _check_path(runtime_path, "runtime_path")
    if cdi not in CDI_CHOICES:
        raise ConfigError(f"cdi: {cdi!r} is not one of {', '.join(CDI_CHOICES)}")
    for d in cdi_spec_dirs or []:
        _check_path(d, "cdi_spec_dirs")
    if drop_in_path:
        _check_path(drop_in_path, "drop_in")
        if not drop_in_path.endswith(".toml"):
            raise ConfigError(f"drop_in: {drop_in_path!r} must end in .toml")
    extra = dict(runtime_config or {})
    if "options" in extra and not isinstance(extra["options"], Mapping):
        raise ConfigError(f"runtime_config: options must be a table, not {extra['options']!r}")
    warnings: list[str] = []
    version_text = ".".join(map(str, version))
    cdi_supported = version >= CDI_MIN
    if cdi == "enable" and not cdi_supported:
        raise ConfigError(f"cdi: enable needs containerd 1.7 or later; this node has containerd {version_text}, "
                          "which has no CDI support (use cdi: auto or skip, or upgrade containerd)")
    if cdi == "auto" and not cdi_supported:
        warnings.append(f"containerd {version_text} has no CDI support: the nvidia runtime is configured without it")
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
    base = ("plugins", plugin)
    if cdi == "skip":
        current = get_path(main.before, (*base, "enable_cdi"))
        enable_cdi = bool(current) if current is not None else version >= (2, 0, 0)
    else:
        enable_cdi = cdi_supported

    # Options come from the main file's default runtime, or from containerd's defaults when it has none.
    inherited = inherited_runtime(main.before, plugin, name)
    default_text = defaults() if inherited is None and defaults is not None else None
    changes: list[tuple[tuple[str, ...], Any]] = []
    if default_text:
        data = plain(parse(default_text, "containerd config default"))
        default_plugin = runtime_plugin(config_version(data) or wanted)
        inherited = without_zero_values(inherited_runtime(data, default_plugin, name))
        # A config that names any runtime replaces containerd 1.x's built-in ones: keep the default runtime
        # defined, or default_runtime_name names nothing and the CRI plugin refuses to load.
        default_name = get_path(main.before, (*base, "containerd", "default_runtime_name")) or \
            get_path(data, ("plugins", default_plugin, "containerd", "default_runtime_name")) or "runc"
        default_table = get_path(data, ("plugins", default_plugin, "containerd", "runtimes", default_name))
        if default_name != name and isinstance(default_table, Mapping):
            changes.append(((*base, "containerd", "runtimes", default_name), without_zero_values(default_table)))
    runtime = nvidia_runtime(inherited, runtime_path, extra)
    changes.append(((*base, "containerd", "runtimes", name), runtime))
    if set_as_default:
        changes.append(((*base, "containerd", "default_runtime_name"), name))
    if enable_cdi and cdi != "skip":
        changes.append(((*base, "enable_cdi"), True))
        if cdi_spec_dirs:
            changes.append(((*base, "cdi_spec_dirs"), list(cdi_spec_dirs)))

    files: dict[str, str] = {}
    if not drop_in_path and not main.before:
        # No config yet: the file is wholly ours.
        whole: dict = {"version": cfg}
        for path, value in changes:
            _set_plain(whole, path, value)
        files[main_path] = dump_toml(whole, header=f"Written by gpuops.nvidia container_runtime: the {name} runtime.")
    elif not drop_in_path:
        for path, value in changes:
            main.set(path, value)
        if not set_as_default and get_path(main.before, (*base, "containerd", "default_runtime_name")) == name:
            main.remove((*base, "containerd", "default_runtime_name"))
        files[main_path] = main.finish()
    else:
        drop: dict = {"version": cfg}
        if version < DEEP_MERGE_MIN:
            section = get_path(main.before, base)
            if isinstance(section, Mapping):
                _set_plain(drop, base, section)
                drop_default = get_path(drop, (*base, "containerd", "default_runtime_name"))
                if not set_as_default and drop_default == name:
                    _set_plain(drop, (*base, "containerd", "default_runtime_name"), None)
        for path, value in changes:
            current = get_path(drop, path)
            _set_plain(drop, path, merged(current, value) if isinstance(current, Mapping) else value)
        files[drop_in_path] = dump_toml(drop, header=(
            f"Written by gpuops.nvidia container_runtime: the {name} runtime for containerd.\n"
            + ("It carries a copy of the main config's CRI section, because containerd before 2.1 lets an\n"
               "imported file's section replace the main file's (containerd issue #5837).\n"
               if version < DEEP_MERGE_MIN else "")))
        imports = plain(main.doc.get("imports")) or []
        if not any(fnmatch.fnmatch(drop_in_path, pattern) for pattern in imports):
            pattern = os.path.join(os.path.dirname(drop_in_path), "*.toml")
            if not main.before:
                main.prepend("version", cfg)
            main.prepend("imports", [*imports, pattern])
        files[main_path] = main.finish()
    files = {p: t for p, t in files.items() if t != (drop_in_text if p == drop_in_path else main_text)}
    return {"files": files, "config_version": cfg, "plugin": plugin, "cdi_enabled": enable_cdi,
            "cdi_supported": cdi_supported, "warnings": warnings, "runtime": runtime}


# ----------------------------------------------------------------------------------------------
# CRI-O


def plan_crio(*, sources: list[tuple[str, str]], drop_in_path: str, drop_in_text: str | None,
              name: str = "nvidia", runtime_path: str = "/usr/bin/nvidia-container-runtime",
              set_as_default: bool = False, cdi_spec_dirs: list[str] | None = None,
              runtime_config: Mapping | None = None) -> dict:
    """CRI-O's drop-in for the nvidia runtime. `sources` are CRI-O's other config files in the order it
    reads them (crio.conf, then crio.conf.d/* by name); options are copied from the default runtime."""
    _check_runtime_name(name)
    _check_path(runtime_path, "runtime_path")
    _check_path(drop_in_path, "drop_in")
    for d in cdi_spec_dirs or []:
        _check_path(d, "cdi_spec_dirs")
    effective: dict = {}
    for path, text in sources:
        effective = merged(effective, plain(parse(text, path)))
    runtime_section = get_path(effective, ("crio", "runtime")) or {}
    runtimes = runtime_section.get("runtimes") or {}
    default = runtime_section.get("default_runtime") or "crun"
    inherited = runtime_to_copy(runtimes, (default, "crun", "runc"), name) or {}
    table = merged(inherited, {"runtime_path": runtime_path, "runtime_type": "oci"})
    table = merged(table, dict(runtime_config or {}))
    runtime: dict = {"runtimes": {name: table}}
    if set_as_default:
        runtime["default_runtime"] = name
    if cdi_spec_dirs:
        runtime["cdi_spec_dirs"] = list(cdi_spec_dirs)
    text = dump_toml({"crio": {"runtime": runtime}},
                     header=f"Written by gpuops.nvidia container_runtime: the {name} runtime for CRI-O (CDI is native to it).")
    files = {} if text == drop_in_text else {drop_in_path: text}
    return {"files": files, "cdi_enabled": True, "cdi_supported": True, "warnings": [], "runtime": table}


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
        raise ConfigError(f"toolkit_mode: {mode!r} is not one of {', '.join(TOOLKIT_MODES)}")
    wanted: list[tuple[tuple[str, ...], object]] = []
    if mode is not None:
        wanted.append((("nvidia-container-runtime", "mode"), mode))
    for key, value in (settings or {}).items():
        parts = tuple(key.split("."))
        if not all(parts) or value is None:
            raise ConfigError(f"toolkit_settings: {key!r} must be a dotted key with a value, e.g. "
                              "nvidia-container-cli.root: /run/nvidia/driver")
        wanted.append((parts, value))
    editor = Editor(text, path)
    for parts, value in wanted:
        editor.set(parts, value)
    new = editor.finish()
    return {"files": {} if new == text else {path: new}}
