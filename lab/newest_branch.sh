#!/bin/sh
# The archive's newest NVIDIA server driver branch with packages of its own (open kernel modules), as this machine's apt
# index has it; with an argument N, the Nth newest (2: the one before the newest). An upload turns the newest into a
# transitional package of the next (615 of 620 on 2026-12-03), so the lab reads it rather than writes it: the default
# scenario's first install (2) and rollout target (prepare.yml), make bench's likewise.
set -eu
nth=${1:-1}
case $nth in ''|*[!0-9]*|0) echo "usage: $0 [N]: N, the place from the newest, is 1 or more" >&2; exit 2 ;; esac
branches=$(for p in $(apt-cache pkgnames nvidia-headless-no-dkms- | grep -E '^nvidia-headless-no-dkms-[0-9]+-server-open$'); do
    apt-cache depends "$p" | grep -q 'Depends: nvidia-headless-no-dkms-' || echo "$p"
done | sed 's/[^0-9]//g' | sort -n)
if [ "$(echo "$branches" | grep -c .)" -lt "$nth" ]; then
    echo "$0: fewer than $nth open server branches with packages of their own here: $(echo $branches)" >&2
    exit 1
fi
echo "$branches" | tail -n "$nth" | head -n 1
