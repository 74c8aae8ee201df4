"""Run on the NRI machine by the runtime scenario's verify (issue 63): with crictl, a pod sandbox whose annotation
nvidia.cdi.k8s.io/container.gpu names a CDI device, and two containers in it, `gpu` (annotated) and `plain` (not);
then what containerd put in each container's OCI spec (crictl inspect) and what each sees in its /dev (crictl exec),
beside the devices of the CDI spec's device. With --pod NAME and --only gpu, that pod with its `gpu` container alone,
for the run with the plugin stopped. Prints one JSON object, with `error` set where a crictl command failed (what was
read before it stays).

    python3 nri_probe_run.py DIR DEVICE [--pod NAME] [--only gpu] [--handlers ,runc-cgroupfs]

--handlers: the runtime handlers to try for the sandbox, in order ("" is the default runtime).
"""

from __future__ import annotations

import json
import subprocess
import sys

import yaml


class CrictlFailed(Exception):
    """A crictl command that failed: its arguments and error."""


def crictl(*args: str) -> str:
    res = subprocess.run(["crictl", *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise CrictlFailed(f"crictl {' '.join(args)}: rc={res.returncode}: {res.stderr.strip()}")
    return res.stdout.strip()


def cdi_device_nodes(device: str, path: str = "/var/run/cdi/nvidia.yaml") -> list[str]:
    """The device nodes a CDI device name (vendor/class=name) gives a container: its own and the spec's common ones."""
    kind, name = device.split("=", 1)
    with open(path, encoding="utf-8") as handle:
        spec = yaml.safe_load(handle)
    if spec.get("kind") != kind:
        sys.exit(f"{path} is of kind {spec.get('kind')}, not {kind}")
    (entry,) = [d for d in spec["devices"] if d["name"] == name]
    nodes = (entry.get("containerEdits") or {}).get("deviceNodes") or []
    nodes += (spec.get("containerEdits") or {}).get("deviceNodes") or []
    return sorted({n["path"] for n in nodes})


def main(directory: str, device: str, pod_name: str, names: list[str], handlers: list[str]) -> None:
    with open(f"{directory}/pod.json", encoding="utf-8") as handle:
        pod_config = json.load(handle)
    pod_config["metadata"]["name"] = pod_config["metadata"]["uid"] = pod_name
    with open(f"{directory}/{pod_name}.json", "w", encoding="utf-8") as handle:
        json.dump(pod_config, handle)
    # What was read before a step failed stays in the output, with the error (the verify shows both).
    out: dict = {"cdi": cdi_device_nodes(device), "error": "", "handler": None, "sandbox_errors": {}}
    pod = ""
    try:
        # The first runtime handler that starts the sandbox (the default one: ""); each that did not, with its error.
        for handler in handlers:
            try:
                pod = crictl("runp", *(["--runtime", handler] if handler else []), f"{directory}/{pod_name}.json")
            except CrictlFailed as exc:
                out["sandbox_errors"][handler] = str(exc)
                continue
            out["handler"] = handler
            break
        if not pod:
            raise CrictlFailed(f"no runtime handler of {handlers} started the pod sandbox")
        ids = {name: crictl("create", pod, f"{directory}/{name}.json", f"{directory}/{pod_name}.json") for name in names}
        for name, cid in ids.items():
            spec = json.loads(crictl("inspect", cid))["info"]["runtimeSpec"]
            out[name] = {"spec": sorted(d["path"] for d in (spec.get("linux") or {}).get("devices") or []), "dev": []}
        crictl("start", *ids.values())
        for name, cid in ids.items():
            lines = crictl("exec", cid, "/probe", "ls", "/dev").splitlines()
            # "NAME MAJOR:MINOR" for each character device the container sees.
            out[name]["dev"] = sorted(f"{line.split()[2]} {line.split()[1]}" for line in lines if line.startswith("c "))
    except CrictlFailed as exc:
        out["error"] = str(exc)
    finally:
        if pod:
            subprocess.run(["crictl", "stopp", pod], capture_output=True, check=False)
            subprocess.run(["crictl", "rmp", "-f", pod], capture_output=True, check=False)
    print(json.dumps(out))


if __name__ == "__main__":
    args = sys.argv[1:]
    pod_name = args[args.index("--pod") + 1] if "--pod" in args else "nri-probe"
    only = [args[args.index("--only") + 1]] if "--only" in args else ["gpu", "plain"]
    tried = args[args.index("--handlers") + 1].split(",") if "--handlers" in args else [""]
    main(args[0], args[1], pod_name, only, tried)
