#!/usr/bin/env bash
# Where sluice spends its CPU (issue 16): `perf record` of both sides of one push over
# loopback, tmpfs to tmpfs, and the hottest symbols of each, kernel included.
#
#   bench/profile.sh [--files N] [--big GIB] [--dir D] [--out O] [BIN]
#
# --files N   N small files of 1-8 KiB (default 20000; 0: none)
# --big GIB   one file of GIB GiB instead of / beside them (default 0)
# --dir D     where to mount the scratch tmpfs (default /tmp/sluice-profile)
# --out O     where perf.data and the reports go (default ./profile-<date>)
# BIN         the sluice binary (default target/release/sluice; build it with
#             `cargo build --release -p sluice`: the release profile keeps line tables)
#
# Writes O/{client,daemon}.perf.data, O/{client,daemon}.top.txt (self time by symbol)
# and O/{client,daemon}.syscalls.txt (`strace -c -f` of a second, identical run). Runs
# as root with no sudo; needs perf (apt-get install -y linux-perf) and strace.
set -euo pipefail

FILES=20000 BIG=0 DIR=/tmp/sluice-profile OUT="profile-$(date +%Y%m%d-%H%M%S)"
BIN=target/release/sluice
while [ $# -gt 0 ]; do
    case $1 in
        --files) FILES=$2; shift 2 ;;
        --big) BIG=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) BIN=$1; shift ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "bench/profile.sh: run as root (it mounts a tmpfs)" >&2; exit 2; }
command -v perf >/dev/null || { echo "bench/profile.sh: perf is missing (apt-get install -y linux-perf)" >&2; exit 2; }
BIN=$(realpath "$BIN")
mkdir -p "$DIR" "$OUT"
OUT=$(realpath "$OUT")
mount -t tmpfs -o size=$(( (FILES * 8 / 1024 + BIG * 1024) * 2 + 256 ))m sluice-profile "$DIR"
TRACER=""
cleanup() {
    [ -n "$TRACER" ] && kill -INT "$TRACER" 2>/dev/null && wait "$TRACER" 2>/dev/null
    umount -l "$DIR" 2>/dev/null || true
}
trap cleanup EXIT

python3 - "$DIR/src" "$FILES" "$BIG" <<'EOF'
import os, random, sys
d, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
rnd = random.Random(16)
for i in range(n):
    sub = os.path.join(d, "d%03d" % (i // 1000))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d" % i), "wb") as f:
        f.write(os.urandom(rnd.randint(1024, 8192)))
if big:
    with open(os.path.join(d, "big"), "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(big << 10):
            f.write(block)
EOF

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.05; done; }

# push TRACE_CMD... : one push with the client run under TRACE_CMD and the daemon's
# transfer (not its start-up, which prefaults its pools) traced by the same command
# attached to it (`-p PID`); each output file is named by its side (@SIDE@).
push() {
    local p daemon; p=$(port)
    rm -rf "$DIR/dst"; mkdir -p "$DIR/dst"
    "$BIN" serve --root "$DIR/dst" --listen "127.0.0.1:$p" >/dev/null 2>&1 &
    daemon=$!
    wait_port "$p"
    "${@//@SIDE@/daemon}" -p "$daemon" &
    TRACER=$!
    sleep 1 # the tracer is attached
    "${@//@SIDE@/client}" "$BIN" cp -r "$DIR/src/" "sluice://127.0.0.1:$p/" >/dev/null
    kill -INT "$TRACER" 2>/dev/null; wait "$TRACER" 2>/dev/null || true; TRACER=""
    kill -INT "$daemon"; wait "$daemon" 2>/dev/null || true
}

echo "profiling $BIN: $FILES files + $BIG GiB, tmpfs to tmpfs" >&2
rm -f "$OUT"/*.perf.data*
push perf record -q -F 4999 -g -o "$OUT/@SIDE@.perf.data"
for side in client daemon; do
    { perf report -i "$OUT/$side.perf.data" --no-children --sort symbol --stdio -g none 2>/dev/null \
        | grep -E '^ +[0-9]' || true; } | head -40 >"$OUT/$side.top.txt"
done
if command -v strace >/dev/null; then
    push strace -f -c -o "$OUT/@SIDE@.syscalls.txt"
fi
for side in client daemon; do
    echo "== $side: hottest symbols (self time)"
    head -15 "$OUT/$side.top.txt"
    [ -f "$OUT/$side.syscalls.txt" ] && { echo "== $side: syscalls"; sed -n '3,14p' "$OUT/$side.syscalls.txt"; }
done
echo "reports in $OUT" >&2
