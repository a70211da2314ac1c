#!/usr/bin/env bash
# One large file pushed by sluice binaries (e.g. a baseline and a candidate) over two
# paths, interleaved rep by rep: loopback, and a veth pair between two network
# namespaces (the nearest this machine has to a NIC: the bytes leave one network stack
# and enter another). Clear text (`--encrypt never`), default flags otherwise, tmpfs to
# tmpfs, a daemon started per run. What it is for: a change to the sending side's
# copies (issue 16: chunks sent from the page cache) shows differently on the two paths.
#
#   bench/veth.sh [--gib G] [--reps R] [--dir D] BIN [BIN...]
#
# --gib G     the file's size in GiB (default 2)
# --reps R    repetitions (default 4); medians are printed
# --dir D     where to mount the tmpfs (default /tmp/sluice-veth)
#
# Prints one line per run: binary, path, rep, wall seconds, CPU seconds of the client,
# of the daemon during the transfer (read from /proc once it listens and at the end)
# and the system's softirq time (both network stacks); then the medians. Before each
# run the tmpfs is written and emptied as bench/cost.sh does (this VM's balloon hands
# free memory back to the host, which then faults it in again). Runs as root, no sudo.
set -euo pipefail

GIB=2 REPS=4 DIR=/tmp/sluice-veth
BINS=()
while [ $# -gt 0 ]; do
    case $1 in
        --gib) GIB=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) BINS+=("$(realpath "$1")"); shift ;;
    esac
done
[ ${#BINS[@]} -gt 0 ] || { echo "usage: bench/veth.sh [options] BIN [BIN...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/veth.sh: run as root (namespaces, a tmpfs)" >&2; exit 2; }

NS_A=sluice-veth-a$$ NS_B=sluice-veth-b$$ PORT=7719
TICK=$(getconf CLK_TCK)
DPID=""
cleanup() {
    [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    umount -l "$DIR" 2>/dev/null || true
}
trap cleanup EXIT

mkdir -p "$DIR"
mount -t tmpfs -o size=$(( GIB * 3 * 1024 + 256 ))m sluice-veth "$DIR"
mkdir -p "$DIR/src"
dd if=/dev/urandom of="$DIR/src/big" bs=4M count=$(( GIB * 256 )) status=none

ip netns add "$NS_A"
ip netns add "$NS_B"
ip link add "va$$" type veth peer name "vb$$"
ip link set "va$$" netns "$NS_A"
ip link set "vb$$" netns "$NS_B"
ip -n "$NS_A" addr add 10.231.0.1/24 dev "va$$"
ip -n "$NS_B" addr add 10.231.0.2/24 dev "vb$$"
for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
ip -n "$NS_A" link set "va$$" up
ip -n "$NS_B" link set "vb$$" up

softirq() { awk '/^cpu /{print $8}' /proc/stat; }
cpu_of() { awk '{print $14 + $15}' "/proc/$1/stat"; }
warm() {
    dd if=/dev/zero of="$DIR/warm" bs=4M count=$(( GIB * 256 + 1 )) status=none
    rm -f "$DIR/warm"
}

# run_one BIN PATH -> "wall client daemon softirq"
run_one() {
    local bin=$1 path=$2 a=() b=() addr serve=()
    if [ "$path" = veth ]; then
        a=(ip netns exec "$NS_A") b=(ip netns exec "$NS_B") addr=10.231.0.2
        serve=(--insecure-no-auth)
    else
        addr=127.0.0.1
    fi
    rm -rf "$DIR/dst"; mkdir -p "$DIR/dst"
    "${b[@]}" "$bin" serve "${serve[@]}" --encrypt never --root "$DIR/dst" \
        --listen "$addr:$PORT" >/dev/null 2>&1 &
    DPID=$!
    for _ in $(seq 100); do
        "${a[@]}" bash -c "echo >/dev/tcp/$addr/$PORT" 2>/dev/null && break
        sleep 0.05
    done
    warm
    local d0 s0 t0 t1 tf
    tf=$(mktemp)
    d0=$(cpu_of "$DPID"); s0=$(softirq); t0=$(date +%s.%N)
    "${a[@]}" /usr/bin/time -o "$tf" -f '%U %S' "$bin" cp --encrypt never -r "$DIR/src/" \
        "sluice://$addr:$PORT/" >/dev/null
    t1=$(date +%s.%N)
    local d1 s1
    d1=$(cpu_of "$DPID"); s1=$(softirq)
    kill "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=""
    cmp -s "$DIR/src/big" "$DIR/dst/big" || { echo "bench/veth.sh: $bin on $path: the copy differs" >&2; exit 1; }
    awk -v t0="$t0" -v t1="$t1" -v d="$((d1 - d0))" -v s="$((s1 - s0))" -v tick="$TICK" \
        '{ printf "%.3f %.2f %.2f %.2f\n", t1 - t0, $1 + $2, d / tick, s / tick }' "$tf"
    rm -f "$tf"
}

RESULTS=$(mktemp)
for rep in $(seq "$REPS"); do
    for path in loopback veth; do
        for i in "${!BINS[@]}"; do
            line="sluice[$i] $path $rep $(run_one "${BINS[$i]}" "$path")"
            echo "$line"; echo "$line" >> "$RESULTS"
        done
    done
done
echo "# medians: tool path wall_s client_cpu_s daemon_cpu_s softirq_s cpu_total_s"
for i in "${!BINS[@]}"; do echo "# sluice[$i] = ${BINS[$i]}"; done
python3 - "$RESULTS" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    tool, path, _, *v = line.split()
    runs.setdefault((tool, path), []).append([float(x) for x in v])
for (tool, path), rs in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    med = [statistics.median(col) for col in zip(*rs)]
    total = statistics.median(r[1] + r[2] + r[3] for r in rs)
    print(f"{tool:10} {path:9} {med[0]:7.3f} {med[1]:6.2f} {med[2]:6.2f} {med[3]:6.2f} {total:6.2f}")
EOF
rm -f "$RESULTS"
