"""Record which lab Nodes are unschedulable, while a rollout runs: a line per change, until a stop file appears.

    python unschedulable_recorder.py KUBECONFIG OUT STOPFILE NODE...

Each line is the set of the named Nodes that are cordoned then (comma-separated, empty for none). The Nodes are
read every 0.2 s; a cordon lasts minutes in the rollout, so none is missed. Exits when STOPFILE exists, or
after an hour.
"""

from __future__ import annotations

import os
import sys
import time

from kubernetes import client, config


def main(argv: list[str]) -> int:
    kubeconfig, out, stop, names = argv[1], argv[2], argv[3], set(argv[4:])
    api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
    last = None
    deadline = time.monotonic() + 3600
    with open(out, "a") as handle:
        while not os.path.exists(stop) and time.monotonic() < deadline:
            cordoned = sorted(n.metadata.name for n in api.list_node().items if n.metadata.name in names and n.spec.unschedulable)
            line = ",".join(cordoned)
            if line != last:
                handle.write(line + "\n")
                handle.flush()
                last = line
            time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
