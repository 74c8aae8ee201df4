"""The real node's settings (lab/realnode.py), decided without booting a machine."""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from lab import realnode
from lab.errors import LabError


@pytest.fixture(scope="module")
def ca():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "lab-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM),
            key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()), cert)


def test_the_node_certificate_is_a_kubelets_signed_by_the_cluster_ca(ca):
    ca_pem, ca_key, ca_cert = ca
    cert_pem, key_pem = realnode.node_certificate(ca_pem, ca_key, "node-1")
    cert = x509.load_pem_x509_certificate(cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:node-1"
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:nodes"
    assert cert.issuer == ca_cert.subject
    cert.verify_directly_issued_by(ca_cert)
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [ExtendedKeyUsageOID.CLIENT_AUTH]
    key = serialization.load_pem_private_key(key_pem, password=None)
    assert key.public_key().public_numbers() == cert.public_key().public_numbers()  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["", "Node_1", "node 1", "node-1/x"])
def test_a_bad_node_name_is_named(ca, name):
    with pytest.raises(LabError, match="give a DNS-1123 name"):
        realnode.node_certificate(ca[0], ca[1], name)


def test_the_kubelet_config_follows_the_hosts_cgroup_version():
    v1 = realnode.kubelet_config(False, "10.96.0.10", "10.244.1.0/24", realnode.cgroup_root("n1"))
    v2 = realnode.kubelet_config(True, "10.96.0.10", "10.244.1.0/24", realnode.cgroup_root("n1"))
    assert v1["failCgroupV1"] is False  # a v1 host: the kubelet refuses to start without it
    assert "failCgroupV1" not in v2
    for config in (v1, v2):
        assert (config["cgroupDriver"], config["cgroupRoot"]) == ("cgroupfs", "/gpuops-lab-kubelet-n1")
        assert config["resolvConf"] == "/etc/resolv.conf"
        assert config["protectKernelDefaults"] is True  # check the bound sysctls, never write the host kernel's
        assert config["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"


@pytest.mark.parametrize(("dns", "cidr"), [("10.96.0", "10.244.1.0/24"), ("10.96.0.10", "10.244.1.1/24")])
def test_bad_addresses_are_refused(dns, cidr):
    with pytest.raises(ValueError):
        realnode.kubelet_config(True, dns, cidr)


def test_host_cgroup_version(tmp_path):
    assert realnode.host_cgroup_v2(tmp_path) is False
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert realnode.host_cgroup_v2(tmp_path) is True


def test_the_kubeconfig_names_the_node_and_its_files():
    cfg = realnode.kubelet_kubeconfig("https://127.0.0.1:32766", "node-1")
    assert cfg["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:32766"
    assert cfg["users"][0]["name"] == "system:node:node-1"
    assert cfg["users"][0]["user"]["client-key"] == "/var/lib/kubelet/pki/kubelet-client.key"


def test_the_pod_network_is_the_hosts_bridge_on_the_nodes_cidr():
    conf = realnode.cni_conflist("10.244.1.0/24")
    (bridge,) = conf["plugins"]  # no portmap, no masquerade: both need iptables chains on the host
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]]
    assert (bridge["type"], bridge["bridge"], bridge["ipMasq"]) == ("bridge", realnode.BRIDGE, False)
    assert len(realnode.BRIDGE) <= 15  # an interface name


def test_the_nspawn_options_give_a_kubelet_what_it_needs():
    assert realnode.nspawn_options() == ["--bind=/dev/kmsg", "--capability=all", "--system-call-filter=add_key keyctl request_key"]


def test_the_sysctls_are_files_the_prep_script_binds_read_only_over_proc_sys():
    files = realnode.sysctl_files()
    assert {Path(p).name for p in files} == {n.replace("/", ".") for n in realnode.KUBELET_SYSCTLS}
    assert files[f"{realnode.SYSCTL_DIR}/vm.overcommit_memory"] == "1\n"
    script = realnode.prep_script("/gpuops-lab-kubelet-n1")
    assert f"for f in {realnode.SYSCTL_DIR}/*" in script
    assert 'mount --bind "$f" "$target"' in script and 'mount -o remount,bind,ro "$target"' in script
    # every v1 hierarchy writable, the cgroup root in each, its cpuset from the parent
    assert 'mkdir -p "$h/gpuops-lab-kubelet-n1"' in script
    assert 'cat "$h/cpuset.cpus" > "$h/gpuops-lab-kubelet-n1/cpuset.cpus"' in script


def test_the_prep_script_runs(tmp_path):
    """The script's shell is right (sh -n), whatever the host."""
    for dev_dir in ("", "/opt/gpuops-lab/hw/driver/dev"):
        path = tmp_path / "prep"
        path.write_text(realnode.prep_script("/x", dev_dir))
        assert subprocess.run(["sh", "-n", str(path)], check=False).returncode == 0


def test_a_loaded_driver_gives_dev_its_device_nodes_as_on_a_node_with_the_driver():
    # The device plugin names /dev/nvidiactl and /dev/nvidia<N> to the kubelet; containerd stats them on the node.
    script = realnode.prep_script("/x", "/opt/gpuops-lab/hw/driver/dev")
    assert "for d in /opt/gpuops-lab/hw/driver/dev/nvidia*; do" in script
    assert 'mount --bind "$d" "$target"' in script
    assert "nvidia" not in realnode.prep_script("/x")  # no driver loaded: no device nodes


def test_the_kubelet_runs_after_the_prep_unit_and_containerd():
    assert f"Requires={realnode.PREP_UNIT} containerd.service" in realnode.KUBELET_UNIT
    assert "Before=containerd.service kubelet.service" in realnode.PREP_UNIT_TEXT
    assert "--hostname-override=%H" in realnode.KUBELET_UNIT


def test_containerd_restricts_oom_score_adj_and_runs_the_labs_pause():
    import tomllib

    config = tomllib.loads(realnode.containerd_config("registry.k8s.io/pause:3.10.2"))
    cri = config["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10.2"
    assert cri["cni"] == {"bin_dir": "/opt/cni/bin", "conf_dir": "/etc/cni/net.d"}


def test_the_service_dnat_goes_from_the_bridge_to_the_loopback_api_server():
    rule = realnode.service_dnat_rule(32766)
    assert rule[:3] == ["PREROUTING", "-i", realnode.BRIDGE]
    assert rule[rule.index("-d") + 1] == f"{realnode.SERVICE_IP}/32" and rule[rule.index("--dport") + 1] == "443"
    assert rule[-2:] == ["--to-destination", "127.0.0.1:32766"]


def test_the_api_server_is_read_from_the_kubeconfig(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:32766'}\n")
    assert realnode.api_server(kubeconfig) == ("https://127.0.0.1:32766", 32766)


def test_the_kwokctl_config_names_the_service_ip_in_the_certificate():
    import yaml

    from lab.cluster import KWOKCTL_CONFIG

    assert yaml.safe_load(KWOKCTL_CONFIG)["options"]["kubeApiserverCertSANs"] == [realnode.SERVICE_IP]


def test_the_driver_roots_nvml_is_a_copy_with_its_soname_link(tmp_path):
    machine_root = tmp_path / "root"
    lib = machine_root / "opt/hw/driver/usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    (lib / "libnvidia-ml.so.550.54.15").symlink_to("../../../../nvml/libnvidia-ml.so.1")  # dangles in a container
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.550.54.15")
    nvml = tmp_path / "libnvidia-ml.so.1"
    nvml.write_bytes(b"\x7fELF builtin")
    realnode.driver_root_nvml(Path("/opt/hw/driver"), machine_root, nvml, "550.54.15")
    target = lib / "libnvidia-ml.so.550.54.15"
    assert not target.is_symlink() and target.read_bytes() == b"\x7fELF builtin"
    assert os.readlink(lib / "libnvidia-ml.so.1") == "libnvidia-ml.so.550.54.15"


def test_the_kubelets_cgroups_on_the_host_are_found_by_the_nodes_name(tmp_path):
    for h in ("cpu,cpuacct", "memory", "systemd"):
        (tmp_path / h / "gpuops-lab-kubelet-n1/kubepods").mkdir(parents=True)
    (tmp_path / "memory/gpuops-lab-kubelet-n2").mkdir()
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    found = realnode.host_cgroups("n1", tmp_path)
    assert found == [tmp_path / h / "gpuops-lab-kubelet-n1" for h in ("cpu,cpuacct", "memory", "systemd")]


def test_a_real_node_gets_no_kwok_node_and_boots_with_the_kubelets_options(tmp_path):
    from lab.cluster import nodes_from_machines
    from lab.machines import Lab, Machine, nspawn_command

    lab = Lab(tmp_path)
    real = Machine("rn", "noble", 2300, str(tmp_path / "rn"), "hgx-h100", extra={realnode.REAL_NODE: "true"})
    plain = Machine("m1", "noble", 2301, str(tmp_path / "m1"), "l40s")
    lab.save({"rn": real, "m1": plain})
    assert [n.name for n in nodes_from_machines(tmp_path)] == ["m1"]
    assert "--capability=all" in nspawn_command(real)
    assert "--capability=all" not in nspawn_command(plain)


def test_a_port_in_use_is_one_line():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(LabError, match=rf"^port {port} on 127.0.0.1 is in use \(.*\): choose another base port"):
            realnode.check_lane_settings([port], tools=())


def test_a_missing_host_tool_is_one_line():
    with pytest.raises(LabError, match=r"^the real-node lane needs no-such-tool-61 on this host"):
        realnode.check_lane_settings([], tools=("no-such-tool-61",))


@pytest.mark.parametrize(("argv", "message"), [
    (["--real-node", "rn=a100-pcie-mig"], "has MIG devices, which a real node cannot show"),
    (["--real-node", "rn", "--real-node", "rn2"], "one --real-node at a time"),
    (["--real-node", "Bad_Name"], "bad machine name"),
    (["--real-node", "rn"], ""),  # no cluster runs in this state directory (or, not root, the lab's own line)
])
def test_bad_real_node_settings_are_one_line_and_start_nothing(tmp_path, capsys, argv, message):
    from lab.cli import main

    assert main(["--state", str(tmp_path), "up", "--inventory", "", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("lab: error: ") and err.count("\n") == 1, err
    assert message in err
    assert not (tmp_path / "machines").exists()


def test_containerd_is_the_archives_newest_or_the_newest_of_a_series(tmp_path):
    assert realnode.containerd_install() == "apt-get install -y -q --no-install-recommends containerd iptables"
    # Run against an apt that has 2.2 and 1.7 (noble's updates and release pockets).
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "apt-cache").write_text("#!/bin/sh\necho ' containerd | 2.2.1-0ubuntu1~24.04.4 | http://a noble-updates/main'\n"
                                       "echo ' containerd | 1.7.12-0ubuntu4 | http://a noble/main'\n")
    (bin_dir / "apt-get").write_text('#!/bin/sh\necho "$@"\n')
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    def run(series: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", "-euo", "pipefail", "-c", realnode.containerd_install(series)], env=env,
                              capture_output=True, text=True, check=False)

    assert run("1.7").stdout.split()[-2:] == ["containerd=1.7.12-0ubuntu4", "iptables"]
    missing = run("1.6")
    assert missing.returncode == 1 and "the archive has no containerd 1.6: 2.2.1-0ubuntu1~24.04.4 1.7.12-0ubuntu4" in missing.stderr


@pytest.mark.parametrize("series", ["1", "1.7.12", "latest", "1.7; rm -rf /"])
def test_a_containerd_series_that_is_not_one_is_refused(series):
    with pytest.raises(LabError, match=r"a release series such as 1\.7"):
        realnode.containerd_install(series)
