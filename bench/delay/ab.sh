#!/usr/bin/env bash
# A/B of two sluice binaries through the delay line: the same path, the same file,
# runs interleaved (A B B A A B ...), each binary's own daemon (both listening at once),
# default flags. One CSV row a run: wall seconds, sluice's own seconds, retransmits of
# every data connection and of each side (TCP_INFO, from --json), bytes on each link.
#
#   bench/delay/ab.sh --a BIN --b BIN [--path NAME:ONE_WAY_MS:RATE:LOSS:LINKS]...
#                     [--bytes N] [--reps N] [--nic-mbit M] [--out DIR]
#
#   --path   as bench/wan.sh's paths (default 1g-50ms:25:1gbit:0:1); repeatable
#   --bytes  the file's size (default 1 GiB; 4096 measures opening a session)
#   --reps   runs of each binary per path (default 3)
#   --nic-mbit  the speed the TUN devices report (ethtool; the kernel's default is
#            10000): as a host whose NIC is the path's bottleneck sees it
#   --out    where raw.csv and the logs go (default /tmp/sluice-ab-PID)
# Namespaces are named ${WAN_NS_PREFIX:-wan-ab}PID{a,b}, addresses ${WAN_SUBNET:-10.44}.k.{1,2}.
set -uo pipefail

main() {
    BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
    REPO=$(dirname "$BENCH")
    local a="" b="" paths=() bytes=$((1 << 30)) reps=3 out=/tmp/sluice-ab-$$
    NIC_MBIT=""
    while [ $# -gt 0 ]; do
        case $1 in
            --a) a=$2; shift ;;
            --b) b=$2; shift ;;
            --path) paths+=("$2"); shift ;;
            --bytes) bytes=$2; shift ;;
            --reps) reps=$2; shift ;;
            --nic-mbit) NIC_MBIT=$2; shift ;;
            --out) out=$2; shift ;;
            -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
            *) echo "ab.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    [ -x "$a" ] && [ -x "$b" ] || { echo "ab.sh: --a and --b must name sluice binaries" >&2; exit 2; }
    [ "$(id -u)" = 0 ] || { echo "SKIP: ab.sh needs root (namespaces, TUN)" >&2; exit 77; }
    [ ${#paths[@]} -gt 0 ] || paths=(1g-50ms:25:1gbit:0:1)
    # shellcheck source=../lib/wan.sh
    . "$BENCH/lib/wan.sh"
    DELAYLINE=${DELAYLINE:-$REPO/target/release/sluice-delayline}
    WAN_TMP=$out/tmp
    mkdir -p "$out/logs" "$WAN_TMP" || exit 1
    SHM=/dev/shm/sluice-ab-$$
    mkdir -p "$SHM/src" "$SHM/dst-a" "$SHM/dst-b" || exit 1
    trap 'ab_cleanup' EXIT
    trap 'exit 130' INT TERM
    head -c "$bytes" /dev/urandom >"$SHM/src/f.bin" || exit 1
    head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$SHM/token"
    wan_ns_create "${WAN_NS_PREFIX:-wan-ab}$$" || exit 1
    echo "path,bin,rep,bytes,wall_s,sluice_s,mbit_s,retransmits,link1_bytes,link2_bytes,cpu_client_s,cpu_daemon_s,cpu_forwarder_s,load1" >"$out/raw.csv"
    local p
    for p in "${paths[@]}"; do ab_path "$p" "$a" "$b" "$reps" "$out" "$bytes"; done
    python3 - "$out/raw.csv" <<'EOF'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for path in dict.fromkeys(r["path"] for r in rows):
    for b in ("A", "B"):
        rs = [r for r in rows if r["path"] == path and r["bin"] == b and r["wall_s"]]
        if rs:
            med = lambda k: statistics.median(float(r[k]) for r in rs)
            print(f"{path} {b}: wall {med('wall_s'):.3f} s, sluice {med('sluice_s'):.3f} s, "
                  f"{med('mbit_s'):.0f} Mbit/s, retransmits {med('retransmits'):.0f}, CPU client "
                  f"{med('cpu_client_s'):.2f} s daemon {med('cpu_daemon_s'):.2f} s forwarder "
                  f"{med('cpu_forwarder_s'):.2f} s, load {med('load1'):.1f} (median of {len(rs)})")
EOF
}

ab_cleanup() {
    trap - EXIT INT TERM
    local pid
    for pid in ${AB_DAEMONS:-}; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    wan_ns_destroy
    rm -rf "$SHM"
}

# ab_path SPEC A B REPS OUT BYTES
ab_path() {
    local name delay rate loss links
    IFS=: read -r name delay rate loss links <<<"$1"
    wan_up "$delay" "$rate" "$loss" "$links" 1500 || { echo "path $name could not be set up" >&2; return; }
    echo "path $name: $WAN_READY" >&2
    if [ -n "$NIC_MBIT" ]; then
        local k ns
        for ((k = 1; k <= links; k++)); do
            for ns in "$WAN_NS_A:dla$k" "$WAN_NS_B:dlb$k"; do
                ip netns exec "${ns%%:*}" ethtool -s "${ns##*:}" speed "$NIC_MBIT" duplex full autoneg off ||
                    { echo "ab.sh: cannot set ${ns##*:}'s speed (ethtool)" >&2; return; }
            done
        done
    fi
    local hosts=$WAN_SUBNET.1.2 nics="--nic dlb1" cnics="--nic dla1"
    if [ "$links" = 2 ]; then
        hosts=$WAN_SUBNET.1.2,$WAN_SUBNET.2.2 nics="--nic dlb1 --nic dlb2" cnics="--nic dla1 --nic dla2"
    fi
    AB_DAEMONS=""
    local label bin port
    for label in A B; do
        bin=$2 port=17100
        [ "$label" = B ] && bin=$3 port=17101
        # shellcheck disable=SC2086
        ip netns exec "$WAN_NS_B" "$bin" serve --root "$SHM/dst-${label,,}" --listen "0.0.0.0:$port" \
            --token-file "$SHM/token" $nics >"$5/logs/$name-daemon-$label.log" 2>&1 &
        AB_DAEMONS="$AB_DAEMONS $!"
        eval "AB_DAEMON_$label=$!"
    done
    local i
    for port in 17100 17101; do
        for ((i = 0; i < 100; i++)); do
            ip netns exec "$WAN_NS_B" ss -ltnH "sport = :$port" | grep -q . && break
            sleep 0.1
        done
    done
    local r order l
    for ((r = 1; r <= $4; r++)); do
        order="A B"
        ((r % 2)) || order="B A"
        for l in $order; do ab_run "$name" "$l" "$r" "$2" "$3" "$hosts" "$cnics" "$5" "$6"; done
    done
    for pid in $AB_DAEMONS; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
    AB_DAEMONS=""
    wan_down
    echo "$name $WAN_STATS" >>"$5/logs/delayline-stats.log"
}

# ab_run PATH LABEL REP A B HOSTS CNICS OUT BYTES: one copy, one row.
ab_run() {
    local bin=$4 port=17100
    [ "$2" = B ] && bin=$5 port=17101
    rm -rf "$SHM/dst-${2,,}/"*
    local l0 l1 t0 t1 json="$8/logs/$1-$2-$3.json"
    read -r l0 l1 < <(ab_link_bytes)
    local dpid d0 d1 f0 f1
    dpid=$(eval echo "\$AB_DAEMON_$2")
    d0=$(ab_cpu "$dpid") f0=$(wan_cpu_s)
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    /usr/bin/time -f "%U %S" -o "$8/logs/$1-$2-$3.time" ip netns exec "$WAN_NS_A" "$bin" cp --json \
        --token-file "$SHM/token" $7 "$SHM/src/f.bin" "sluice://$6:$port/" >"$json" 2>"$8/logs/$1-$2-$3.err"
    local rc=$?
    t1=$(date +%s.%N)
    d1=$(ab_cpu "$dpid") f1=$(wan_cpu_s)
    local cpu_c cpu_d cpu_f load
    cpu_c=$(awk '{ printf "%.2f", $1 + $2 }' "$8/logs/$1-$2-$3.time" 2>/dev/null)
    cpu_d=$(awk -v a="$d0" -v b="$d1" 'BEGIN { printf "%.2f", b - a }')
    cpu_f=$(awk -v a="$f0" -v b="$f1" 'BEGIN { printf "%.2f", b - a }')
    load=$(cut -d' ' -f1 /proc/loadavg)
    local m0 m1
    read -r m0 m1 < <(ab_link_bytes)
    if [ $rc != 0 ] || ! cmp -s "$SHM/src/f.bin" "$SHM/dst-${2,,}/f.bin"; then
        echo "$1,$2,$3,$9,,,,,,,,,," >>"$8/raw.csv"
        echo "run $1 $2 $3 FAILED (rc $rc)" >&2
        return
    fi
    python3 - "$json" "$1" "$2" "$3" "$9" "$t0" "$t1" "$((m0 - l0))" "$((m1 - l1))" \
        "$cpu_c,$cpu_d,$cpu_f,$load" >>"$8/raw.csv" <<'EOF'
import json, sys
j, path, label, rep, size, t0, t1, b1, b2, cpu = sys.argv[1:]
d = json.load(open(j))
d = d.get("summary", d)
wall = float(t1) - float(t0)
net = d.get("network") or {}
rx = sum(c.get("retransmits", 0) for c in net.get("connections", []))
print(f"{path},{label},{rep},{size},{wall:.3f},{d.get('seconds', 0):.3f},"
      f"{int(size) * 8 / wall / 1e6:.0f},{rx},{b1},{b2},{cpu}")
EOF
    tail -1 "$8/raw.csv" >&2
}

# CPU seconds (user + system) process PID has used so far.
ab_cpu() {
    awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null || echo 0
}

ab_link_bytes() {
    local a b
    a=$(ip netns exec "$WAN_NS_A" cat /sys/class/net/dla1/statistics/tx_bytes 2>/dev/null || echo 0)
    b=$(ip netns exec "$WAN_NS_A" cat /sys/class/net/dla2/statistics/tx_bytes 2>/dev/null || echo 0)
    echo "$a $b"
}

main "$@"
