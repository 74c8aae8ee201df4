# Copyright: gpuops.nvidia contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What gpu_validation checks on a cluster, and how it waits: the logic behind the module, with no I/O of its own.

The module hands `validate()` a `Cluster` (a thin adapter over the kubernetes client: list Nodes, create,
list and delete Jobs, read a Job's pods) and a `Clock` (`now()`, `sleep()`); the unit tests hand it a fake
of each, so a five-minute timeout takes milliseconds.

In order: wait until every Node advertises the resources it should and carries the GPU Feature Discovery
labels it should (where GFD has labelled it), then, with the smoke test, one Job per Node requesting one of
its GPU resources, wait for the Jobs, delete them, and report per Node. A Job of an earlier, interrupted
run (same name, HTTP 409 on create) is deleted and created again.

`changed` means the run left the cluster different from how it found it: it removed a Job an interrupted
run had left behind, or could not delete one of its own. The Jobs it creates and deletes within the run
are not a change, so a re-run on a healthy cluster reports none.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

from ansible_collections.gpuops.nvidia.plugins.module_utils._common.facts import GpuInfo
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster import dra, gfd
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.kube_common import in_parallel
from ansible_collections.gpuops.nvidia.plugins.module_utils.cluster.rules import replicated

APP = "gpuops-validation"
RUN_LABEL = "gpuops.nvidia/validation-run"
# A Node carries GFD's labels once GFD has run there; this one is set on every Node with a GPU it can read.
GFD_MARKER = "nvidia.com/gpu.product"
# The labels GFD derives from the hardware (and the sharing config, for the product's -SHARED), compared
# with what the host's facts give. Driver and CUDA versions are left out: a driver upgrade changes them
# before the facts are read again.
GFD_KEYS = ("nvidia.com/gpu.product", "nvidia.com/gpu.count", "nvidia.com/gpu.memory", "nvidia.com/gpu.family",
            "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor", "nvidia.com/mig.capable",
            # The node's sharing config, as GFD reads it through the config manager.
            "nvidia.com/gpu.replicas", "nvidia.com/gpu.sharing-strategy")
_MIG_COUNT = re.compile(r"^nvidia\.com/mig-[^/]+\.count$")
JOB_DONE = ("succeeded", "skipped", "not run", "not run: nothing changed")
# How the calls of many Nodes are made: call(item) for each item; returns {item: exception} for those that raised.
Parallel = Callable[[Callable[[str], object], list[str]], dict[str, Exception]]


# ---------------------------------------------------------------------------------------------------
# The cluster and the clock, as validate() sees them
# ---------------------------------------------------------------------------------------------------

class ApiError(Exception):
    """An API server's refusal: its HTTP status and its own message."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class NodeState:
    name: str
    allocatable: dict[str, int]  # the nvidia.com/ resources only
    labels: dict[str, str]


@dataclass(frozen=True)
class JobState:
    name: str
    succeeded: int = 0
    failed: int = 0
    conditions: tuple[dict[str, str], ...] = ()  # {type, reason, message} of the Job's status


class Cluster(Protocol):
    def list_nodes(self) -> list[NodeState]: ...

    def list_jobs(self, namespace: str, selector: str) -> list[JobState]: ...

    def create_job(self, namespace: str, manifest: dict[str, Any]) -> None: ...

    def delete_job(self, namespace: str, name: str) -> None: ...

    def job_pods(self, namespace: str, job: str) -> list[dict[str, Any]]:
        """The Job's pods as the API serialises them (camelCase keys)."""

    def list_resource_slices(self) -> list[dict[str, Any]]:
        """The ResourceSlices (resource.k8s.io/v1) as the API serialises them: with DRA, what the nodes publish."""


class Clock(Protocol):
    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """The real one."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class Settings:
    namespace: str
    image: str = "nvcr.io/nvidia/cuda:12.9.1-base-ubuntu24.04"
    command: tuple[str, ...] = ("nvidia-smi", "-L")
    image_pull_secrets: tuple[str, ...] = ()
    runtime_class_name: str = ""
    timeout: int = 300
    smoke_test: bool = True
    # None: every Node; else only these, and any Node that was not right at the first read (it was changing).
    smoke_nodes: frozenset[str] | None = None
    poll: float = 2.0
    # GPUs scheduled with the DRA driver: the Nodes' devices are read from their ResourceSlices (dra.slice_devices's
    # counts), and the smoke test claims one through the claim templates the dra role applies.
    dra: bool = False


@dataclass
class Result:
    nodes: dict[str, dict[str, Any]]
    timings: dict[str, float]
    failed_nodes: list[str] = field(default_factory=list)
    gfd_unlabelled: list[str] = field(default_factory=list)
    jobs: dict[str, Any] = field(default_factory=lambda: {"created": 0, "replaced": [], "left": []})
    warnings: list[str] = field(default_factory=list)
    msg: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.jobs["replaced"] or self.jobs["left"])


# ---------------------------------------------------------------------------------------------------
# Pure pieces
# ---------------------------------------------------------------------------------------------------

def nvidia_resources(allocatable: dict[str, Any] | None) -> dict[str, int]:
    """The nvidia.com/ extended resources of a Node's allocatable, as counts."""
    return {str(k): int(v) for k, v in (allocatable or {}).items() if str(k).startswith("nvidia.com/") and str(v).isdigit()}


def allocatable_diff(expected: dict[str, int], found: dict[str, int]) -> dict[str, tuple[int, int | None]]:
    """Resource -> (expected, seen or None when not advertised) for each resource that differs."""
    out: dict[str, tuple[int, int | None]] = {}
    for name in sorted(set(expected) | set(found)):
        want, seen = int(expected.get(name, 0)), found.get(name)
        if want != int(seen or 0):
            out[name] = (want, seen)
    return out


def job_name(node: str) -> str:
    """One name per Node, a valid object name whatever the Node's name is."""
    base = re.sub(r"[^a-z0-9-]", "-", node.lower()).strip("-")
    digest = hashlib.sha256(node.encode()).hexdigest()[:8]
    return f"gpuops-validate-{base[:36]}-{digest}"


def request_for(expected: dict[str, int]) -> str | None:
    """The resource the smoke test asks for: a whole GPU if the Node has one, else its first MIG or shared one."""
    names = sorted(n for n, v in expected.items() if int(v) > 0)
    for whole in ("nvidia.com/gpu", dra.GPU):
        if whole in names:
            return whole
    return names[0] if names else None


# With DRA, the smoke test's pod claims its device through one of these ResourceClaimTemplates (the dra role's): a
# whole GPU, or any MIG device.
CLAIM_TEMPLATES = {"gpu": "gpuops-validation-gpu", "mig": "gpuops-validation-mig"}


def _claim(resource: str) -> dict[str, Any] | None:
    """The pod's resource claim for a DRA device kind (gpu.nvidia.com/gpu, gpu.nvidia.com/mig-<profile>), else None."""
    if not resource.startswith(dra.DRIVER + "/"):
        return None
    kind = "gpu" if resource == dra.GPU else "mig"
    return {"name": "gpu", "resourceClaimTemplateName": CLAIM_TEMPLATES[kind]}


# The Job's own deadline, past the module's wait: at activeDeadlineSeconds the Job controller deletes the pod, and a
# Job failed with no pod says only "DeadlineExceeded"; the module gives up first and reports the pod's wait (an image
# it cannot pull, a device it cannot get). The Job is deleted after the wait either way.
JOB_DEADLINE_MARGIN_S = 60


def job_manifest(node: str, resource: str, settings: Settings, run: str) -> dict[str, Any]:
    """The smoke-test Job of one Node: pinned to it (cordoned or not), one unit of `resource`, no privileges."""
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]}}},
        # A node being changed (MIG, driver) is checked while still cordoned: the pod tolerates the cordon.
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "smoke-test",
            "image": settings.image,
            "command": list(settings.command),
            "resources": {"limits": {resource: "1"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }],
    }
    claim = _claim(resource)
    if claim:
        pod["resourceClaims"] = [claim]
        pod["containers"][0]["resources"] = {"claims": [{"name": claim["name"]}]}
    if settings.runtime_class_name:
        pod["runtimeClassName"] = settings.runtime_class_name
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in settings.image_pull_secrets]
    labels = {"app": APP, RUN_LABEL: run}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        # The Job carries the collection's mark, so that an uninstall finds one an interrupted run left behind.
        "metadata": {"name": job_name(node), "namespace": settings.namespace,
                     "labels": {**labels, "app.kubernetes.io/managed-by": "gpuops.nvidia"}},
        "spec": {"backoffLimit": 0, "ttlSecondsAfterFinished": 600, "activeDeadlineSeconds": settings.timeout + JOB_DEADLINE_MARGIN_S,
                 "template": {"metadata": {"labels": labels}, "spec": pod}},
    }


def pod_reason(pod: dict[str, Any]) -> str:
    """Why a smoke-test pod did not succeed, from its status: a container's end or wait, else scheduling, else phase."""
    name = (pod.get("metadata") or {}).get("name", "?")
    status = pod.get("status") or {}
    for cs in list(status.get("initContainerStatuses") or []) + list(status.get("containerStatuses") or []):
        state = cs.get("state") or {}
        ended = state.get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if ended and (ended.get("exitCode") or ended.get("reason") not in (None, "Completed")):
            text = f"container {cs.get('name')} {ended.get('reason') or 'terminated'} (exit code {ended.get('exitCode')})"
            return f"pod {name}: {text}" + (f": {ended['message'].strip()}" if ended.get("message") else "")
        waiting = state.get("waiting")
        if waiting and waiting.get("reason"):
            text = f"container {cs.get('name')} {waiting['reason']}"
            return f"pod {name}: {text}" + (f": {waiting['message']}" if waiting.get("message") else "")
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return f"pod {name}: not scheduled: {cond.get('reason') or ''}: {cond.get('message') or ''}".rstrip(": ")
    if status.get("reason"):
        return f"pod {name}: {status['reason']}" + (f": {status['message']}" if status.get("message") else "")
    return f"pod {name}: {status.get('phase') or 'no status'}"


def job_reason(job: JobState | None, pods: list[dict[str, Any]]) -> str:
    """The pod's reason when the Job has a pod, else the Job's own failure condition."""
    if pods:
        return pod_reason(pods[-1])
    for cond in (job.conditions if job else ()):
        if cond.get("type") == "Failed":
            return f"{cond.get('reason') or 'Failed'}: {cond.get('message') or ''}".rstrip(": ")
    return "no pod was created"


# ---------------------------------------------------------------------------------------------------
# GPU Feature Discovery's labels
# ---------------------------------------------------------------------------------------------------

def gfd_sharing(config: dict[str, Any] | None) -> gfd.Sharing:
    """GFD's sharing input from a device plugin config: the strategy and replicas of nvidia.com/gpu."""
    strategy, shared = replicated(config or {})
    if "nvidia.com/gpu" not in shared:
        return {"strategy": "none", "replicas": 1}
    replicas, advertised_as = shared["nvidia.com/gpu"]
    return {"strategy": strategy, "replicas": replicas, "rename_by_default": advertised_as != "nvidia.com/gpu"}


def hardware_labels(labels: dict[str, Any]) -> dict[str, str]:
    """The labels validation compares: GFD_KEYS and each MIG profile's count."""
    return {str(k): str(v) for k, v in labels.items() if k in GFD_KEYS or _MIG_COUNT.match(str(k))}


def expected_gfd_labels(info: dict[str, Any] | None, config: dict[str, Any] | None, mig_strategy: str) -> dict[str, str] | None:
    """The hardware labels GFD should set on the Node of a host whose gpu_info this is, or None when the facts
    cannot say (no GPU, or the driver did not answer when they were read, so NVML's view is missing)."""
    if not isinstance(info, dict) or not isinstance(info.get("pci"), dict) or not isinstance(info.get("nvml"), dict):
        return None
    try:
        sharing = gfd_sharing(config)
    except (KeyError, TypeError, ValueError):
        return None  # a config the device plugin's checks refuse; they say why, before anything is applied
    try:
        labels, source = gfd.node_gfd_labels(cast(GpuInfo, info), sharing, mig_strategy)
    except ValueError:
        return None  # a MIG strategy or sharing GFD refuses; the roles' argument specs and checks name it
    return hardware_labels(labels) if source == "nvml" else None


def compare_gfd(expected: dict[str, str] | None, actual: dict[str, str]) -> tuple[str, list[dict[str, str | None]]]:
    """(status, mismatches): `not checked` without an expectation, `not labelled` while GFD has not labelled the
    Node, else `matches` or `wrong` with each {label, expected, actual} that differs (None where absent)."""
    if expected is None:
        return "not checked", []
    if GFD_MARKER not in actual:
        return "not labelled", []
    seen = hardware_labels(actual)
    wrong: list[dict[str, str | None]] = [
        {"label": key, "expected": expected.get(key), "actual": seen.get(key)}
        for key in sorted(set(expected) | set(seen)) if expected.get(key) != seen.get(key)]
    return ("wrong" if wrong else "matches"), wrong


# ---------------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------------

def _new_row(expected: dict[str, int]) -> dict[str, Any]:
    return {"expected": expected, "allocatable": {}, "allocatable_ok": False, "gfd": "not checked", "job": "not run", "ok": False}


MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_DEPLOY = "nvidia.com/gpu.deploy.mig-manager"


def _mig_row(labels: dict[str, str], config: str) -> dict[str, Any]:
    """Where the MIG manager is with the config this run set: `applied`, `failed`, `not deployed` (no MIG
    manager runs on the node, so nothing will apply it) or `pending` (the state it reports, or none yet)."""
    state = labels.get(MIG_STATE)
    if labels.get(MIG_DEPLOY) != "true":
        status = "not deployed"
    elif labels.get(MIG_CONFIG) == config and state == "success":
        status = "applied"
    elif labels.get(MIG_CONFIG) == config and state == "failed":
        status = "failed"
    else:
        status = "pending"
    return {"config": config, "state": state, "deploy": labels.get(MIG_DEPLOY), "status": status}


def _read_nodes(cluster: Cluster, report: dict[str, dict[str, Any]], gfd_expected: dict[str, dict[str, str] | None],
                mig_configs: dict[str, str], use_dra: bool = False) -> None:
    nodes = {n.name: n for n in cluster.list_nodes()}
    published = dra.slice_devices(cluster.list_resource_slices()) if use_dra else {}
    for name, row in report.items():
        node = nodes.get(name)
        row["present"] = node is not None
        if use_dra:
            row["allocatable"] = dict(published.get(name, {})) if node else {}
        else:
            row["allocatable"] = dict(node.allocatable) if node else {}
        row["allocatable_ok"] = node is not None and not allocatable_diff(row["expected"], row["allocatable"])
        if name in mig_configs:
            row["mig"] = _mig_row(node.labels if node else {}, mig_configs[name])
        # The facts GFD's labels are computed from show the layout before a MIG change: checked next run.
        status, wrong = compare_gfd(None if name in mig_configs else gfd_expected.get(name), node.labels if node else {})
        row["gfd"] = status
        if wrong:
            row["gfd_wrong"] = wrong
        else:
            row.pop("gfd_wrong", None)


def _mig_ok(row: dict[str, Any]) -> bool:
    return "mig" not in row or row["mig"]["status"] == "applied"


def _settled(row: dict[str, Any]) -> bool:
    """Nothing more to wait for: right, or a MIG change that failed or that nothing will apply."""
    if "mig" in row and row["mig"]["status"] in ("failed", "not deployed"):
        return True
    return bool(row["allocatable_ok"]) and row["gfd"] != "wrong" and _mig_ok(row)


def _shown(value: str | None) -> str:
    return "absent" if value is None else value or '""'


def problems(name: str, row: dict[str, Any], timeout: int) -> list[str]:
    """What is wrong with one Node, each naming what was expected and what was seen."""
    out = []
    mig = row.get("mig")
    if mig and mig["status"] == "failed":
        out.append(f"{name}: the MIG manager failed to apply {mig['config']} ({MIG_STATE}=failed)")
    elif mig and mig["status"] == "not deployed":
        out.append(f"{name}: {MIG_CONFIG} is {mig['config']} but no MIG manager runs there "
                   f"({MIG_DEPLOY}={_shown(mig['deploy'])})")
    elif mig and mig["status"] == "pending":
        out.append(f"{name}: MIG config {mig['config']} not applied after {timeout}s ({MIG_STATE}={_shown(mig['state'])})")
    if not row.get("present", True):
        out.append(f"{name}: no Node of that name in the cluster")
    elif not mig or mig["status"] in ("applied", "pending"):
        for resource, (want, seen) in allocatable_diff(row["expected"], row["allocatable"]).items():
            out.append(f"{name}: {resource} expected {want}, seen {'none' if seen is None else seen} after {timeout}s")
    for item in row.get("gfd_wrong") or []:
        out.append(f"{name}: GFD label {item['label']} expected {_shown(item['expected'])}, actual {_shown(item['actual'])}")
    if row["job"] not in JOB_DONE and row["job"] != "not run: allocatable wrong":
        out.append(f"{name}: smoke test {row['job']}")
    return out


def _leftovers(cluster: Cluster, namespace: str, names: Iterable[str]) -> set[str]:
    """The Jobs of these names that an earlier run left behind."""
    wanted = set(names)
    return {j.name for j in cluster.list_jobs(namespace, f"app={APP}") if j.name in wanted}


def validate(cluster: Cluster, expected: dict[str, dict[str, int]], settings: Settings, clock: Clock,
             gfd_expected: dict[str, dict[str, str] | None] | None = None, check_mode: bool = False,
             run: str | None = None, parallel: Parallel = in_parallel, mig_configs: dict[str, str] | None = None) -> Result:
    """Wait for the Nodes, run the smoke tests, report. Raises ApiError when listing Nodes or Jobs fails.

    mig_configs: the Nodes whose MIG config this run set, and the config; each is waited for until its MIG
    manager reports it applied (expected holds the layout it gives), and fails when it reports `failed` or
    no MIG manager runs there."""
    gfd_expected = gfd_expected or {}
    mig_configs = {n: c for n, c in (mig_configs or {}).items() if n in expected}
    report = {name: _new_row(want) for name, want in expected.items()}
    result = Result(nodes=report, timings={})
    started = clock.now()
    deadline = started + settings.timeout
    unsettled_at_first: set[str] | None = None
    while True:
        _read_nodes(cluster, report, gfd_expected, mig_configs, settings.dra)
        if unsettled_at_first is None:
            unsettled_at_first = {name for name, row in report.items() if not _settled(row) or name in mig_configs}
        if check_mode or all(_settled(r) for r in report.values()) or clock.now() >= deadline:
            break
        clock.sleep(settings.poll)
    waited = clock.now()
    result.timings["allocatable_s"] = round(waited - started, 1)

    run = run or secrets.token_hex(5)
    manifests: dict[str, dict[str, Any]] = {}
    smoke = set(report) if settings.smoke_nodes is None else (set(settings.smoke_nodes) | (unsettled_at_first or set())) & set(report)
    for name, row in sorted(report.items()) if settings.smoke_test else ():
        if name not in smoke:
            row["job"] = "not run: nothing changed"
            continue
        resource = request_for(row["expected"])
        if resource is not None and row["allocatable_ok"] and _mig_ok(row):
            manifests[name] = job_manifest(name, resource, settings, run)
        elif not check_mode:
            row["job"] = "skipped" if resource is None else "not run: allocatable wrong"
    if check_mode:
        # Nothing is created; what a real run would change is the Jobs an interrupted run left, that it replaces.
        result.jobs["replaced"] = sorted(_leftovers(cluster, settings.namespace, [m["metadata"]["name"] for m in manifests.values()]))
    elif manifests:
        _smoke_test(cluster, report, manifests, settings, clock, result, run, parallel)
    # From the unrounded end of the wait: less the rounded wait, a run with nothing to test read -0.0s.
    result.timings["smoke_test_s"] = round(clock.now() - waited, 1)

    for name, row in report.items():
        row["ok"] = _settled(row) and _mig_ok(row) and row["job"] in JOB_DONE
        if not row["ok"]:
            result.failed_nodes.append(name)
        if row["gfd"] == "not labelled":
            result.gfd_unlabelled.append(name)
    result.failed_nodes.sort()
    result.gfd_unlabelled.sort()
    if check_mode:
        result.failed_nodes = []
    elif result.failed_nodes:
        lines = [p for n in result.failed_nodes[:20] for p in problems(n, report[n], settings.timeout)]
        more = f" (and {len(result.failed_nodes) - 20} more Nodes)" if len(result.failed_nodes) > 20 else ""
        result.msg = f"{len(result.failed_nodes)} of {len(report)} GPU node(s) failed validation: " + "; ".join(lines) + more
    return result


def _smoke_test(cluster: Cluster, report: dict[str, dict[str, Any]], manifests: dict[str, dict[str, Any]], settings: Settings,
                clock: Clock, result: Result, run: str, parallel: Parallel) -> None:
    ns = settings.namespace
    deadline = clock.now() + settings.timeout
    replaced: set[str] = set()
    lock = threading.Lock()

    def create(node: str) -> None:
        manifest = manifests[node]
        job = manifest["metadata"]["name"]
        try:
            cluster.create_job(ns, manifest)
            return
        except ApiError as exc:
            if exc.status != 409:
                raise
        # The Job of an interrupted run, under the same name: delete it, then create ours once it is gone.
        try:
            cluster.delete_job(ns, job)
        except ApiError as exc:
            if exc.status != 404:
                raise
        with lock:
            replaced.add(job)
        while True:
            try:
                cluster.create_job(ns, manifest)
                return
            except ApiError as exc:
                if exc.status != 409 or clock.now() >= deadline:
                    raise
            clock.sleep(1)

    failed = parallel(create, sorted(manifests))
    jobs: dict[str, str] = {}  # Job name -> Node
    for node, manifest in manifests.items():
        if node in failed:
            exc = failed[node]
            report[node]["job"] = f"not created: {exc.message if isinstance(exc, ApiError) else exc}"
        else:
            jobs[manifest["metadata"]["name"]] = node
            report[node]["job"] = "created"
    result.jobs["created"] = len(jobs)
    result.jobs["replaced"] = sorted(replaced)
    try:
        _wait_for_jobs(cluster, report, jobs, settings, clock, deadline, run)
    finally:
        gone = parallel(lambda job: cluster.delete_job(ns, job), sorted(jobs))
        for job, exc in sorted(gone.items()):
            if isinstance(exc, ApiError) and exc.status == 404:
                continue
            result.jobs["left"].append(job)
            result.warnings.append(f"deleting Job {job} in {ns} failed: {exc.message if isinstance(exc, ApiError) else exc}; "
                                   "its ttlSecondsAfterFinished removes it once it has finished")


def _wait_for_jobs(cluster: Cluster, report: dict[str, dict[str, Any]], jobs: dict[str, str], settings: Settings,
                   clock: Clock, deadline: float, run: str) -> None:
    ns = settings.namespace
    pending = set(jobs)
    if not pending:
        return
    states: dict[str, JobState] = {}
    while True:
        for job in cluster.list_jobs(ns, f"{RUN_LABEL}={run}"):
            if job.name not in pending:
                continue
            states[job.name] = job
            if job.succeeded >= 1:
                report[jobs[job.name]]["job"] = "succeeded"
                pending.discard(job.name)
            elif job.failed >= 1:
                report[jobs[job.name]]["job"] = "failed: " + job_reason(job, cluster.job_pods(ns, job.name))
                pending.discard(job.name)
        if not pending or clock.now() >= deadline:
            break
        clock.sleep(settings.poll)
    for name in sorted(pending):
        report[jobs[name]]["job"] = f"not finished in {settings.timeout}s: " + job_reason(states.get(name), cluster.job_pods(ns, name))
