"""The field-config test's judge, run on a lab machine with its real containerd (molecule/runtime, field.yml).

  field_judge.py prepare SRC WORK      one case per config of SRC (JSON: file name to text) and layout (in place,
                                       drop-in) under WORK,
                                       each with `containerd config dump` of the untouched config; prints the cases
  field_judge.py judge RESULTS         after the module ran on each case (RESULTS: its two runs, as JSON): prints
                                       what containerd's own dump of the result says is wrong, one line each

The judge: the result loads; every setting of the original's dump is in the result's dump unchanged (but for
the nvidia runtime's table, CDI, and imports); the CRI plugin's default runtime is defined and is the original's;
the nvidia runtime runs the toolkit's runtime; a second run changed nothing; a refusal changed no file and gave
one of the reasons the test accepts.
"""

import json
import os
import re
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
    major = int(re.search(r"\sv?(\d+)\.\d+\.\d+", version).group(1))
    with open(src, encoding="utf-8") as handle:
        configs = json.load(handle)
    for name, text in sorted(configs.items()):
        if major < 2 and re.search(r"^version\s*=\s*3\s*$", text, re.M):
            continue  # containerd 1.x does not read version 3: a refusal the unit tests prove for each of them
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
    print(json.dumps(cases))


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
    else:
        judge(sys.argv[2])
