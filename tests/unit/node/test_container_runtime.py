"""The nvidia runtime in containerd's and CRI-O's config: plans from recorded and planted configs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomlkit
from ansible_collections.gpuops.nvidia.plugins.module_utils.node import container_runtime as cr

RECORDED = Path(__file__).parent / "recorded"
PLANTED = Path(__file__).parents[3] / "molecule/runtime/files"
# `containerd config default`, recorded on the lab machines (Ubuntu 24.04, Debian 12).
DEFAULT_22 = (RECORDED / "containerd-2.2.1-default.toml").read_text()
DEFAULT_16 = (RECORDED / "containerd-1.6.20-default.toml").read_text()
# containerd 2.3.7 built from its Go module (the lab's build), `containerd config default`: version 4.
DEFAULT_23 = (RECORDED / "containerd-2.3.7-default.toml").read_text()
V2 = (PLANTED / "planted-v2.toml").read_text()
V3 = (PLANTED / "planted-v3.toml").read_text()
V4 = (PLANTED / "planted-v4.toml").read_text()
MAIN = "/etc/containerd/config.toml"
DROP = "/etc/containerd/conf.d/99-nvidia.toml"
NV = "/usr/bin/nvidia-container-runtime"


def data(text: str) -> dict:
    return cr.plain(tomlkit.parse(text))


def plan(version, main_text, defaults=None, **kw):
    return cr.plan_containerd(version=version, main_path=MAIN, main_text=main_text,
                              defaults=(lambda: defaults) if defaults else None, **kw)


def again(version, first, main_text, defaults=None, **kw):
    """The plan on the files the first plan wrote: must write nothing."""
    files = first["files"]
    return plan(version, files.get(MAIN, main_text), defaults, drop_in_text=files.get(kw.get("drop_in_path", "")), **kw)


def runtimes(d: dict, plugin: str) -> dict:
    return d["plugins"][plugin]["containerd"]["runtimes"]


@pytest.mark.parametrize(("version", "text", "plugin"), [((2, 2, 1), V3, cr.CRI_V3_RUNTIME), ((1, 7, 12), V2, cr.CRI_V2),
                                                         ((2, 2, 1), V2, cr.CRI_V2), ((2, 3, 7), V4, cr.CRI_V3_RUNTIME),
                                                         ((2, 3, 7), V3, cr.CRI_V3_RUNTIME), ((2, 3, 7), V2, cr.CRI_V2)])
def test_in_place_keeps_everything_and_copies_systemd_cgroup(version, text, plugin):
    p = plan(version, text)
    new = p["files"][MAIN]
    before, after = data(text), data(new)
    nvidia = runtimes(after, plugin)["nvidia"]
    assert nvidia == {"runtime_type": cr.DEFAULT_RUNTIME_TYPE, "options": {"SystemdCgroup": True, "BinaryName": NV}}
    assert after["plugins"][plugin]["enable_cdi"] is True
    # Everything that was there is still there, unchanged, and so are the comments.
    del runtimes(after, plugin)["nvidia"]
    del after["plugins"][plugin]["enable_cdi"]
    assert after == before
    assert "# Planted by the molecule scenario" in new
    assert again(version, p, text)["files"] == {}


def test_version_2_config_on_containerd_2_is_kept_with_a_warning():
    p = plan((2, 2, 1), V2)
    assert p["config_version"] == 2 and p["plugin"] == cr.CRI_V2
    assert "converts it to version 3" in p["warnings"][0]


@pytest.mark.parametrize(("version", "expected"), [
    ((1, 6, 20), 2), ((1, 7, 27), 2), ((2, 0, 0), 3), ((2, 2, 7), 3), ((2, 3, 0), 4), ((2, 3, 7), 4), ((2, 4, 2), 4)])
def test_the_config_version_each_containerd_writes(version, expected):
    assert cr.expected_config_version(version) == expected


@pytest.mark.parametrize(("text", "cfg"), [(V3, 3), (V2, 2)])
def test_an_older_config_on_containerd_2_3_is_kept_with_a_warning(text, cfg):
    p = plan((2, 3, 7), text)
    assert p["config_version"] == cfg and data(p["files"][MAIN])["version"] == cfg
    assert f"is a version {cfg} config; containerd 2.3.7 converts it to version 4 when it starts" in p["warnings"][0]


def test_version_4_in_place_keeps_the_server_plugins():
    p = plan((2, 3, 7), V4, set_as_default=True)
    after = data(p["files"][MAIN])
    assert p["config_version"] == 4 and p["warnings"] == [] and after["version"] == 4
    assert after["plugins"]["io.containerd.server.v1.grpc"] == data(V4)["plugins"]["io.containerd.server.v1.grpc"]
    assert after["plugins"][cr.CRI_V3_RUNTIME]["containerd"]["default_runtime_name"] == "nvidia"
    assert again((2, 3, 7), p, V4, set_as_default=True)["files"] == {}


@pytest.mark.parametrize(("text", "cfg"), [(V4, 4), (V3, 3), (V2, 2)])
def test_drop_in_on_containerd_2_3_is_in_the_main_files_version(text, cfg):
    p = plan((2, 3, 7), text, DEFAULT_23, drop_in_path=DROP)
    drop, main = data(p["files"][DROP]), data(p["files"][MAIN])
    assert drop["version"] == cfg and main["version"] == cfg
    assert set(drop["plugins"]) == {p["plugin"]}
    assert runtimes(drop, p["plugin"])["nvidia"]["options"] == {"SystemdCgroup": True, "BinaryName": NV}
    assert main["imports"] == ["/etc/containerd/conf.d/*.toml"]
    assert again((2, 3, 7), p, text, DEFAULT_23, drop_in_path=DROP)["files"] == {}


def test_no_config_on_containerd_2_3_is_written_as_version_4():
    for drop_in in ("", DROP):
        p = plan((2, 3, 7), None, DEFAULT_23, drop_in_path=drop_in)
        written = data(p["files"][drop_in or MAIN])
        assert written["version"] == 4 and p["config_version"] == 4
        assert runtimes(written, cr.CRI_V3_RUNTIME)["nvidia"] == {
            "runtime_type": "io.containerd.runc.v2", "sandboxer": "podsandbox", "options": {"BinaryName": NV}}
        assert again((2, 3, 7), p, None, DEFAULT_23, drop_in_path=drop_in)["files"] == {}


@pytest.mark.parametrize(("version", "reads"), [((2, 2, 7), 3), ((1, 7, 12), 2)])
def test_version_4_config_before_containerd_2_3_is_refused(version, reads):
    text = ".".join(map(str, version))
    with pytest.raises(cr.ConfigError, match=rf"version 4 config, which containerd {text} does not read \(it reads version {reads} and older\)"):
        plan(version, V4)


def test_no_config_takes_options_from_containerd_defaults_without_zero_values():
    p = plan((2, 2, 1), None, DEFAULT_22)
    d = data(p["files"][MAIN])
    assert d["version"] == 3
    assert runtimes(d, cr.CRI_V3_RUNTIME)["nvidia"] == {
        "runtime_type": "io.containerd.runc.v2", "sandboxer": "podsandbox", "options": {"BinaryName": NV}}
    assert again((2, 2, 1), p, None, DEFAULT_22)["files"] == {}


def test_containerd_16_refuses_cdi_enable_and_configures_without_it_on_auto():
    with pytest.raises(cr.ConfigError, match=r"cdi: enable needs containerd 1.7 or later; this node has containerd 1.6.20"):
        plan((1, 6, 20), V2, cdi="enable")
    p = plan((1, 6, 20), None, DEFAULT_16)
    d = data(p["files"][MAIN])
    assert "enable_cdi" not in d["plugins"][cr.CRI_V2]
    assert runtimes(d, cr.CRI_V2)["nvidia"]["options"]["BinaryName"] == NV
    assert p["cdi_enabled"] is False and "no CDI support" in p["warnings"][0]


def test_drop_in_before_2_1_carries_the_cri_section():
    p = plan((1, 7, 12), V2, drop_in_path=DROP)
    main, drop = data(p["files"][MAIN]), data(p["files"][DROP])
    assert main["imports"] == ["/etc/containerd/conf.d/*.toml"]
    del main["imports"]
    assert main == data(V2)
    section = drop["plugins"][cr.CRI_V2]
    # containerd 1.x lets this section replace the main file's: it must hold the planted keys too.
    assert section["registry"]["config_path"] == "/etc/containerd/certs.d"
    assert set(section["containerd"]["runtimes"]) == {"runc", "crun", "nvidia"}
    assert section["enable_cdi"] is True
    assert again((1, 7, 12), p, V2, drop_in_path=DROP)["files"] == {}


def test_drop_in_from_2_1_holds_only_our_keys_and_keeps_imports():
    text = 'version = 3\nimports = ["/etc/containerd/extra/*.toml"]\n' + V3.split("version = 3\n", 1)[1]
    p = plan((2, 2, 1), text, drop_in_path=DROP, set_as_default=True)
    drop = data(p["files"][DROP])
    assert drop == {"version": 3, "plugins": {cr.CRI_V3_RUNTIME: {"enable_cdi": True, "containerd": {
        "default_runtime_name": "nvidia",
        "runtimes": {"nvidia": {"runtime_type": cr.DEFAULT_RUNTIME_TYPE, "options": {"SystemdCgroup": True, "BinaryName": NV}}}}}}}
    assert data(p["files"][MAIN])["imports"] == ["/etc/containerd/extra/*.toml", "/etc/containerd/conf.d/*.toml"]
    assert again((2, 2, 1), p, text, drop_in_path=DROP, set_as_default=True)["files"] == {}


def test_an_import_that_already_covers_the_drop_in_is_left_alone():
    text = 'version = 3\nimports = ["/etc/containerd/conf.d/*.toml"]\n'
    p = plan((2, 2, 1), text, DEFAULT_22, drop_in_path=DROP)
    assert set(p["files"]) == {DROP}


def test_set_as_default_and_back():
    p = plan((2, 2, 1), V3, set_as_default=True)
    assert data(p["files"][MAIN])["plugins"][cr.CRI_V3_RUNTIME]["containerd"]["default_runtime_name"] == "nvidia"
    # The default (keep) leaves a default runtime as it is; false puts containerd's own back.
    assert plan((2, 2, 1), p["files"][MAIN])["files"] == {}
    back = plan((2, 2, 1), p["files"][MAIN], set_as_default=False)
    assert "default_runtime_name" not in data(back["files"][MAIN])["plugins"][cr.CRI_V3_RUNTIME]["containerd"]


def test_options_follow_the_default_runtime_and_extra_keys_merge():
    text = V3.replace('[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]',
                      '[plugins."io.containerd.cri.v1.runtime".containerd]\n  default_runtime_name = "crun"\n\n'
                      '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]')
    p = plan((2, 2, 1), text, runtime_config={"privileged_without_host_devices": True, "options": {"Root": "/run/nv"}})
    nvidia = runtimes(data(p["files"][MAIN]), cr.CRI_V3_RUNTIME)["nvidia"]
    # crun is the default: its options (BinaryName replaced by ours) are the base.
    assert nvidia == {"runtime_type": cr.DEFAULT_RUNTIME_TYPE, "privileged_without_host_devices": True,
                      "options": {"BinaryName": NV, "Root": "/run/nv"}}


def test_cdi_spec_dirs_and_skip():
    p = plan((2, 2, 1), V3, cdi_spec_dirs=["/etc/cdi", "/var/run/cdi", "/opt/cdi"])
    assert data(p["files"][MAIN])["plugins"][cr.CRI_V3_RUNTIME]["cdi_spec_dirs"] == ["/etc/cdi", "/var/run/cdi", "/opt/cdi"]
    skip = plan((1, 7, 12), V2, cdi="skip")
    assert "enable_cdi" not in data(skip["files"][MAIN])["plugins"][cr.CRI_V2] and skip["cdi_enabled"] is False


@pytest.mark.parametrize(("kw", "text", "message"), [
    ({"name": "NVIDIA_GPU"}, V3, r"runtime_name: 'NVIDIA_GPU' is not a valid runtime handler name"),
    ({"runtime_path": "nvidia-container-runtime"}, V3, r"runtime_path: 'nvidia-container-runtime' is not an absolute path"),
    ({"cdi": "yes"}, V3, r"cdi: 'yes' is not one of auto, enable, skip"),
    ({"drop_in_path": "/etc/containerd/conf.d/99-nvidia.conf"}, V3, r"must end in .toml"),
    ({}, '[plugins.cri]\nsystemd_cgroup = true\n', r"version 1 config .*`containerd config migrate`"),
    ({}, 'version = 3\n[plugins."io.containerd.cri.v1.runtime"]\nenable_cdi = true\n', None),
])
def test_refusals(kw, text, message):
    if message is None:  # control: a valid input passes
        plan((2, 2, 1), text, **kw)
        return
    with pytest.raises(cr.ConfigError, match=message):
        plan((2, 2, 1), text, **kw)


def test_version_3_config_on_containerd_1_is_refused():
    with pytest.raises(cr.ConfigError, match=r"version 3 config, which containerd 1.7.12 does not read"):
        plan((1, 7, 12), V3)


def test_a_file_that_does_not_parse_is_reported_with_its_line():
    with pytest.raises(cr.ConfigError, match=r"/etc/containerd/config.toml does not parse as TOML at line 3"):
        plan((2, 2, 1), 'version = 3\n\n[plugins\n')


@pytest.mark.parametrize(("output", "version"), [
    ("containerd github.com/containerd/containerd/v2 2.2.1 ", (2, 2, 1)),
    ("containerd github.com/containerd/containerd/v2 2.3.7 ", (2, 3, 7)),
    ("containerd github.com/containerd/containerd/v2 2.3.7+unknown ", (2, 3, 7)),
    ("containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3", (1, 6, 20)),
    ("containerd containerd.io v1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da", (1, 7, 27)),
])
def test_containerd_version(output, version):
    assert cr.containerd_version(output) == version


def test_crio_drop_in_copies_the_default_runtime():
    conf = '[crio.runtime]\ndefault_runtime = "crun"\n[crio.runtime.runtimes.crun]\nruntime_path = "/usr/bin/crun"\n' \
           'runtime_root = "/run/crun"\nmonitor_path = "/usr/libexec/crio/conmon"\n'
    p = cr.plan_crio(sources=[("/etc/crio/crio.conf", conf)], drop_in_path="/etc/crio/crio.conf.d/99-nvidia.toml",
                     drop_in_text=None, set_as_default=True)
    d = data(p["files"]["/etc/crio/crio.conf.d/99-nvidia.toml"])
    assert d == {"crio": {"runtime": {"default_runtime": "nvidia", "runtimes": {"nvidia": {
        "runtime_path": NV, "runtime_root": "/run/crun", "monitor_path": "/usr/libexec/crio/conmon", "runtime_type": "oci"}}}}}
    again_ = cr.plan_crio(sources=[("/etc/crio/crio.conf", conf)], drop_in_path="/etc/crio/crio.conf.d/99-nvidia.toml",
                          drop_in_text=p["files"]["/etc/crio/crio.conf.d/99-nvidia.toml"], set_as_default=True)
    assert again_["files"] == {}


TOOLKIT = '''#accept-nvidia-visible-devices-as-volume-mounts = false
disable-require = false

[nvidia-container-cli]
environment = []
#root = "/run/nvidia/driver"

[nvidia-container-runtime]
log-level = "info"
mode = "auto"
runtimes = ["runc", "crun"]
'''


def test_toolkit_config_mode_and_settings_in_place():
    p = cr.plan_toolkit(path="/etc/nvidia-container-runtime/config.toml", text=TOOLKIT, mode="cdi",
                        settings={"nvidia-container-cli.root": "/run/nvidia/driver"})
    new = p["files"]["/etc/nvidia-container-runtime/config.toml"]
    d = data(new)
    assert d["nvidia-container-runtime"]["mode"] == "cdi"
    assert d["nvidia-container-cli"]["root"] == "/run/nvidia/driver"
    assert d["nvidia-container-runtime"]["runtimes"] == ["runc", "crun"]
    assert "#accept-nvidia-visible-devices-as-volume-mounts = false" in new
    assert cr.plan_toolkit(path="x", text=new, mode="cdi", settings={"nvidia-container-cli.root": "/run/nvidia/driver"})["files"] == {}
    assert cr.plan_toolkit(path="x", text=TOOLKIT, mode="auto", settings={})["files"] == {}


def test_dump_toml_round_trips():
    value = {"version": 2, "plugins": {"a.b": {"x": ["1", "2"], "y": True, "z": {"k": 3, "q": "it's \"quoted\""}}}}
    assert data(cr.dump_toml(value, header="two\nlines")) == value


# /etc/containerd/config.toml as Debian 12's containerd 1.6.20 package ships it: a CRI section without runtimes.
DEBIAN_16 = (RECORDED / "containerd-1.6.20-debian-config.toml").read_text()


@pytest.mark.parametrize("drop_in", ["", DROP])
def test_a_config_without_runtimes_keeps_the_default_runtime_defined(drop_in):
    # containerd 1.x replaces its default runtimes with the ones a config names: with only nvidia written,
    # default_runtime_name "runc" named no runtime and the CRI plugin refused to load (seen in `make demo`).
    p = plan((1, 6, 20), DEBIAN_16, DEFAULT_16, drop_in_path=drop_in)
    written = data(p["files"][drop_in or MAIN])
    rts = runtimes(written, cr.CRI_V2)
    assert set(rts) == {"runc", "nvidia"}
    assert rts["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert rts["nvidia"]["options"] == {"BinaryName": NV}
    assert written["plugins"][cr.CRI_V2]["cni"]["bin_dir"] == "/usr/lib/cni"
    assert again((1, 6, 20), p, DEBIAN_16, DEFAULT_16, drop_in_path=drop_in)["files"] == {}


def test_a_default_runtime_already_defined_is_not_rewritten():
    p = plan((1, 7, 12), V2, DEFAULT_16)
    runc = runtimes(data(p["files"][MAIN]), cr.CRI_V2)["runc"]
    assert runc == {"runtime_type": "io.containerd.runc.v2", "options": {"SystemdCgroup": True}}


@pytest.mark.parametrize(("path", "runtime", "backup_dir", "expected"), [
    # Beside the file, unless a directory is given.
    ("/etc/containerd/config.toml", "containerd", None, None),
    ("/etc/containerd/conf.d/99-nvidia.toml", "containerd", None, None),
    ("/etc/containerd/config.toml", "containerd", "/var/backups/gpuops", "/var/backups/gpuops"),
    # CRI-O reads its whole drop-in directory: backups of files there go outside it.
    ("/etc/crio/crio.conf.d/99-nvidia.toml", "crio", None, "/etc/crio/gpuops-backups"),
    ("/etc/crio/crio.conf.d/99-nvidia.toml", "crio", "/var/backups/gpuops", "/var/backups/gpuops"),
    ("/etc/nvidia-container-runtime/config.toml", "crio", None, None),
])
def test_where_backups_go(path, runtime, backup_dir, expected):
    drop_in = "/etc/crio/crio.conf.d/99-nvidia.toml" if runtime == "crio" else "/etc/containerd/conf.d/99-nvidia.toml"
    assert cr.backup_dir_for(path, runtime=runtime, drop_in=drop_in, backup_dir=backup_dir) == expected


# ----------------------------------------------------------------------------------------------
# Configs as nodes have them (issue 25).

# What `nvidia-ctk runtime configure --set-as-default` leaves on a node that had no config (GPU node images,
# NVIDIA's own stacks): nvidia is the default and the only runtime.
NVIDIA_DEFAULT = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  default_runtime_name = "nvidia"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  privileged_without_host_devices = false
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  BinaryName = "/usr/bin/nvidia-container-runtime"
"""


def effective(files: dict, main_text: str, drop_in: str, version) -> dict:
    """What containerd reads: before 2.1 an imported file's plugin section replaces the main file's whole
    (containerd issue #5837), from 2.1 they merge key by key."""
    main = data(files.get(MAIN, main_text))
    if not drop_in:
        return main
    drop = data(files[drop_in]) if drop_in in files else {}
    if version >= cr.DEEP_MERGE_MIN:
        return cr.merged(main, drop)
    return {**main, "plugins": {**main.get("plugins", {}), **drop.get("plugins", {})}}


def default_is_defined(config: dict) -> str:
    containerd = config["plugins"][cr.CRI_V2]["containerd"]
    name = containerd.get("default_runtime_name", "runc")
    assert name in containerd["runtimes"], f"default runtime {name} is not defined: {containerd}"
    return name


@pytest.mark.parametrize("version", [(1, 6, 20), (1, 7, 12), (2, 2, 1)])
@pytest.mark.parametrize("drop_in", ["", DROP])
def test_a_default_nvidia_runtime_is_kept_unless_asked(version, drop_in):
    # Before: set_as_default false (the old default) deleted default_runtime_name = "nvidia", so GPU pods fell
    # back to runc, and with the drop-in on 1.6/1.7 no runc was defined: the CRI plugin refused to start.
    p = plan(version, NVIDIA_DEFAULT, DEFAULT_16, drop_in_path=drop_in)
    assert default_is_defined(effective(p["files"], NVIDIA_DEFAULT, drop_in, version)) == "nvidia"
    assert again(version, p, NVIDIA_DEFAULT, DEFAULT_16, drop_in_path=drop_in)["files"] == {}


@pytest.mark.parametrize("version", [(1, 6, 20), (1, 7, 12), (2, 2, 1)])
@pytest.mark.parametrize("drop_in", ["", DROP])
def test_taking_the_default_away_defines_what_it_falls_back_to(version, drop_in):
    p = plan(version, NVIDIA_DEFAULT, DEFAULT_16, drop_in_path=drop_in, set_as_default=False)
    config = effective(p["files"], NVIDIA_DEFAULT, drop_in, version)
    assert default_is_defined(config) == "runc"
    assert config["plugins"][cr.CRI_V2]["containerd"]["runtimes"]["runc"]["runtime_type"] == "io.containerd.runc.v2"
    assert again(version, p, NVIDIA_DEFAULT, DEFAULT_16, drop_in_path=drop_in, set_as_default=False)["files"] == {}


def test_a_default_runtime_that_cannot_be_defined_is_refused():
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "kata"\n'
    with pytest.raises(cr.ConfigError, match=r"default runtime 'kata' .* is not defined .*refuse to start the CRI plugin"):
        plan((1, 7, 12), text, DEFAULT_16)


@pytest.mark.parametrize("value", ["always", "", None])
def test_set_as_default_choices(value):
    with pytest.raises(cr.ConfigError, match=r"set_as_default: .* is not one of keep"):
        plan((2, 2, 1), V3, set_as_default=value)


# Some node images write a sub-table before its parent: valid TOML, on which tomlkit's in-place edit
# raised "Key ... already exists" (0.11.7 and 0.12.4) or could not rebuild the text.
SUB_TABLE_FIRST = """version = 2
root = "/var/lib/containerd"

[plugins."io.containerd.grpc.v1.cri".containerd]
default_runtime_name = "runc"
discard_unpacked_layers = true

[plugins."io.containerd.grpc.v1.cri"]
sandbox_image = "registry.k8s.io/pause:3.10"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
SystemdCgroup = true

[plugins."io.containerd.grpc.v1.cri".cni]
bin_dir = "/opt/cni/bin"
"""


@pytest.mark.parametrize("as_default", [True, False])
def test_a_sub_table_before_its_parent_is_edited_in_place(as_default):
    p = plan((1, 7, 12), SUB_TABLE_FIRST, set_as_default=as_default)
    before, after = data(SUB_TABLE_FIRST), data(p["files"][MAIN])
    cri = after["plugins"][cr.CRI_V2]
    assert cri["containerd"]["runtimes"]["nvidia"]["options"] == {"SystemdCgroup": True, "BinaryName": NV}
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["default_runtime_name"] == ("nvidia" if as_default else "runc")
    del cri["containerd"]["runtimes"]["nvidia"], cri["enable_cdi"]
    cri["containerd"]["default_runtime_name"] = "runc"
    assert after == before
    assert again((1, 7, 12), p, SUB_TABLE_FIRST, set_as_default=as_default)["files"] == {}


def test_an_edit_that_tomlkit_drops_is_never_reported_as_done(monkeypatch):
    # tomlkit 0.11.7 could lose an edit on a table written out of order and give back the old text: the
    # module then reported ok with no nvidia runtime. The text is now proven against the wanted keys.
    monkeypatch.setattr(cr.Editor, "_with_tomlkit", lambda self: self.text)
    p = plan((2, 2, 1), V3)
    assert "nvidia" in runtimes(data(p["files"][MAIN]), cr.CRI_V3_RUNTIME)
    monkeypatch.setattr(cr.Editor, "_with_lines", lambda self: self.text)
    with pytest.raises(cr.ConfigError, match=r"cannot edit /etc/containerd/config.toml in place .* drop-in"):
        plan((2, 2, 1), V3)


# gVisor's runtime under the name nvidia (a sandbox with GPU access): not runc-based, not ours to rewrite.
RUNSC_AS_NVIDIA = """version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia]
  runtime_type = "io.containerd.runsc.v1"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.nvidia.options]
  TypeUrl = "io.containerd.runsc.v1.options"
  ConfigPath = "/etc/containerd/runsc.toml"
"""


@pytest.mark.parametrize("drop_in", ["", DROP])
def test_a_runtime_of_our_name_that_is_not_runc_is_refused(drop_in):
    with pytest.raises(cr.ConfigError, match=r"runtime_name: .* runtime 'nvidia' of type io.containerd.runsc.v1 "
                                             r"\(options ConfigPath, TypeUrl\), which is not runc-based"):
        plan((1, 7, 12), RUNSC_AS_NVIDIA, drop_in_path=drop_in)
    # Under another name it goes beside it, and gVisor's runtime stays as it was.
    p = plan((1, 7, 12), RUNSC_AS_NVIDIA, name="nvidia-gpu", drop_in_path=drop_in)
    config = effective(p["files"], RUNSC_AS_NVIDIA, drop_in, (1, 7, 12))
    assert config["plugins"][cr.CRI_V2]["containerd"]["runtimes"]["nvidia"] == data(RUNSC_AS_NVIDIA)["plugins"][cr.CRI_V2]["containerd"]["runtimes"]["nvidia"]


def test_an_error_names_the_variable_the_role_set():
    with pytest.raises(cr.ConfigError) as exc:
        plan((2, 2, 1), V3, name="Bad_Name")
    assert exc.value.named({"runtime_name": "gpuops_container_toolkit_runtime_name"}).startswith(
        "gpuops_container_toolkit_runtime_name: 'Bad_Name' is not a valid runtime handler name")
    assert str(exc.value).startswith("runtime_name: ")


# What containerd reads besides the main file: its imports (issue 25: found with containerd's own dump).
EXTRA = "/etc/containerd/extra.d/10-site.toml"
SITE = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.example/pause:3.10"\n'


def test_a_drop_in_before_2_1_carries_what_the_imports_set_too():
    # Before, only the main file's CRI section was copied: loaded last, the drop-in dropped the site file's settings.
    p = plan((1, 7, 12), V2, drop_in_path=DROP, imports=[(EXTRA, SITE)])
    assert data(p["files"][DROP])["plugins"][cr.CRI_V2]["sandbox_image"] == "registry.example/pause:3.10"


def test_a_drop_in_somebody_else_wrote_is_never_replaced():
    ctk = '# generated by nvidia-ctk\nversion = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  default_runtime_name = "nvidia"\n'
    with pytest.raises(cr.ConfigError, match=r"^drop_in: /etc/containerd/conf.d/99-nvidia.toml exists and was not written by "
                                             r"this module"):
        plan((1, 7, 12), V2, drop_in_path=DROP, drop_in_text=ctk)


@pytest.mark.parametrize(("version", "verb"), [((1, 7, 12), "replaces"), ((2, 2, 1), "overrides")])
def test_an_import_that_would_undo_the_edit_is_refused(version, verb):
    later = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  enable_cdi = false\n'
    with pytest.raises(cr.ConfigError, match=rf" differ\): {EXTRA}, imported after {MAIN}, {verb} the CRI section"):
        plan(version, V2, imports=[(EXTRA, later)])


def test_a_missing_import_would_hide_the_drop_in():
    # containerd 2.2 stops reading imports at a file that does not exist (seen with Talos' config in the lab).
    with pytest.raises(cr.ConfigError, match=r"^drop_in: .* imports /etc/cri/conf.d/cri.toml, which does not exist"):
        plan((2, 2, 1), V3, drop_in_path=DROP, imports=[("/etc/cri/conf.d/cri.toml", None)])
    assert plan((2, 2, 1), V3, imports=[("/etc/cri/conf.d/cri.toml", None)])["files"]


def test_cri_disabled_is_refused():
    text = 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
    with pytest.raises(cr.ConfigError, match=r"disables containerd's CRI plugin \(disabled_plugins: io.containerd.grpc.v1.cri\)"):
        plan((1, 7, 12), text)


def test_a_version_2_file_with_the_2x_section_gets_the_runtime_where_2x_reads_it():
    text = ('version = 2\n[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"\n'
            '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata]\n  runtime_type = "io.containerd.kata.v2"\n')
    p = plan((2, 2, 1), text)
    assert "nvidia" in runtimes(data(p["files"][MAIN]), cr.CRI_V3_RUNTIME)
    assert "nvidia" in runtimes(data(plan((1, 7, 12), text)["files"][MAIN]), cr.CRI_V2)


# Reading (not editing) goes through tomllib where the Python has it; the data must be what tomlkit's parse gives, on
# every real config the tests hold (recorded defaults, field files from cloud images and installers, the lab's planted
# ones), and a file tomllib refuses keeps tomlkit's answer and message.
CONFIGS = sorted([*RECORDED.glob("*.toml"), *(Path(__file__).parents[3] / "tests/data/containerd-field").glob("*.toml"),
                  *PLANTED.rglob("*.toml")])


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_reading_a_config_gives_what_tomlkit_gives(path):
    text = path.read_text()
    assert cr.read(text, str(path)) == cr.plain(cr.parse(text, str(path)))


def test_reading_uses_tomllib_where_the_python_has_it():
    assert (cr.tomllib is not None) == (sys.version_info >= (3, 11))
    assert len(CONFIGS) > 20
    assert cr.read(None, "/nothing.toml") == {} and cr.read("", "/empty.toml") == {}


def test_a_file_tomllib_refuses_keeps_tomlkit_s_message():
    with pytest.raises(cr.ConfigError, match=r"/etc/containerd/config.toml does not parse as TOML at line 2"):
        cr.read('version = 2\n[plugins\n', "/etc/containerd/config.toml")
