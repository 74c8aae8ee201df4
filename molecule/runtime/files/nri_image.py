"""The runtime scenario's NRI probe image (issue 63), written on the controller: nri_probe.c compiled static with the
host's gcc, in a one-layer OCI archive (lab/oci.py) that `ctr -n k8s.io images import` loads on the machine. It serves as
the pod sandbox's image too (tagged there as containerd's sandbox image): the lab reaches no registry.

    python nri_image.py OUT_DIR     # writes OUT_DIR/nri-probe.tar, prints the image's name
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO))

from lab.oci import File, write_archive  # noqa: E402

IMAGE = "gpuops.lab/nri-probe:1"


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    binary = out / "nri-probe"
    subprocess.run(["gcc", "-static", "-Os", "-Wall", "-Werror", "-o", str(binary), str(Path(__file__).with_name("nri_probe.c"))],
                   check=True)
    write_archive(out / "nri-probe.tar", IMAGE, {"/probe": File(binary, 0o755)}, entrypoint=["/probe"])
    print(IMAGE)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
