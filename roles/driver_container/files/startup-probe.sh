#!/bin/sh
# The driver container's startup probe (gpuops.nvidia driver_container role): ready once the nvidia module is
# loaded, the container's daemons say Ready (where it reports them) and nvidia-smi answers. Then it writes the
# marker the other GPU components wait for, with the GPUDirect features this container runs.
# GPUOPS_PROBE_ROOT prefixes every path (the collection's unit tests); empty in the pod.
r="${GPUOPS_PROBE_ROOT:-}"
[ -e "$r/sys/module/nvidia/refcnt" ] || { echo "the nvidia module is not loaded"; exit 1; }
status="$r/run/nvidia/validations/.driver-daemons-status"
if [ -f "$status" ] && [ "$(cat "$status")" != "Ready" ]; then
  echo "the driver's daemons are not ready: $(cat "$status")"
  exit 1
fi
nvidia-smi > /dev/null 2>&1 || { echo "nvidia-smi does not answer"; exit 1; }
mkdir -p "$r/run/nvidia/validations"
ready="$r/run/nvidia/validations/.driver-ctr-ready"
printf 'GPU_DIRECT_RDMA_ENABLED: %s\nGDS_ENABLED: %s\nGDRCOPY_ENABLED: %s\n' \
  "${GPU_DIRECT_RDMA_ENABLED:-false}" "${GDS_ENABLED:-false}" "${GDRCOPY_ENABLED:-false}" > "$ready.tmp"
mv -f "$ready.tmp" "$ready"
