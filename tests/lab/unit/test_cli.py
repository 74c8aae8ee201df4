from __future__ import annotations

import pytest
import yaml

from lab import cli
from lab.inventory import render_inventory, write_inventory
from lab.machines import Machine


def _run(capsys, *argv):
    rc = cli.main(list(argv))
    err = capsys.readouterr().err
    return rc, err


def test_unknown_distribution_is_one_line(capsys):
    rc, err = _run(capsys, "up", "--machine", "x=focal")
    assert rc == 2
    assert err == "lab: error: unknown distribution 'focal' (known: bookworm, jammy, noble, resolute)\n"


def test_missing_root_is_one_line(capsys, monkeypatch):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 1000)
    rc, err = _run(capsys, "up", "--machine", "x=noble")
    assert rc == 2
    assert err.startswith("lab: error: must run as root") and err.count("\n") == 1


def test_missing_tools_are_named(capsys, monkeypatch):
    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    monkeypatch.setattr(cli.shutil, "which", lambda tool: None if tool == "systemd-nspawn" else "/usr/bin/" + tool)
    rc, err = _run(capsys, "up", "--machine", "x=noble")
    assert rc == 2
    assert "missing host tools: systemd-nspawn" in err


def test_ssh_to_an_unknown_machine(capsys, tmp_path):
    rc, err = _run(capsys, "--state", str(tmp_path), "ssh", "nope")
    assert rc == 2
    assert "no lab machine named 'nope' (machines: none running)" in err


@pytest.mark.parametrize("argv", [["--", "test", "-d", "/x"], ["test", "-d", "/x"]], ids=["with --", "without"])
def test_ssh_runs_the_command_without_the_separator(monkeypatch, tmp_path, argv):
    machine = Machine(name="m", distro="noble", port=2222, directory="/x/m")
    monkeypatch.setattr(cli.Lab, "load", lambda self: {"m": machine})
    monkeypatch.setattr(cli.Lab, "is_ours", lambda self, m: True)
    monkeypatch.setattr(cli.sys.stdin, "isatty", lambda: False, raising=False)
    ran = []
    monkeypatch.setattr(cli.os, "execvp", lambda prog, cmd: ran.append(cmd))
    cli.main(["--state", str(tmp_path), "ssh", "m", *argv])
    assert ran[0][-4:] == ["root@127.0.0.1", "test", "-d", "/x"]


def test_status_of_an_empty_lab(capsys, tmp_path):
    assert cli.main(["--state", str(tmp_path), "status"]) == 0
    assert capsys.readouterr().out == "no lab machines\n"


def test_inventory_puts_machines_in_gpu_nodes(tmp_path):
    machines = {
        "b": Machine(name="b", distro="jammy", port=2222, directory="/x/b"),
        "a": Machine(name="a", distro="noble", port=2221, directory="/x/a"),
    }
    data = render_inventory(machines, tmp_path / "key")
    hosts = data["all"]["children"]["gpu_nodes"]["hosts"]
    assert list(hosts) == ["a", "b"]
    assert hosts["a"] == {"ansible_host": "127.0.0.1", "ansible_port": 2221, "gpuops_lab_distro": "noble"}
    assert data["all"]["vars"]["ansible_ssh_private_key_file"] == str(tmp_path / "key")
    assert "-o UserKnownHostsFile=/dev/null" in data["all"]["vars"]["ansible_ssh_common_args"]


def test_write_inventory_is_valid_yaml(tmp_path):
    path = tmp_path / "inv/hosts.yml"
    write_inventory(path, {"a": Machine(name="a", distro="noble", port=2221, directory="/x/a")}, tmp_path / "k")
    assert yaml.safe_load(path.read_text())["all"]["children"]["gpu_nodes"]["hosts"]["a"]["ansible_port"] == 2221


@pytest.mark.parametrize("argv", [["up", "--machine", "a=noble", "--machine", "a=jammy"]])
def test_duplicate_machine_names(capsys, argv):
    rc, err = _run(capsys, *argv)
    assert rc == 2 and "given twice" in err


def test_inventory_of_a_machine_with_a_profile_points_the_roles_at_its_hardware(tmp_path):
    m = Machine(name="a", distro="noble", port=2221, directory="/x/a", profile="hgx-h100")
    host = render_inventory({"a": m}, tmp_path / "key")["all"]["children"]["gpu_nodes"]["hosts"]["a"]
    assert host["gpuops_lab_profile"] == "hgx-h100"
    assert host["gpuops_preflight_hardware_root"] == "/opt/gpuops-lab/hw"
    assert host["gpuops_preflight_nvml_library"] == "/opt/gpuops-lab/hw/nvml/libnvidia-ml.so.1"


def test_machines_with_mig_devices_do_not_generate_the_cdi_spec():
    from lab.inventory import host_vars

    def machine(profile):
        return Machine(name="a", distro="noble", port=2221, directory="/x/a", profile=profile)

    assert host_vars(machine("a100-pcie-mig"))["gpuops_container_toolkit_cdi_spec"] is False
    assert "gpuops_container_toolkit_cdi_spec" not in host_vars(machine("hgx-h100"))


def test_the_mig_profile_names_the_config_its_gpus_are_in(tmp_path):
    """The lab's MIG manager must apply what the machine's fake NVML shows, or every later cluster.yml fails."""
    from lab.facts import A100_PROFILE_MIG_CONFIG

    machines = {"a": Machine(name="a", distro="jammy", port=2222, directory="/x/a", profile="a100-pcie-mig"),
                "b": Machine(name="b", distro="noble", port=2221, directory="/x/b", profile="hgx-h100")}
    data = render_inventory(machines, tmp_path / "key")
    hosts = data["all"]["children"]["gpu_nodes"]["hosts"]
    assert hosts["a"]["gpuops_mig_manager_config"] == "lab-a100-gpu0-balanced"
    assert "gpuops_mig_manager_config" not in hosts["b"]
    assert data["all"]["vars"]["gpuops_mig_manager_configs"] == A100_PROFILE_MIG_CONFIG
    assert "gpuops_mig_manager_configs" not in render_inventory({"b": machines["b"]}, tmp_path / "key")["all"]["vars"]


def test_down_removes_only_the_inventory_its_own_up_wrote(capsys, tmp_path, monkeypatch):
    """`lab down --state OTHER` must not delete the default inventory of a lab that is still running."""
    from lab.machines import Lab

    monkeypatch.setattr(cli.os, "geteuid", lambda: 0)
    running, other = tmp_path / "running", tmp_path / "other"
    shared = tmp_path / "hosts.yml"
    shared.write_text("running lab\n")
    Lab(running).record_inventory(shared)
    mine = tmp_path / "mine.yml"
    mine.write_text("other lab\n")
    Lab(other).record_inventory(mine)

    assert cli.main(["--state", str(other), "down", "--inventory", str(shared)]) == 0
    assert shared.read_text() == "running lab\n"
    assert f"left {shared}: this lab's up did not write it" in capsys.readouterr().out
    assert mine.exists()  # not named: left as well

    assert cli.main(["--state", str(running), "down", "--inventory", str(shared)]) == 0
    assert not shared.exists()
    assert not (running / "inventory-path").exists()
