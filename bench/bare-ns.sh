#!/bin/sh
# The bare-runsc baseline, run by bench/run INSIDE
#   unshare --map-root-user --map-auto --mount --net --pid --fork --mount-proc
# (so: as root of a user namespace made from the caller's subordinate IDs,
# PID 1 of a fresh PID namespace, in a fresh mount and network namespace).
#
#   bare-ns.sh cold  BASE LOWER        one `runsc run` of /bin/true (timed by the caller)
#   bare-ns.sh serve BASE LOWER ID     `runsc run` of the idle init, stays in the foreground
#
# Like lazaret-supervisor, the root is a kernel overlay (userxattr) with the
# prepared image as its read-only lower and a fresh upper per sandbox. The
# uppers are left under BASE/layers and removed once, at the end of the run.
#
# BARE_RUNSC names the runsc (default runsc on PATH), BARE_FLAGS its global
# flags (default the ptrace platform's).
set -eu
mode=$1 base=$2 lower=$3
runsc=${BARE_RUNSC:-runsc}
flags=${BARE_FLAGS:-"--ignore-cgroups --platform=ptrace --overlay2=none --network=none"}

layer=$(mktemp -d "$base/layers/bench-XXXXXXXX")
mkdir "$layer/upper" "$layer/work"
mount -t overlay -o "userxattr,lowerdir=$lower,upperdir=$layer/upper,workdir=$layer/work" \
    bench-root "$base/root"

case $mode in
cold)
    # shellcheck disable=SC2086
    exec "$runsc" --root "$base/state" $flags run --bundle "$base/bundle-cold" "${layer##*/}"
    ;;
serve)
    # shellcheck disable=SC2086
    exec "$runsc" --root "$base/state" $flags run --bundle "$base/bundle-serve" "$4"
    ;;
*)
    echo "bare-ns.sh: unknown mode $mode" >&2
    exit 2
    ;;
esac
