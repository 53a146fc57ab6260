# shellcheck shell=bash
# bench/lib.sh: what bench/run and bench/compare share. Sourced, not run.
#
# The caller sets, before use:
#   BENCH_NAME   the log prefix ("bench", "bench-compare")
#   BENCH_DIR    the directory of the calling script (the staged copy, inside)
#   OUT          the results directory (hf writes its exports there)
# and uses the globals below for the background lazaret session and the
# bare runsc container, so that one cleanup can stop them.

# shellcheck disable=SC2034 # BARE_COLD and BARE_EXEC are set here for the callers
LZ_BG='' BARE='' BARE_HOLDER=''
BARE_COLD=() BARE_EXEC=()
# The runsc of both sides: BENCH_RUNSC (Lazaret gets it as runtime.runsc,
# see lazaret_runsc_config), else runsc on PATH. The bare side's platform is
# the one Lazaret's runsc uses (set_runsc_flags, once a Domain is up).
RUNSC=${BENCH_RUNSC:-runsc}
RUNSC_FLAGS=(--ignore-cgroups --platform=ptrace --overlay2=none --network=none)
UNSHARE=(unshare --map-root-user --map-auto --mount --net --pid --fork --mount-proc)

log() { printf '%s: %s\n' "${BENCH_NAME:-bench}" "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

q() { printf '%q ' "$@"; } # a shell-quoted command line for hyperfine

# ---------------------------------------------------------------------------
# Outer phase: build, snapshot the binaries, drop privileges.
# ---------------------------------------------------------------------------

# bench_outer SCRIPT [VAR=VALUE...]: builds the release binaries (unless
# BENCH_NO_BUILD=1), copies them, SCRIPT and bench/*.{sh,py} to a private
# temp dir readable by the benchmark user, and runs the staged SCRIPT there
# with BENCH_INNER=1 (as BENCH_USER when started as root) and the given
# variables. Exits with the script's status.
bench_outer() {
    local script=$1 repo src rev rc=0 user uid gid home
    shift
    repo=$(cd "$BENCH_DIR/.." && pwd)
    if [ "${BENCH_NO_BUILD:-0}" != 1 ]; then
        command -v cargo >/dev/null || die "cargo not found: build the binaries yourself and set BENCH_NO_BUILD=1"
        log "building release binaries (cargo build --release --bins; BENCH_NO_BUILD=1 skips this)"
        (cd "$repo" && cargo build --release --bins) || die "cargo build --release --bins failed"
    fi
    src=${BENCH_BIN_DIR:-${CARGO_TARGET_DIR:-$repo/target}/release}
    [ -x "$src/lazaret" ] || die "$src/lazaret is missing (build it, or point BENCH_BIN_DIR at the binaries)"
    # Every Lazaret binary: lazaret finds its helpers beside itself.
    local -a bins=()
    local f
    for f in "$src"/lazaret "$src"/lazaret-*; do
        case ${f##*/} in *.*) continue ;; esac # skip lazaret.d and the like
        [ -f "$f" ] && [ -x "$f" ] && bins+=("$f")
    done
    rev=$(git -C "$repo" describe --always --dirty 2>/dev/null || echo unknown)

    # A private snapshot, readable by the benchmark user: the binaries and
    # these scripts. It also keeps a concurrent `cargo build` from swapping
    # binaries mid-run.
    STAGE=$(mktemp -d /tmp/lazaret-bench-stage.XXXXXX)
    trap 'rm -rf "$STAGE"' EXIT
    local stage=$STAGE
    mkdir "$stage/bin" "$stage/bench"
    cp "${bins[@]}" "$stage/bin/"
    cp "$BENCH_DIR/$script" "$BENCH_DIR"/*.py "$BENCH_DIR"/*.sh "$stage/bench/"
    chmod -R a+rX "$stage"

    local -a pass=(BENCH_INNER=1 "BENCH_BIN_DIR=$stage/bin" "BENCH_REV=$rev" "BENCH_RUNSC=${BENCH_RUNSC:-}" "$@")
    if [ "$(id -u)" = 0 ]; then
        user=${BENCH_USER:-dev}
        uid=$(id -u "$user") || die "no user $user (set BENCH_USER)"
        [ "$uid" != 0 ] || die "BENCH_USER must be an unprivileged user"
        gid=$(id -g "$user")
        home=$(getent passwd "$user" | cut -d: -f6)
        log "running as $user (uid $uid) via setpriv"
        (cd / && setpriv --reuid="$uid" --regid="$gid" --init-groups \
            env -i "HOME=$home" "USER=$user" "LOGNAME=$user" LANG=C.UTF-8 \
            PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin "${pass[@]}" \
            bash "$stage/bench/$script") || rc=$?
    else
        env "${pass[@]}" bash "$stage/bench/$script" || rc=$?
    fi
    exit "$rc"
}

# ---------------------------------------------------------------------------
# Inner phase helpers (as the unprivileged user).
# ---------------------------------------------------------------------------

# A fresh Git workspace at $1 (one commit), printed as its canonical path.
make_workspace() {
    mkdir -p "$1"
    git -C "$1" init -q
    echo bench >"$1/README"
    git -C "$1" add README
    git -C "$1" -c user.name=bench -c user.email=bench@localhost commit -q -m bench
    realpath "$1"
}

# wait_domain_down DOMAIN_ROOT: the coordinator holds domain.lock until the
# Domain is fully torn down.
wait_domain_down() {
    [ -e "$1/domain.lock" ] || return 0
    flock -w 90 "$1/domain.lock" true || die "the Domain did not stop within 90 s (see $1/coordinator.log)"
}

# warmup_run LOGFILE [lazaret run options...]: one untimed `lazaret run --
# true` in the current directory; the first one builds the image if this
# storage root has none yet.
warmup_run() {
    local logfile=$1 rc=0
    shift
    "$LZ" run "$@" -- true </dev/null >"$logfile" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        log "'lazaret run $* -- true' failed (exit $rc); its output:"
        cat "$logfile" >&2
        exit 1
    fi
    if grep -q "preparing image" "$logfile"; then
        log "the warm-up run prepared the image (untimed)"
    else
        log "the warm-up run reused the prepared image"
    fi
}

# start_lazaret_bg DOMAIN_ROOT LOGDIR [lazaret run options...]: a background
# `lazaret run -- sleep 600` session in the current directory; returns once
# a second session sees it running (the Domain is up).
start_lazaret_bg() {
    local domain=$1 logdir=$2
    shift 2
    log "starting the background session 'lazaret run $* -- sleep 600'"
    "$LZ" run "$@" -- sleep 600 </dev/null >"$logdir/warm-session.log" 2>&1 &
    LZ_BG=$!
    local deadline=$((SECONDS + 120))
    until [ -S "$domain/run/coordinator.sock" ] &&
        "$LZ" run "$@" -- pgrep -x -f 'sleep 600' </dev/null >/dev/null 2>"$logdir/warm-probe.log"; do
        if ! kill -0 "$LZ_BG" 2>/dev/null; then
            log "the background session ended early; its output:"
            cat "$logdir/warm-session.log" >&2
            LZ_BG=
            exit 1
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "the background session was not up after 120 s (see $logdir/warm-probe.log)"
        sleep 0.1
    done
    log "Domain is up (sleep 600 runs in its sandbox)"
}

stop_lazaret_bg() {
    [ -n "$LZ_BG" ] || return 0
    if kill -0 "$LZ_BG" 2>/dev/null; then
        kill -TERM "$LZ_BG" 2>/dev/null || true
        for _ in $(seq 200); do kill -0 "$LZ_BG" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$LZ_BG" 2>/dev/null; then kill -KILL "$LZ_BG" 2>/dev/null || true; fi
    fi
    wait "$LZ_BG" 2>/dev/null || true
    LZ_BG=
}

# find_lower DOMAIN_ROOT: the image layer of the running Domain's root
# overlay, as mounted: the bottom-most entry of its lowerdir (lazaret may
# stack its own layers, which live in the Domain's run dir, above the image).
find_lower() {
    local f
    for f in /proc/[0-9]*/mountinfo; do
        grep -s -o "lowerdir=[^,]*,upperdir=$1/run/root-upper" "$f" 2>/dev/null |
            sed -e 's/^lowerdir=//' -e 's/,upperdir=.*//' -e 's/.*://' && return 0
    done
    return 1
}

# image_rootfs DOMAIN_ROOT STORE: BENCH_ROOTFS, else the running Domain's
# image lower, else the newest prepared image in STORE.
image_rootfs() {
    local lower=${BENCH_ROOTFS:-$(find_lower "$1" || true)}
    if [ -z "$lower" ]; then
        lower=$(ls -td "$2"/lowers/*/complete 2>/dev/null | head -n1 | xargs -r dirname)/rootfs
        log "could not read the Domain's overlay lower from /proc; using the newest prepared image"
    fi
    [ -d "$lower" ] || die "no image rootfs at $lower (set BENCH_ROOTFS)"
    echo "$lower"
}

# PID 1 of the bare holder's PID namespace (the child of `unshare --fork`).
bare_pid1() {
    local c
    for c in $(cat "/proc/$BARE_HOLDER/task/$BARE_HOLDER/children" 2>/dev/null); do
        if grep -qE '^NSpid:.*[[:space:]]1$' "/proc/$c/status" 2>/dev/null; then
            echo "$c"
            return 0
        fi
    done
    return 1
}

# runsc VERB... in the namespaces of the bare `runsc run`.
bare_runsc() {
    local pid1
    pid1=$(bare_pid1) || return 1
    nsenter -t "$pid1" -U -m -n -p "$RUNSC" --root "$BARE/state" "${RUNSC_FLAGS[@]}" "$@"
}

# lazaret_runsc_config FILE: appends `[runtime] runsc = BENCH_RUNSC` to the
# run's private config FILE when BENCH_RUNSC is set.
lazaret_runsc_config() {
    [ -n "${BENCH_RUNSC:-}" ] || return 0
    printf '\n[runtime]\nrunsc = "%s"\n' "$BENCH_RUNSC" >>"$1"
    chmod 600 "$1"
}

# The platform Lazaret's runsc uses in the running Domain DOMAIN_ROOT, read
# from its command line; ptrace if it cannot be read.
domain_platform() {
    local f p
    for f in /proc/[0-9]*/cmdline; do
        p=$(tr '\0' '\n' <"$f" 2>/dev/null) || continue
        case $p in *"--root=$1/run/runsc"*) ;; *) continue ;; esac
        p=$(grep -m1 -o '^--platform=.*' <<<"$p") || continue
        echo "${p#--platform=}"
        return 0
    done
    echo ptrace
}

# set_runsc_flags DOMAIN_ROOT: the bare side's runsc flags, with the
# platform of the running Domain's runsc.
set_runsc_flags() {
    RUNSC_FLAGS=(--ignore-cgroups "--platform=$(domain_platform "$1")" --overlay2=none --network=none)
    log "runsc of the bare side: $RUNSC ${RUNSC_FLAGS[*]}"
}

# domain_memory DOMAIN_ID BARE_HOLDER: the PSS of every process of the
# running Domain and of the bare container, to stdout.
domain_memory() {
    python3 "$BENCH_DIR/pss.py" domain "$1" "idle Domain (one session attached)" || true
    if [ -n "$2" ]; then
        python3 "$BENCH_DIR/pss.py" tree "$2" "bare runsc container (unshare + runsc run)" || true
    fi
}

# bare_setup DIR LOWER WORKSPACE: the bare baseline's bundles under DIR (sets
# BARE).
bare_setup() {
    BARE=$1
    mkdir -p "$BARE/layers" "$BARE/root" "$BARE/state"
    python3 "$BENCH_DIR/bundle.py" cold "$BARE/root" "$3" "$BARE/bundle-cold"
    python3 "$BENCH_DIR/bundle.py" serve "$BARE/root" "$3" "$BARE/bundle-serve"
}

# bare_cold_cmd LOWER: the bare cold command (one `runsc run` of /bin/true),
# into the array BARE_COLD.
bare_cold_cmd() {
    BARE_COLD=(env "BARE_RUNSC=$RUNSC" "BARE_FLAGS=${RUNSC_FLAGS[*]}"
        "${UNSHARE[@]}" sh "$BENCH_DIR/bare-ns.sh" cold "$BARE" "$1")
}

# start_bare_serve LOWER LOGFILE: a bare container running lazaret's idle
# init loop (bench-serve); sets BARE_EXEC to the `runsc exec /bin/true`
# command against it, run once to check it.
start_bare_serve() {
    # runsc chowns the stdio it is given: hand it pipes, never our files.
    BARE_RUNSC=$RUNSC BARE_FLAGS="${RUNSC_FLAGS[*]}" \
        "${UNSHARE[@]}" sh "$BENCH_DIR/bare-ns.sh" serve "$BARE" "$1" bench-serve \
        </dev/null > >(cat >"$2") 2>&1 &
    BARE_HOLDER=$!
    # runsc's later verbs must run in the namespaces of `runsc run`,
    # including its PID namespace (the state file records PIDs as seen
    # there): join those of PID 1 of that namespace, as lazaret-exec-bridge
    # joins the Domain holder's.
    local deadline=$((SECONDS + 60))
    until bare_runsc state bench-serve 2>/dev/null | grep -q '"status": *"running"'; do
        if ! kill -0 "$BARE_HOLDER" 2>/dev/null; then
            sleep 0.2
            log "the bare container exited during start-up; its output:"
            cat "$2" >&2
            BARE_HOLDER=
            exit 1
        fi
        [ "$SECONDS" -lt "$deadline" ] || die "the bare container was not running after 60 s"
        sleep 0.05
    done
    log "bare container is up"
    BARE_EXEC=(nsenter -t "$(bare_pid1)" -U -m -n -p "$RUNSC" --root "$BARE/state" "${RUNSC_FLAGS[@]}"
        exec bench-serve /bin/true)
    local out
    out=$("${BARE_EXEC[@]}" </dev/null 2>&1) || die "bare runsc exec failed: $out"
}

stop_bare_holder() {
    [ -n "$BARE_HOLDER" ] || return 0
    if kill -0 "$BARE_HOLDER" 2>/dev/null; then
        bare_runsc kill bench-serve KILL >/dev/null 2>&1 || true
        for _ in $(seq 200); do kill -0 "$BARE_HOLDER" 2>/dev/null || break; sleep 0.1; done
        if kill -0 "$BARE_HOLDER" 2>/dev/null; then
            # PID 1 of the holder's PID namespace takes everything with it.
            local child
            for child in $(cat "/proc/$BARE_HOLDER/task/$BARE_HOLDER/children" 2>/dev/null); do
                kill -KILL "$child" 2>/dev/null || true
            done
            kill -KILL "$BARE_HOLDER" 2>/dev/null || true
        fi
    fi
    wait "$BARE_HOLDER" 2>/dev/null || true
    BARE_HOLDER=
}

# Rounds for N samples: up to BENCH_ROUNDS, at least 2 samples each.
rounds_for() {
    local n=$1 r=${BENCH_ROUNDS:-5}
    ((r > n / 2)) && r=$((n / 2))
    ((r < 1)) && r=1
    echo "$r"
}

# share N ROUNDS R: the samples of round R (1-based), N spread evenly.
share() {
    local n=$1 rounds=$2 r=$3
    echo $((n / rounds + (r <= n % rounds ? 1 : 0)))
}

# hf NAME ROUND RUNS WARMUP OUTPUT [hyperfine options...] COMMAND
hf() {
    local name=$1 round=$2 runs=$3 warmup=$4 output=$5
    shift 5
    local extra=
    [ "$warmup" -gt 0 ] && extra=" (+$warmup warm-up)"
    log "timing $name, round $round: $runs runs$extra"
    if ! hyperfine --style basic --time-unit millisecond --runs "$runs" --warmup "$warmup" \
        --output "$output" --export-json "$OUT/$name.$round.json" -n "$name" "$@" \
        >"$OUT/$name.$round.hyperfine.txt" 2>&1; then
        log "hyperfine failed for $name:"
        cat "$OUT/$name.$round.hyperfine.txt" >&2
        if [ -f "$output" ]; then
            log "output of the failing command ($output):"
            tail -n 40 "$output" >&2
        fi
        exit 1
    fi
}

# The environment header of a run, to stderr and OUT/header.txt.
bench_header() {
    {
        echo "# $1, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "# lazaret $BENCH_REV ($BENCH_BIN_DIR), $("$RUNSC" --version 2>/dev/null | head -n1) ($(command -v "$RUNSC"))"
        echo "# kernel $(uname -r), $(nproc) CPUs, user $(id -un), hyperfine $(hyperfine --version | cut -d' ' -f2)"
    } | tee "$OUT/header.txt" >&2
}
