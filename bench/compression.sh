#!/usr/bin/env bash
# Compression benchmark (seed 001): effective throughput of `sluice cp` with
# --compress none / lz4 / auto on tomography-like and random data, over a 1 Gbit/s link
# (two network namespaces joined by a veth pair, tbf on both ends) and over loopback
# (CPU-bound). Prints a markdown table and ratios; writes CSV to $OUT (default
# bench/runs/<date>-<host>/compression.csv). Needs root (namespaces), iproute2.
# RTT is not emulated: this kernel has no netem.
#   bench/compression.sh [SIZE] [REPS]   default 1GiB 5 (median of REPS, interleaved)
set -euo pipefail
cd "$(dirname "$0")/.."
size="${1:-1GiB}"
reps="${2:-5}"
bin=target/release/sluice
[ -x "$bin" ] || cargo build --release -q -p sluice
out_dir="${OUT:-bench/runs/$(date +%Y-%m-%d)-$(hostname)}"
mkdir -p "$out_dir"
csv="$out_dir/compression.csv"
work=$(mktemp -d /dev/shm/sluice-cbench.XXXX)
nsa=sluice-cb-a nsb=sluice-cb-b
cleanup() {
  pkill -f "sluice serve --root $work" 2>/dev/null || true
  ip netns del "$nsa" 2>/dev/null || true
  ip netns del "$nsb" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin" gen tomo "$work/tomo.bin" --size "$size"
head -c "$("$bin" --version >/dev/null; stat -c %s "$work/tomo.bin")" /dev/urandom >"$work/random.bin"

ip netns add "$nsa"
ip netns add "$nsb"
ip link add sl-cb-a type veth peer name sl-cb-b
ip link set sl-cb-a netns "$nsa"
ip link set sl-cb-b netns "$nsb"
ip -n "$nsa" addr add 10.78.0.1/24 dev sl-cb-a
ip -n "$nsb" addr add 10.78.0.2/24 dev sl-cb-b
for ns in "$nsa" "$nsb"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set sl-cb-a up
ip -n "$nsb" link set sl-cb-b up
ip netns exec "$nsa" tc qdisc add dev sl-cb-a root tbf rate 1gbit burst 1mb latency 50ms
ip netns exec "$nsb" tc qdisc add dev sl-cb-b root tbf rate 1gbit burst 1mb latency 50ms

token="$work/token"
head -c 32 /dev/urandom | base64 >"$token"
start_daemon() { # NS ADDR -> echoes the listen address
  local ns=$1 addr=$2 dst="$work/dst-$RANDOM"
  mkdir -p "$dst"
  local run=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  "${run[@]}" "$bin" serve --root "$work" --listen "$addr:0" --token-file "$token" --json >"$work/serve.json" 2>"$work/serve.log" &
  for _ in $(seq 100); do
    [ -s "$work/serve.json" ] && break
    sleep 0.1
  done
  python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["listen"])' "$work/serve.json"
}
echo "path,data,compress,seconds,bytes,wire_bytes,throughput_mib_s" >"$csv"
run_case() { # PATH_NAME NS LISTEN_ADDR DATA COMPRESS
  local path=$1 ns=$2 data=$4 comp=$5 json
  local run=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  rm -f "$work/out-$data-$comp.bin"
  json=$("${run[@]}" "$bin" cp --json --token-file "$token" --compress "$comp" --streams 2 \
    "$work/$data.bin" "sluice://$listen/out-$data-$comp.bin")
  cmp -s "$work/$data.bin" "$work/out-$data-$comp.bin" || { echo "FAILED: $path $data $comp: output differs" >&2; exit 1; }
  python3 - "$path" "$data" "$comp" "$json" >>"$csv" <<'PY'
import json, sys
p, d, c, j = sys.argv[1:5]
s = json.loads(j)
print(f"{p},{d},{c},{s['seconds']:.3f},{s['bytes']},{s['wire_bytes']},{s['bytes']/s['seconds']/1048576:.1f}")
PY
}
for path in 1gbit loopback; do
  if [ "$path" = 1gbit ]; then
    listen=$(start_daemon "$nsb" 10.78.0.2); client_ns=$nsa
  else
    listen=$(start_daemon "" 127.0.0.1); client_ns=""
  fi
  for data in tomo random; do
    for rep in $(seq "$reps"); do  # interleaved, so drift hits every codec alike
      for comp in none lz4 auto; do
        run_case "$path" "$client_ns" "$listen" "$data" "$comp"
      done
    done
  done
  pkill -f "sluice serve --root $work" || true
  sleep 0.3
done
python3 - "$csv" "$size" <<'PY' | tee "$out_dir/compression.md"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
import statistics
runs = {}
for r in rows:
    runs.setdefault((r["path"], r["data"], r["compress"]), []).append(float(r["throughput_mib_s"]))
t = {k: statistics.median(v) for k, v in runs.items()}
print(f"# Compression: `sluice cp --compress none|lz4|auto`, {sys.argv[2]} per file\n")
print("tomo: `sluice gen tomo` (16-bit detector frames, ~2:1 with LZ4); random: /dev/urandom. "
      "1gbit: two namespaces, one veth pair, tbf 1 Gbit/s on both ends (no RTT: this kernel has no "
      "netem); loopback: CPU-bound. Source and destination in /dev/shm. Throughput is sluice's own "
      f"(payload bytes over its `seconds`), median of {max(len(v) for v in runs.values())} interleaved runs.\n")
print("| path | data | none MiB/s | lz4 MiB/s | auto MiB/s | lz4/none | auto/max(none,lz4) |")
print("|---|---|---|---|---|---|---|")
for p in ("1gbit", "loopback"):
    for d in ("tomo", "random"):
        n, l, a = t[(p, d, "none")], t[(p, d, "lz4")], t[(p, d, "auto")]
        print(f"| {p} | {d} | {n:.0f} | {l:.0f} | {a:.0f} | {l/n:.2f} | {a/max(n,l):.2f} |")
r = t[("1gbit", "tomo", "lz4")] / t[("1gbit", "tomo", "none")]
print(f"\n- **{'PASS' if r >= 1.8 else 'FAIL'}** `--compress lz4` ≥ 1.8× `none` over 1 Gbit/s on tomo: {r:.2f}×")
for p in ("1gbit", "loopback"):
    for d in ("tomo", "random"):
        n, l, a = t[(p, d, "none")], t[(p, d, "lz4")], t[(p, d, "auto")]
        ra = a / max(n, l)
        print(f"- **{'PASS' if ra >= 0.95 else 'FAIL'}** `auto` within 5 % of the better of none/lz4 ({p}, {d}): {ra:.2f}×")
PY
echo "csv: $csv"
