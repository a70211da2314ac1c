# shellcheck shell=bash
# Shared helpers of the benchmark driver: logging, CSV rows, timing, caches, ports,
# process-tree accounting. Sourced by bench/run.sh; every function is side-effect free
# outside $WORK, $OUT and the processes it starts.

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
warn() { printf '[%s] WARNING: %s\n' "$(date +%H:%M:%S)" "$*" >&2; echo "$*" >>"$OUT/notes.txt"; }
note() { echo "$*" >>"$OUT/notes.txt"; log "note: $*"; }
now() { date +%s.%N; }
# fsub A B -> A-B with 3 decimals
fsub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a - b }'; }
is_root() { [ "$(id -u)" = 0 ]; }

# The CSV every measurement lands in (one row per timed run or per refused case).
CSV_COLUMNS="section,path,workload,tool,variant,flags,rep,status,seconds,bytes,files,throughput_Bps,cpu_client_s,cpu_server_s,rss_client_kib,rss_server_kib,wire_bytes,link1_bytes,link2_bytes,note"

csv_field() {
    local v=${1-}
    v=${v//$'\n'/ }
    case $v in
        *[,\"]*) printf '"%s"' "${v//\"/\"\"}" ;;
        *) printf '%s' "$v" ;;
    esac
}

# row KEY=VALUE... : appends one row to $OUT/raw.csv in $CSV_COLUMNS order.
row() {
    local -A r=()
    local kv
    for kv in "$@"; do r[${kv%%=*}]=${kv#*=}; done
    local IFS=, first=1 col line=""
    for col in $CSV_COLUMNS; do
        if [ $first = 1 ]; then first=0; else line+=","; fi
        line+=$(csv_field "${r[$col]-}")
    done
    echo "$line" >>"$OUT/raw.csv"
}

# Flush dirty pages and drop the page cache so that every timed run reads its source
# from the disk (root only; otherwise noted once).
drop_caches() {
    sync
    if is_root && [ -w /proc/sys/vm/drop_caches ]; then
        echo 3 >/proc/sys/vm/drop_caches
    elif [ -z "${_DROP_NOTED-}" ]; then
        _DROP_NOTED=1
        note "not root: page cache NOT dropped between runs (sources may be read from memory)"
    fi
}

# A TCP port nobody listens on (loopback); inside our namespaces any port is free.
free_port() {
    python3 - <<'EOF'
import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
EOF
}

# wait_listen NSEXEC PORT [SECONDS]: true once something listens on PORT (checked with ss,
# never by connecting: one-shot servers such as `nc -l` would take the probe).
wait_listen() {
    local nsx=$1 port=$2 limit=${3:-15} i
    for ((i = 0; i < limit * 20; i++)); do
        if $nsx ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then return 0; fi
        sleep 0.05
    done
    return 1
}

# GNU time's last line "%e %U %S %M" -> variables (elapsed, user+sys, maxrss KiB).
read_time_file() {
    local f=$1 line
    T_ELAPSED="" T_CPU="" T_RSS=""
    [ -s "$f" ] || return 1
    line=$(grep -E '^[0-9.]+ [0-9.]+ [0-9.]+ [0-9]+$' "$f" | tail -1)
    [ -n "$line" ] || return 1
    # shellcheck disable=SC2086
    set -- $line
    T_ELAPSED=$1
    T_CPU=$(awk -v u="$2" -v s="$3" 'BEGIN { printf "%.2f", u + s }')
    T_RSS=$4
}

TIME_FMT="%e %U %S %M"

# Background server bookkeeping: start_server NAME NSEXEC CMD... runs CMD (inside the
# namespace NSEXEC, e.g. "ip netns exec X", which forks) under GNU time, so that its CPU
# seconds and peak RSS, children included, are known when it stops.
declare -A SRV_PIDS=()
start_server() {
    local name=$1 nsx=$2
    shift 2
    local tf="$RUNTMP/srv-$name.time"
    rm -f "$tf"
    # shellcheck disable=SC2086
    /usr/bin/time -o "$tf" -f "$TIME_FMT" $nsx "$@" >"$RUNTMP/srv-$name.out" 2>"$RUNTMP/srv-$name.err" &
    SRV_PIDS[$name]=$!
}

# descendants PID: every process below PID, parents before children
descendants() {
    local c
    for c in $(pgrep -P "$1" 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}

# stop_server NAME: TERM the server's processes (not the `ip netns exec` and time
# wrappers, which must outlive it to collect its usage), then KILL what is left; sets
# S_CPU and S_RSS from GNU time.
stop_server() {
    local name=$1 pid=${SRV_PIDS[$1]-} p i
    S_CPU="" S_RSS=""
    [ -n "$pid" ] || return 0
    for p in $(descendants "$pid"); do
        case $(cat "/proc/$p/comm" 2>/dev/null) in
            ip | time) ;;
            *) kill -TERM "$p" 2>/dev/null ;;
        esac
    done
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.05
    done
    if kill -0 "$pid" 2>/dev/null; then
        for p in $(descendants "$pid"); do kill -KILL "$p" 2>/dev/null; done
    fi
    wait "$pid" 2>/dev/null
    unset "SRV_PIDS[$name]"
    if read_time_file "$RUNTMP/srv-$name.time"; then
        S_CPU=$T_CPU S_RSS=$T_RSS
    fi
}

stop_all_servers() {
    local n
    for n in "${!SRV_PIDS[@]}"; do stop_server "$n"; done
}

server_alive() { kill -0 "${SRV_PIDS[$1]-0}" 2>/dev/null; }

# median of numbers on stdin
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print ""; else if (NR % 2) print a[(NR + 1) / 2]; else printf "%.3f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

human_bytes() { numfmt --to=iec-i --suffix=B "$1" 2>/dev/null || echo "$1"; }

# Destinations live on a scratch ext4 of their own: a sparse image on the same disk,
# loop-mounted with O_DIRECT (no double caching) and without `discard`. The root file
# system here is mounted with online discard, which makes deleting a tree of 80k files
# take minutes; on the scratch file system it takes a second. Falls back to $WORK/dst.
# noinit_itable: no background zeroing of inode tables while we measure.
DST_IMG="" DST_LOOP="" DST_MNT="" DST_MOUNT_OPTS="nodiscard,noatime,noinit_itable" DST_INODES=""
scratch_mount() { # SIZE_GIB INODES
    DST_INODES=$2
    mkdir -p "$DST"
    is_root && command -v losetup >/dev/null && command -v mkfs.ext4 >/dev/null || {
        note "destinations on $(stat -f -c %T "$DST") under $WORK (no scratch file system: not root)"
        return 0
    }
    DST_IMG=$WORK/dst.img
    rm -f "$DST_IMG"
    truncate -s "$1G" "$DST_IMG" &&
        mkfs.ext4 -q -F -N "$2" -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$DST_IMG" &&
        DST_LOOP=$(losetup --find --show --direct-io=on "$DST_IMG") &&
        mount -o "$DST_MOUNT_OPTS" "$DST_LOOP" "$DST" || {
        note "scratch file system could not be made: destinations directly under $WORK"
        [ -n "$DST_LOOP" ] && losetup -d "$DST_LOOP"
        rm -f "$DST_IMG"
        DST_IMG="" DST_LOOP=""
        return 0
    }
    DST_MNT=$DST
    DST_FS="ext4 on a loop device (O_DIRECT) backed by a sparse file on $(df --output=source "$WORK" | tail -1)"
}

# dst_clear DIR FILES: empties a destination; a big tree is cleared by making the scratch
# file system anew (1-2 s instead of a minute of unlinks).
dst_clear() {
    if [ -n "$DST_LOOP" ] && [ "$2" -gt 5000 ] && [ "$(dirname "$1")" = "$DST_MNT" ]; then
        if umount "$DST_MNT" && mkfs.ext4 -q -F -N "$DST_INODES" -E nodiscard,lazy_itable_init=1,lazy_journal_init=1 "$DST_LOOP" &&
            mount -o "$DST_MOUNT_OPTS" "$DST_LOOP" "$DST_MNT"; then
            return 0
        fi
        mountpoint -q "$DST_MNT" || mount -o "$DST_MOUNT_OPTS" "$DST_LOOP" "$DST_MNT"
    fi
    rm -rf "$1"
}

scratch_umount() {
    [ -n "$DST_LOOP" ] || return 0
    # A server that is still exiting may hold it for a moment: retry, then detach lazily.
    local i
    for i in 1 2 3 4 5; do
        umount "$DST_MNT" 2>/dev/null && break
        sleep 1
    done
    mountpoint -q "$DST_MNT" && umount -l "$DST_MNT" 2>/dev/null
    losetup -d "$DST_LOOP" 2>/dev/null
    rm -f "$DST_IMG"
    DST_LOOP="" DST_IMG=""
}
