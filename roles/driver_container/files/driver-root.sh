#!/bin/sh
# Runs a GPU component once this node's driver is there (gpuops.nvidia, clusters with the containerized driver):
# the driver container's, once its startup probe wrote its marker, or a host driver (its nvidia-smi on the host).
# Exports NVIDIA_DRIVER_ROOT and the same root as this container sees it (CONTAINER_DRIVER_ROOT, DRIVER_ROOT_CTR_PATH),
# where the device nodes are (NVIDIA_DEV_ROOT, DEV_ROOT_CTR_PATH: under the driver root where the driver container made
# them there, else the host's /dev) and WITH_SHUTDOWN_HOST_GPU_CLIENTS (true only for a host driver: the MIG manager
# stops host GPU clients through the host's systemd and NVML), as the GPU Operator's driver validation does, then runs
# the command given; without one it only waits (an init container).
# HOST_ROOT: where the pod mounts the host's / (default /host); HOST_DRIVER_ROOT: where a host driver is (default /);
# GPUOPS_WAIT_SECONDS: between two looks (default 5).
host="${HOST_ROOT:-/host}"
host_driver="${HOST_DRIVER_ROOT:-/}"
while :; do
  if [ -f "$host/run/nvidia/validations/.driver-ctr-ready" ]; then
    root=/run/nvidia/driver
    break
  fi
  if [ -x "$host${host_driver%/}/usr/bin/nvidia-smi" ]; then
    root="$host_driver"
    break
  fi
  echo "waiting for the NVIDIA driver on this node (the driver container's marker or a host driver)"
  sleep "${GPUOPS_WAIT_SECONDS:-5}"
done
NVIDIA_DRIVER_ROOT="$root"
CONTAINER_DRIVER_ROOT="$host${root%/}"
DRIVER_ROOT_CTR_PATH="$CONTAINER_DRIVER_ROOT"
if [ "$root" != / ] && [ -e "$host$root/dev/nvidiactl" ]; then
  NVIDIA_DEV_ROOT="$root"
  DEV_ROOT_CTR_PATH="$CONTAINER_DRIVER_ROOT"
else
  NVIDIA_DEV_ROOT=/
  DEV_ROOT_CTR_PATH="$host"
fi
if [ "$root" = "$host_driver" ]; then WITH_SHUTDOWN_HOST_GPU_CLIENTS=true; else WITH_SHUTDOWN_HOST_GPU_CLIENTS=false; fi
export NVIDIA_DRIVER_ROOT CONTAINER_DRIVER_ROOT DRIVER_ROOT_CTR_PATH NVIDIA_DEV_ROOT DEV_ROOT_CTR_PATH WITH_SHUTDOWN_HOST_GPU_CLIENTS
echo "NVIDIA_DRIVER_ROOT=$NVIDIA_DRIVER_ROOT CONTAINER_DRIVER_ROOT=$CONTAINER_DRIVER_ROOT"
[ "$#" -eq 0 ] || exec "$@"
