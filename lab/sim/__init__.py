"""The lab's stand-ins: what takes the place of the parts a lab machine or a KWOK cluster cannot run.

The rest of lab/ runs real things (machines, images, a control plane, the toolkit's repository, CI timing); everything
here pretends, and each says what it stands in for and what it checks of the real part:

- hardware.py, fake_nvml.c, profiles/: the GPUs themselves, at the hardware boundary: a sysfs/procfs tree and an NVML
  library made from a hardware profile, which gpu_info reads as on a real server;
- boot.py: the kernel's part of a machine's boot (which kernel runs, which modules load), copied onto each machine
  with simulated hardware as /opt/gpuops-lab/boot.py;
- fabric.py: Fabric Manager and IMEX, copied onto NVSwitch machines as /opt/gpuops-lab/fabric.py;
- devplugin.py (`python -m lab.sim.devplugin`, one process per lab cluster) with gfd.py, migmgr.py and dra.py: the
  device plugin's, GPU Feature Discovery's, the MIG manager's and the DRA kubelet plugin's effects on KWOK nodes.

boot.py and fabric.py run on the machines under their Python alone: the standard library only, no import from lab.
"""
