"""The uninstall judge's config comparison (molecule/shared/files/snapshot.py), which runs on the lab machines."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("snapshot", ROOT / "molecule/shared/files/snapshot.py")
assert _spec and _spec.loader
snapshot = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(snapshot)

# What containerd 1.7 printed on rt-noble17 in CI, before and after a check-mode uninstall that changed no file.
BEFORE = ('disabled_plugins = []\nimports = ["/etc/containerd/conf.d/99-nvidia.toml", "/etc/containerd/config.toml"]\n'
          'oom_score = 0\nversion = 2\n')
NOW = ('disabled_plugins = []\nimports = ["/etc/containerd/config.toml", "/etc/containerd/conf.d/99-nvidia.toml"]\n'
       'oom_score = 0\nversion = 2\n')


def test_the_imports_in_another_order_are_the_same_config():
    assert snapshot.same_config(BEFORE, NOW)
    assert snapshot.config_diff(BEFORE, NOW) == []


def test_the_text_decides_the_same_without_tomllib(monkeypatch):
    """Ubuntu 22.04's Python 3.10 has no tomllib: the text, imports sorted, still compares equal."""
    import builtins

    real_import = builtins.__import__

    def no_tomllib(name, *args, **kwargs):
        if name == "tomllib":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tomllib)
    assert snapshot.same_config(BEFORE, NOW)
    assert not snapshot.same_config(BEFORE, NOW.replace("oom_score = 0", "oom_score = 1"))


def test_an_import_more_or_less_is_a_different_config():
    fewer = BEFORE.replace('"/etc/containerd/conf.d/99-nvidia.toml", ', "")
    assert not snapshot.same_config(BEFORE, fewer)
    assert any(line.startswith("+imports") for line in snapshot.config_diff(BEFORE, fewer))
