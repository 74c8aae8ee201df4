"""`make bench` (`python -m lab.bench [--only PART] [--no-upgrade] [--keep]`): the figures issue 23 asks for, each from one run on this machine.

Boots three fresh lab machines of its own (its own state directory, ports and toolkit repository, so a
`make demo` lab keeps running) and a lab cluster with a KWOK node per machine, prepares them as `make demo`
does (kernel, containerd), then times:

- the first install of `node.yml` on one machine alone (DKMS; Canonical's precompiled modules are not
  reachable from the lab, so that row says so), then on the other two at once;
- a no-op `node.yml` on one machine and on the three (and the ratio), each the median of three runs taken in
  turn, with the controller's CPU seconds (a small machine runs the lab's machines and the controller on the same
  cores); a check-mode run on a converged node;
- a no-op `site.yml` on the three, after a first one, the median of three;
- `gpu_info` on the 8-GPU profile (HGX H100): one read, in process, against the profile's sysfs and NVML;
- `upgrade_driver.yml` on one node (from the branch before the archive's newest to the newest, DKMS, with Fabric
  Manager);
- `cluster.yml` on a thousand KWOK nodes (no machines), first and no-op; the first run's own work is its time
  less the validation's wait for the cluster to converge (the time the validation reports).

Every playbook run must pass and the no-op runs must change nothing; the bench fails otherwise. Nothing here is
an assertion on time: the table is printed and written (with the date and the machine) to docs/bench.md, between
its markers (BEGIN, END): the history of the figures below them is kept. Everything it started is stopped by PID at
the end (--keep leaves the machines up).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import yaml

from .cluster import scale_nodes
from .facts import cluster_inventory, fact_cache_env, move_facts_to_cache, profile_mig_config, profile_mig_configs
from .images import cache_dir
from .sim.hardware import build_fake_nvml, load_profile, write_hardware

REPO = Path(__file__).resolve().parents[1]
MACHINES = {"bench-noble": "noble:hgx-h100", "bench-jammy": "jammy:a100-pcie-mig", "bench-bookworm": "bookworm:v100"}
FIRST = "bench-noble"
# The first install pins the H100 machine to the branch before the archive's newest; the upgrade moves it to the newest.
# Both are read from the machine's index at the time (lab/newest_branch.sh), as in the default scenario.
FIRST_BRANCH, UPGRADE_BRANCH = 2, 1
UPGRADE_ROW = "upgrade_driver.yml, 1 node"
# Runs of each no-op playbook row: its figure is their median.
NOOP_RUNS = 3
RECAP = re.compile(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)\s+skipped=(\d+)", re.M)
WAITED = re.compile(r"waited ([0-9.]+)s for their resources, ([0-9.]+)s for the smoke tests")


@dataclass
class Row:
    what: str
    seconds: float | None
    note: str = ""
    part: str = ""
    measured: str = ""  # when the run that measured it started (UTC, to the minute)


@dataclass
class Bench:
    state: Path
    base_port: int
    repo_port: int
    nodes: int
    log: Path
    rows: list[Row] = field(default_factory=list)
    part: str = ""
    started: str = ""
    # Beside the table (docs/bench.json), in the repository: a part measured on another machine or in another
    # checkout keeps its figures there, where the state directory would lose them.
    results: Path | None = None
    # The controller's CPU seconds (user and system) of the last playbook run.
    last_cpu: float = 0.0

    # -- running things ----------------------------------------------------------------------
    def lab(self, *args: str, state: Path | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "lab", "--state", str(state or self.state), *args]
        return self._run(cmd, check=check)

    def _run(self, cmd: list[str], check: bool = True, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        with self.log.open("a", encoding="utf-8") as log:
            log.write(f"\n$ {' '.join(cmd)}\n")
            log.flush()
            res = subprocess.run(cmd, cwd=REPO, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 env={**os.environ, **(env or {})}, check=False)
            log.write(res.stdout)
        if check and res.returncode != 0:
            raise SystemExit(f"bench: {' '.join(cmd[:6])} ... failed ({res.returncode}); see {self.log}:\n{res.stdout[-3000:]}")
        return res

    def playbook(self, playbook: str, inventory: Path, *extra: str, forks: int | None = None,
                 env: dict[str, str] | None = None) -> tuple[float, dict[str, dict[str, int]], str]:
        """Run a playbook, return (seconds, the recap per host, the output); any failed host stops the bench."""
        cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), *extra, str(REPO / "playbooks" / playbook)]
        t0, cpu0 = time.monotonic(), _children_cpu()
        env = {"ANSIBLE_NOCOLOR": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json", **({"ANSIBLE_FORKS": str(forks)} if forks else {}),
               **(env or {})}
        res = self._run(cmd, check=False, env=env)
        took = time.monotonic() - t0
        self.last_cpu = _children_cpu() - cpu0
        recap = {m[1]: {"ok": int(m[2]), "changed": int(m[3]), "unreachable": int(m[4]), "failed": int(m[5]),
                        "skipped": int(m[6])} for m in RECAP.finditer(res.stdout)}
        if res.returncode != 0 or not recap or any(r["failed"] or r["unreachable"] for r in recap.values()):
            raise SystemExit(f"bench: {playbook} {' '.join(extra)} failed; see {self.log}:\n{res.stdout[-3000:]}")
        return took, recap, res.stdout

    def add(self, what: str, seconds: float | None, note: str = "") -> None:
        """Record a figure, and keep it at once with the results (a later step that fails does not lose it)."""
        self.rows.append(Row(what, seconds, note, self.part, self.started))
        save_results(self.results or self.state / "results.json", self.rows)
        print(f"bench: {what}: {_seconds(seconds)}{'' if seconds is None else 's'} {note}".rstrip(), flush=True)


def _children_cpu() -> float:
    """User and system seconds of the bench's finished children: a playbook run's controller (ansible-playbook, its
    workers and their SSH clients), not the machines, which `lab up` started."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _seconds(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds:.3f}" if seconds < 1 else f"{seconds:.1f}"


def _runs(runs: list[tuple[float, float]]) -> str:
    """'median of 3: 4.4 to 4.9s, controller CPU 3.1s' for (seconds, controller CPU seconds) of each run."""
    took = [t for t, _cpu in runs]
    return (f"median of {len(runs)}: {min(took):.1f} to {max(took):.1f}s, "
            f"controller CPU {statistics.median(cpu for _t, cpu in runs):.1f}s")


def _tasks(recap: dict[str, dict[str, int]]) -> str:
    """'61 tasks, 38 ran' per host (the first host's figures when they agree)."""
    per = {h: (r["ok"] + r["skipped"], r["ok"]) for h, r in recap.items()}
    shown = sorted(set(per.values()))
    return "; ".join(f"{t} tasks, {ran} ran" for t, ran in shown)


def _unchanged(recap: dict[str, dict[str, int]], what: str) -> None:
    changed = {h: r["changed"] for h, r in recap.items() if r["changed"]}
    if changed:
        raise SystemExit(f"bench: the no-op {what} changed something: {changed}")


def inventory_dir(bench: Bench) -> Path:
    """The bench's inventory: hosts.yml from `lab up`, the lab's group settings with the bench's repository."""
    inv = bench.state / "inventory"
    (inv / "group_vars").mkdir(parents=True, exist_ok=True)
    (inv / "host_vars").mkdir(exist_ok=True)
    # An earlier run's (or a person's) host settings would change what this run measures: the run writes its own.
    for stale in (inv / "host_vars").glob("*"):
        stale.unlink()
    settings = yaml.safe_load((REPO / "inventories/lab/group_vars/all.yml").read_text())
    url = f"http://127.0.0.1:{bench.repo_port}"
    settings.update(gpuops_container_toolkit_repo_url=url, gpuops_container_toolkit_repo_key_url=f"{url}/gpgkey",
                    gpuops_cluster_kubeconfig=str(bench.state / "cluster/kubeconfig"),
                    gpuops_node_feature_discovery_crds_url=f"file://{bench.state}/cluster/nfd-api-crds.yaml",
                    gpuops_validation_timeout=240)
    (inv / "group_vars/all.yml").write_text(yaml.safe_dump(settings, sort_keys=False))
    return inv


def gpu_info_seconds(runs: int = 7) -> tuple[float, float]:
    """(first, median of the rest) seconds of one gpu_info read of the HGX H100 profile (8 GPUs, NVSwitch)."""
    sys.path.insert(0, str(REPO / ".build/collections"))
    from ansible_collections.gpuops.nvidia.plugins.module_utils.node import gpu_info  # pylint: disable=import-outside-toplevel

    with tempfile.TemporaryDirectory() as tmp:
        hw = Path(tmp) / "hw"
        write_hardware(load_profile("hgx-h100"), hw, "bench", platform.release(), build_fake_nvml(cache_dir()))
        times = []
        for _run in range(runs):
            t0 = time.perf_counter()
            info = gpu_info.collect(str(hw), str(hw / "nvml/libnvidia-ml.so.1"))
            times.append(time.perf_counter() - t0)
        if len(info["nvml"]["gpus"]) != 8:
            raise SystemExit(f"bench: gpu_info read {len(info['nvml']['gpus'])} GPUs on the 8-GPU profile")
    return times[0], statistics.median(times[1:])


def machines_part(bench: Bench, upgrade: bool) -> None:
    inv = inventory_dir(bench)
    specs = [a for name, spec in MACHINES.items() for a in ("--machine", f"{name}={spec}")]
    bench.lab("up", *specs, "--base-port", str(bench.base_port), "--inventory", str(inv / "hosts.yml"))
    bench.lab("cluster", "up")
    bench.lab("repo", "up", "--port", str(bench.repo_port))
    for prep in ("kernel.yml", "archive_holes.yml", "runtime.yml"):
        bench._run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv), str(REPO / "molecule/shared" / prep)])
    rest = ",".join(n for n in MACHINES if n != FIRST)

    first = archive_branch(bench, inv, FIRST_BRANCH)
    (inv / f"host_vars/{FIRST}.yml").write_text(yaml.safe_dump({"gpuops_driver_branch": first}))
    took, recap, _out = bench.playbook("node.yml", inv, "--limit", FIRST)
    bench.add("first install, node.yml, 1 machine (DKMS)", took, f"{FIRST}, branch {first}; {_tasks(recap)}")
    bench.add("first install, precompiled modules", None, "not reachable from the lab (Canonical's pool answers 404)")
    took, recap, _out = bench.playbook("node.yml", inv, "--limit", rest)
    bench.add("first install, node.yml, 2 machines at once (DKMS)", took, rest)

    module = [str(Path(sys.executable).parent / "ansible"), "-i", str(inv), FIRST, "-m", "gpuops.nvidia.gpu_info", "-a",
              "root=/opt/gpuops-lab/hw nvml_library=/opt/gpuops-lab/hw/nvml/libnvidia-ml.so.1"]
    times = []
    for _try in range(4):
        t0 = time.monotonic()
        bench._run(module)
        times.append(time.monotonic() - t0)
    bench.add("gpu_info module on the 8-GPU machine, over SSH", statistics.median(times[1:]),
              "the whole round trip of an ad-hoc `ansible -m gpuops.nvidia.gpu_info`, median of 3 after a first")

    # One run's figure moves by a second or two on a small machine: each no-op row is the median of NOOP_RUNS runs, the
    # one-machine and three-machine runs taken in turn so that a slower spell weighs on both.
    limits: dict[str, tuple[str, ...]] = {"one": ("--limit", FIRST), "three": ()}
    noop: dict[str, list[tuple[float, float]]] = {key: [] for key in limits}
    recaps: dict[str, dict[str, dict[str, int]]] = {}
    for _round in range(NOOP_RUNS):
        for key, limit in limits.items():
            took, recaps[key], _out = bench.playbook("node.yml", inv, *limit)
            _unchanged(recaps[key], "node.yml")
            noop[key].append((took, bench.last_cpu))
    one = statistics.median(took for took, _cpu in noop["one"])
    bench.add("no-op node.yml, 1 machine", one, f"{_runs(noop['one'])}; {_tasks(recaps['one'])}")
    three = statistics.median(took for took, _cpu in noop["three"])
    bench.add("no-op node.yml, 3 machines", three, f"{three / one:.2f}x one machine; {_runs(noop['three'])}")
    took, recap, _out = bench.playbook("node.yml", inv, "--limit", FIRST, "--check", "--diff")
    _unchanged(recap, "check-mode node.yml")
    bench.add("check mode node.yml on a converged node", took, _tasks(recap))

    bench.playbook("site.yml", inv)
    site: list[tuple[float, float]] = []
    waits: list[tuple[float, float]] = []
    for _run in range(NOOP_RUNS):
        took, recap, out = bench.playbook("site.yml", inv)
        _unchanged(recap, "site.yml")
        site.append((took, bench.last_cpu))
        waited = WAITED.search(" ".join(out.split()))
        if waited:
            waits.append((float(waited[1]), float(waited[2])))
    bench.add("no-op site.yml, 3 machines", statistics.median(took for took, _cpu in site),
              f"{_runs(site)}; " + (f"validation waited at most {max(w for w, _s in waits)}s, smoke tests {max(s for _w, s in waits)}s"
                                    if waits else "validation's waits not reported"))

    if upgrade:
        target = archive_branch(bench, inv, UPGRADE_BRANCH)
        took, recap, _out = bench.playbook("upgrade_driver.yml", inv, "--limit", FIRST, "-e", f"gpuops_upgrade_branch={target}")
        bench.add(UPGRADE_ROW, took, f"{first} to {target} (the archive's newest), DKMS, Fabric Manager with it")


def archive_branch(bench: Bench, inv: Path, nth: int) -> str:
    """The archive's nth newest driver branch with packages of its own (1: the newest), as the first machine's index has it."""
    res = bench._run([str(Path(sys.executable).parent / "ansible"), "-i", str(inv), FIRST, "-m", "ansible.builtin.script",
                      "-a", f"{REPO / 'lab/newest_branch.sh'} {nth}"],
                     env={"ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json"})
    return newest_from_json(res.stdout, FIRST)


def newest_from_json(out: str, host: str) -> str:
    """The branch in the json callback's output of that ad-hoc run; a run that found none stops the bench."""
    try:
        found = json.loads(out[out.index("{"):])["plays"][0]["tasks"][0]["hosts"][host]["stdout"].strip()
    except (ValueError, KeyError, IndexError) as err:
        raise SystemExit(f"bench: no newest branch from {host}: {err}: {out[-2000:]}") from err
    if not re.fullmatch(r"\d{3}", found):
        raise SystemExit(f"bench: no newest branch from {host}: {found!r}")
    return found


def scale_part(bench: Bench) -> None:
    """cluster.yml on bench.nodes KWOK nodes, first and no-op, in a state directory of its own."""
    state = bench.state / "scale"
    bench.lab("cluster", "up", "--no-machines", "--nodes", str(bench.nodes), "--timeout", "300", state=state)
    try:
        inventory = state / "inventory.json"
        nodes = [(spec.name, spec.profile) for spec in scale_nodes(bench.nodes)]
        # The MIG config each MIG profile's GPUs are in (as `lab up` writes it): the lab's MIG manager must apply what
        # the facts show, or the no-op run expects MIG devices the default config took away.
        configs = profile_mig_configs(profile for _name, profile in nodes)
        # The hosts' facts come from a jsonfile fact cache, as node.yml leaves them for a later cluster.yml.
        facts = state / "facts"
        inventory.write_text(json.dumps(move_facts_to_cache(cluster_inventory(nodes, {
            "gpuops_cluster_kubeconfig": str(state / "cluster/kubeconfig"), "gpuops_validation_timeout": 300,
            "gpuops_node_feature_discovery_crds_url": f"file://{state / 'cluster/nfd-api-crds.yaml'}",
            **({"gpuops_mig_manager_configs": configs} if configs else {})},
            {name: {"gpuops_mig_manager_config": config} for name, profile in nodes if (config := profile_mig_config(profile))}),
            facts)))
        for run in ("first", "no-op"):
            # The forks of the lab tests that ran this before (ansible.cfg has 20).
            took, recap, out = bench.playbook("cluster.yml", inventory, forks=50, env=fact_cache_env(facts))
            if run == "no-op":
                _unchanged(recap, "cluster.yml")
            waited = WAITED.search(" ".join(out.split()))
            wait = float(waited[1]) + float(waited[2]) if waited else 0.0
            if run == "first":
                listed = json.loads(bench._run(["kubectl", "--kubeconfig", str(state / "cluster/kubeconfig"), "get", "nodes",
                                                "-o", "json"]).stdout)["items"]
                labelled = [n for n in listed if "nvidia.com/gpu.present" in n["metadata"].get("labels", {})]
                if len(labelled) != bench.nodes:
                    raise SystemExit(f"bench: cluster.yml labelled {len(labelled)} of {bench.nodes} nodes")
            bench.add(f"cluster.yml, {bench.nodes} KWOK nodes, {run}", took,
                      f"{took - wait:.1f}s without the validation's {wait:.1f}s wait for the cluster")
    finally:
        bench.lab("cluster", "down", state=state, check=False)


PARTS = ("gpu_info", "machines", "scale")


def load_results(path: Path, parts_run: list[str], keep: tuple[str, ...] = ()) -> list[Row]:
    """The figures of earlier runs for the parts this run does not measure, and the rows named in keep (what a part
    run leaves out: the upgrade with --no-upgrade)."""
    try:
        rows = [Row(**r) for r in json.loads(path.read_text())]
    except (OSError, ValueError, TypeError):
        return []
    return [r for r in rows if r.part not in parts_run or r.what in keep]


def save_results(path: Path, rows: list[Row]) -> None:
    ordered = sorted(rows, key=lambda r: PARTS.index(r.part) if r.part in PARTS else len(PARTS))
    path.write_text(json.dumps([r.__dict__ for r in ordered], indent=1) + "\n")


TITLE = "# `make bench`: measured figures"
# The bench writes only between these two lines of docs/bench.md; the rest of the file (the history of the figures,
# notes on a measurement) is the developers' and is kept as it is.
BEGIN = "<!-- make bench writes from here to the end marker; the rest of this file is kept -->"
END = "<!-- end of what make bench writes -->"


def figures(bench: Bench, started: float) -> str:
    """This run's section of docs/bench.md: the date, the machine, and every row (a part not run keeps its last figures)."""
    cpu = os.cpu_count()
    lines = [
        f"Written by `make bench` on {date.today().isoformat()}: {cpu} cores, {platform.system()} {platform.release()},",
        f"Python {platform.python_version()}. This run took {(time.monotonic() - started) / 60:.0f} minutes. "
        f"Each figure is one run (a no-op playbook row: the median of {NOOP_RUNS}, with their spread and the controller's "
        "CPU seconds), the machines and the cluster being the lab's (systemd-nspawn machines over SSH on "
        "loopback, a KWOK cluster); see lab/bench.py for what each step does. A part this run did not measure "
        "(`--only`, or a run that stopped) keeps the figures of the run named in the last column (kept in docs/bench.json).",
        "",
        "| what | seconds | notes | measured (UTC) |",
        "|---|---:|---|---|",
    ]
    for row in sorted(bench.rows, key=lambda r: PARTS.index(r.part) if r.part in PARTS else len(PARTS)):
        lines.append(f"| {row.what} | {_seconds(row.seconds)} | {row.note} | {row.measured} |")
    return "\n".join(lines) + "\n"


def with_figures(text: str | None, section: str) -> str:
    """docs/bench.md with its bench section replaced by `section`, everything outside the markers as it was. A file
    without the markers (none yet, or one the bench wrote whole before it kept a history) becomes the title and the
    section."""
    if text is not None and BEGIN in text and END in text.split(BEGIN, 1)[1]:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        return f"{head}{BEGIN}\n{section}{END}{tail}"
    return f"{TITLE}\n\n{BEGIN}\n{section}{END}\n"


def write_table(bench: Bench, out: Path, started: float) -> str:
    section = figures(bench, started)
    try:
        text: str | None = out.read_text()
    except FileNotFoundError:
        text = None
    out.write_text(with_figures(text, section))
    return section


def main(argv: list[str] | None = None, teardown: Callable[[Bench], None] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.bench", description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--state", default=str(Path.home() / ".local/state/gpuops-lab-bench"))
    parser.add_argument("--base-port", type=int, default=2291)
    parser.add_argument("--repo-port", type=int, default=8471)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--out", default=str(REPO / "docs/bench.md"))
    parser.add_argument("--only", choices=["machines", "scale", "gpu_info"], action="append",
                        help="run only these parts (repeatable); default: all")
    parser.add_argument("--no-upgrade", action="store_true", help="leave out the driver upgrade (two more DKMS builds)")
    parser.add_argument("--keep", action="store_true", help="leave the machines and their cluster running")
    args = parser.parse_args(argv)
    parts = args.only or ["gpu_info", "machines", "scale"]
    state = Path(args.state)
    state.mkdir(parents=True, exist_ok=True)
    results = Path(args.out).with_suffix(".json")
    bench = Bench(state, args.base_port, args.repo_port, args.nodes, state / "bench.log",
                  started=time.strftime("%Y-%m-%d %H:%M", time.gmtime()), results=results)
    bench.rows = load_results(results, parts, (UPGRADE_ROW,) if args.no_upgrade else ())
    bench.log.write_text("")
    started = time.monotonic()
    print(f"bench: the log of every command is {bench.log}", flush=True)
    if "gpu_info" in parts:
        bench.part = "gpu_info"
        first, median = gpu_info_seconds()
        bench.add("gpu_info, 8 GPUs (HGX H100 profile), one read", median, f"median of 6 after a first read of {first:.3f}s")
    try:
        if "machines" in parts:
            bench.part = "machines"
            machines_part(bench, upgrade=not args.no_upgrade)
    finally:
        if not args.keep:
            (teardown or _teardown)(bench)
    if "scale" in parts:
        bench.part = "scale"
        scale_part(bench)
    print(write_table(bench, Path(args.out), started))
    return 0


def _teardown(bench: Bench) -> None:
    bench.lab("cluster", "down", check=False)
    bench.lab("repo", "down", check=False)
    bench.lab("down", "--inventory", str(bench.state / "inventory/hosts.yml"), check=False)


if __name__ == "__main__":
    sys.exit(main())
