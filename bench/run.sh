#!/usr/bin/env bash
# sluice's benchmark suite: one command that installs the peers, runs every case, verifies
# every destination byte for byte and writes a dated results folder.
#
#   bench/run.sh [--quick] [--out DIR] [options]
#
#   --quick            tiny data, one run per case, peers that cannot be installed are
#                      skipped with a note (under 5 minutes; CI keeps the harness alive)
#   --out DIR          results folder (default bench/runs/<date>-<host>[-quick])
#   --work DIR         scratch: generated data (kept, in data/ and data-quick/),
#                      destinations, servers' files (default bench/work, ignored by git)
#   --reps N           timed runs per case, median reported (default 3; quick 1)
#   --peer-reps N      runs per case for the slower peers (default 1; quick 1): sluice,
#                      GridFTP and the local ceilings always get --reps
#   --million          also the 1,000,000-file tree (full mode only; ~4 min more)
#   --no-paths         skip the namespace paths      --no-sweep   skip the placement sweep
#   --no-install       use whatever is installed
#   --wait-load X      wait (up to 20 min, polling every 30 s) for a 1-minute load below X
#   --only REGEX       only cases whose "section/path/workload/tool/variant" matches
#   --dest image|plain where destinations live: `image` (default), a scratch ext4 on a
#                      loop device (O_DIRECT, made anew for big trees); `plain`, plain
#                      directories under --work on the source's own file system (what
#                      users copy into: the file system's journal and allocator decide)
#   --sluice BIN       the sluice binary (default target/release/sluice, built if missing)
#   --sluice-base BIN  a second sluice binary (an earlier build) run as tool `sluice-base`
#                      beside sluice in every loopback, path and million case, the two
#                      interleaved run by run, so a change is measured against its
#                      baseline in the same run
#
# Needs root for namespaces, dropping caches and installing packages; without root it
# runs what it can on loopback and says what it skipped.
set -uo pipefail

# Everything is inside main, so that bash has read the whole script before it runs any of
# it (editing this file during a run cannot change the run).
main() {

    BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
    REPO=$(dirname "$BENCH")
    QUICK=0 OUT="" WORK="$BENCH/work" REPS="" PEER_REPS="" MILLION=0 DO_PATHS=1 DO_SWEEP=1
    NO_INSTALL=0 WAIT_LOAD="" ONLY="" SLUICE_SRC="$REPO/target/release/sluice" SLUICE_BASE_SRC="" DEST_KIND=image
    while [ $# -gt 0 ]; do
        case $1 in
            --quick) QUICK=1 ;;
            --out) OUT=$2; shift ;;
            --work) WORK=$2; shift ;;
            --reps) REPS=$2; shift ;;
            --peer-reps) PEER_REPS=$2; shift ;;
            --million) MILLION=1 ;;
            --no-paths) DO_PATHS=0 ;;
            --no-sweep) DO_SWEEP=0 ;;
            --no-install) NO_INSTALL=1 ;;
            --wait-load) WAIT_LOAD=$2; shift ;;
            --only) ONLY=$2; shift ;;
            --dest) DEST_KIND=$2; shift ;;
            --sluice) SLUICE_SRC=$2; shift ;;
            --sluice-base) SLUICE_BASE_SRC=$2; shift ;;
            -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
            *) echo "run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
        esac
        shift
    done
    case $DEST_KIND in image | plain) ;; *) echo "run.sh: --dest $DEST_KIND: expected image or plain" >&2; exit 2 ;; esac
    [ "$QUICK" = 1 ] && MILLION=0
    : "${REPS:=$((QUICK ? 1 : 3))}" "${PEER_REPS:=1}"

    # sluice's flags in every case outside the sweep (the defaults, written out).
    SLUICE_STREAMS=${SLUICE_STREAMS:-2} SLUICE_IO=${SLUICE_IO:-2} SLUICE_BUFFER=${SLUICE_BUFFER:-auto}
    SLUICE_CLI_FLAGS="--streams $SLUICE_STREAMS --io-threads $SLUICE_IO --buffer-mem $SLUICE_BUFFER"
    SLUICE_SRV_FLAGS="--streams $SLUICE_STREAMS --io-threads $SLUICE_IO --buffer-mem $SLUICE_BUFFER"
    SLUICE_CLI_EXTRA="" SLUICE_SRV_EXTRA=""
    NCPU=$(nproc)
    SWEEP_IO=$(seq 1 "$NCPU" | tr '\n' ' ')
    [ "$NCPU" -lt 4 ] && SWEEP_IO="$SWEEP_IO 4"  # and one oversubscribed point
    TIMEOUT_MAX=$((QUICK ? 120 : 900))
    # What runs: quick mode keeps one case of each kind (every peer on a file, the
    # kernel-like tree and the plain small-file tree, one plain and one rate-limited
    # two-link path, the sweep on one data set).
    if [ "$QUICK" = 1 ]; then
        PEER_WORKLOADS="big tree small" PATHS="veth1 veth2-tbf1g" SWEEP_WLS="sweep-big"
    else
        PEER_WORKLOADS="big many tree small tree-tar tomo" SWEEP_WLS="sweep-big sweep-small"
        PATHS="veth1 veth2 veth1-tbf5g veth2-tbf5g veth1-tbf1g veth2-tbf1g"
    fi

    # shellcheck source=lib/common.sh
    . "$BENCH/lib/common.sh"
    # shellcheck source=lib/netns.sh
    . "$BENCH/lib/netns.sh"
    # shellcheck source=lib/workloads.sh
    . "$BENCH/lib/workloads.sh"
    # shellcheck source=lib/peers.sh
    . "$BENCH/lib/peers.sh"
    # shellcheck source=lib/cases.sh
    . "$BENCH/lib/cases.sh"

    HOST=$(hostname -s 2>/dev/null || hostname)
    if [ -z "$OUT" ]; then
        OUT="$BENCH/runs/$(date +%F)-$HOST$([ "$QUICK" = 1 ] && echo -quick)"
        [ -e "$OUT/raw.csv" ] && OUT="$OUT-$(date +%H%M)"
    fi
    mkdir -p "$OUT/logs" "$WORK" || exit 1
    OUT=$(cd "$OUT" && pwd) WORK=$(cd "$WORK" && pwd)
    DATA=$WORK/data$([ "$QUICK" = 1 ] && echo -quick) DST=$WORK/dst RUNTMP=$WORK/tmp/$$ SHM=""
    DST_FS="$(stat -f -c %T "$WORK") under $WORK"
    mkdir -p "$DATA" "$RUNTMP"
    rm -f "$OUT/raw.csv" "$OUT/notes.txt" "$OUT/sluice-runs.jsonl"
    echo "$CSV_COLUMNS" >"$OUT/raw.csv"
    exec 3>&2 2> >(tee -a "$OUT/logs/run.log" >&3)

    cleanup() {
        trap - EXIT INT TERM
        stop_all_servers
        netns_destroy
        [ -n "$SHM" ] && rm -rf "$SHM"
        scratch_umount
        rm -rf "$DST" "$RUNTMP"
    }
    trap cleanup EXIT
    trap 'log "interrupted"; exit 130' INT TERM

    T_START=$(now)
    log "results: $OUT (quick=$QUICK reps=$REPS peer-reps=$PEER_REPS million=$MILLION)"

    install_peers
    PY=python3
    /usr/bin/python3 -c "import matplotlib" 2>/dev/null && PY=/usr/bin/python3

    # sluice: a private copy, so that a rebuild during the run cannot change the binary
    if [ ! -x "$SLUICE_SRC" ]; then
        log "building sluice (cargo build --release -p sluice)"
        (cd "$REPO" && cargo build --release -q -p sluice) || { log "cannot build sluice"; exit 1; }
    fi
    mkdir -p "$RUNTMP/bin" && cp "$SLUICE_SRC" "$RUNTMP/bin/sluice" && SLUICE=$RUNTMP/bin/sluice
    SLUICE_VERSION=$("$SLUICE" --version 2>/dev/null)
    BASE_TOOL="" SLUICE_BASE=""
    if [ -n "$SLUICE_BASE_SRC" ]; then
        [ -x "$SLUICE_BASE_SRC" ] || { log "--sluice-base $SLUICE_BASE_SRC: not an executable"; exit 2; }
        cp "$SLUICE_BASE_SRC" "$RUNTMP/bin/sluice-base" && SLUICE_BASE=$RUNTMP/bin/sluice-base BASE_TOOL=sluice-base
    fi
    # compression on the wire: `--compress CODEC` where this sluice has it, else threads only
    COMPRESS_FLAG=0
    "$SLUICE" cp --help 2>/dev/null | grep -q -- '--compress <CODEC>' && COMPRESS_FLAG=1
    BUFFERED_FLAG=0
    "$SLUICE" cp --help 2>/dev/null | grep -q -- '--buffered' && BUFFERED_FLAG=1
    GIT_REV=$(cd "$REPO" && git rev-parse --short HEAD 2>/dev/null)
    GIT_DIRTY=$(cd "$REPO" && git status --porcelain -- crates Cargo.lock 2>/dev/null | grep -c .)
    [ "$GIT_DIRTY" = 0 ] && GIT_DIRTY=""

    if [ -n "$WAIT_LOAD" ]; then
        for ((i = 0; i < 40; i++)); do
            awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v x="$WAIT_LOAD" 'BEGIN { exit !(l < x) }' && break
            log "waiting for load < $WAIT_LOAD (now $(cut -d' ' -f1-3 /proc/loadavg))"
            sleep 30
        done
    fi
    LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

    wl_define
    for w in $WORKLOADS path-big; do wl_prepare "$w" || note "workload $w could not be prepared"; done
    [ "$MILLION" = 1 ] && { wl_prepare million || { note "1,000,000-file tree could not be generated"; MILLION=0; }; }
    netem_probe
    if [ "$DEST_KIND" = image ]; then
        scratch_mount $((QUICK ? 2 : 16)) $((QUICK ? 100000 : 2200000))
    else
        mkdir -p "$DST"
        DST_FS="plain directories on the source's file system ($(stat -f -c %T "$WORK") on $(df --output=source "$WORK" | tail -1))"
        note "destinations: $DST_FS"
    fi
    [ "$(id -u)" = 0 ] || note "not root: namespace paths skipped"
    T_MEASURE=$(now)

    # ---- ceilings: memory, then the loopback network (namespaced loopback when root)
    local t_sec
    t_sec=$(now)
    run_memory_ceilings
    run_disk_ceilings
    path_setup lo
    IPERF_SECS=$((QUICK ? 2 : 5))
    run_iperf 1 "$IPERF_SECS"
    run_iperf "$PEER_STREAMS" "$IPERF_SECS"

    # ---- every tool on every workload over loopback (local cp and tar|tar: the ceilings)
    for w in $WORKLOADS; do
        [ -f "$DATA/.$w.ok" ] || continue
        for t in cp tar-tar; do run_transfer transfer "$w" "$t" "$REPS"; done
        run_interleaved transfer "$w" "$REPS" sluice $BASE_TOOL
        case $w in
            big | many)  # direct I/O (the default) against the page cache
                run_sluice_variant transfer "$w" buffered
                ;;
            tomo | tree-tar)  # compressible: sluice with compression on the wire as well
                run_sluice_variant transfer "$w" lz4
                [ "$w" = tomo ] && run_sluice_variant transfer "$w" auto
                ;;
        esac
        case " $PEER_WORKLOADS " in *" $w "*) ;; *) continue ;; esac
        run_transfer transfer "$w" gridftp "$REPS"
        for t in gridftp-3pt xrdcp rsyncd rsync-ssh scp tar-nc; do run_transfer transfer "$w" "$t" "$PEER_REPS"; done
    done

    SEC_LOOPBACK=$(fsub "$(now)" "$t_sec") t_sec=$(now)
    # ---- paths: namespaces joined by one or two veth pairs, with and without tbf
    if [ "$DO_PATHS" = 1 ] && netns_available; then
        for p in $PATHS; do
            if ! path_setup "$p"; then note "path $p could not be set up"; continue; fi
            run_iperf 1 "$IPERF_SECS"
            run_iperf "$PEER_STREAMS" "$IPERF_SECS"
            run_interleaved path path-big "$REPS" sluice $BASE_TOOL
            run_transfer path path-big gridftp "$REPS"
            # small files on two links: does sluice spread them?
            [ "$p" = veth2 ] && run_transfer path tree sluice "$REPS"
            if [ "$p" = veth1-tbf1g ]; then  # where compression should pay
                run_transfer path tomo sluice "$REPS"
                run_sluice_variant path tomo lz4
                run_sluice_variant path tomo auto
            fi
        done
    fi

    SEC_PATHS=$(fsub "$(now)" "$t_sec") t_sec=$(now)
    # ---- placement sweep (seed 000 figure 1; seed 001 configurations A-H), in /dev/shm
    if [ "$DO_SWEEP" = 1 ]; then
        if sweep_prepare; then run_sweep "$REPS"; else note "sweep data could not be made in /dev/shm"; fi
        rm -rf "$SHM"
    fi

    SEC_SWEEP=$(fsub "$(now)" "$t_sec") t_sec=$(now)
    # ---- the 1,000,000-file tree: time and, above all, the peak RSS of daemon and client
    if [ "$MILLION" = 1 ]; then
        path_setup lo
        run_transfer million million sluice 1
        [ -n "$BASE_TOOL" ] && run_transfer million million sluice-base 1
        run_transfer million million tar-tar 1
    else
        note "1,000,000-file tree not run ($([ "$QUICK" = 1 ] && echo "quick mode" || echo "pass --million; it adds about 4 minutes"))"
    fi

    SEC_MILLION=$(fsub "$(now)" "$t_sec")
    # ---- the folder: meta, workloads, report
    T_END=$(now)
    {
        echo "date=$(date -Is)"
        echo "host=$HOST"
        echo "mode=$([ "$QUICK" = 1 ] && echo quick || echo full)"
        echo "reps=$REPS"
        echo "peer_reps=$PEER_REPS"
        echo "kernel=$(uname -r)"
        echo "cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
        echo "cpus=$NCPU"
        echo "numa_nodes=$(ls -d /sys/devices/system/node/node[0-9]* 2>/dev/null | wc -l)"
        echo "memory=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)"
        echo "source_fs=$(findmnt -no FSTYPE -T "$DATA" 2>/dev/null || stat -f -c %T "$DATA") on $(df --output=source "$DATA" | tail -1) ($(findmnt -no OPTIONS -T "$DATA" 2>/dev/null))"
        echo "destination_fs=$DST_FS"
        echo "load_start=$LOAD_START"
        echo "load_end=$(cut -d' ' -f1-3 /proc/loadavg)"
        echo "sluice=$SLUICE_VERSION"
        [ -n "$SLUICE_BASE_SRC" ] && echo "sluice_base=$SLUICE_BASE_SRC" && echo "sluice_base_interleaved=yes"
        echo "git=$GIT_REV${GIT_DIRTY:+ ($GIT_DIRTY uncommitted changes under crates/)}"
        echo "sluice_flags=$SLUICE_CLI_FLAGS"
        echo "peer_streams=$PEER_STREAMS"
        echo "netem=$NETEM"
        echo "drop_caches=$(is_root && echo yes || echo no)"
        echo "seconds_total=$(fsub "$T_END" "$T_START")"
        echo "seconds_setup=$(fsub "$T_MEASURE" "$T_START")"
        echo "seconds_loopback=$SEC_LOOPBACK"
        echo "seconds_paths=$SEC_PATHS"
        echo "seconds_sweep=$SEC_SWEEP"
        echo "seconds_million=$SEC_MILLION"
    } >"$OUT/meta.env"
    {
        echo "workload,kind,files,bytes,description"
        for w in $WORKLOADS path-big million sweep-big sweep-small sweep-tomo; do
            [ -s "$DATA/.$w.stats" ] && [ -n "${WL_KIND[$w]-}" ] || continue
            read -r f b <"$DATA/.$w.stats"
            echo "$w,${WL_KIND[$w]},$f,$b,$(csv_field "${WL_DESC[$w]}")"
        done
    } >"$OUT/workloads.csv"
    "$PY" "$BENCH/report.py" "$OUT" || log "report.py failed"
    log "done in $(fsub "$T_END" "$T_START") s: $OUT/results.md"
}

main "$@"
exit $?
