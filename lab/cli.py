"""The lab's command line: `python -m lab up|down|status|ssh|image|cluster|repo|time`.

Every problem the user can fix is reported as one line on stderr ("lab: error: ...") with exit 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

from . import interrupt, lanes, realnode, timing, toolkit
from .cluster import Cluster, nodes_from_machines, parse_node_spec, scale_nodes
from .distros import DISTROS, get_distro
from .errors import LabError
from .images import DEFAULT_MAX_AGE_DAYS, cache_dir, ensure_images
from .inventory import write_inventory
from .machines import DEFAULT_BASE_PORT, Lab, MachineSpec, check_specs, parse_machine_spec
from .nodebuild import ensure_node_builds
from .sim.hardware import build_fake_nvml, load_profile, nvml_conf, profile_names
from .toolchain import ensure_toolchain

REPO = Path(__file__).resolve().parents[1]
DEFAULT_INVENTORY = REPO / "inventories/lab/hosts.yml"
# One machine per distribution, each with simulated GPUs: what `make lab-up` and `make demo` boot.
DEFAULT_MACHINES = ("lab-noble=noble:hgx-h100", "lab-jammy=jammy:a100-pcie-mig", "lab-bookworm=bookworm:v100")
HOST_TOOLS = ("systemd-nspawn", "ssh", "ssh-keygen", "tar", "zstd")


def _require_root() -> None:
    if os.geteuid() != 0:
        raise LabError(f"must run as root (systemd-nspawn and debootstrap need it); you are uid {os.geteuid()}")


def _require_tools(tools: tuple[str, ...] = HOST_TOOLS) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise LabError(f"missing host tools: {', '.join(missing)}; install them with 'make lab-deps'")


def _lab(args: argparse.Namespace) -> Lab:
    return Lab(Path(args.state) if args.state else None)


def parse_real_node(text: str) -> MachineSpec:
    """--real-node NAME[=PROFILE]: an Ubuntu 24.04 machine with that profile (hgx-h100 by default)."""
    name, _sep, profile = text.partition("=")
    spec = parse_machine_spec(f"{name}={realnode.DISTRO}:{profile or 'hgx-h100'}")
    if (load_profile(spec.profile).get("gpus") or {}).get("mig_devices"):
        raise LabError(f"--real-node {text!r}: profile {spec.profile} has MIG devices, which a real node cannot show "
                       "(runc does not mount /proc/driver/nvidia/capabilities): choose one without")
    return spec


def cmd_up(args: argparse.Namespace) -> int:
    real = [parse_real_node(r) for r in args.real_node or []]
    specs = [parse_machine_spec(m) for m in (args.machine or ([] if real else DEFAULT_MACHINES))] + real
    check_specs(specs)
    if len(real) > 1:
        raise LabError("one --real-node at a time: they would share the host's pod bridge and port 10250")
    if args.real_node_containerd and not real:
        raise LabError("--real-node-containerd: only with --real-node")
    realnode.containerd_install(args.real_node_containerd)  # a bad series is refused before anything starts
    _require_root()
    _require_tools()
    lab = _lab(args)
    cluster = Cluster(lab.dir)
    builds = nvml = None
    if real:
        # Every setting and the cluster checked, and everything built, before a machine boots.
        realnode.check_lane_settings([])
        state = cluster.load()
        if state is None or not state.pids or not all(state.alive(n) for n in state.pids):
            raise LabError(f"--real-node: no lab cluster runs for state {lab.dir}; start it first: "
                           f"python -m lab --state {lab.dir} cluster up")
        builds = ensure_node_builds()
        nvml = build_fake_nvml(cache_dir(), nvml_conf(load_profile(real[0].profile), real[0].name))
    t0 = time.monotonic()
    machines = lab.up(specs, args.base_port, timeout=args.timeout, compiler_cache=args.compiler_cache,
                      real_nodes=frozenset(r.name for r in real))
    for spec in real:
        machine = machines[spec.name]
        try:
            realnode.join(lab, machine, cluster, builds, nvml,  # type: ignore[arg-type]  # both set with real
                          containerd=args.real_node_containerd)
        except BaseException:
            # Nothing half-joined is left running; what the machine's units said stays in the join's log.
            realnode.save_journal(lab, machine)
            realnode.delete_node(cluster, machine)
            lab.stop(machine)
            machines.pop(spec.name)
            lab.save(machines)
            raise
        lab.save(machines)
    if args.inventory:
        write_inventory(Path(args.inventory), machines, lab.key)
        lab.record_inventory(Path(args.inventory))
    for m in sorted(machines.values(), key=lambda m: m.name):
        print(f"{m.name}: {m.distro} ssh root@127.0.0.1 -p {m.port} (pid {m.pid})")
    print(f"lab up: {len(machines)} machine(s) ready in {time.monotonic() - t0:.1f}s; state in {lab.dir}")
    return 0


def cmd_real_node_check(args: argparse.Namespace) -> int:
    """The real-node lane's settings, before anything starts (make lab-test-real-node)."""
    realnode.check_lane_settings([args.base_port, args.repo_port])
    _require_root()
    print(f"real-node lane: ports {args.base_port} and {args.repo_port} free, host tools present")
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    _require_root()
    lab = _lab(args)
    ours = lab.recorded_inventory()
    # A real node's Node goes while its cluster still runs (`make lab-down` stops the cluster first: it goes with it).
    for machine in lab.load().values():
        if machine.extra.get(realnode.REAL_NODE):
            realnode.delete_node(Cluster(lab.dir), machine)
    stopped = lab.down()
    if args.inventory:
        # Only the inventory this lab's `up` wrote: the default path may be another, running lab's.
        inventory = Path(args.inventory)
        if ours is not None and inventory.resolve() == ours:
            inventory.unlink(missing_ok=True)
        elif inventory.exists():
            print(f"lab down: left {inventory}: this lab's up did not write it (state {lab.dir})")
    print(f"lab down: stopped {', '.join(stopped) if stopped else 'nothing'}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    lab = _lab(args)
    machines = lab.load()
    rows = []
    for m in sorted(machines.values(), key=lambda m: m.name):
        rows.append(
            {
                "instance": m.name,
                "name": m.name,
                "distro": m.distro,
                "port": m.port,
                "pid": m.pid,
                "nspawn_pid": lab.nspawn_pid(m),
                "running": lab.is_ours(m),
                "root": str(m.root),
                "address": "127.0.0.1",
                "user": "root",
                "identity_file": str(lab.key),
            }
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    elif not rows:
        print("no lab machines")
    else:
        for r in rows:
            print(f"{r['name']:<20} {r['distro']:<9} port {r['port']:<6} pid {r['pid']:<8} {'running' if r['running'] else 'STOPPED'}")
    return 0


def _after_separator(words: list[str]) -> list[str]:
    """A REMAINDER argument's words without the leading "--", which argparse keeps."""
    return words[1:] if words[:1] == ["--"] else words


def cmd_ssh(args: argparse.Namespace) -> int:
    lab = _lab(args)
    machines = lab.load()
    machine = machines.get(args.name)
    if machine is None:
        known = ", ".join(sorted(machines)) or "none running"
        raise LabError(f"no lab machine named {args.name!r} (machines: {known})")
    if not lab.is_ours(machine):
        raise LabError(f"lab machine {args.name} is not running (pid {machine.pid} is gone); run 'lab down' then 'lab up'")
    # `lab ssh NAME -- CMD...`: without the "--", which ssh would send as the command's first word.
    cmd = lab.ssh_command(machine, *_after_separator(args.command))
    if sys.stdin.isatty():
        cmd.insert(1, "-t")
    os.execvp(cmd[0], cmd)
    return 0  # not reached


def cmd_image(args: argparse.Namespace) -> int:
    distros = [get_distro(d) for d in (args.distro or sorted(DISTROS))]
    _require_root()
    _require_tools(("debootstrap", "systemd-nspawn", "tar", "zstd"))
    for name, path in ensure_images(distros, max_age_days=args.max_age_days).items():
        print(f"{name}: {path}")
    return 0


def _cluster(args: argparse.Namespace) -> Cluster:
    return Cluster(Path(args.state) if args.state else None)


def cmd_cluster_up(args: argparse.Namespace) -> int:
    nodes = [] if args.no_machines else nodes_from_machines(Path(args.state) if args.state else None)
    nodes += [parse_node_spec(n) for n in args.node or []]
    nodes += scale_nodes(args.nodes)
    _cluster(args).up(nodes, wait=args.timeout)
    return 0


def cmd_cluster_down(args: argparse.Namespace) -> int:
    stopped = _cluster(args).down()
    print(f"lab cluster down: stopped {', '.join(stopped) if stopped else 'nothing'}")
    return 0


def cmd_cluster_status(args: argparse.Namespace) -> int:
    status = _cluster(args).status()
    if args.json:
        print(json.dumps(status, indent=2))
    elif not status["components"]:
        print("no lab cluster")
    else:
        print(f"lab cluster: {'running' if status['running'] else 'NOT RUNNING'}, {status['nodes']} node(s), "
              f"KUBECONFIG={status['kubeconfig']}")
        for name, c in sorted(status["components"].items()):
            print(f"  {name:<26} pid {c['pid']:<8} {'running' if c['running'] else 'STOPPED'}")
    return 0 if status["running"] or not status["components"] else 1


def cmd_cluster_build(_args: argparse.Namespace) -> int:
    tools = ensure_toolchain()
    for path in (tools.kube_apiserver, tools.kube_controller_manager, tools.kube_scheduler, tools.etcd, tools.kwok, tools.kwokctl):
        print(path)
    return 0


def cmd_cluster_node_build(_args: argparse.Namespace) -> int:
    builds = ensure_node_builds()
    for path in (builds.kubelet, builds.cni_bin, builds.pause_archive, builds.device_plugin_archive, builds.probe_archive):
        print(path)
    return 0


def cmd_cluster_kubeconfig(args: argparse.Namespace) -> int:
    print(_cluster(args).kubeconfig)
    return 0


def _state_dir(args: argparse.Namespace) -> Path:
    return _lab(args).dir


def cmd_repo_up(args: argparse.Namespace) -> int:
    data = toolkit.up(_state_dir(args), args.port)
    print(json.dumps(data, indent=2) if args.json else f"lab toolkit repository: {data['url']} (pid {data['pid']})")
    return 0


def cmd_repo_down(args: argparse.Namespace) -> int:
    stopped = toolkit.down(_state_dir(args))
    print(f"lab toolkit repository down: {'stopped' if stopped else 'stopped nothing'}")
    return 0


def cmd_repo_status(args: argparse.Namespace) -> int:
    data = toolkit.status(_state_dir(args))
    print(json.dumps(data, indent=2))
    return 0 if data["running"] else 1


def cmd_repo_build(_args: argparse.Namespace) -> int:
    print(toolkit.build_repo())
    return 0


def cmd_time_run(args: argparse.Namespace) -> int:
    command = _after_separator(args.command)
    if not command:
        raise LabError("time run: no command given (lab time run --log FILE --name NAME -- CMD...)")
    return timing.run_timed(Path(args.log), args.name, command)


def cmd_time_lane(args: argparse.Namespace) -> int:
    command = _after_separator(args.command)
    if not command:
        raise LabError("time lane: no command given (lab time lane --log FILE --name NAME --weight N -- CMD...)")
    if not 1 <= args.weight <= 10000:
        raise LabError(f"time lane: --weight {args.weight} is out of range: 1 to 10000 (100 is a default task's)")
    return lanes.main_lane(Path(args.log), args.name, args.weight, command)


def cmd_interrupt(args: argparse.Namespace) -> int:
    command = _after_separator(args.command)
    if not command:
        raise LabError("interrupt: no command given (lab interrupt --until CHECK --log FILE -- CMD...)")
    result = interrupt.run_until(command, args.until, log=Path(args.log), timeout=args.timeout)
    print(json.dumps(result))
    return 0


def cmd_time_report(args: argparse.Namespace) -> int:
    begin = timing.read_begin(Path(args.begin_file) if args.begin_file else None)
    budget = args.budget_min * 60 if args.budget_min is not None else None
    print(timing.format_table(timing.read_log(Path(args.log)), begin, time.time(), budget))
    try:
        now = timing.cpu_lines(Path("/proc/stat").read_text(encoding="utf-8"))
    except OSError:
        now = []
    cpu = timing.format_cpu(timing.read_begin_cpu(Path(args.begin_file) if args.begin_file else None), now)
    if cpu:
        print(cpu)
    shares = lanes.format_lanes(Path(args.lanes_log)) if args.lanes_log else None
    if shares:
        print(shares)
    return 0


def cmd_time_failures(args: argparse.Namespace) -> int:
    timing.print_failures(Path(args.log), Path(args.build_dir))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lab", description="The gpuops lab: systemd-nspawn machines reached over SSH.")
    parser.add_argument("--state", help="state directory (default: $GPUOPS_LAB_STATE or ~/.local/state/gpuops-lab)")
    sub = parser.add_subparsers(dest="cmd", required=True)

    up = sub.add_parser("up", help="boot machines (default: one per distribution)")
    up.add_argument(
        "--machine",
        action="append",
        metavar="NAME=DISTRO[:PROFILE]",
        help=f"a machine to boot; repeat for several (distributions: {', '.join(sorted(DISTROS))}; "
        f"hardware profiles: {', '.join(profile_names())})",
    )
    up.add_argument("--real-node", action="append", metavar="NAME[=PROFILE]",
                    help="also boot an Ubuntu 24.04 machine with that hardware profile (default hgx-h100) that runs a real "
                    "kubelet and containerd, and join it to the running lab cluster of this state directory as a Node "
                    "(lab/realnode.py; one at a time). Without --machine, only that machine boots")
    up.add_argument("--real-node-containerd", default="", metavar="SERIES",
                    help="the real node's containerd: the newest of a release series its archive has (1.7: Ubuntu 24.04's "
                    "release pocket), instead of the archive's newest (2.2 from its updates)")
    up.add_argument("--base-port", type=int, default=int(os.environ.get("GPUOPS_LAB_BASE_PORT", DEFAULT_BASE_PORT)))
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for each machine to boot")
    up.add_argument("--inventory", default=str(DEFAULT_INVENTORY), help="inventory file to write ('' for none)")
    up.add_argument("--compiler-cache", action="store_true",
                    help="bind the host's compiler cache for the distribution (~/.cache/gpuops-lab/ccache/DISTRO) at "
                    "/var/cache/gpuops-lab/ccache in each machine (molecule/shared/compiler_cache.yml sets ccache up)")
    up.set_defaults(func=cmd_up)

    rcheck = sub.add_parser("real-node-check", help="check the real-node lane's settings (ports, host tools) before it starts anything")
    rcheck.add_argument("--base-port", type=int, required=True, help="the real node's SSH port")
    rcheck.add_argument("--repo-port", type=int, required=True, help="the lane's toolkit repository port")
    rcheck.set_defaults(func=cmd_real_node_check)

    down = sub.add_parser("down", help="stop every machine and remove its directory")
    down.add_argument("--inventory", default=str(DEFAULT_INVENTORY), help="inventory file to remove ('' for none)")
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="list machines")
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    ssh = sub.add_parser("ssh", help="open a shell on a machine, or run a command there")
    ssh.add_argument("name")
    ssh.add_argument("command", nargs=argparse.REMAINDER)
    ssh.set_defaults(func=cmd_ssh)

    image = sub.add_parser("image", help="build (or reuse from the cache) the images")
    image.add_argument("distro", nargs="*")
    image.add_argument("--max-age-days", type=int, default=DEFAULT_MAX_AGE_DAYS)
    image.set_defaults(func=cmd_image)

    cluster = sub.add_parser("cluster", help="the lab's Kubernetes control plane with KWOK nodes")
    csub = cluster.add_subparsers(dest="cluster_cmd", required=True)
    cup = csub.add_parser("up", help="start the control plane and create the nodes (one per lab machine by default)")
    cup.add_argument("--nodes", type=int, default=0, help="also create N simulated GPU nodes of mixed profiles")
    cup.add_argument("--node", action="append", metavar="NAME=PROFILE[:DISTRO[:KERNEL]]", help="also create this node; repeatable")
    cup.add_argument("--no-machines", action="store_true", help="no nodes for the lab machines")
    cup.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the control plane and the nodes")
    cup.set_defaults(func=cmd_cluster_up)
    cdown = csub.add_parser("down", help="stop the processes the cluster started (by PID) and remove its state")
    cdown.set_defaults(func=cmd_cluster_down)
    cstatus = csub.add_parser("status", help="the cluster's processes and nodes")
    cstatus.add_argument("--json", action="store_true")
    cstatus.set_defaults(func=cmd_cluster_status)
    cbuild = csub.add_parser("build", help="build (or find in the cache) the control plane, etcd and KWOK binaries")
    cbuild.set_defaults(func=cmd_cluster_build)
    node_help = "build (or find in the cache) what a real node runs: the kubelet, the CNI plugins, the pause and device plugin images"
    cnode = csub.add_parser("node-build", help=node_help)
    cnode.set_defaults(func=cmd_cluster_node_build)
    ckube = csub.add_parser("kubeconfig", help="print the kubeconfig path")
    ckube.set_defaults(func=cmd_cluster_kubeconfig)

    repo = sub.add_parser("repo", help="the lab's signed apt repository of the NVIDIA Container Toolkit, built from Go")
    rsub = repo.add_subparsers(dest="repo_cmd", required=True)
    rup = rsub.add_parser("up", help="build (or find in the cache) and serve the repository on 127.0.0.1")
    rup.add_argument("--port", type=int, default=int(os.environ.get("GPUOPS_LAB_REPO_PORT", toolkit.DEFAULT_PORT)))
    rup.add_argument("--json", action="store_true")
    rup.set_defaults(func=cmd_repo_up)
    rsub.add_parser("down", help="stop the server (by PID)").set_defaults(func=cmd_repo_down)
    rsub.add_parser("status", help="the server's address and PID, as JSON").set_defaults(func=cmd_repo_status)
    rsub.add_parser("build", help="build (or find in the cache) the repository").set_defaults(func=cmd_repo_build)

    intr = sub.add_parser("interrupt", help="run a command and SIGKILL its process group once a check passes (interrupted runs)")
    intr.add_argument("--until", required=True, help="shell command run every 0.5s; the first exit 0 kills the command")
    intr.add_argument("--log", required=True, help="where the command's output goes")
    intr.add_argument("--timeout", type=float, default=900.0, help="seconds to wait for the check (default 900)")
    intr.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    intr.set_defaults(func=cmd_interrupt)

    timed = sub.add_parser("time", help="time the steps of `make test` and print the table (no root needed)")
    tsub = timed.add_subparsers(dest="time_cmd", required=True)
    trun = tsub.add_parser("run", help="run a command, append its name, start, duration and exit code to the log")
    trun.add_argument("--log", required=True, help="the log (tab-separated; created with its directory)")
    trun.add_argument("--name", required=True, help="the step's name in the table")
    trun.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    trun.set_defaults(func=cmd_time_run)
    tlane = tsub.add_parser("lane", help="run a command in a CPU cgroup of its own with a weight; log its CPU time")
    tlane.add_argument("--log", required=True, help="the lanes' log (tab-separated; created with its directory)")
    tlane.add_argument("--name", required=True, help="the lane's name in the report")
    tlane.add_argument("--weight", type=int, default=100, help="its CPU weight, 1 to 10000 (default 100, a default task's)")
    tlane.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    tlane.set_defaults(func=cmd_time_lane)
    treport = tsub.add_parser("report", help="print the timing table of the log")
    treport.add_argument("--log", required=True)
    treport.add_argument("--begin-file", help="file with the epoch seconds at which the run began (gives the setup row)")
    treport.add_argument("--budget-min", type=int, help="the budget in minutes: adds a within/OVER line")
    treport.add_argument("--lanes-log", help="the lanes' log (`lab time lane`): adds their weights and CPU times")
    treport.set_defaults(func=cmd_time_report)
    tfail = tsub.add_parser("failures", help="for each failed step in the timing log, print the last failures in its own log")
    tfail.add_argument("--log", required=True, help="the timing log")
    tfail.add_argument("--build-dir", default=".build", help="where the steps' logs are (NAME.log, / as -)")
    tfail.set_defaults(func=cmd_time_failures)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except LabError as exc:
        print(f"lab: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("lab: interrupted", file=sys.stderr)
        return 130


# Keep the type importable for callers that build specs themselves.
__all__ = ["MachineSpec", "build_parser", "main"]
