#!/usr/bin/env bash
# Issue 18's benchmark: an HTTP third-party copy (HTTP-TPC) between two sluice daemons,
# driven by gfal2's own client as FTS3 drives it, against sluice's own push between the
# same hosts and against the same copy between two plain HTTP endpoints (nginx WebDAV,
# which has no COPY: gfal2 streams the bytes through the client, as FTS3 does with such
# endpoints).
#
# Three network namespaces on one bridge (no rate limit: the CPU decides): A 10.79.0.2
# (the source: a sluice daemon with its HTTPS face, and nginx), B 10.79.0.3 (the
# destination: the same), C 10.79.0.4 (the gfal2 client). Sources and destinations are
# tmpfs, so no disk decides. Cases run interleaved, run by run, their order reversed
# every other round; figures are medians. CPU is the CPU time of every process the
# script started (daemons, nginx, gfal2, sluice cp; a cpuacct cgroup) plus the machine's
# softirq time, per GB moved. Every destination is compared with the source byte for
# byte (a wrong copy is FAILED, not timed).
#
#   bench/tpc.sh [--size-mib N] [--reps N] [--out DIR] [--sluice BIN] [--cases A,B,...]
#
# Cases:
#   tpc-pull      gfal-copy --copy-mode pull davs://A -> davs://B (sluice's bytes A->B)
#   tpc-push      gfal-copy --copy-mode push davs://A -> davs://B
#   sluice-push   sluice cp in A to sluice://B (TLS, default flags)
#   sluice-pull   sluice cp in B from sluice://A (TLS, default flags; not run by default)
#   nginx-https   gfal-copy --copy-mode streamed https://A(nginx) -> https://B(nginx)
#   nginx-http    the same in clear text
#   gfal-1byte    a 1-byte tpc-pull: gfal2's fixed cost per transfer (start-up, stat, COPY)
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MIB=4096 REPS=3 OUT="" SLUICE="" CASE_LIST=tpc-pull,tpc-push,sluice-push,nginx-https,nginx-http
while [ $# -gt 0 ]; do
    case $1 in
        --size-mib) SIZE_MIB=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --sluice) SLUICE=$2; shift 2 ;;
        --cases) CASE_LIST=$2; shift 2 ;;
        -h | --help) sed -n 2,27p "$0"; exit 0 ;;
        *) echo "tpc.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "tpc.sh: needs root (namespaces, tmpfs)" >&2; exit 2; }
if ! command -v nginx >/dev/null; then
    echo "tpc.sh: installing nginx (the plain WebDAV endpoints)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null
fi
for t in ip gfal-copy nginx openssl; do
    command -v "$t" >/dev/null || { echo "tpc.sh: $t not installed (scripts/setup.sh)" >&2; exit 2; }
done
if [ -z "$SLUICE" ]; then
    cargo build --release --locked -q -p sluice
    SLUICE=$PWD/target/release/sluice
fi
OUT=${OUT:-bench/runs/$(date +%F)-tpc}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/sluice-tpc.XXXXXX)
T=$$
NS_A=tpa$T NS_B=tpb$T NS_C=tpc$T BR=tpbr$T
A=10.79.0.2 B=10.79.0.3
declare -a PIDS=()

# CPU seconds of every process this script starts, and the hosts (bench/lib/hosts.sh).
. bench/lib/hosts.sh
cpu_cgroup_enter "sluice-tpc-$T"

cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for n in a b; do [ -f "$W/nginx-$n.pid" ] && kill "$(cat "$W/nginx-$n.pid")" 2>/dev/null; done
    sleep 0.5
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    bridge_down "$BR" $NS_A $NS_B $NS_C
    umount "$W/a" "$W/b" 2>/dev/null
    rm -rf "$W"
    cpu_cgroup_leave
}
trap cleanup EXIT
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- the hosts -----------------------------------------------------------------------
bridge_up "$BR" "tp$T" 10.79.0 $NS_A $NS_B $NS_C
inA() { ip netns exec "$NS_A" "$@"; }
inB() { ip netns exec "$NS_B" "$@"; }
inC() { ip netns exec "$NS_C" "$@"; }

mkdir -p "$W/a" "$W/b"
mount -t tmpfs -o size=$((SIZE_MIB + 512))m tmpfs "$W/a"
mount -t tmpfs -o size=$((SIZE_MIB * 2 + 512))m tmpfs "$W/b"
log "making a ${SIZE_MIB} MiB file (incompressible)"
head -c $((SIZE_MIB << 20)) /dev/urandom >"$W/a/big"
printf x >"$W/a/one"
BYTES=$((SIZE_MIB << 20))
TOKEN="tpc-bench-token-$RANDOM$RANDOM$RANDOM"
printf %s "$TOKEN" >"$W/token"
chmod 600 "$W/token"

# --- sluice daemons (A's certificate trusted by B and the reverse: A starts twice) ------
sluiced() { # NS IP ROOT NAME EXTRA...
    local ns=$1 ip=$2 root=$3 name=$4
    shift 4
    ip netns exec "$ns" "$SLUICE" serve --root "$root" --listen "$ip:7878" --http "$ip:8443" \
        --token-file "$W/token" --state-dir "$W/state-$name" "$@" >"$W/ready-$name" 2>"$W/daemon-$name.log" &
    PIDS+=($!)
    for _ in $(seq 200); do [ -s "$W/state-$name/identity.pem" ] && ip netns exec "$ns" ss -Hltn "sport = :8443" | grep -q . && return; sleep 0.1; done
    echo "tpc.sh: daemon $name did not start: $(cat "$W/daemon-$name.log")" >&2
    exit 1
}
sluiced "$NS_A" $A "$W/a" a
sluiced "$NS_B" $B "$W/b" b --http-ca "$W/state-a/identity.pem"
kill "${PIDS[0]}"
wait "${PIDS[0]}" 2>/dev/null || true
sluiced "$NS_A" $A "$W/a" a --http-ca "$W/state-b/identity.pem"

# --- nginx WebDAV endpoints (HTTPS on 9443, HTTP on 9080) -------------------------------
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=tpc-bench \
    -keyout "$W/nginx.key" -out "$W/nginx.crt" 2>/dev/null
nginx_conf() { # NAME IP ROOT
    cat <<CONF
user root;
worker_processes 2;
pid $W/nginx-$1.pid;
error_log $W/nginx-$1.err;
events { worker_connections 256; }
http {
  access_log off;
  sendfile on;
  client_body_temp_path $3/.nginx-tmp;
  client_max_body_size 0;
  types { application/octet-stream bin; }
  server {
    listen $2:9443 ssl;
    listen $2:9080;
    ssl_certificate $W/nginx.crt;
    ssl_certificate_key $W/nginx.key;
    ssl_protocols TLSv1.3;
    root $3;
    location / { dav_methods PUT DELETE MKCOL; create_full_put_path on; dav_access user:rw group:r all:r; }
  }
}
CONF
}
for n in a b; do
    root=$W/$n ip=$A ns=$NS_A
    [ $n = b ] && ip=$B ns=$NS_B
    mkdir -p "$root/.nginx-tmp"
    nginx_conf $n $ip "$root" >"$W/nginx-$n.conf"
    ip netns exec "$ns" nginx -c "$W/nginx-$n.conf" -p "$W"
done

# --- the cases ---------------------------------------------------------------------------
G=(gfal-copy -D "HTTP PLUGIN:INSECURE=true" -D "HTTP PLUGIN:ENABLE_FALLBACK_TPC_COPY=false" -f)
export GFAL_PYTHONBIN=/usr/bin/python3
case_cmd() { # NAME -> one copy into $W/b/out
    case $1 in
        tpc-pull) inC env BEARER_TOKEN="$TOKEN" "${G[@]}" --copy-mode pull "davs://$A:8443/big" "davs://$B:8443/out" ;;
        tpc-push) inC env BEARER_TOKEN="$TOKEN" "${G[@]}" --copy-mode push "davs://$A:8443/big" "davs://$B:8443/out" ;;
        sluice-push) inA "$SLUICE" cp --token-file "$W/token" --known-hosts "$W/kh" "$W/a/big" "sluice://$B:7878/out" ;;
        sluice-pull) inB "$SLUICE" cp --token-file "$W/token" --known-hosts "$W/kh" "sluice://$A:7878/big" "$W/b/out" ;;
        nginx-https) inC "${G[@]}" --copy-mode streamed "https://$A:9443/big" "https://$B:9443/out" ;;
        nginx-http) inC "${G[@]}" --copy-mode streamed "http://$A:9080/big" "http://$B:9080/out" ;;
        gfal-1byte) inC env BEARER_TOKEN="$TOKEN" "${G[@]}" --copy-mode pull "davs://$A:8443/one" "davs://$B:8443/out" ;;
    esac
}
echo "case,rep,status,seconds,bytes,cpu_s" >"$OUT/raw.csv"
run_one() { # NAME REP SOURCE
    rm -f "$W/b/out"
    sync
    local t0 c0 t1 c1 st=ok
    c0=$(cpu_busy) t0=$(date +%s.%N)
    case_cmd "$1" >"$W/run.out" 2>"$W/run.err" || st=fail
    t1=$(date +%s.%N) c1=$(cpu_busy)
    if [ $st = ok ] && ! cmp -s "$3" "$W/b/out"; then st=wrong-output; fi
    [ $st = ok ] || log "$1 rep $2: $st: $(tail -c 400 "$W/run.err")"
    echo "$1,$2,$st,$(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.3f", a-b}'),$(stat -c %s "$3"),$(awk -v a="$c1" -v b="$c0" 'BEGIN{printf "%.2f", a-b}')" >>"$OUT/raw.csv"
}

IFS=, read -ra CASES <<<"$CASE_LIST"
# Warm-up: pins B's certificate for sluice cp, checks every case once (not recorded).
for c in "${CASES[@]}"; do
    case_cmd "$c" >/dev/null 2>"$W/warm.err" || log "warm-up $c failed: $(tail -c 300 "$W/warm.err")"
done
for r in $(seq "$REPS"); do
    order=("${CASES[@]}")
    [ $((r % 2)) = 0 ] && order=($(printf '%s\n' "${CASES[@]}" | tac))
    for c in "${order[@]}"; do log "rep $r: $c"; run_one "$c" "$r" "$W/a/big"; done
    run_one gfal-1byte "$r" "$W/a/one"
done
grep -c '"op":"pull"' "$W/daemon-a.log" >/dev/null 2>&1 || true

# --- the report ----------------------------------------------------------------------------
python3 - "$OUT" "$SIZE_MIB" "$REPS" "$("$SLUICE" --version)" "$(nginx -v 2>&1)" "$(gfal-copy -V 2>&1 | head -1)" <<'PY'
import csv, statistics, sys
out, size_mib, reps, version, nginx, gfal = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *sys.argv[4:]
rows = list(csv.DictReader(open(f"{out}/raw.csv")))
def med(case, key):
    v = [float(r[key]) for r in rows if r["case"] == case and r["status"] == "ok"]
    return statistics.median(v) if v else None
fails = {r["case"] for r in rows if r["status"] != "ok"}
gb = size_mib * 1.048576 / 1000
ALL = ["tpc-pull", "tpc-push", "sluice-push", "sluice-pull", "nginx-https", "nginx-http"]
ran = [c for c in ALL if any(r["case"] == c for r in rows)]
rate = {c: gb * 1000 / med(c, "seconds") for c in ran if med(c, "seconds")}
def ratio(a, b):
    return f"{rate[a] / rate[b]:.2f}x" if a in rate and b in rate else "n/a"
lines = [f"# HTTP-TPC benchmark ({version}; {nginx}; {gfal})", "",
         f"{size_mib} MiB incompressible file, tmpfs to tmpfs, three network namespaces on one",
         f"bridge (no rate limit), {reps} interleaved runs per case, medians. CPU: every process of",
         "both sides and the client (a cgroup) plus the machine's softirq time, per GB.", "",
         "| case | median s | MB/s | CPU s/GB | vs sluice-push | vs nginx-https | vs nginx-http |",
         "|---|---|---|---|---|---|---|"]
for c in ran:
    s, cpu = med(c, "seconds"), med(c, "cpu_s")
    if not s:
        lines.append(f"| {c} | failed | | | | | |"); continue
    lines.append(f"| {c}{' (some runs failed)' if c in fails else ''} | {s:.2f} | {rate[c]:.0f} | "
                 f"{cpu / gb:.2f} | {ratio(c, 'sluice-push')} | {ratio(c, 'nginx-https')} | {ratio(c, 'nginx-http')} |")
one = med("gfal-1byte", "seconds")
lines += ["", f"gfal2's fixed cost per transfer (a 1-byte tpc-pull, median): {one:.2f} s" if one else
          "gfal2's fixed cost: failed", ""]
open(f"{out}/results.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
cp "$W"/daemon-*.log "$OUT/" 2>/dev/null || true
