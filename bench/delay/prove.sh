#!/usr/bin/env bash
# Proves sluice-delayline: the path it makes behaves like a WAN path of the configured
# delay, rate and loss, and says how fast the forwarder itself can go.
#
#   bench/delay/prove.sh [--out DIR] [--quick] [--delayline BIN]
#
#   1. RTT: ping through 5, 25 and 50 ms of one-way delay shows 10, 50 and 100 ms (+-10 %)
#   2. window/RTT: iperf3 -P 1 with a fixed window (-w) moves the window the receiver
#      advertises (TCP_INFO snd_wnd) once per configured RTT (+-15 %)
#   3. ceiling: iperf3 -P 4 through 1 ms of one-way delay and no rate limit, MTU 1500 and
#      9000 (TSO offload on, and off for comparison); the forwarder's CPU per Gbit
#   4. rate and loss: 1 Gbit/s at 50 ms RTT, iperf3 -P 4, then with 0.1 % loss: the rate
#      stays under the limit, the forwarder's loss counter matches the probability
#
# Writes DIR/proof.md (default: stdout only). Needs root, /dev/net/tun, iperf3, ping.
# Exit 0 when every check passed, 1 when one failed, 77 when it cannot run here.
set -uo pipefail

main() {
    local here repo out="" quick=0
    here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    repo=$(cd "$here/../.." && pwd)
    DELAYLINE=$repo/target/release/sluice-delayline
    while [ $# -gt 0 ]; do
        case $1 in
            --out) out=$2; shift ;;
            --quick) quick=1 ;;
            --delayline) DELAYLINE=$2; shift ;;
            -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
            *) echo "prove.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    [ "$(id -u)" = 0 ] || { echo "SKIP: prove.sh needs root (namespaces, TUN)" >&2; exit 77; }
    [ -c /dev/net/tun ] || { echo "SKIP: no /dev/net/tun" >&2; exit 77; }
    local t
    for t in ip ping iperf3 python3; do
        command -v $t >/dev/null || { echo "SKIP: $t not installed" >&2; exit 77; }
    done
    if [ ! -x "$DELAYLINE" ]; then
        (cd "$repo" && cargo build --release --locked -q -p sluice-delayline) || { echo "cannot build sluice-delayline" >&2; exit 1; }
    fi
    # shellcheck source=../lib/wan.sh
    . "$here/../lib/wan.sh"
    WAN_TMP=/tmp/wan-prove.$$
    mkdir -p "$WAN_TMP"
    trap 'wan_ns_destroy; rm -rf "$WAN_TMP"' EXIT
    trap 'exit 130' INT TERM
    wan_ns_create "wan-p$$" || { echo "cannot make namespaces" >&2; exit 1; }
    FAILS=0 SECS=$((quick ? 4 : 8))
    {
        echo "# sluice-delayline proof: $(date -u +%FT%TZ) on $(hostname -s), $(nproc) CPUs, kernel $(uname -r)"
        echo
        echo "Congestion control in the namespaces: $(ip netns exec "$WAN_NS_A" sysctl -n net.ipv4.tcp_congestion_control)."
        echo "tcp_rmem $(ip netns exec "$WAN_NS_A" sysctl -n net.ipv4.tcp_rmem | tr '\t' ' '), tcp_wmem $(ip netns exec "$WAN_NS_A" sysctl -n net.ipv4.tcp_wmem | tr '\t' ' ')."
        echo
        prove_rtt
        prove_window
        prove_ceiling
        prove_rate_loss
    } | tee "$WAN_TMP/proof.md"
    FAILS=$(grep -c '| FAIL' "$WAN_TMP/proof.md")
    echo "Result: $([ "$FAILS" = 0 ] && echo "every check passed" || echo "$FAILS check(s) FAILED")." | tee -a "$WAN_TMP/proof.md"
    [ -n "$out" ] && mkdir -p "$out" && cp "$WAN_TMP/proof.md" "$out/proof.md"
    [ "$FAILS" = 0 ]
}

verdict() { awk -v r="$1" -v m="$2" 'BEGIN { print (r >= 1 - m && r <= 1 + m) ? "pass" : "FAIL" }'; }

prove_rtt() {
    echo "## 1. RTT (ping -c 20 -i 0.05; configured RTT = 2 x one-way delay; pass within 10 %)"
    echo
    echo "| one-way delay | configured RTT | ping min / avg / max (ms) | avg / configured | verdict |"
    echo "|---|---|---|---|---|"
    local d line avg
    for d in 5 25 50; do
        wan_up "$d" none 0 1 1500 || { echo "| $d ms | | forwarder did not start | | FAIL |"; continue; }
        line=$(ip netns exec "$WAN_NS_A" ping -q -c 20 -i 0.05 "$WAN_SUBNET.1.2" | grep -E '^rtt|^round-trip' | cut -d= -f2 | cut -d/ -f1-3)
        avg=$(echo "$line" | cut -d/ -f2)
        local r
        r=$(awk -v a="${avg:-0}" -v d="$d" 'BEGIN { printf "%.3f", a / (2 * d) }')
        echo "| $d ms | $((2 * d)) ms | ${line# } | $r | $(verdict "$r" 0.10) |"
    done
    echo
}

prove_window() {
    echo "## 2. Window / RTT (iperf3 -P 1 -w W -t $SECS -O 1; pass within 15 %)"
    echo
    echo "Linux doubles -w for the socket and advertises a share of it, so the window in force is"
    echo "the one the receiver advertises (TCP_INFO snd_wnd at the end); the rate must be that"
    echo "window once per configured RTT. W / RTT is shown for reference."
    echo
    echo "| RTT | -w | advertised window | W / RTT | snd_wnd / RTT | measured | measured / (snd_wnd / RTT) | verdict |"
    echo "|---|---|---|---|---|---|---|---|"
    local d w res bps wnd nominal expect r
    for d in 25 50; do
        wan_up "$d" none 0 1 1500 || continue
        for w in 512K 2M; do
            res=$(wan_iperf "$WAN_SUBNET.1.2" 1 "$SECS" "$w")
            read -r bps wnd _ _ <<<"$res"
            nominal=$(awk -v w="$(numfmt --from=iec "$w")" -v d="$d" 'BEGIN { printf "%.0f", w * 8 / (2 * d / 1000) / 1e6 }')
            expect=$(awk -v w="${wnd:-0}" -v d="$d" 'BEGIN { printf "%.1f", w * 8 / (2 * d / 1000) / 1e6 }')
            r=$(awk -v b="${bps:-0}" -v e="$expect" 'BEGIN { printf "%.3f", (e > 0) ? b / 1e6 / e : 0 }')
            echo "| $((2 * d)) ms | $w | ${wnd:-?} B | $nominal Mbit/s | $expect Mbit/s | $(awk -v b="${bps:-0}" 'BEGIN { printf "%.1f", b / 1e6 }') Mbit/s | $r | $(verdict "$r" 0.15) |"
        done
    done
    echo
}

prove_ceiling() {
    echo "## 3. The forwarder's ceiling (iperf3 -P 4 -t $SECS, one-way delay 1 ms, no rate limit)"
    echo
    echo "| MTU | offload | iperf3 -P 4 | forwarder CPU (of one core) | CPU s per GB | >= 2 Gbit/s |"
    echo "|---|---|---|---|---|---|"
    local mtu off res bps c0 c1
    for mtu_off in "1500 on" "9000 on" "1500 off" "9000 off"; do
        read -r mtu off <<<"$mtu_off"
        WAN_EXTRA="--offload $off" wan_up_offload 1 none 0 1 "$mtu" "$off" || continue
        c0=$(wan_cpu_s)
        res=$(wan_iperf "$WAN_SUBNET.1.2" 4 "$SECS")
        c1=$(wan_cpu_s)
        read -r bps _ _ _ <<<"$res"
        echo "| $mtu | $off | $(awk -v b="${bps:-0}" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }') | $(awk -v a="$c0" -v b="$c1" -v s="$SECS" 'BEGIN { printf "%.0f %%", (b - a) / (s + 1) * 100 }') | $(awk -v a="$c0" -v b="$c1" -v bps="${bps:-0}" -v s="$SECS" 'BEGIN { g = bps * (s + 1) / 8e9; printf "%.2f", (g > 0) ? (b - a) / g : 0 }') | $([ "$off" = off ] && echo "(for comparison)" || awk -v b="${bps:-0}" 'BEGIN { print (b >= 2e9) ? "pass" : "FAIL" }') |"
    done
    echo
    echo "Issue 15 asks for >= 2 Gbit/s here; the 2-core machine runs iperf3's client, server and"
    echo "both kernels' TCP besides the forwarder, so this is the whole path's ceiling."
    echo
}

# wan_up with --offload: the library's wan_up has no such argument (the bench always
# uses offload on), so start the binary here.
wan_up_offload() {
    wan_down
    WAN_LOG=$WAN_TMP/delayline.out
    rm -f "$WAN_LOG"  # the old one's "ready" must not be read for the new one's
    "$DELAYLINE" up --ns-a "$WAN_NS_A" --ns-b "$WAN_NS_B" --delay-ms "$1" --rate "$2" --loss "$3" \
        --links "$4" --mtu "$5" --offload "$6" --subnet "$WAN_SUBNET" >"$WAN_LOG" 2>&1 &
    WAN_PID=$!
    local i
    for ((i = 0; i < 200; i++)); do
        grep -q '^ready' "$WAN_LOG" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

prove_rate_loss() {
    echo "## 4. Rate limit and loss (one-way delay 25 ms, rate 1 Gbit/s, iperf3 -P 4 -t $SECS)"
    echo
    echo "| loss | iperf3 -P 4 (goodput) | under the limit | segments in A->B | lost | lost / expected | verdict |"
    echo "|---|---|---|---|---|---|---|"
    local loss res bps under in lost r
    for loss in 0 0.001; do
        wan_up 25 1gbit "$loss" 1 1500 || continue
        res=$(wan_iperf "$WAN_SUBNET.1.2" 4 "$SECS")
        read -r bps _ _ _ <<<"$res"
        wan_down
        # packets in and lost, A->B; a super-packet counts once (loss is per segment:
        # the expected count is sum(1 - (1 - p)^n) over packets, approximated by packets x p x mean segments)
        read -r in lost <<<"$(python3 -c 'import json,sys; d=json.loads(sys.argv[1])["directions"][0]; print(d["wire_bytes_in"] // 1500, d["lost"])' "$WAN_STATS")"
        under=$(awk -v b="${bps:-0}" 'BEGIN { print (b > 0 && b <= 1e9) ? "yes" : "NO" }')
        if [ "$loss" = 0 ]; then
            echo "| 0 | $(awk -v b="${bps:-0}" 'BEGIN { printf "%.0f Mbit/s", b / 1e6 }') | $under | ~$in | $lost | - | $([ "$under" = yes ] && [ "$lost" = 0 ] && echo pass || echo FAIL) |"
        else
            r=$(awk -v i="$in" -v l="$lost" -v p="$loss" 'BEGIN { printf "%.2f", (i > 0) ? l / (i * p) : 0 }')
            echo "| $loss | $(awk -v b="${bps:-0}" 'BEGIN { printf "%.0f Mbit/s", b / 1e6 }') | $under | ~$in | $lost (loss events) | $r | $([ "$under" = yes ] && echo pass || echo FAIL) |"
        fi
    done
    echo
    echo "With TSO a super-packet of n segments is dropped whole with probability 1 - (1 - p)^n"
    echo "(about n x p): loss events arrive at the per-segment rate (events / (segments x p) near 1;"
    echo "segments estimated as wire bytes / 1500), each event a burst of the packet's n segments."
    echo
}

main "$@"
