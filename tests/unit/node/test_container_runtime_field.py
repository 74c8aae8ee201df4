"""The containerd plan on configs collected from the field (tests/data/containerd-field, origins in its README):
cloud node images, distributions, installers, NVIDIA's and sandbox runtimes' own. For each config, containerd
version and layout (in place, drop-in): the plan works or refuses cleanly for a stated reason; what it writes
keeps every setting that was there, defines the CRI plugin's default runtime, and a second plan writes nothing.
The lab runs the same configs through the module and judges with each containerd's own `config dump`
(molecule/runtime, field.yml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomlkit
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr

RECORDED = Path(__file__).parent / "recorded"
FIELD = sorted((Path(__file__).parents[2] / "data/containerd-field").glob("*.toml"))
# `containerd config default` of each version the plan runs on (1.7 plans with 1.6's: neither writes version 3).
DEFAULTS = {(1, 6, 20): (RECORDED / "containerd-1.6.20-default.toml").read_text(),
            (2, 2, 1): (RECORDED / "containerd-2.2.1-default.toml").read_text(),
            (2, 3, 7): (RECORDED / "containerd-2.3.7-default.toml").read_text()}
DEFAULTS[(1, 7, 12)] = DEFAULTS[(1, 6, 20)]
MAIN = "/etc/containerd/config.toml"
DROP = "/etc/containerd/conf.d/99-nvidia.toml"
VERSIONS = sorted(DEFAULTS)
NV = "/usr/bin/nvidia-container-runtime"


def data(text: str | None) -> dict:
    return cr.plain(tomlkit.parse(text or ""))


FIELD_DIR = Path(__file__).parents[2] / "data/containerd-field"
# Files a config imports on the node it comes from (its path there, the file of the collection).
COMPANIONS = {"nvidia-ctk-main-config": {"/etc/containerd/conf.d/99-nvidia.toml": "nvidia-ctk-dropin-99-nvidia.toml"}}


def node_imports(name: str, config: dict) -> list:
    """The imports as the module reads them on a node that has only the config and its companions."""
    out = [(path, (FIELD_DIR / source).read_text()) for path, source in COMPANIONS.get(name, {}).items()]
    for pattern in config.get("imports") or []:
        if "*" not in pattern and pattern not in dict(out):
            out.append((pattern, None))
    return out


def refusal(name: str, config: dict, version, drop_in: str = "") -> str | None:
    """The reason a config is refused, where one is expected."""
    if config.get("version", 1) > cr.expected_config_version(version):
        return "does not read"
    if config.get("version", 1) == 1 and config:
        return "version 1 config"
    if "named-nvidia" in name:
        return "not runc-based"
    plugins = {cr.CRI_V2, "cri", cr.runtime_plugin(config.get("version", 1))}
    if plugins & set(config.get("disabled_plugins") or []):
        return "disables containerd's CRI plugin"
    if drop_in and any(text is None for _path, text in node_imports(name, config)):
        return "which does not exist: containerd stops reading imports there"
    if drop_in and DROP in dict(node_imports(name, config)):
        return "was not written by this module"
    if not drop_in and name in COMPANIONS and version >= cr.CDI_MIN:
        # nvidia-ctk's drop-in, read after the main file, carries enable_cdi = false over the main file's true.
        return "the CRI section"
    return None


def effective(main: dict, imported: list, version) -> dict:
    """containerd's reading: before 2.1 an imported plugin section replaces the earlier one, from 2.1 they merge."""
    out = main
    for data in imported:
        if version >= cr.DEEP_MERGE_MIN:
            out = cr.merged(out, data)
        else:
            out = {**out, **{k: v for k, v in data.items() if k != "plugins"},
                   "plugins": {**out.get("plugins", {}), **data.get("plugins", {})}}
    return out


def leaves(value, path=()):
    if isinstance(value, dict) and value:
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    else:
        yield path, value


def test_the_field_collection_is_there():
    assert len(FIELD) >= 10


@pytest.mark.parametrize("version", VERSIONS, ids=lambda v: ".".join(map(str, v)))
@pytest.mark.parametrize("drop_in", ["", DROP], ids=["in-place", "drop-in"])
@pytest.mark.parametrize("path", FIELD, ids=lambda p: p.stem)
def test_a_field_config(path, drop_in, version):
    text = path.read_text()
    main_before = data(text)
    imports = node_imports(path.stem, main_before)
    companions = [data(t) for _p, t in imports if t is not None]
    before = effective(main_before, companions, version)
    defaults = DEFAULTS[version]
    kw = {"version": version, "main_path": MAIN, "main_text": text, "defaults": lambda: defaults, "drop_in_path": drop_in,
          "drop_in_text": dict(imports).get(DROP) if drop_in else None, "imports": imports}
    expected_refusal = refusal(path.stem, main_before, version, drop_in)
    if expected_refusal:
        with pytest.raises(cr.ConfigError, match=re.escape(expected_refusal)):
            cr.plan_containerd(**kw)
        return
    p = cr.plan_containerd(**kw)
    main_after = data(p["files"].get(MAIN, text))
    chain = [data(t) for path_, t in imports if t is not None and not (drop_in and path_ == DROP)]
    if drop_in:
        chain.append(data(p["files"].get(DROP, kw["drop_in_text"])))
    after = effective(main_after, chain, version)
    plugin = p["plugin"]
    containerd = after["plugins"][plugin]["containerd"]
    # Ours is there, runc-based, with the toolkit's runtime.
    nvidia = containerd["runtimes"]["nvidia"]
    assert nvidia["runtime_type"] == cr.DEFAULT_RUNTIME_TYPE and nvidia["options"]["BinaryName"] == NV
    # The CRI plugin's default runtime is defined, and is the one the node had (keep).
    default = containerd.get("default_runtime_name", "runc")
    assert default in containerd["runtimes"]
    assert default == (cr.get_path(before, ("plugins", plugin, "containerd", "default_runtime_name")) or "runc")
    # Every setting that was there survives, but for our own runtime's table, CDI (turned on) and imports.
    ours = {("plugins", plugin, "containerd", "runtimes", "nvidia"), ("plugins", plugin, "enable_cdi"), ("imports",)}
    for leaf, value in leaves(before):
        if any(leaf[:len(o)] == o for o in ours):
            continue
        assert cr.get_path(after, leaf) == value, f"{'.'.join(leaf)} was {value!r}, is {cr.get_path(after, leaf)!r}"
    # The main file keeps its own settings even in the drop-in layout.
    if drop_in:
        assert {k: v for k, v in main_after.items() if k != "imports"} == {k: v for k, v in main_before.items() if k != "imports"}
    # A second run writes nothing.
    again = cr.plan_containerd(**{**kw, "main_text": p["files"].get(MAIN, text),
                                  "drop_in_text": p["files"].get(DROP, kw["drop_in_text"])})
    assert again["files"] == {}
