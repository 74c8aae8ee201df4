"""NRI mode: the runtime's config gets NRI and CDI enabled and nothing else; runtimes that cannot inject CDI devices
through NRI are refused before anything is written."""

from __future__ import annotations

import pytest
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr

from tests.unit.node.test_container_runtime import DROP, MAIN, V2, V3, V4, data

CRIO_DROP = "/etc/crio/crio.conf.d/99-nvidia.toml"


def plan(version, main_text, **kw):
    return cr.plan_containerd(version=version, main_path=MAIN, main_text=main_text, nri=True, **kw)


@pytest.mark.parametrize("version", [(1, 7, 30), (1, 7, 31), (2, 1, 0), (2, 2, 1), (2, 3, 7)])
def test_containerd_with_nri_cdi_injection_is_accepted(version):
    assert cr.check_nri_support("containerd", version, "auto") == []


@pytest.mark.parametrize(("version", "text"), [((1, 7, 29), "1.7.29"), ((1, 6, 20), "1.6.20"), ((2, 0, 5), "2.0.5")])
def test_containerd_without_it_is_refused_naming_what_is_accepted(version, text):
    with pytest.raises(cr.ConfigError) as exc:
        cr.check_nri_support("containerd", version, "auto")
    assert exc.value.option == "nri"
    assert f"containerd {text}" in exc.value.message
    assert "1.7.30" in exc.value.message and "2.1" in exc.value.message


def test_crio_before_1_34_is_refused():
    with pytest.raises(cr.ConfigError) as exc:
        cr.check_nri_support("crio", (1, 33, 4), "auto")
    assert "CRI-O 1.33.4" in exc.value.message and "1.34" in exc.value.message
    assert cr.check_nri_support("crio", (1, 34, 0), "auto") == []


@pytest.mark.parametrize("runtime", ["containerd", "crio"])
def test_nri_with_cdi_off_is_refused(runtime):
    with pytest.raises(cr.ConfigError) as exc:
        cr.check_nri_support(runtime, (2, 3, 7) if runtime == "containerd" else (1, 34, 0), "skip")
    assert exc.value.option == "cdi"
    assert "skip" in exc.value.message


def test_the_named_variables_show_in_the_message():
    with pytest.raises(cr.ConfigError) as exc:
        cr.check_nri_support("containerd", (2, 0, 5), "auto")
    names = {"nri": "gpuops_container_toolkit_mode"}
    assert exc.value.named(names).startswith("gpuops_container_toolkit_mode: nri needs")


def test_containerd_inputs_check_refuses_nri_early():
    with pytest.raises(cr.ConfigError):
        cr.check_containerd_inputs(version=(2, 0, 5), nri=True)
    assert cr.check_containerd_inputs(version=(2, 3, 7), nri=True) == []


@pytest.mark.parametrize(("version", "text", "plugin"), [((1, 7, 30), V2, cr.CRI_V2), ((2, 2, 1), V3, cr.CRI_V3_RUNTIME),
                                                         ((2, 3, 7), V4, cr.CRI_V3_RUNTIME)])
def test_in_place_enables_nri_and_cdi_and_nothing_else(version, text, plugin):
    p = plan(version, text)
    after, before = data(p["files"][MAIN]), data(text)
    assert after["plugins"][cr.NRI_PLUGIN] == {"disable": False}
    assert after["plugins"][plugin]["enable_cdi"] is True
    assert "nvidia" not in after["plugins"][plugin]["containerd"]["runtimes"]
    del after["plugins"][cr.NRI_PLUGIN]
    del after["plugins"][plugin]["enable_cdi"]
    assert after == before
    assert p["cdi_enabled"] is True and p["nri"] is True
    again = plan(version, p["files"][MAIN])
    assert again["files"] == {}


def test_a_disabled_nri_plugin_is_turned_on_keeping_its_other_keys():
    text = V2 + '\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n  socket_path = "/var/run/nri/nri.sock"\n'
    after = data(plan((1, 7, 30), text)["files"][MAIN])
    assert after["plugins"][cr.NRI_PLUGIN] == {"disable": False, "socket_path": "/var/run/nri/nri.sock"}


def test_drop_in_from_2_1_holds_only_the_nri_and_cdi_keys():
    p = plan((2, 3, 7), V4, drop_in_path=DROP)
    assert data(p["files"][DROP]) == {"version": 4, "plugins": {cr.CRI_V3_RUNTIME: {"enable_cdi": True},
                                                                cr.NRI_PLUGIN: {"disable": False}}}
    again = plan((2, 3, 7), p["files"][MAIN], drop_in_path=DROP, drop_in_text=p["files"][DROP])
    assert again["files"] == {}


def test_drop_in_before_2_1_carries_the_nri_section_it_replaces():
    text = V2 + '\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n  plugin_path = "/opt/site/nri"\n'
    p = plan((1, 7, 30), text, drop_in_path=DROP)
    drop = data(p["files"][DROP])
    assert drop["plugins"][cr.NRI_PLUGIN] == {"disable": False, "plugin_path": "/opt/site/nri"}
    assert "nvidia" not in drop["plugins"][cr.CRI_V2]["containerd"]["runtimes"]
    assert drop["plugins"][cr.CRI_V2]["registry"]["config_path"] == "/etc/containerd/certs.d"


def test_crio_drop_in_enables_nri_only():
    p = cr.plan_crio(sources=[("/etc/crio/crio.conf", "")], drop_in_path=CRIO_DROP, drop_in_text=None, nri=True)
    assert data(p["files"][CRIO_DROP]) == {"crio": {"nri": {"enable_nri": True}}}
    again = cr.plan_crio(sources=[("/etc/crio/crio.conf", "")], drop_in_path=CRIO_DROP,
                         drop_in_text=p["files"][CRIO_DROP], nri=True)
    assert again["files"] == {}


def test_crio_drop_in_keeps_the_spec_dirs_asked():
    p = cr.plan_crio(sources=[], drop_in_path=CRIO_DROP, drop_in_text=None, nri=True, cdi_spec_dirs=["/etc/cdi"])
    assert data(p["files"][CRIO_DROP]) == {"crio": {"nri": {"enable_nri": True}, "runtime": {"cdi_spec_dirs": ["/etc/cdi"]}}}


@pytest.mark.parametrize(("output", "version"), [
    ("crio version 1.34.1\n", (1, 34, 1)),
    ("Version:        1.33.4\nGitCommit:      abc\n", (1, 33, 4)),
])
def test_crio_version_is_read_from_either_output(output, version):
    assert cr.crio_version(output) == version
