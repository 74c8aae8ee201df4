"""The field-config test's judge, run on a lab machine with its real containerd (molecule/runtime, field.yml).

  field_judge.py prepare SRC WORK      one case per config of SRC (JSON: file name to text) and layout (in place,
                                       drop-in) under WORK,
                                       each with `containerd config dump` of the untouched config; the cases to
                                       WORK/cases.json
  field_judge.py run CASES LIB RESULTS the container_runtime module on each case of CASES (prepare's cases.json), and
                                       again where the first run configured it, in this one process: the module and
                                       the module_utils it imports (Ansible's and the collection's) from LIB, as
                                       AnsiballZ would lay them out; both runs' results to RESULTS (JSON)
  field_judge.py judge RESULTS         after the module ran on each case (RESULTS: its two runs, as JSON): prints
                                       what containerd's own dump of the result says is wrong, one line each

The judge: the result loads; every setting of the original's dump is in the result's dump unchanged (but for
the nvidia runtime's table, CDI, and imports); the CRI plugin's default runtime is defined and is the original's;
the nvidia runtime runs the toolkit's runtime; a second run changed nothing; a refusal changed no file and gave
one of the reasons the test accepts.
"""

import contextlib
import io
import json
import os
import re
import runpy
import shutil
import subprocess
import sys

import tomlkit
from runtime_view import plain  # beside this script on the machine (verify copies both)

LAYOUTS = {"inplace": "", "dropin": "etc/containerd/conf.d/99-nvidia.toml"}
# Files a config imports on the node it comes from, laid out beside it (path under the case, source file).
COMPANIONS = {"nvidia-ctk-main-config.toml": {"etc/containerd/conf.d/99-nvidia.toml": "nvidia-ctk-dropin-99-nvidia.toml"}}
CRI = ("io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri")
# Refusals the test accepts, by the reason in the module's message.
ACCEPTED = [r"version 3 config, which containerd 1\.\d+\.\d+ does not read", r"not runc-based", r"is a version 1 config",
            r"disables containerd's CRI plugin", r"which does not exist: containerd stops reading imports there",
            r"was not written by this module", r"(replaces|overrides) the CRI section"]
# Go's zero values: in containerd's dump a key at its zero value is the same as the key left out.
ZERO = ("", 0, False, [], {}, None)


def dump(config):
    """containerd's own view of a config and its imports, or the error it gives."""
    run = subprocess.run(["containerd", "--config", config, "config", "dump"], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        return None, (run.stderr.strip().splitlines() or [f"exit {run.returncode}"])[-1]
    return plain(tomlkit.parse(run.stdout)), ""


def files(case_dir):
    out = {}
    for root, _dirs, names in os.walk(case_dir):
        for name in names:
            if name.startswith("dump-") or name == "toolkit.toml":
                continue
            with open(os.path.join(root, name), encoding="utf-8") as handle:
                out[os.path.relpath(os.path.join(root, name), case_dir)] = handle.read()
    return out


def leaves(value, path=()):
    if isinstance(value, dict) and value:
        for key, item in value.items():
            yield from leaves(item, (*path, key))
    else:
        yield path, value


def get(data, path):
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def prepare(src, work):
    shutil.rmtree(work, ignore_errors=True)
    cases = []
    version = subprocess.run(["containerd", "--version"], capture_output=True, text=True, check=True).stdout
    found = re.search(r"\sv?(\d+)\.(\d+)\.\d+", version)
    release = (int(found.group(1)), int(found.group(2)))
    # The newest config version this containerd reads: 2 for 1.x, 3 for 2.0 to 2.2, 4 from 2.3.
    reads = 2 if release < (2, 0) else 3 if release < (2, 3) else 4
    with open(src, encoding="utf-8") as handle:
        configs = json.load(handle)
    for name, text in sorted(configs.items()):
        written = re.search(r"^version\s*=\s*(\d+)\s*$", text, re.M)
        if written and int(written.group(1)) > reads:
            continue  # a version this containerd does not read: a refusal the unit tests prove for each of them
        for layout, drop_in in LAYOUTS.items():
            case = os.path.join(work, layout, name[: -len(".toml")])
            os.makedirs(case)
            # The node's own paths (imports of /etc/...) under the case, so nothing of the lab machine is read.
            with open(os.path.join(case, "config.toml"), "w", encoding="utf-8") as handle:
                handle.write(re.sub(r"""(["'])/etc/""", rf"\g<1>{case}/etc/", text))
            for path, companion in COMPANIONS.get(name, {}).items():
                os.makedirs(os.path.dirname(os.path.join(case, path)), exist_ok=True)
                with open(os.path.join(case, path), "w", encoding="utf-8") as handle:
                    handle.write(configs[companion])
            before, error = dump(os.path.join(case, "config.toml"))
            with open(os.path.join(case, "dump-before.json"), "w", encoding="utf-8") as handle:
                json.dump({"dump": before, "error": error, "files": files(case)}, handle)
            cases.append({"name": name, "layout": layout, "dir": case, "config": os.path.join(case, "config.toml"),
                          "drop_in": os.path.join(case, drop_in) if drop_in else "",
                          "toolkit": os.path.join(case, "toolkit.toml")})
    with open(os.path.join(work, "cases.json"), "w", encoding="utf-8") as handle:
        json.dump(cases, handle)
    print(json.dumps({"cases": len(cases)}))


MODULE = "ansible_collections.gpuops.nvidia.plugins.modules.container_runtime"


def run_module(args):
    """One run of the module, as its AnsiballZ wrapper runs it (parameters in basic._ANSIBLE_ARGS, the module run as
    __main__, its result the JSON it prints before it exits), but in this process: a loop of Ansible tasks costs a
    Python start and the module_utils' compile per case, about half a second of CPU each (146 cases, twice, on three
    machines: about three minutes of a 2-core CI host), where the test's subject is the module's edit of each config.
    Anything the module raises comes back as a failure naming it, which the judge does not accept."""
    from ansible.module_utils import basic  # pylint: disable=import-outside-toplevel  # from LIB, on sys.path by now

    basic._ANSIBLE_ARGS = json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_diff": True}}).encode()
    basic._ANSIBLE_PROFILE = "legacy"
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_module(MODULE, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    except Exception as exc:  # pylint: disable=broad-except
        return {"failed": True, "msg": f"the module raised {exc!r}"}
    text = out.getvalue().strip()
    try:
        return json.loads(text.splitlines()[-1])
    except (IndexError, ValueError):
        return {"failed": True, "msg": f"the module printed no result: {text[-500:]!r}"}


def run(cases_file, lib, results_file):
    """The module on each case, and a second time where the first run configured it (refusals are judged too)."""
    # The packages' __init__ files AnsiballZ adds (empty): LIB's packages, not another copy's, are the ones imported.
    for package in ("ansible", "ansible_collections", "ansible_collections/gpuops", "ansible_collections/gpuops/nvidia",
                    "ansible_collections/gpuops/nvidia/plugins", "ansible_collections/gpuops/nvidia/plugins/modules",
                    "ansible_collections/gpuops/nvidia/plugins/module_utils"):
        init = os.path.join(lib, package, "__init__.py")
        if not os.path.exists(init):
            with open(init, "w", encoding="utf-8"):
                pass
    sys.path.insert(0, lib)
    with open(cases_file, encoding="utf-8") as handle:
        cases = json.load(handle)
    first, second = [], []
    for case in cases:
        # The module's record of each case, beside the case (not the machine's own, which the uninstall reads).
        args = {"runtime": "containerd", "config": case["config"], "drop_in": case["drop_in"], "toolkit_config": case["toolkit"],
                "record": os.path.dirname(case["config"]) + ".record.json", "backup": False, "image_build": "true"}
        result = run_module(args)
        first.append({**result, "item": case})
        if not result.get("failed"):
            second.append({**run_module(args), "item": {"item": case}})
    with open(results_file, "w", encoding="utf-8") as handle:
        json.dump({"first": first, "second": second}, handle)
    print(json.dumps({"cases": len(first), "second_runs": len(second)}))


def judge_case(case, first, second):
    where = "{} ({})".format(case["name"], case["layout"])
    with open(os.path.join(case["dir"], "dump-before.json"), encoding="utf-8") as handle:
        before = json.load(handle)
    if first.get("failed"):
        problems = []
        if not any(re.search(p, first.get("msg", "")) for p in ACCEPTED):
            problems.append("{}: refused for a reason the test does not accept: {}".format(where, first.get("msg")))
        if files(case["dir"]) != before["files"]:
            problems.append(f"{where}: refused, but files changed")
        return problems, "refused"
    if before["dump"] is None:
        # A config this containerd does not load at all (a newer plugin's keys): nothing to judge against.
        return [], "original does not load: " + before["error"]
    problems = []
    after, error = dump(case["config"])
    if after is None:
        return [f"{where}: containerd does not load the result: {error}"], "broken"
    plugin = next((p for p in CRI if p in after.get("plugins", {})), None)
    cri = get(after, ("plugins", plugin)) or {}
    runtimes = get(cri, ("containerd", "runtimes")) or {}
    default = get(cri, ("containerd", "default_runtime_name")) or "runc"
    if default not in runtimes:
        problems.append(f"{where}: the CRI plugin's default runtime {default!r} is not defined (runtimes: {sorted(runtimes)})")
    was = get(before["dump"], ("plugins", plugin, "containerd", "default_runtime_name")) or "runc"
    if default != was:
        problems.append(f"{where}: the default runtime was {was!r}, is {default!r}")
    nvidia = runtimes.get("nvidia") or {}
    if get(nvidia, ("options", "BinaryName")) != "/usr/bin/nvidia-container-runtime":
        problems.append(f"{where}: no nvidia runtime running the toolkit's runtime: {nvidia}")
    ours = [("plugins", plugin, "containerd", "runtimes", "nvidia"), ("plugins", plugin, "enable_cdi"), ("imports",)]
    for path, value in leaves(before["dump"]):
        if any(path[: len(o)] == o for o in ours):
            continue
        now = get(after, path)
        if now != value and not (now is None and value in ZERO):
            problems.append("{}: {} was {!r}, is {!r}".format(where, ".".join(path), value, now))
    if second.get("changed") or second.get("failed"):
        problems.append("{}: the second run changed {} or failed: {}".format(where, second.get("files"), second.get("msg", "")))
    return problems, "configured"


def judge(results_file):
    """RESULTS: the registered loops of the two module runs ({"first": [...], "second": [...]})."""
    with open(results_file, encoding="utf-8") as handle:
        results = json.load(handle)
    seconds = {r["item"]["item"]["dir"]: r for r in results["second"]}
    problems, outcomes = [], {}
    for first in results["first"]:
        case = first["item"]
        second = seconds.get(case["dir"], {})
        if not first.get("failed") and not second:
            problems.append("{} ({}): no second run".format(case["name"], case["layout"]))
        found, outcome = judge_case(case, first, second)
        problems += found
        outcomes.setdefault(outcome, []).append("{}/{}".format(case["layout"], case["name"]))
    print(json.dumps({"problems": problems, "outcomes": outcomes}))


if __name__ == "__main__":
    if sys.argv[1] == "prepare":
        prepare(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "run":
        run(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        judge(sys.argv[2])
