#!/usr/bin/env bash
# sluice's WAN benchmark: paths with a real round-trip time, made by sluice-delayline
# (two namespaces joined through a user-space forwarder; this kernel has no netem), and
# every tool on one file per path, tmpfs to tmpfs, default flags, interleaved run by run.
#
#   bench/wan.sh [--quick] [--out DIR] [--reps N] [--peer-reps N] [--mtu M] [--only REGEX]
#                [--sluice BIN] [--sluice-base BIN] [--dest ramdisk|tmpfs] [--tools LIST]
#
#   paths (full): 1 Gbit/s at 10, 50 and 100 ms RTT; the fastest rate the forwarder
#                 sustains at 50 ms; 0.01 % and 0.1 % random loss at 1 Gbit/s and 50 ms;
#                 two links of 1 Gbit/s at 50 ms            (1 GiB file, 3 runs, ~25 min)
#   --quick       1 Gbit/s at 10, 50, 100 ms, 0.1 % loss at 50 ms, two links at 50 ms
#                 (512 MiB file, 1 run, ~5 min)
#   --reps N      runs of sluice and GridFTP per path, median reported (default 3; quick 1)
#   --peer-reps N runs of rsync and scp (default 1: they are slow on long paths); all
#                 tools are interleaved run by run, the order reversed every other round
#   tools         sluice (daemon in B, client in A), iperf3 -P 1..8 moving the same bytes
#                 as the file (best of; quick 1 and 4), globus-url-copy -fast -p 4 (with
#                 this host's congestion control, and with cubic, Debian's default),
#                 rsync (daemon), scp
#   two links     the full run moves a 4 GiB file there (filling both is a steady state)
#   --mtu M       MTU of the paths (default 1500; 9000 for jumbo frames)
#   --dest D      where the file goes: ramdisk (default), an ext4 on a loop device over
#                 memory written once at the start, or tmpfs (/dev/shm). On this VM a
#                 fresh page of tmpfs is faulted in by the host: a new file goes into
#                 tmpfs at 0.2-0.4 GB/s, less than two 1 Gbit/s links carry. Every row
#                 carries the destination's measured write rates (O_DIRECT, page cache)
#                 and the run measures tmpfs's too.
#   --only REGEX  only paths whose name matches
#   --tools LIST  only these of the interleaved tools (comma-separated: sluice, gridftp,
#                 gridftp-cubic, rsyncd, scp; sluice-base comes with --sluice-base);
#                 iperf3's ceilings always run
#   --sluice-base BIN  an earlier sluice build, run as tool `sluice-base` interleaved
#                 with sluice on every path (before/after in the same run)
#
# Every row of raw.csv carries the path's RTT, rate and loss, the destination's write rates and the forwarder's ceiling
# (iperf3 -P 4 through 1 ms of one-way delay, no rate limit) measured in the same run.
# Needs root, /dev/net/tun and the peers (run.sh installs them; this script does too).
set -uo pipefail

main() {
    BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    REPO=$(dirname "$BENCH")
    QUICK=0 OUT="" REPS="" PEER_REPS=1 MTU=1500 ONLY_PATHS="" SLUICE_SRC="$REPO/target/release/sluice" NO_INSTALL=0
    SLUICE_BASE_SRC="" DEST_KIND=ramdisk TOOLS_ONLY=""
    while [ $# -gt 0 ]; do
        case $1 in
            --quick) QUICK=1 ;;
            --out) OUT=$2; shift ;;
            --reps) REPS=$2; shift ;;
            --peer-reps) PEER_REPS=$2; shift ;;
            --mtu) MTU=$2; shift ;;
            --only) ONLY_PATHS=$2; shift ;;
            --sluice) SLUICE_SRC=$2; shift ;;
            --sluice-base) SLUICE_BASE_SRC=$2; shift ;;
            --dest) DEST_KIND=$2; shift ;;
            --tools) TOOLS_ONLY=",$2,"; shift ;;
            --no-install) NO_INSTALL=1 ;;
            -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
            *) echo "wan.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    case $MTU in '' | *[!0-9]*) echo "wan.sh: --mtu $MTU: a number such as 1500 or 9000" >&2; exit 2 ;; esac
    case $DEST_KIND in ramdisk | tmpfs) ;; *) echo "wan.sh: --dest $DEST_KIND: ramdisk or tmpfs" >&2; exit 2 ;; esac
    [ "$(id -u)" = 0 ] || { echo "SKIP: wan.sh needs root (namespaces, TUN)" >&2; exit 77; }
    [ -c /dev/net/tun ] || { echo "SKIP: wan.sh needs /dev/net/tun" >&2; exit 77; }
    : "${REPS:=$((QUICK ? 1 : 3))}"
    ONLY="" PY=python3
    /usr/bin/python3 -c "import matplotlib" 2>/dev/null && PY=/usr/bin/python3

    # sluice with its defaults (nothing written out: the point is what it does unasked)
    SLUICE_CLI_FLAGS="" SLUICE_SRV_FLAGS="" SLUICE_CLI_EXTRA="" SLUICE_SRV_EXTRA=""
    # shellcheck source=lib/common.sh
    . "$BENCH/lib/common.sh"
    # shellcheck source=lib/workloads.sh
    . "$BENCH/lib/workloads.sh"
    # shellcheck source=lib/peers.sh
    . "$BENCH/lib/peers.sh"
    # shellcheck source=lib/cases.sh
    . "$BENCH/lib/cases.sh"
    # shellcheck source=lib/wan.sh
    . "$BENCH/lib/wan.sh"
    wan_columns
    # Tools' run time limit: a 1 GiB file over a slow tool on a lossy 100 ms path.
    TIMEOUT_MAX=$((QUICK ? 180 : 600))
    _timeout_for() { echo "$TIMEOUT_MAX"; }

    HOST=$(hostname -s 2>/dev/null || hostname)
    if [ -z "$OUT" ]; then
        OUT="$BENCH/runs/$(date +%F)-$HOST-wan$([ "$QUICK" = 1 ] && echo -quick)"
        [ -e "$OUT/raw.csv" ] && OUT="$OUT-$(date +%H%M)"
    fi
    mkdir -p "$OUT/logs" || exit 1
    OUT=$(cd "$OUT" && pwd)
    SHM=/dev/shm/sluice-wan-$$
    DATA=$SHM/data DST=$SHM/dst RUNTMP=$SHM/tmp WAN_TMP=$SHM/tmp WORK=$BENCH/work  # WORK: ssh keys
    mkdir -p "$DATA" "$DST" "$RUNTMP" || exit 1
    rm -f "$OUT/raw.csv" "$OUT/notes.txt" "$OUT/sluice-runs.jsonl"
    echo "$CSV_COLUMNS" >"$OUT/raw.csv"
    exec 3>&2 2> >(tee -a "$OUT/logs/run.log" >&3)
    cleanup() {
        trap - EXIT INT TERM
        stop_all_servers
        wan_ns_destroy
        wan_dest_destroy
        [ -n "${HOST_ALLOWED_CC-}" ] && sysctl -qw net.ipv4.tcp_allowed_congestion_control="$HOST_ALLOWED_CC"
        rm -rf "$SHM"
    }
    trap cleanup EXIT
    trap 'log "interrupted"; exit 130' INT TERM

    T_START=$(now)
    log "results: $OUT (quick=$QUICK reps=$REPS mtu=$MTU)"
    install_peers
    wan_binaries || exit 1
    wan_ns_create "${WAN_NS_PREFIX:-wan-b}$$" || { log "cannot make namespaces"; exit 1; }
    HOST_CC=$(ip netns exec "$WAN_NS_A" sysctl -n net.ipv4.tcp_congestion_control)
    wan_data || exit 1
    wan_destination || exit 1
    NO_DROP=1  # tmpfs to tmpfs: nothing to drop
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

    wan_ceiling
    wan_define_paths
    local p
    for p in $WAN_PATHS; do
        [ -n "$ONLY_PATHS" ] && ! [[ ${p%%:*} =~ $ONLY_PATHS ]] && continue
        wan_run_path "$p"
    done
    wan_down
    T_END=$(now)
    wan_meta >"$OUT/meta.env"
    {
        echo "workload,kind,files,bytes,description"
        echo "path-big,file,1,$WAN_BYTES,$(csv_field "${WL_DESC[path-big]}")"
        [ -n "${WL_PATH[path-4g]-}" ] && echo "path-4g,file,1,$((4 << 30)),$(csv_field "${WL_DESC[path-4g]}")"
    } >"$OUT/workloads.csv"
    "$PY" "$BENCH/report.py" "$OUT" || log "report.py failed"
    log "done in $(fsub "$T_END" "$T_START") s: $OUT/results.md"
}

# Extra columns on every row: the path and the forwarder's ceiling in this run.
wan_columns() {
    CSV_COLUMNS="$CSV_COLUMNS,rtt_ms,rate_bps,loss,links,mtu,forwarder_ceiling_bps,dest,dest_direct_bps,dest_buffered_bps"
    eval "$(declare -f row | sed '1s/^row /_wan_row_base /')"
    row() {
        _wan_row_base "$@" rtt_ms="${W_RTT-}" rate_bps="${W_RATE_BPS-}" loss="${W_LOSS-}" \
            links="${W_LINKS-}" mtu="$MTU" forwarder_ceiling_bps="${W_CEILING_BPS-}" \
            dest="$DEST_KIND" dest_direct_bps="${DEST_DIRECT_BPS-}" dest_buffered_bps="${DEST_BUFFERED_BPS-}"
    }
}

wan_binaries() {
    DELAYLINE=$REPO/target/release/sluice-delayline
    if [ ! -x "$SLUICE_SRC" ] || [ ! -x "$DELAYLINE" ]; then
        log "building sluice and sluice-delayline (cargo build --release)"
        (cd "$REPO" && cargo build --release --locked -q -p sluice -p sluice-delayline) || { log "cannot build"; return 1; }
    fi
    mkdir -p "$RUNTMP/bin" && cp "$SLUICE_SRC" "$RUNTMP/bin/sluice" && cp "$DELAYLINE" "$RUNTMP/bin/" || return 1
    SLUICE=$RUNTMP/bin/sluice DELAYLINE=$RUNTMP/bin/sluice-delayline SLUICE_BASE=""
    if [ -n "$SLUICE_BASE_SRC" ]; then
        [ -x "$SLUICE_BASE_SRC" ] || { log "--sluice-base $SLUICE_BASE_SRC: not an executable"; return 1; }
        cp "$SLUICE_BASE_SRC" "$RUNTMP/bin/sluice-base" && SLUICE_BASE=$RUNTMP/bin/sluice-base || return 1
    fi
    SLUICE_VERSION=$("$SLUICE" --version 2>/dev/null)
    GIT_REV=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)
}

# The file: deterministic random bytes in tmpfs (1 GiB; quick 512 MiB).
wan_data() {
    WAN_BYTES=$((QUICK ? 512 << 20 : 1 << 30))
    mkdir -p "$DATA/path-big"
    WL_PATH[path-big]=$DATA/path-big/path.bin WL_KIND[path-big]=file
    WL_DESC[path-big]="1 x $(human_bytes $WAN_BYTES) random, in tmpfs (/dev/shm), to $(dest_words)"
    log "generating $(human_bytes $WAN_BYTES) in $DATA"
    keystream "${WL_PATH[path-big]}" "$WAN_BYTES" 77 || { log "cannot generate the file"; return 1; }
    echo "1 $WAN_BYTES" >"$DATA/.path-big.stats"
}

dest_words() { [ "$DEST_KIND" = ramdisk ] && echo "a ramdisk (ext4, loop device over memory written once)" || echo tmpfs; }

# The destination (--dest) and its write rates, with tmpfs's beside them: a fresh file of
# the path file's size written with O_DIRECT and through the page cache.
wan_destination() {
    if [ "$DEST_KIND" = ramdisk ]; then
        local gib=$((QUICK ? 2 : 6))
        log "destination: ext4 on a loop device over $gib GiB of memory, written now"
        wan_dest_ramdisk "$DST" "$gib" || { log "cannot make the ramdisk destination (--dest tmpfs does without)"; return 1; }
    fi
    local src=${WL_PATH[path-big]}
    read -r TMPFS_DIRECT_BPS TMPFS_BUFFERED_BPS <<<"$(wan_dest_ceiling "$RUNTMP" "$WAN_BYTES" "$src")"
    DEST_DIRECT_BPS=$TMPFS_DIRECT_BPS DEST_BUFFERED_BPS=$TMPFS_BUFFERED_BPS
    [ "$DEST_KIND" = ramdisk ] && read -r DEST_DIRECT_BPS DEST_BUFFERED_BPS <<<"$(wan_dest_ceiling "$DST" "$WAN_BYTES" "$src")"
    log "destination $DEST_KIND writes a fresh $(human_bytes "$WAN_BYTES") at $(gbit "$DEST_DIRECT_BPS") Gbit/s with O_DIRECT, $(gbit "$DEST_BUFFERED_BPS") through the page cache (tmpfs: $(gbit "$TMPFS_DIRECT_BPS"), $(gbit "$TMPFS_BUFFERED_BPS"))"
}

gbit() { awk -v b="${1:-0}" 'BEGIN { printf "%.2f", b / 1e9 }'; }

# The two links' file: 4 GiB, made when that path first runs.
wan_data_two_links() {
    local bytes=$((4 << 30))
    WL_PATH[path-4g]=$DATA/path-4g/path.bin WL_KIND[path-4g]=file
    WL_DESC[path-4g]="1 x $(human_bytes $bytes) random, in tmpfs (/dev/shm), to $(dest_words) (two links)"
    [ -s "$DATA/.path-4g.stats" ] && return 0
    mkdir -p "$DATA/path-4g"
    log "generating $(human_bytes $bytes) for the two links"
    keystream "${WL_PATH[path-4g]}" "$bytes" 78 || { log "cannot generate the file"; return 1; }
    echo "1 $bytes" >"$DATA/.path-4g.stats"
}

# The forwarder's ceiling: iperf3 -P 4 through 1 ms of one-way delay, no rate limit.
wan_ceiling() {
    W_RTT=2 W_RATE_BPS=0 W_LOSS=0 W_LINKS=1 W_CEILING_BPS=""
    wan_up 1 none 0 1 "$MTU" || { note "the forwarder did not start"; exit 1; }
    local c0 c1 res secs=$((QUICK ? 3 : 5))
    c0=$(wan_cpu_s)
    res=$(wan_iperf "$WAN_SUBNET.1.2" 4 "$secs")
    c1=$(wan_cpu_s)
    W_CEILING_BPS=${res%% *}
    CEILING_CPU=$(fsub "$c1" "$c0")
    row section=ceiling path=forwarder-2ms workload=- tool=iperf3 variant="4 stream(s)" rep=1 \
        status="$([ -n "$W_CEILING_BPS" ] && echo ok || echo FAILED)" flags="iperf3 -P 4 -t $secs" seconds="$secs" \
        throughput_Bps="$(awk -v b="${W_CEILING_BPS:-0}" 'BEGIN { printf "%.0f", b / 8 }')" \
        note="sluice-delayline, one-way delay 1 ms, no rate limit; forwarder CPU ${CEILING_CPU} s"
    log "ceiling  forwarder (1 ms one-way, no limit): $(awk -v b="${W_CEILING_BPS:-0}" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }'), forwarder CPU $CEILING_CPU s"
    # the fastest rate at 50 ms: what iperf3 -P 8 reaches through 25 ms one-way, no limit
    wan_up 25 none 0 1 "$MTU" || exit 1
    W_RTT=50
    res=$(wan_iperf "$WAN_SUBNET.1.2" 8 "$secs")
    CEILING50_BPS=${res%% *}
    row section=ceiling path=forwarder-50ms workload=- tool=iperf3 variant="8 stream(s)" rep=1 \
        status="$([ -n "$CEILING50_BPS" ] && echo ok || echo FAILED)" flags="iperf3 -P 8 -t $secs" seconds="$secs" \
        throughput_Bps="$(awk -v b="${CEILING50_BPS:-0}" 'BEGIN { printf "%.0f", b / 8 }')" \
        note="sluice-delayline, one-way delay 25 ms, no rate limit"
    # 80 % of it, in steps of 0.5 Gbit/s, at least 1 Gbit/s
    FAST_MBIT=$(awk -v b="${CEILING50_BPS:-0}" 'BEGIN { m = int(b * 0.8 / 5e8) * 500; print (m < 1000) ? 1000 : m }')
    log "ceiling  forwarder at 50 ms (iperf3 -P 8, no limit): $(awk -v b="${CEILING50_BPS:-0}" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }'); fastest path: ${FAST_MBIT} Mbit/s"
}

# NAME:ONE_WAY_MS:RATE:LOSS:LINKS
wan_define_paths() {
    local fast="max-50ms:25:${FAST_MBIT}mbit:0:1"
    if [ "$QUICK" = 1 ]; then
        WAN_PATHS="1g-10ms:5:1gbit:0:1 1g-50ms:25:1gbit:0:1 1g-100ms:50:1gbit:0:1 1g-50ms-loss0.1:25:1gbit:0.001:1 2x1g-50ms:25:1gbit:0:2"
        IPERF_SET="1 4" IPERF_SECS=4
    else
        WAN_PATHS="1g-10ms:5:1gbit:0:1 1g-50ms:25:1gbit:0:1 1g-100ms:50:1gbit:0:1 $fast 1g-50ms-loss0.01:25:1gbit:0.0001:1 1g-50ms-loss0.1:25:1gbit:0.001:1 2x1g-50ms:25:1gbit:0:2"
        IPERF_SET="1 2 3 4 5 6 7 8" IPERF_SECS=3
    fi
}

wan_run_path() {
    local name delay rate loss links
    IFS=: read -r name delay rate loss links <<<"$1"
    W_RTT=$((2 * delay)) W_LOSS=$loss W_LINKS=$links W_RATE_BPS=$(wan_rate_bps "$rate")
    if ! wan_up "$delay" "$rate" "$loss" "$links" "$MTU"; then
        note "path $name could not be set up"
        return
    fi
    log "path $name: $WAN_READY"
    PATH_NAME=$name LINKS=$links RATE=$rate
    CLI_X="ip netns exec $WAN_NS_A" SRV_X="ip netns exec $WAN_NS_B"
    CLI_HOST=$WAN_SUBNET.1.1 SRV_HOST=$WAN_SUBNET.1.2 SRV_HOST2="" CLI_NICS="dla1" SRV_NICS="dlb1"
    if [ "$links" = 2 ]; then
        SRV_HOST2=$WAN_SUBNET.2.2 CLI_NICS="dla1 dla2" SRV_NICS="dlb1 dlb2"
    fi
    # Two links are filled only once start-up is paid: on the full run they move a file
    # four times as large (the issue asks that both be filled, a steady state).
    WL=path-big
    if [ "$links" = 2 ] && [ "$QUICK" = 0 ]; then
        wan_data_two_links || return
        WL=path-4g
    fi
    local s bytes
    read -r _ bytes <<<"$(wl_stats "$WL")"
    for s in $IPERF_SET; do IPERF_BYTES=$bytes run_iperf "$s" "$IPERF_SECS"; done
    wan_interleave
    wan_down
    echo "$name $WAN_STATS" >>"$OUT/logs/delayline-stats.log"
}

# Every tool on the file, run by run: sluice and GridFTP REPS times (GridFTP twice: with
# this host's congestion control, and with Debian's default, cubic, which is what a
# stock DTN gives it: unlike sluice it does not choose one per socket), rsync and scp in
# the first PEER_REPS rounds; the order reversed every other round (as run_interleaved).
wan_interleave() {
    local r t tools order
    for ((r = 1; r <= REPS; r++)); do
        tools=(sluice gridftp gridftp-cubic)
        [ -n "$SLUICE_BASE" ] && tools=(sluice sluice-base gridftp gridftp-cubic)
        ((r <= PEER_REPS)) && tools+=(rsyncd scp)
        if [ -n "$TOOLS_ONLY" ]; then
            local kept=() k
            for k in "${tools[@]}"; do [[ $TOOLS_ONLY == *",$k,"* || $k == sluice-base ]] && kept+=("$k"); done
            tools=("${kept[@]}")
        fi
        order=("${tools[@]}")
        ((r % 2)) || mapfile -t order < <(printf '%s\n' "${tools[@]}" | tac)
        for t in "${order[@]}"; do
            if [ "$t" = gridftp-cubic ]; then
                wan_congestion cubic || { log "cubic is not offered here: no GridFTP row with it"; continue; }
                REP_FROM=$r run_transfer wan "$WL" gridftp 1 host-cubic
                wan_congestion "$HOST_CC"
            else
                REP_FROM=$r run_transfer wan "$WL" "$t" 1
            fi
        done
    done
}

# wan_congestion NAME: the default congestion control of both namespaces (what a tool
# that does not choose one per socket gets). A namespace may only pick one the host
# allows (net.ipv4.tcp_allowed_congestion_control): NAME is added to that list for the
# run, and the list is put back when the run ends.
wan_congestion() {
    local ns
    for ns in "$WAN_NS_A" "$WAN_NS_B"; do
        ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$1" 2>/dev/null && continue
        [ -n "${HOST_ALLOWED_CC-}" ] || HOST_ALLOWED_CC=$(sysctl -n net.ipv4.tcp_allowed_congestion_control)
        sysctl -qw net.ipv4.tcp_allowed_congestion_control="$(sysctl -n net.ipv4.tcp_allowed_congestion_control) $1" &&
            ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$1" || return 1
        log "the host now allows $1 (was: $HOST_ALLOWED_CC; put back at the end)"
    done
}

# Per-link rate in bit/s from the delayline's notation (none -> 0).
wan_rate_bps() {
    case $1 in
        none) echo 0 ;;
        *gbit) awk -v v="${1%gbit}" 'BEGIN { printf "%.0f", v * 1e9 }' ;;
        *mbit) awk -v v="${1%mbit}" 'BEGIN { printf "%.0f", v * 1e6 }' ;;
        *) echo "$1" ;;
    esac
}

# Link bytes: the TUN devices' counters on side A (what the client sent on each link).
link_tx_bytes() {
    local a b
    a=$(ip netns exec "$WAN_NS_A" cat /sys/class/net/dla1/statistics/tx_bytes 2>/dev/null || echo 0)
    b=$(ip netns exec "$WAN_NS_A" cat /sys/class/net/dla2/statistics/tx_bytes 2>/dev/null || echo 0)
    echo "$a $b"
}


wan_meta() {
    echo "date=$(date -Is)"
    echo "host=$HOST"
    echo "mode=wan-$([ "$QUICK" = 1 ] && echo quick || echo full)"
    echo "reps=$REPS"
    echo "peer_reps=$PEER_REPS"
    echo "kernel=$(uname -r)"
    echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    echo "cpus=$(nproc)"
    echo "memory=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
    echo "load_start=$LOAD_START"
    echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
    echo "sluice=$SLUICE_VERSION"
    echo "git=$GIT_REV"
    [ -n "$SLUICE_BASE_SRC" ] && echo "sluice_base=$SLUICE_BASE_SRC" && echo "sluice_base_interleaved=yes"
    echo "sluice_flags=(defaults)"
    echo "peer_streams=$PEER_STREAMS"
    echo "mtu=$MTU"
    echo "congestion_control=$HOST_CC"
    echo "gridftp_variants=host ($HOST_CC), host-cubic"
    echo "iperf_amount=the file's bytes (-n), timed from the command's start to its end like every tool (its own data-phase figure in each row's note)"
    echo "tcp_rmem=$(ip netns exec "$WAN_NS_A" sysctl -n net.ipv4.tcp_rmem | tr '\t' ' ')"
    echo "tcp_wmem=$(ip netns exec "$WAN_NS_A" sysctl -n net.ipv4.tcp_wmem | tr '\t' ' ')"
    echo "forwarder_ceiling_bps=$W_CEILING_BPS"
    echo "tools=$(t=${TOOLS_ONLY#,}; echo "${t%,}" | sed "s/^$/all/")"
    echo "dest=$DEST_KIND"
    echo "dest_description=$(dest_words)"
    echo "dest_direct_bps=$DEST_DIRECT_BPS"
    echo "dest_buffered_bps=$DEST_BUFFERED_BPS"
    echo "tmpfs_direct_bps=$TMPFS_DIRECT_BPS"
    echo "tmpfs_buffered_bps=$TMPFS_BUFFERED_BPS"
    echo "forwarder_ceiling_cpu_s=$CEILING_CPU"
    echo "forwarder_ceiling_50ms_bps=$CEILING50_BPS"
    echo "fast_path_mbit=$FAST_MBIT"
    echo "iperf_streams=$IPERF_SET"
    echo "paths=$WAN_PATHS"
    echo "seconds_total=$(fsub "$T_END" "$T_START")"
}

main "$@"
exit $?
