#!/bin/sh
# The archive's newest NVIDIA server driver branch with packages of its own (open kernel modules), as this machine's apt
# index has it. An upload turns the newest into a transitional package of the next (615 of 620 on 2026-12-03), so the
# lab reads it rather than writes it: the default scenario's rollout target (prepare.yml) and make bench's upgrade.
set -eu
for p in $(apt-cache pkgnames nvidia-headless-no-dkms- | grep -E '^nvidia-headless-no-dkms-[0-9]+-server-open$'); do
    apt-cache depends "$p" | grep -q 'Depends: nvidia-headless-no-dkms-' || echo "$p"
done | sed 's/[^0-9]//g' | sort -n | tail -n 1
