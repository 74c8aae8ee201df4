from __future__ import annotations

import socket

import pytest

from lab.errors import LabError
from lab.machines import (
    COMPILER_CACHE_MOUNT,
    Lab,
    Machine,
    MachineSpec,
    assign_ports,
    check_specs,
    compiler_cache_dir,
    ensure_inotify_instances,
    nspawn_command,
    parse_machine_spec,
    port_in_use,
)


def test_parse_machine_spec():
    assert parse_machine_spec("gpu1=Ubuntu24.04") == MachineSpec("gpu1", "noble")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu1", "expected NAME=DISTRO"),
        ("=noble", "expected NAME=DISTRO"),
        ("Gpu_1=noble", "bad machine name 'Gpu_1'"),
        ("gpu1=centos7", "unknown distribution 'centos7'"),
    ],
)
def test_parse_machine_spec_errors_name_the_problem(text, message):
    with pytest.raises(LabError, match=message):
        parse_machine_spec(text)


def test_check_specs_refuses_duplicates_and_nothing():
    with pytest.raises(LabError, match="given twice"):
        check_specs([MachineSpec("a", "noble"), MachineSpec("a", "jammy")])
    with pytest.raises(LabError, match="no machines"):
        check_specs([])


@pytest.fixture
def held_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_port_in_use_sees_a_listener(held_port):
    assert port_in_use(held_port)


def test_assign_ports_names_a_port_held_by_another_program(held_port):
    specs = [MachineSpec("a", "noble")]
    with pytest.raises(LabError, match=f"port {held_port} on 127.0.0.1 is already in use \\(wanted for a\\)"):
        assign_ports(specs, held_port, set())


def test_assign_ports_skips_ports_of_the_labs_own_machines():
    specs = [MachineSpec("a", "noble"), MachineSpec("b", "jammy")]
    base = _free_base(4)
    assert assign_ports(specs, base, {base, base + 2}) == {"a": base + 1, "b": base + 3}


def test_assign_ports_refuses_out_of_range():
    with pytest.raises(LabError, match="base port 80 is out of range"):
        assign_ports([MachineSpec("a", "noble")], 80, set())


def test_state_round_trips(tmp_path):
    lab = Lab(tmp_path / "state")
    m = Machine(name="a", distro="noble", port=2221, directory=str(tmp_path / "m/a"), pid=123)
    lab.save({"a": m})
    assert lab.load() == {"a": m}


def test_nspawn_command_binds_the_compiler_cache_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.setenv("GPUOPS_LAB_CACHE", str(tmp_path / "cache"))
    plain = Machine(name="a", distro="noble", port=2221, directory=str(tmp_path / "m/a"))
    cmd = nspawn_command(plain)
    assert cmd[0] == "systemd-nspawn" and cmd[-2:] == ["-D", str(tmp_path / "m/a/root")]
    assert not [a for a in cmd if a.startswith("--bind")]
    cached = Machine(name="a", distro="jammy", port=2221, directory=str(tmp_path / "m/a"),
                     extra={"compiler_cache": str(compiler_cache_dir("jammy"))})
    assert compiler_cache_dir("jammy") == tmp_path / "cache/ccache/jammy"
    # The bind is an option before the root directory, and a saved machine keeps it for its reboots.
    assert f"--bind={tmp_path}/cache/ccache/jammy:{COMPILER_CACHE_MOUNT}" in nspawn_command(cached)[:-2]
    lab = Lab(tmp_path / "state")
    lab.save({"a": cached})
    assert nspawn_command(lab.load()["a"]) == nspawn_command(cached)


@pytest.mark.parametrize(("distro", "env"), [("resolute", {"SYSTEMD_NSPAWN_UNIFIED_HIERARCHY": "1"}), ("noble", None)])
def test_boot_gives_nspawn_the_distributions_environment(tmp_path, monkeypatch, distro, env):
    from lab import machines

    started = {}

    class Proc:
        pid = 4242

        @staticmethod
        def poll():
            return 0

    def popen(argv, **kwargs):
        started.update(argv=argv, env=kwargs.get("env"))
        return Proc()

    monkeypatch.setattr(machines.subprocess, "Popen", popen)
    monkeypatch.setattr(machines, "ensure_unified_hierarchy", lambda: None)
    monkeypatch.setattr(machines, "machine_cgroups", lambda leaf: [])
    monkeypatch.setenv("GPUOPS_LAB_TEST_MARK", "kept")
    (tmp_path / "m").mkdir()
    Lab(tmp_path / "state").boot(Machine(name="a", distro=distro, port=2221, directory=str(tmp_path / "m")))
    assert "systemd-nspawn" in started["argv"]
    if env is None:
        assert started["env"] is None
    else:
        assert {k: started["env"][k] for k in env} == env and started["env"]["GPUOPS_LAB_TEST_MARK"] == "kept"


def test_is_ours_rejects_a_pid_that_is_not_the_recorded_nspawn(tmp_path):
    import os

    m = Machine(name="a", distro="noble", port=2221, directory=str(tmp_path), pid=os.getpid())
    assert not Lab.is_ours(m)
    assert not Lab.is_ours(Machine(name="b", distro="noble", port=1, directory="/x", pid=0))


def test_down_of_an_empty_lab_removes_its_directory(tmp_path):
    lab = Lab(tmp_path / "state")
    (tmp_path / "state").mkdir()
    assert lab.down() == []
    assert not (tmp_path / "state").exists()


def _free_base(count: int) -> int:
    for base in range(40000, 60000, 10):
        if not any(port_in_use(base + i) for i in range(count)):
            return base
    raise RuntimeError("no free ports")


V1_SELF = "9:name=systemd:/user.slice/session-1.scope\n4:memory:/x\n0::/ci\n"
V2_SELF = "0::/ci/job-7\n"


def test_machine_cgroups_on_a_v1_host_without_cgroup2(tmp_path):
    from lab.machines import machine_cgroups

    (tmp_path / "systemd").mkdir()
    assert machine_cgroups("m", tmp_path, V1_SELF) == [tmp_path / "systemd/user.slice/session-1.scope/m"]


def test_machine_cgroups_on_a_hybrid_v1_host_cover_both_hierarchies(tmp_path):
    from lab.machines import machine_cgroups

    (tmp_path / "systemd").mkdir()
    (tmp_path / "unified").mkdir()
    (tmp_path / "unified/cgroup.procs").write_text("")
    assert machine_cgroups("m", tmp_path, V1_SELF) == [
        tmp_path / "systemd/user.slice/session-1.scope/m",
        tmp_path / "unified/ci/m",
    ]


def test_machine_cgroups_on_a_v2_host(tmp_path):
    from lab.machines import machine_cgroups

    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert machine_cgroups("m", tmp_path, V2_SELF) == [tmp_path / "ci/job-7/m"]


def test_machine_cgroups_without_a_hierarchy(tmp_path):
    from lab.machines import machine_cgroups

    assert machine_cgroups("m", tmp_path, V2_SELF) == []


def test_remove_cgroup_removes_the_tree_deepest_first(tmp_path):
    from lab.cgroups import remove_cgroup

    (tmp_path / "m/system.slice/ssh.service").mkdir(parents=True)
    (tmp_path / "m/init.scope").mkdir()
    remove_cgroup(tmp_path / "m")
    assert not (tmp_path / "m").exists()
    remove_cgroup(tmp_path / "m")  # already gone: nothing to do


def test_remove_cgroup_waits_out_a_cgroup_that_is_busy_for_a_moment(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    from lab.cgroups import remove_cgroup

    (tmp_path / "m/system.slice/systemd-journald.service").mkdir(parents=True)
    real = Path.rmdir
    busy = {"left": 3}

    def rmdir(self):
        if self.name == "systemd-journald.service" and busy["left"]:
            busy["left"] -= 1
            raise OSError(errno.EBUSY, "Device or resource busy", str(self))
        real(self)

    monkeypatch.setattr(Path, "rmdir", rmdir)
    remove_cgroup(tmp_path / "m")
    assert not (tmp_path / "m").exists() and busy["left"] == 0


def test_remove_cgroup_gives_up_on_a_cgroup_that_stays_busy(tmp_path, monkeypatch):
    import errno
    from pathlib import Path

    from lab.cgroups import remove_cgroup

    (tmp_path / "m/init.scope").mkdir(parents=True)

    def rmdir(self):
        raise OSError(errno.EBUSY, "Device or resource busy", str(self))

    monkeypatch.setattr(Path, "rmdir", rmdir)
    with pytest.raises(OSError, match="busy"):
        remove_cgroup(tmp_path / "m", busy_for=0.3)


def test_parse_machine_spec_with_a_profile():
    assert parse_machine_spec("gpu1=jammy:hgx-h100") == MachineSpec("gpu1", "jammy", "hgx-h100")


def test_parse_machine_spec_with_an_unknown_profile_names_it():
    with pytest.raises(LabError, match="unknown hardware profile 'hgx-z'"):
        parse_machine_spec("gpu1=jammy:hgx-z")


def test_a_port_in_time_wait_is_free_for_sshd():
    """sshd binds with SO_REUSEADDR: a port whose last connection is in TIME_WAIT is free for the next lab."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as sshd's listener does
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        conn, _addr = server.accept()
        conn.close()  # the server side closes first, so its end goes to TIME_WAIT
        client.close()
    assert not port_in_use(port)


@pytest.mark.parametrize("module", ["lab.machines", "lab.supervise", "lab.cluster", "lab.inventory"])
def test_the_machine_layer_does_not_load_the_ci_timing(module):
    """The machines (and what builds on them) work without `make test`'s timing and lanes: importing them loads neither."""
    import subprocess
    import sys
    from pathlib import Path

    code = f"import sys, {module}; print(' '.join(sorted(m for m in sys.modules if m.startswith('lab.'))))"
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3], check=True,
                         capture_output=True, text=True).stdout.split()
    assert module in out
    assert not {"lab.lanes", "lab.timing"} & set(out), out


def test_the_inotify_instance_limit_is_raised_never_lowered(tmp_path):
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    assert ensure_inotify_instances(limit, 1024) is True
    assert limit.read_text() == "1024\n"
    assert ensure_inotify_instances(limit, 1024) is False
    limit.write_text("8192\n")
    assert ensure_inotify_instances(limit, 1024) is False
    assert limit.read_text() == "8192\n"
    assert ensure_inotify_instances(tmp_path / "absent", 1024) is False


def test_a_limit_that_cannot_be_raised_is_one_line_naming_the_sysctl(tmp_path, monkeypatch):
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")

    def refused(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(type(limit), "write_text", refused)
    with pytest.raises(LabError, match=r"fs\.inotify\.max_user_instances is 128: lab machines need 1024"):
        ensure_inotify_instances(limit, 1024)
