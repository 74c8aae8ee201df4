#!/bin/sh
# The lab's compiler cache (molecule/shared/compiler_cache.yml): the compiler this link names, through ccache.
#
# NVIDIA's conftest.sh probes the kernel headers with about 180 small compiles per DKMS build, each of a file named
# after the script's PID (conftest<PID>.c) and with that PID in KBUILD_BASENAME and KBUILD_MODNAME: the same probe
# of the same headers never hashes the same, and about half the build's compiler time is spent on them. Here such a
# probe compiles under a name made from its content (conftest-lab-<sha256>.c, beside it, left there: identical
# content, so two at once write the same), with its object where the script looks for it and the PID left out of the
# two macros, whose values only name the object the script deletes. Whether the probe compiles, which is all the
# script reads, is what it was; ccache keeps the successful ones (it keeps no failures). Every other call is
# ccache's as before.
dir=${0%/*}
name=${0##*/}
# This directory out of PATH, so that ccache finds the compiler and not this script.
p=":$PATH:"
while :; do
    case $p in
        *":$dir:"*) p="${p%%:"$dir":*}:${p#*:"$dir":}" ;;
        *) break ;;
    esac
done
p=${p#:}
PATH=${p%:}
export PATH

probe=
compile=
for a do
    case $a in
        conftest[0-9]*.c) probe=$a ;;
        -c) compile=1 ;;
    esac
done
if [ -z "$probe" ] || [ -z "$compile" ] || [ ! -f "$probe" ]; then
    exec ccache "$name" "$@"
fi
pid=${probe#conftest}
pid=${pid%.c}
case $pid in *[!0-9]*) exec ccache "$name" "$@" ;; esac
sum=$(sha256sum < "$probe") || exec ccache "$name" "$@"
stable="conftest-lab-${sum%% *}.c"
if [ ! -f "$stable" ]; then
    cp "$probe" "$stable.$$" && mv -f "$stable.$$" "$stable" || exec ccache "$name" "$@"
fi
output=
for a do
    shift
    case $a in
        "$probe") a=$stable ;;
        -o) output=1 ;;
        *"#conftest$pid"*) a="${a%%"#conftest$pid"*}#conftest${a#*"#conftest$pid"}" ;;
    esac
    set -- "$@" "$a"
done
if [ -z "$output" ]; then
    set -- "$@" -o "conftest$pid.o"
fi
exec ccache "$name" "$@"
