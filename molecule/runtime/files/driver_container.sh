#!/bin/sh
# The lab's stand-in for the GPU Operator's driver container on a machine set for it (gpuops_driver_method:
# containerized): what the container leaves on the host once its driver is up. Its root at /run/nvidia/driver with
# the driver's libraries and tools (here the simulated driver's, from /opt/gpuops-lab/hw: the fake NVML copied with
# its answers, so that nvidia-ctk finds it under that root), its device nodes (the simulated ones, bound), and the
# marker its startup probe writes (/run/nvidia/validations/.driver-ctr-ready). The hardware tree's driver root is
# made by lab/sim/hardware.py; `stop` takes it all away again, as the container's end does.
set -eu
hw=/opt/gpuops-lab/hw
root=/run/nvidia/driver
marker=/run/nvidia/validations/.driver-ctr-ready
case "${1:-start}" in
start)
  lib="$root/usr/lib/x86_64-linux-gnu"
  mkdir -p "$lib" "$root/usr/bin" "$root/dev" "$(dirname "$marker")"
  cp "$hw/nvml/libnvidia-ml.so.1" "$hw/nvml/nvml.conf" "$lib/"
  for f in "$hw"/driver/usr/lib/x86_64-linux-gnu/*; do
    name=$(basename "$f")
    case "$name" in
      libnvidia-ml.so.1) ;;
      libnvidia-ml.so.*) ln -sfn libnvidia-ml.so.1 "$lib/$name" ;;
      *) cp -P "$f" "$lib/$name" ;;
    esac
  done
  cp "$hw/driver/usr/bin/nvidia-smi" "$root/usr/bin/"
  mountpoint -q "$root/dev" || mount --bind "$hw/driver/dev" "$root/dev"
  printf 'GPU_DIRECT_RDMA_ENABLED: false\nGDS_ENABLED: false\nGDRCOPY_ENABLED: false\n' > "$marker.tmp"
  mv -f "$marker.tmp" "$marker"
  ;;
stop)
  rm -f "$marker"
  ! mountpoint -q "$root/dev" || umount "$root/dev"
  rm -rf "$root"
  ;;
*)
  echo "usage: $0 [start|stop]" >&2
  exit 2
  ;;
esac
