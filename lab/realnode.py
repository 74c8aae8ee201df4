"""A real node for the lab cluster: a lab machine that runs a real kubelet (issue 61; in progress).

What is here is what joining a machine needs that can be decided and tested without booting one:

- the node's client certificate, `system:node:<name>` in `system:nodes`, signed by the cluster's CA (as the Node
  authorizer and NodeRestriction expect a kubelet's), and the kubelet's kubeconfig;
- the kubelet's configuration, chosen by the host's cgroup version: on a v1 host the kubelet must be told
  `failCgroupV1: false`; cgroupfs as the driver and its own `cgroupRoot` (the machine's systemd does not delegate a
  slice to it); swap and the kernel defaults left as the host has them;
- the node's pod network: a CNI conflist (bridge with host-local addresses, portmap, loopback);
- what systemd-nspawn must give the machine for a kubelet: /dev/kmsg, every capability, the key syscalls, and the
  sysctls the kubelet checks as files bound over /proc/sys (a machine shares the host's kernel: the kubelet must
  never write them there);
- the lane's settings checked before anything starts: a port in use or a missing host tool is one line.

Not done yet: booting the machine with these, containerd's `restrict_oom_score_adj`, importing the images, the
route to the `kubernetes` Service, `lab down` removing the Node, and the stand-ins leaving a real node alone.
"""

from __future__ import annotations

import datetime
import ipaddress
import shutil
import warnings
from pathlib import Path

from .errors import LabError, require_free_port

# What the kubelet sets at start (its kernel tunables) unless told to only check them; a machine must not set them on
# the shared host kernel, so each is a file with the value the kubelet wants, bound over /proc/sys in the machine.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
# The host tools the lane needs besides the lab's own.
LANE_TOOLS = ("systemd-nspawn", "gcc", "go")
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"


def host_cgroup_v2(root: Path = Path("/sys/fs/cgroup")) -> bool:
    """Whether the host runs the unified hierarchy (cgroup v2): its root holds cgroup.controllers."""
    return (root / "cgroup.controllers").is_file()


def kubelet_config(cgroup_v2: bool, cluster_dns: str, pod_cidr: str) -> dict:
    """The KubeletConfiguration of the lab's real node."""
    ipaddress.ip_address(cluster_dns)
    ipaddress.ip_network(pod_cidr)
    config: dict = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": "/var/lib/kubelet/pki/ca.crt"}},
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": "/kubelet",
        "clusterDNS": [cluster_dns],
        "clusterDomain": "cluster.local",
        "containerRuntimeEndpoint": CONTAINERD_SOCKET,
        "podCIDR": pod_cidr,
        "failSwapOn": False,
        "protectKernelDefaults": True,  # check the bound sysctl files, never write them
        "makeIPTablesUtilChains": False,
        "resolvConf": "/run/systemd/resolve/resolv.conf",
        "registerNode": True,
        "serializeImagePulls": False,
    }
    if not cgroup_v2:
        config["failCgroupV1"] = False
    return config


def node_certificate(ca_cert_pem: bytes, ca_key_pem: bytes, node: str, days: int = 30) -> tuple[bytes, bytes]:
    """A kubelet's client certificate and key for `node`, signed by the cluster's CA (PEM)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    if not node or any(c not in "abcdefghijklmnopqrstuvwxyz0123456789-." for c in node):
        raise LabError(f"node name {node!r}: give a DNS-1123 name (lower case letters, digits, '-', '.')")
    with warnings.catch_warnings():  # kwokctl's CA has a serial number RFC 5280 disallows (zero); it is what the cluster trusts
        warnings.simplefilter("ignore")
        ca_cert = x509.load_pem_x509_certificate(ca_cert_pem)
    ca_key = serialization.load_pem_private_key(ca_key_pem, password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    subject = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                         x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.KeyUsage(digital_signature=True, key_encipherment=True, content_commitment=False, data_encipherment=False,
                                         key_agreement=False, key_cert_sign=False, crl_sign=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))  # type: ignore[arg-type]
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def kubelet_kubeconfig(server: str, node: str) -> dict:
    """The kubelet's kubeconfig; the CA, certificate and key are files beside it in /var/lib/kubelet/pki."""
    pki = "/var/lib/kubelet/pki"
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "lab",
        "clusters": [{"name": "lab", "cluster": {"server": server, "certificate-authority": f"{pki}/ca.crt"}}],
        "users": [{"name": f"system:node:{node}",
                   "user": {"client-certificate": f"{pki}/kubelet-client.crt", "client-key": f"{pki}/kubelet-client.key"}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": f"system:node:{node}"}}],
    }


def cni_conflist(pod_cidr: str) -> dict:
    """The node's pod network: a bridge with host-local addresses from the node's pod CIDR, masquerade out, portmap."""
    net = ipaddress.ip_network(pod_cidr)
    gateway = str(next(net.hosts()))
    return {
        "cniVersion": "1.0.0", "name": "gpuops-lab",
        "plugins": [
            {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": str(net), "gateway": gateway}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write_sysctl_files(dest: Path) -> list[str]:
    """Write one file per sysctl the kubelet checks, with the value it wants, under dest; return nspawn's bind
    options binding each read-only over the machine's /proc/sys."""
    binds = []
    for name, value in sorted(KUBELET_SYSCTLS.items()):
        path = dest / name.replace("/", ".")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
        binds.append(f"--bind-ro={path}:/proc/sys/{name}")
    return binds


def nspawn_options(sysctl_dir: Path) -> list[str]:
    """What systemd-nspawn gives a machine that runs a kubelet and containers (besides the lab's usual options)."""
    return ["--bind=/dev/kmsg", "--capability=all", "--system-call-filter=add_key keyctl request_key",
            *write_sysctl_files(sysctl_dir)]


def check_lane_settings(ports: list[int], tools: tuple[str, ...] = LANE_TOOLS) -> None:
    """Raise one LabError line for a port already in use on 127.0.0.1 or a missing host tool, before anything starts."""
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise LabError(f"the real-node lane needs {', '.join(missing)} on this host ('make lab-deps')")
    for port in ports:
        require_free_port(port, "choose another base port (GPUOPS_MOLECULE_BASE_PORT)")
