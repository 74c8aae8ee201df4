"""Putting containerd's config back as it was (container_runtime state=absent): the record the module keeps of its
changes, and the removal planned from it, on the planted configs the runtime scenario starts containerd with."""

from __future__ import annotations

import pytest
import tomlkit
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr

from tests.unit.node.test_container_runtime import DEFAULT_22, DROP, MAIN, NVIDIA_DEFAULT, V2, V3, data, plan

BACKUP = "/etc/containerd/config.toml.1.2026-11-24@10:00:00~"


def installed(version, text, record=None, **kw):
    """A run of the module: the files it writes and its record after them."""
    p = plan(version, text, DEFAULT_22, **kw)
    main = p["files"].get(MAIN, text)
    if MAIN in p["files"]:
        record = cr.recorded(record, main_path=MAIN, before=text, after=main, backup=BACKUP if text is not None else "",
                             edits=p["edits"])
    return p["files"], main, record


def removal(main_text, record, backup_text, drop_in_text=None, drop_in_path=""):
    return cr.plan_containerd_removal(main_path=MAIN, main_text=main_text, drop_in_path=drop_in_path, drop_in_text=drop_in_text,
                                      entry=(record or {}).get(MAIN), backup_text=backup_text)


@pytest.mark.parametrize(("version", "text"), [((2, 2, 1), V3), ((1, 7, 12), V2), ((2, 2, 1), NVIDIA_DEFAULT)],
                         ids=["v3", "v2-on-1.7", "nvidia-default"])
@pytest.mark.parametrize("as_default", ["keep", "true"])
def test_an_unchanged_file_is_put_back_whole_from_its_backup(version, text, as_default):
    _files, main, record = installed(version, text, set_as_default=as_default)
    assert main != text
    out = removal(main, record, backup_text=text)
    assert out["files"] == {MAIN: text} and out["restored_from"] == BACKUP and out["warnings"] == []


@pytest.mark.parametrize(("version", "text"), [((2, 2, 1), V3), ((1, 7, 12), V2)], ids=["v3", "v2-on-1.7"])
def test_a_file_changed_since_loses_only_our_keys(version, text):
    _files, main, record = installed(version, text, set_as_default="true")
    # Somebody adds a registry mirror setting after our run: the file is no longer what we wrote.
    changed = main + '\n[debug]\n  level = "debug"\n'
    out = removal(changed, record, backup_text=text)
    assert out["restored_from"] == "" and out["warnings"] == []
    assert data(out["files"][MAIN]) == {**data(text), "debug": {"level": "debug"}}
    assert "# Planted by the molecule scenario" in out["files"][MAIN]


def test_a_backup_that_is_not_the_original_is_not_put_back():
    _files, main, record = installed((2, 2, 1), V3)
    out = removal(main, record, backup_text=V3 + "# edited by hand\n")
    assert out["restored_from"] == "" and data(out["files"][MAIN]) == data(V3)


def test_a_file_the_module_created_is_removed_and_the_drop_in_with_it():
    files, main, record = installed((2, 2, 1), None, drop_in_path=DROP)
    assert record[MAIN]["original"] is None
    out = removal(main, record, None, drop_in_text=files[DROP], drop_in_path=DROP)
    assert out["files"] == {MAIN: None, DROP: None}


def test_our_import_leaves_a_main_file_changed_since_and_a_users_import_stays():
    files, main, record = installed((2, 2, 1), V2, drop_in_path=DROP)
    assert "/etc/containerd/conf.d/*.toml" in data(main)["imports"]
    doc = tomlkit.parse(main)
    doc["imports"] = [*doc["imports"], "/etc/containerd/site.d/*.toml"]
    changed = tomlkit.dumps(doc)
    out = removal(changed, record, V2, drop_in_text=files[DROP], drop_in_path=DROP)
    assert out["files"][DROP] is None
    assert data(out["files"][MAIN]) == {**data(V2), "imports": ["/etc/containerd/site.d/*.toml"]}


def test_the_first_value_is_kept_over_later_runs():
    """A first run keeps the default runtime, a later one makes nvidia the default: the removal puts back the default
    the file had before the first run."""
    _files, main, record = installed((2, 2, 1), V3)
    _files, main2, record = installed((2, 2, 1), main, record, set_as_default="true")
    assert main2 != main and record[MAIN]["original"] == cr.digest(V3)
    changed = main2 + '\n[debug]\n  level = "info"\n'
    out = removal(changed, record, V3)
    assert data(out["files"][MAIN]) == {**data(V3), "debug": {"level": "info"}}


def test_a_key_changed_since_is_left_and_named():
    _files, main, record = installed((2, 2, 1), V3, set_as_default="true")
    doc = tomlkit.parse(main)
    doc["plugins"][cr.CRI_V3_RUNTIME]["containerd"]["default_runtime_name"] = "crun"
    out = removal(tomlkit.dumps(doc), record, V3)
    assert any("default_runtime_name was changed since" in w for w in out["warnings"])
    assert data(out["files"][MAIN])["plugins"][cr.CRI_V3_RUNTIME]["containerd"]["default_runtime_name"] == "crun"


def test_without_a_record_only_our_runtime_goes_and_never_the_default():
    _files, main, _record = installed((2, 2, 1), V3)
    out = removal(main, None, None)
    left = data(out["files"][MAIN])
    assert "nvidia" not in left["plugins"][cr.CRI_V3_RUNTIME]["containerd"]["runtimes"]
    # Without the record, enable_cdi (which this module set) cannot be told from the user's own: it stays.
    expected = data(V3)
    expected["plugins"][cr.CRI_V3_RUNTIME]["enable_cdi"] = True
    assert left == expected
    _files, main, _record = installed((2, 2, 1), V3, set_as_default="true")
    out = removal(main, None, None)
    assert MAIN not in out["files"] and any("is the default runtime" in w for w in out["warnings"])


def test_a_drop_in_somebody_else_wrote_is_left():
    out = removal(V3, None, None, drop_in_text="# nvidia-ctk\nversion = 3\n", drop_in_path=DROP)
    assert DROP not in out["files"] and any("was not written by this module" in w for w in out["warnings"])


def test_nothing_to_remove_changes_nothing():
    assert removal(V3, None, None)["files"] == {}
    assert removal(None, None, None)["files"] == {}


def test_without_tomlkit_nothing_of_ours_is_no_change_and_an_edit_is_refused(monkeypatch):
    """A second uninstall runs after the toolkit's packages, python3-tomlkit among them, are purged."""
    monkeypatch.setattr(cr, "HAS_TOMLKIT", False)
    assert removal(V3, None, None)["files"] == {}
    with pytest.raises(cr.ConfigError, match="only tomlkit"):
        removal(V3.replace("runc]", "runc]\n  # /usr/bin/nvidia-container-runtime", 1), None, None)
