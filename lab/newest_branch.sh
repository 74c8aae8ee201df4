#!/bin/sh
# The archive's newest NVIDIA server driver branch with packages of its own (open kernel modules), as this machine's apt
# index has it; with arguments N..., the Nth newest for each (2: the one before the newest), a line each, from one read
# of the index. An upload turns the newest into a transitional package of the next (615 of 620 on 2026-12-03), so the
# lab reads it rather than writes it: the default scenario's first install (2) and rollout target (1) (prepare.yml),
# make bench's likewise.
set -eu
[ $# -gt 0 ] || set -- 1
for nth in "$@"; do
    case $nth in ''|*[!0-9]*|0) echo "usage: $0 [N...]: N, the place from the newest, is 1 or more" >&2; exit 2 ;; esac
done
branches=$(for p in $(apt-cache pkgnames nvidia-headless-no-dkms- | grep -E '^nvidia-headless-no-dkms-[0-9]+-server-open$'); do
    apt-cache depends "$p" | grep -q 'Depends: nvidia-headless-no-dkms-' || echo "$p"
done | sed 's/[^0-9]//g' | sort -n)
for nth in "$@"; do
    if [ "$(echo "$branches" | grep -c .)" -lt "$nth" ]; then
        echo "$0: fewer than $nth open server branches with packages of their own here: $(echo $branches)" >&2
        exit 1
    fi
    echo "$branches" | tail -n "$nth" | head -n 1
done
