#!/usr/bin/env bash
# A brief HTTP-TPC measurement between two sluice daemons in two network namespaces
# (http-bench-a: 10.66.11.2, http-bench-b: 10.66.12.2, joined by a veth; the client in
# this namespace reaches each over its own veth). One run each, in this order:
#   1. gfal-copy --copy-mode pull, davs:// (B pulls from A; sluice-native bytes),
#   2. sluice cp from A's namespace to B (sluice's own push between the same pair),
#   3. gfal-copy --copy-mode pull, dav:// clear text (B pulls from A over HTTP),
# after a 1-byte gfal-copy that shows gfal2's fixed cost per transfer.
# Usage: crates/http/bench/tpc.sh [SIZE_MIB] [SLUICE_BINARY]   (default 1024, release)
set -euo pipefail
SIZE_MIB=${1:-1024}
BIN=${2:-$(cd "$(dirname "$0")/../../.." && pwd)/target/bench/release/sluice}
WORK=$(mktemp -d /tmp/http-bench.XXXX)
A=http-bench-a; B=http-bench-b
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  ip link del hbA 2>/dev/null || true; ip link del hbB 2>/dev/null || true
  ip netns del $A 2>/dev/null || true; ip netns del $B 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
ip netns add $A; ip netns add $B
ip link add hbA type veth peer name hbAp; ip link set hbAp netns $A
ip link add hbB type veth peer name hbBp; ip link set hbBp netns $B
ip link add hbAB netns $A type veth peer name hbBA netns $B
ip addr add 10.66.11.1/24 dev hbA; ip link set hbA up
ip addr add 10.66.12.1/24 dev hbB; ip link set hbB up
ip netns exec $A sh -c "ip link set lo up; ip addr add 10.66.11.2/24 dev hbAp; ip link set hbAp up; ip addr add 10.66.13.1/24 dev hbAB; ip link set hbAB up; ip route add 10.66.12.0/24 via 10.66.13.2"
ip netns exec $B sh -c "ip link set lo up; ip addr add 10.66.12.2/24 dev hbBp; ip link set hbBp up; ip addr add 10.66.13.2/24 dev hbBA; ip link set hbBA up; ip route add 10.66.11.0/24 via 10.66.13.1"
mkdir -p "$WORK/a" "$WORK/b"
TOKEN=bench-token-0123456789abcdef
printf %s "$TOKEN" > "$WORK/token"; chmod 600 "$WORK/token"
head -c "$((SIZE_MIB << 20))" /dev/urandom > "$WORK/a/f.bin"
printf x > "$WORK/a/one.bin"
serve() { # NS IP ROOT STATE EXTRA...
  local ns=$1 ip=$2 root=$3 state=$4; shift 4
  ip netns exec "$ns" "$BIN" serve --root "$root" --token-file "$WORK/token" --listen "$ip:7000" \
    --http "$ip:8443" --state-dir "$state" --json "$@" > "$WORK/$ns.out" 2> "$WORK/$ns.err" &
  PIDS+=($!)
  for _ in $(seq 100); do [ -s "$WORK/$ns.out" ] && return; sleep 0.1; done
  echo "daemon in $ns not ready: $(cat "$WORK/$ns.err")" >&2; exit 1
}
serve $A 10.66.11.2 "$WORK/a" "$WORK/sa" --http-insecure
serve $B 10.66.12.2 "$WORK/b" "$WORK/sb" --http-insecure --http-ca "$WORK/sa/identity.pem"
export GFAL_PYTHONBIN=/usr/bin/python3 BEARER_TOKEN=$TOKEN
secs() { local t0 t1; t0=$(date +%s.%N); "$@" > "$WORK/last.log" 2>&1 || { cat "$WORK/last.log"; exit 1; }; t1=$(date +%s.%N); echo "$t1 - $t0" | bc -l; }
G=(gfal-copy -D "HTTP PLUGIN:INSECURE=true" -D "HTTP PLUGIN:ENABLE_FALLBACK_TPC_COPY=false" --copy-mode pull)
fixed=$(secs "${G[@]}" davs://10.66.11.2:8443/one.bin davs://10.66.12.2:8443/one.bin)
native=$(secs "${G[@]}" davs://10.66.11.2:8443/f.bin davs://10.66.12.2:8443/native.bin)
push=$(secs ip netns exec $A "$BIN" cp --token-file "$WORK/token" --known-hosts "$WORK/kh" "$WORK/a/f.bin" sluice://10.66.12.2:7000/push.bin)
http=$(secs "${G[@]}" dav://10.66.11.2:8443/f.bin dav://10.66.12.2:8443/http.bin)
for f in native push http; do cmp -s "$WORK/a/f.bin" "$WORK/b/$f.bin" || { echo "$f.bin differs" >&2; exit 1; }; done
mib() { echo "scale=0; $SIZE_MIB / $1" | bc -l; }
echo "size_mib=$SIZE_MIB"
echo "gfal_tpc_one_byte_s=$fixed (gfal2's fixed cost: start-up, stat, checksum, COPY)"
echo "gfal_tpc_native_s=$native MiB/s=$(mib "$native")"
echo "sluice_push_s=$push MiB/s=$(mib "$push")"
echo "gfal_tpc_http_s=$http MiB/s=$(mib "$http")"
echo "native/push=$(echo "scale=2; $push / $native" | bc -l) native/http=$(echo "scale=2; $http / $native" | bc -l)"
echo "without gfal2's fixed cost: native/push=$(echo "scale=2; $push / ($native - $fixed)" | bc -l)"
