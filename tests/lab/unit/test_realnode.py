"""The real node's settings (lab/realnode.py), decided without booting a machine."""

from __future__ import annotations

import datetime
import socket
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
    v1 = realnode.kubelet_config(False, "10.96.0.10", "10.244.1.0/24")
    v2 = realnode.kubelet_config(True, "10.96.0.10", "10.244.1.0/24")
    assert v1["failCgroupV1"] is False  # a v1 host: the kubelet refuses to start without it
    assert "failCgroupV1" not in v2
    for config in (v1, v2):
        assert (config["cgroupDriver"], config["cgroupRoot"]) == ("cgroupfs", "/kubelet")
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


def test_the_pod_network_is_a_bridge_on_the_nodes_cidr():
    conf = realnode.cni_conflist("10.244.1.0/24")
    bridge, portmap = conf["plugins"]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]]
    assert (bridge["type"], portmap["type"]) == ("bridge", "portmap")


def test_the_sysctls_are_files_bound_read_only_over_proc_sys(tmp_path):
    opts = realnode.nspawn_options(tmp_path)
    assert opts[:3] == ["--bind=/dev/kmsg", "--capability=all", "--system-call-filter=add_key keyctl request_key"]
    binds = {o.split(":", 1)[1]: o.removeprefix("--bind-ro=").split(":", 1)[0] for o in opts[3:]}
    assert set(binds) == {f"/proc/sys/{name}" for name in realnode.KUBELET_SYSCTLS}
    assert all(o.startswith("--bind-ro=") for o in opts[3:])
    assert Path(binds["/proc/sys/vm/overcommit_memory"]).read_text() == "1\n"


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
