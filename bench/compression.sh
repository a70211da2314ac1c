#!/usr/bin/env bash
# Compression benchmark (seed 001): effective throughput of `sluice cp` with
# --compress none / lz4 / auto on tomography-like and random data, over three paths:
#   1gbit          two network namespaces joined by a veth pair, tbf 1 Gbit/s on both
#                  ends; source and destination in /dev/shm
#   loopback       127.0.0.1, source and destination in /dev/shm (CPU-bound)
#   loopback-disk  127.0.0.1, tomo only, from the disk to the disk as in bench/run.sh's
#                  tomo workload: FRAMES files of 11,059,200 bytes (one 2560 x 2160
#                  16-bit frame each) in a directory on the disk under DISK_WORK, the
#                  destination a scratch ext4 on an O_DIRECT loop device, the page cache
#                  dropped before every run
# Prints a markdown table and ratios; writes compression.md and compression.csv to $OUT
# (default bench/runs/<date>-<host>/). Needs root (namespaces, loop device, dropping
# caches), iproute2, e2fsprogs. RTT is not emulated: this kernel has no netem.
#
#   bench/compression.sh [SIZE] [REPS]   default 1GiB 5: SIZE per file on 1gbit and
#                                        loopback; median of REPS runs, interleaved
#                                        (none, lz4, auto, none, lz4, auto, ...)
# Environment:
#   SLUICE=BIN     the binary (default target/release/sluice, built if missing); a copy
#                  of it is run, so that a rebuild during the run cannot change it
#   OUT=DIR        where compression.md and compression.csv go
#   CASES=LIST     the paths to run (default "1gbit loopback loopback-disk")
#   FRAMES=N       tomo frames of loopback-disk (default 96, 1.06 GB)
#   DISK_WORK=DIR  disk scratch of loopback-disk (default bench/work, ignored by git):
#                  the frames are kept there (compression-tomo/) for the next run; the
#                  loop device, its image and its mount point are removed on exit
set -euo pipefail
case ${1-} in -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;; esac
cd "$(dirname "$0")/.."
size="${1:-1GiB}"
reps="${2:-5}"
cases="${CASES:-1gbit loopback loopback-disk}"
frames="${FRAMES:-96}"
frame_bytes=11059200  # 2560 x 2160 x 2
disk_work="${DISK_WORK:-bench/work}"
src_bin="${SLUICE:-target/release/sluice}"
if [ ! -x "$src_bin" ]; then
  [ -z "${SLUICE-}" ] || { echo "compression.sh: $src_bin is not an executable" >&2; exit 2; }
  cargo build --release -q -p sluice
fi
for c in $cases; do
  case $c in 1gbit | loopback | loopback-disk) ;; *) echo "compression.sh: unknown case $c (CASES)" >&2; exit 2 ;; esac
done
has_case() { [[ " $cases " == *" $1 "* ]]; }
out_dir="${OUT:-bench/runs/$(date +%Y-%m-%d)-$(hostname)}"
mkdir -p "$out_dir"
csv="$out_dir/compression.csv"
work=$(mktemp -d /dev/shm/sluice-cbench.XXXX)
bin=$work/sluice
cp "$src_bin" "$bin"
nsa=sluice-cb-a nsb=sluice-cb-b
daemon_pid="" disk_img="" disk_loop="" disk_mnt=""
stop_daemon() {
  [ -n "$daemon_pid" ] || return 0
  kill "$daemon_pid" 2>/dev/null || true
  wait "$daemon_pid" 2>/dev/null || true
  daemon_pid=""
}
cleanup() {
  stop_daemon
  if has_case 1gbit; then
    ip netns del "$nsa" 2>/dev/null || true
    ip netns del "$nsb" 2>/dev/null || true
  fi
  if [ -n "$disk_mnt" ]; then
    umount "$disk_mnt" 2>/dev/null || umount -l "$disk_mnt" 2>/dev/null || true
    rmdir "$disk_mnt" 2>/dev/null || true
  fi
  [ -n "$disk_loop" ] && { losetup -d "$disk_loop" 2>/dev/null || true; }
  [ -n "$disk_img" ] && rm -f "$disk_img"
  rm -rf "$work"
}
trap cleanup EXIT

# Flush dirty pages and drop the page cache: loopback-disk reads its source from the disk.
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }

if has_case 1gbit || has_case loopback; then
  "$bin" gen tomo "$work/tomo.bin" --size "$size"
  head -c "$(stat -c %s "$work/tomo.bin")" /dev/urandom >"$work/random.bin"
fi

if has_case 1gbit; then
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
fi

# loopback-disk: the frames on the disk (made once, kept) and a scratch ext4 on an
# O_DIRECT loop device for the destination, like bench/lib/common.sh's scratch_mount.
frames_dir=""
if has_case loopback-disk; then
  mkdir -p "$disk_work"
  disk_work=$(cd "$disk_work" && pwd)
  frames_dir=$disk_work/compression-tomo
  spec="sluice gen tomo --size $((frames * frame_bytes)) --seed 3 | split -b $frame_bytes"
  if [ "$(cat "$disk_work/compression-tomo.ok" 2>/dev/null)" != "$spec" ]; then
    echo "generating $frames tomo frames in $frames_dir (once; kept)" >&2
    rm -rf "$frames_dir" "$disk_work/compression-tomo.ok"
    mkdir -p "$frames_dir"
    "$bin" gen tomo - --size $((frames * frame_bytes)) --seed 3 |
      split -b "$frame_bytes" -d -a 3 --additional-suffix=.raw - "$frames_dir/proj_"
    [ "$(find "$frames_dir" -type f -size "${frame_bytes}c" | wc -l)" = "$frames" ] ||
      { echo "compression.sh: frame generation in $frames_dir failed" >&2; exit 1; }
    echo "$spec" >"$disk_work/compression-tomo.ok"
    sync
  fi
  disk_img=$disk_work/compression-dst.img disk_mnt=$disk_work/compression-dst
  rm -f "$disk_img"
  mkdir -p "$disk_mnt"
  truncate -s "$((frames * frame_bytes * 2 / (1 << 30) + 2))G" "$disk_img"
  mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$disk_img"
  disk_loop=$(losetup --find --show --direct-io=on "$disk_img")
  mount -o nodiscard,noatime,noinit_itable "$disk_loop" "$disk_mnt"
fi

token="$work/token"
head -c 32 /dev/urandom | base64 >"$token"
start_daemon() { # NS ADDR ROOT -> sets listen and daemon_pid
  local ns=$1 addr=$2 root=$3
  local run=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  rm -f "$work/serve.json"
  "${run[@]}" "$bin" serve --root "$root" --listen "$addr:0" --token-file "$token" --json >"$work/serve.json" 2>"$work/serve.log" &
  daemon_pid=$!
  for _ in $(seq 100); do
    [ -s "$work/serve.json" ] && break
    sleep 0.1
  done
  listen=$(python3 -c 'import json,sys;print(json.load(open(sys.argv[1]))["listen"])' "$work/serve.json")
}
echo "path,data,compress,seconds,bytes,wire_bytes,throughput_mib_s,wall_seconds" >"$csv"
run_case() { # PATH_NAME NS DATA COMPRESS (the daemon at $listen)
  local path=$1 ns=$2 data=$3 comp=$4 json src dst t0 t1
  local run=() r=()
  [ -n "$ns" ] && run=(ip netns exec "$ns")
  if [ "$path" = loopback-disk ]; then
    src=$frames_dir/ dst=$disk_mnt/out-$data-$comp r=(-r)
    rm -rf "$dst"
    drop_caches
  else
    src=$work/$data.bin dst=$work/out-$data-$comp.bin
    rm -f "$dst"
  fi
  t0=$EPOCHREALTIME
  json=$("${run[@]}" "$bin" cp "${r[@]}" --json --token-file "$token" --compress "$comp" --streams 2 \
    "$src" "sluice://$listen/${dst##*/}$([ "$path" = loopback-disk ] && echo /)")
  sync
  t1=$EPOCHREALTIME
  if [ "$path" = loopback-disk ]; then
    diff -rq "$frames_dir" "$dst" >/dev/null || { echo "FAILED: $path $data $comp: output differs" >&2; exit 1; }
    rm -rf "$dst"
  else
    cmp -s "$src" "$dst" || { echo "FAILED: $path $data $comp: output differs" >&2; exit 1; }
  fi
  python3 - "$path" "$data" "$comp" "$json" "$t0" "$t1" >>"$csv" <<'PY'
import json, sys
p, d, c, j, t0, t1 = sys.argv[1:7]
s = json.loads(j)
print(f"{p},{d},{c},{s['seconds']:.3f},{s['bytes']},{s['wire_bytes']},{s['bytes']/s['seconds']/1048576:.1f},"
      f"{float(t1) - float(t0):.3f}")
PY
}
for path in 1gbit loopback loopback-disk; do
  has_case "$path" || continue
  data_sets="tomo random" client_ns=""
  case $path in
    1gbit) start_daemon "$nsb" 10.78.0.2 "$work"; client_ns=$nsa ;;
    loopback) start_daemon "" 127.0.0.1 "$work" ;;
    loopback-disk) start_daemon "" 127.0.0.1 "$disk_mnt"; data_sets=tomo ;;
  esac
  for data in $data_sets; do
    for rep in $(seq "$reps"); do  # interleaved, so drift hits every codec alike
      for comp in none lz4 auto; do
        run_case "$path" "$client_ns" "$data" "$comp"
      done
    done
  done
  stop_daemon
  sleep 0.3
done
python3 - "$csv" "$size" "$frames" <<'PY' | tee "$out_dir/compression.md"
import csv, sys
import statistics
rows = list(csv.DictReader(open(sys.argv[1])))
runs = {}
for r in rows:
    runs.setdefault((r["path"], r["data"], r["compress"]), []).append(float(r["throughput_mib_s"]))
t = {k: statistics.median(v) for k, v in runs.items()}
cases = [(p, d) for p in ("1gbit", "loopback", "loopback-disk") for d in ("tomo", "random")
         if all((p, d, c) in t for c in ("none", "lz4", "auto"))]
paths = sorted({p for p, _ in cases}, key=["1gbit", "loopback", "loopback-disk"].index)
print(f"# Compression: `sluice cp --compress none|lz4|auto`, {sys.argv[2]} per file"
      + (f"; loopback-disk {sys.argv[3]} x 11,059,200-byte frames" if "loopback-disk" in paths else "") + "\n")
what = {
    "1gbit": "1gbit: two namespaces, one veth pair, tbf 1 Gbit/s on both ends (no RTT: this kernel has no netem), "
             "source and destination in /dev/shm",
    "loopback": "loopback: CPU-bound, source and destination in /dev/shm",
    "loopback-disk": f"loopback-disk: tomo only, {sys.argv[3]} frame files on the disk (ext4) to a scratch ext4 on an "
                     "O_DIRECT loop device, page cache dropped before every run",
}
print("tomo: `sluice gen tomo` (16-bit detector frames, ~2:1 with LZ4); random: /dev/urandom. "
      + "; ".join(what[p] for p in paths) + ". Throughput is sluice's own "
      f"(payload bytes over its `seconds`), median of {max(len(v) for v in runs.values())} interleaved runs; "
      "compression.csv also has each run's wall time including `sync`.\n")
print("| path | data | none MiB/s | lz4 MiB/s | auto MiB/s | lz4/none | auto/max(none,lz4) |")
print("|---|---|---|---|---|---|---|")
for p, d in cases:
    n, l, a = t[(p, d, "none")], t[(p, d, "lz4")], t[(p, d, "auto")]
    print(f"| {p} | {d} | {n:.0f} | {l:.0f} | {a:.0f} | {l/n:.2f} | {a/max(n,l):.2f} |")
print()
if ("1gbit", "tomo") in cases:
    r = t[("1gbit", "tomo", "lz4")] / t[("1gbit", "tomo", "none")]
    print(f"- **{'PASS' if r >= 1.8 else 'FAIL'}** `--compress lz4` ≥ 1.8× `none` over 1 Gbit/s on tomo: {r:.2f}×")
for p, d in cases:
    n, l, a = t[(p, d, "none")], t[(p, d, "lz4")], t[(p, d, "auto")]
    ra = a / max(n, l)
    print(f"- **{'PASS' if ra >= 0.95 else 'FAIL'}** `auto` within 5 % of the better of none/lz4 ({p}, {d}): {ra:.2f}×")
PY
echo "csv: $csv"
