# shellcheck shell=bash
# The measurements: one timed, verified transfer (run_transfer), the ceilings, the
# placement sweep and the 1,000,000-file RSS check. Every run lands as a row of raw.csv.

# Per-run time limit: generous for the slowest peer, bounded for the suite.
_timeout_for() { # BYTES FILES
    local t=$((60 + $1 / 30000000 + $2 / 400))
    [ $t -gt "$TIMEOUT_MAX" ] && t=$TIMEOUT_MAX
    echo "$t"
}

# Keeps a sluice client's JSON summary (minus the per-file report) for the results.
_keep_sluice_json() { # CASE-ID-JSON
    [ -s "$RUNTMP/sluice.json" ] || return 0
    "$PY" - "$RUNTMP/sluice.json" "$1" "$RUNTMP/srv-sluice.out" >>"$OUT/sluice-runs.jsonl" <<'EOF' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
d.pop("file_report", None)
d.get("plan", {}).pop("explain", None)  # kept small: the plan itself and its notes stay
case = json.loads(sys.argv[2])
try:  # the daemon's buffer pools, from its `serve --json` line (the RSS target's cap)
    srv = json.loads(open(sys.argv[3]).readline())
    case["daemon_buffer_bytes"] = sum(c["buffer_bytes"] for c in srv["plan"]["channels"])
except (OSError, ValueError, KeyError, TypeError):
    pass
print(json.dumps({"case": case, "summary": d}, separators=(",", ":")))
EOF
}

# What sluice's JSON says it did: wire bytes and its channels/NICs, for the note.
_sluice_facts() {
    [ -s "$RUNTMP/sluice.json" ] || return 0
    "$PY" - "$RUNTMP/sluice.json" <<'EOF' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
p = d.get("plan", {})
ch = p.get("channels", [])
nics = sorted({n for c in ch for n in c.get("nics", [])})
print(d.get("wire_bytes", ""), f"plan {p.get('policy')} ({p.get('requested_policy')}), {len(ch)} channel(s), nics [{' '.join(nics)}], pipeline {d.get('pipeline')}")
EOF
}

# run_transfer SECTION WORKLOAD TOOL REPS [VARIANT]
#   Times REPS pushes of WORKLOAD with TOOL over the current path (cp and tar-tar: local),
#   dropping caches before and ending with sync inside the timing; verifies every
#   destination; a tool whose output is wrong is FAILED and not repeated.
run_transfer() {
    local section=$1 wl=$2 tool=$3 reps=$4 variant=${5:-default}
    local src=${WL_PATH[$wl]} kind=${WL_KIND[$wl]} files bytes path=$PATH_NAME nsx=$CLI_X
    read -r files bytes <<<"$(wl_stats "$wl")"
    case " $TOOLS_LOCAL " in *" $tool "*) path=local nsx="" ;; esac
    if [ -n "$ONLY" ] && ! [[ "$section/$path/$wl/$tool/$variant" =~ $ONLY ]]; then return 0; fi
    local base=(section="$section" path="$path" workload="$wl" tool="$tool" variant="$variant" bytes="$bytes" files="$files")
    local why
    why=$(tool_missing "$tool")
    if [ -n "$why" ]; then
        row "${base[@]}" rep=1 status=SKIPPED note="$why"
        log "SKIPPED $section $path $wl $tool: $why"
        return 0
    fi
    local dst="$DST/$tool" rep tmo rc t0 t1 secs status note l0 l1 wire facts
    tmo=$(_timeout_for "$bytes" "$files")
    for ((rep = ${REP_FROM:-1}; rep < ${REP_FROM:-1} + reps; rep++)); do
        rm -f "$RUNTMP/sluice.json"
        local pstart=$EPOCHREALTIME
        if ! tool_dst "$tool" "$dst"; then
            row "${base[@]}" rep="$rep" status=FAILED note="cannot create $dst"
            return 1
        fi
        if ! tool_begin "$tool" "$src" "$kind" "$dst"; then
            tool_end "$tool"
            row "${base[@]}" rep="$rep" status=FAILED flags="$FLAGS" note="server: $TOOL_ERR"
            log "FAILED $section $path $wl $tool: $TOOL_ERR"
            return 1
        fi
        local p0=$EPOCHREALTIME p1 p2 p3 p4
        [ "${NO_DROP-}" = 1 ] && sync || drop_caches
        p1=$EPOCHREALTIME
        read -r l0 _ <<<"$(link_tx_bytes)"
        local l0b
        l0b=$(link_tx_bytes | cut -d' ' -f2)
        t0=$(now)
        # shellcheck disable=SC2086
        /usr/bin/time -o "$RUNTMP/cli.time" -f "$TIME_FMT" timeout "$tmo" $nsx \
            bash -c "$CMD; rc=\$?; sync; exit \$rc" >"$RUNTMP/cli.out" 2>"$RUNTMP/cli.err"
        rc=$?
        t1=$(now)
        local link1="" link2=""
        if [ "$path" != local ] && [ "$PATH_NAME" != lo ]; then
            read -r l1 l1b <<<"$(link_tx_bytes)"
            link1=$((l1 - l0)) link2=$((l1b - l0b))
        fi
        p2=$EPOCHREALTIME
        tool_end "$tool"
        p3=$EPOCHREALTIME
        read_time_file "$RUNTMP/cli.time" || { T_CPU="" T_RSS=""; }
        secs=$(fsub "$t1" "$t0")
        status=ok note="" wire=""
        if [ "$tool" = sluice ] || [ "$tool" = sluice-base ]; then
            facts=$(_sluice_facts)
            wire=${facts%% *} note=${facts#* }
            _keep_sluice_json "{\"tool\":\"$tool\",\"section\":\"$section\",\"path\":\"$path\",\"workload\":\"$wl\",\"variant\":\"$variant\",\"rep\":$rep,\"rc\":$rc}"
        fi
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            status=FAILED note="timed out after $tmo s; $note"
        elif [ $rc != 0 ]; then
            status=FAILED
            note="exit $rc: $(tail -c 300 "$RUNTMP/cli.err" | tr '\n' ' ') $(tail -c 200 "$RUNTMP/cli.out" | tr '\n' ' ')"
            if [ "$tool" = sluice ]; then
                note="$note; daemon: $(tail -c 300 "$RUNTMP/srv-sluice.err" | tr '\n' ' ')"
                cp "$RUNTMP/cli.err" "$OUT/logs/$section-$path-$wl-$tool-$variant-$rep.client.err" 2>/dev/null
                cp "$RUNTMP/srv-sluice.err" "$OUT/logs/$section-$path-$wl-$tool-$variant-$rep.daemon.err" 2>/dev/null
            fi
        fi
        p4=$EPOCHREALTIME
        if [ $status = ok ]; then
            local v
            v=$("$PY" "$BENCH/lib/verify.py" "$src" "$dst" 2>&1 | tail -1)
            case $v in
                ok*) ;;
                *) status=FAILED note="wrong output: ${v#FAILED: }${note:+; $note}" ;;
            esac
        fi
        row "${base[@]}" rep="$rep" status="$status" flags="$FLAGS" seconds="$secs" \
            throughput_Bps="$(awk -v b="$bytes" -v s="$secs" 'BEGIN { if (s > 0) printf "%.0f", b / s }')" \
            cpu_client_s="$T_CPU" cpu_server_s="$SRV_CPU" rss_client_kib="$T_RSS" rss_server_kib="$SRV_RSS" \
            wire_bytes="$wire" link1_bytes="$link1" link2_bytes="$link2" note="$note"
        log "$(printf '%-8s %-12s %-9s %-12s %-14s #%d %-6s %7.2fs %s' "$section" "$path" "$wl" "$tool" "$variant" "$rep" "$status" "$secs" "${note:0:150}")"
        local p5=$EPOCHREALTIME
        dst_clear "$dst" "$files"
        echo "phases: start $(fsub "$p0" "$pstart") drop $(fsub "$p1" "$p0") run $(fsub "$p2" "$p1") stop $(fsub "$p3" "$p2") verify $(fsub "$p5" "$p4") rm $(fsub "$EPOCHREALTIME" "$p5")" >>"$OUT/logs/phases.log"
        [ $status = ok ] || break
    done
}

# run_interleaved SECTION WORKLOAD REPS TOOL...: one run of each TOOL in turn, REPS
# rounds, the order reversed every other round, so that two builds of one tool (sluice,
# sluice-base) meet the same drift of a shared machine and neither always goes first;
# with one TOOL, as run_transfer.
run_interleaved() {
    local section=$1 wl=$2 reps=$3 r t order
    shift 3
    if [ $# = 1 ]; then run_transfer "$section" "$wl" "$1" "$reps"; return; fi
    for ((r = 1; r <= reps; r++)); do
        order=("$@")
        ((r % 2)) || order=($(printf '%s\n' "$@" | tac))
        for t in "${order[@]}"; do REP_FROM=$r run_transfer "$section" "$wl" "$t" 1; done
    done
}

# run_sluice_variant SECTION WORKLOAD lz4|auto|buffered: sluice with compression on the
# wire, or with large files through the page cache instead of O_DIRECT (the default).
run_sluice_variant() {
    local section=$1 wl=$2 v=$3
    if [ "$v" = buffered ]; then
        [ "$BUFFERED_FLAG" = 1 ] || return 0  # this sluice has no --buffered
        SLUICE_CLI_EXTRA="--buffered" SLUICE_SRV_EXTRA=""
    elif [ "$COMPRESS_FLAG" = 1 ]; then
        SLUICE_CLI_EXTRA="--compress $v" SLUICE_SRV_EXTRA=""
    elif [ "$v" = lz4 ]; then
        SLUICE_CLI_EXTRA="--compress-threads 1" SLUICE_SRV_EXTRA="--decompress-threads 1"
    else
        return 0  # this sluice has no --compress auto
    fi
    run_transfer "$section" "$wl" sluice "$REPS" "$v"
    SLUICE_CLI_EXTRA="" SLUICE_SRV_EXTRA=""
}

# iperf3 over the current path: STREAMS streams (on each link when the path has two).
run_iperf() {
    local streams=$1 secs=$2 i pids=() total=0 port ports=() hosts=("$SRV_HOST") t0
    [ -n "$ONLY" ] && ! [[ "ceiling/$PATH_NAME/-/iperf3/$streams" =~ $ONLY ]] && return 0
    local why
    why=$(tool_missing iperf3)
    [ -n "$why" ] && { row section=ceiling path="$PATH_NAME" workload=- tool=iperf3 variant="$streams" status=SKIPPED note="$why"; return; }
    [ "$LINKS" = 2 ] && hosts+=("$SRV_HOST2")
    for i in "${!hosts[@]}"; do
        ports[i]=$(_port $((5201 + i)))
        start_server "iperf3-$i" "$SRV_X" iperf3 -s -1 -B "${hosts[$i]}" -p "${ports[i]}"
        wait_listen "$SRV_X" "${ports[i]}"
    done
    t0=$EPOCHREALTIME
    for i in "${!hosts[@]}"; do
        port=${ports[i]}
        # IPERF_BYTES: move that many bytes in all (shared by the links) instead of
        # running for SECS, so that the ceiling pays the same start-up as the file; it
        # is then timed like every tool, from the command's start to its end (iperf3's
        # own figure covers only its data phase: not its connections' set-up).
        local amount=(-t "$secs") tmo=$((secs + 20))
        [ -n "${IPERF_BYTES-}" ] && amount=(-n $((IPERF_BYTES / ${#hosts[@]}))) tmo=300
        # shellcheck disable=SC2086
        timeout "$tmo" $CLI_X iperf3 -c "${hosts[$i]}" -p "$port" -P "$streams" "${amount[@]}" -J >"$RUNTMP/iperf-$i.json" 2>&1 &
        pids+=($!)
    done
    for i in "${pids[@]}"; do wait "$i"; done
    local t1=$EPOCHREALTIME note="" ok=1 bps took own=0
    for i in "${!hosts[@]}"; do
        stop_server "iperf3-$i"
        read -r bps took < <("$PY" -c 'import json,sys; e=json.load(open(sys.argv[1]))["end"]["sum_received"]; print(e["bits_per_second"], e["seconds"])' "$RUNTMP/iperf-$i.json" 2>/dev/null)
        if [ -z "$bps" ]; then ok=0; note="$note $(head -c 200 "$RUNTMP/iperf-$i.json")"; continue; fi
        [ -n "${IPERF_BYTES-}" ] && secs=$took
        own=$(awk -v a="$own" -v b="$bps" 'BEGIN { printf "%.0f", a + b / 8 }')
        [ "${#hosts[@]}" = 2 ] && note="$note link$((i + 1)) $(awk -v b="$bps" 'BEGIN { printf "%.2f", b / 1e9 }') Gbit/s;"
    done
    total=$own
    if [ -n "${IPERF_BYTES-}" ] && [ $ok = 1 ]; then
        secs=$(fsub "$t1" "$t0")
        total=$(awk -v b="$IPERF_BYTES" -v s="$secs" 'BEGIN { printf "%.0f", b / s }')
        note="$note iperf3's own figure (its data phase): $(awk -v b="$own" 'BEGIN { printf "%.3f", b * 8 / 1e9 }') Gbit/s;"
    fi
    local variant="$streams stream(s)"
    [ "${#hosts[@]}" = 2 ] && variant="$streams stream(s) on each of 2 links"
    if [ $ok = 1 ]; then
        row section=ceiling path="$PATH_NAME" workload=- tool=iperf3 variant="$variant" rep=1 status=ok \
            flags="iperf3 -P $streams $(if [ -n "${IPERF_BYTES-}" ]; then echo "-n $IPERF_BYTES"; else echo "-t $secs"; fi)" \
            seconds="$secs" throughput_Bps="$total" note="$note"
        log "ceiling  $PATH_NAME iperf3 $variant: $(awk -v b="$total" 'BEGIN { printf "%.2f GB/s", b / 1e9 }')"
    else
        row section=ceiling path="$PATH_NAME" workload=- tool=iperf3 variant="$variant" rep=1 status=FAILED note="$note"
    fi
}

run_memory_ceilings() {
    [ -n "$ONLY" ] && ! [[ "ceiling/local/-/memcpy" =~ $ONLY ]] && return 0
    local out secs count=$((QUICK ? 2000 : 20000))
    out=$(dd if=/dev/zero of=/dev/null bs=1M count=$count 2>&1 | tail -1)
    secs=$(echo "$out" | awk -F', ' '{ print $(NF-1) }' | awk '{ print $1 }')
    row section=ceiling path=local workload=- tool=memcpy variant="dd zero->null" rep=1 status=ok \
        flags="dd if=/dev/zero of=/dev/null bs=1M count=$count" seconds="$secs" bytes=$((count << 20)) \
        throughput_Bps="$(awk -v b=$((count << 20)) -v s="$secs" 'BEGIN { printf "%.0f", b / s }')" \
        note="1 MiB buffer stays in cache: an upper bound, not DRAM bandwidth"
    local mib=$((QUICK ? 256 : 1024))
    out=$("$PY" "$BENCH/lib/gen.py" memcpy --mib $mib --reps 5 | cut -d' ' -f1)
    row section=ceiling path=local workload=- tool=memcpy variant="memmove ${mib} MiB" rep=1 status=ok \
        flags="python3 bytearray copy of ${mib} MiB, best of 5" bytes=$((mib << 20)) throughput_Bps="$out" \
        note="one core; DRAM to DRAM"
    log "ceiling  memcpy: dd $(awk -v b=$((count << 20)) -v s="$secs" 'BEGIN { printf "%.1f GB/s", b / s / 1e9 }'), memmove $(awk -v b="$out" 'BEGIN { printf "%.1f GB/s", b / 1e9 }')"
}

# The disk's read rate for the big workload's file, the way the tools read it: direct
# 4 MiB reads one at a time (`dd iflag=direct`) and N at once (N readers on N parts), and
# through the page cache with the kernel's readahead; caches dropped before each, median
# of REPS. What no tool reading this file can beat, whatever it does after the read.
run_disk_ceilings() {
    [ -n "$ONLY" ] && ! [[ "ceiling/local/big/dd" =~ $ONLY ]] && return 0
    local f=${WL_PATH[big]:-} bytes count v i r t0 secs list par=4 pids
    [ -f "$f" ] || return 0
    bytes=$(stat -c %s "$f")
    count=$((bytes >> 22))
    for v in "direct 1" "direct $par" "buffered 1"; do
        set -- $v
        list=""
        for ((r = 0; r < REPS; r++)); do
            drop_caches
            t0=$(now)
            pids=()
            for ((i = 0; i < $2; i++)); do
                dd if="$f" of=/dev/null bs=4M skip=$((i * count / $2)) count=$((count / $2)) \
                    $([ "$1" = direct ] && echo iflag=direct) status=none &
                pids+=($!)
            done
            # only the readers: a bare `wait` would also wait for the log's tee
            wait "${pids[@]}"
            secs=$(fsub "$(now)" "$t0")
            list="$list $secs"
        done
        secs=$(echo "$list" | tr ' ' '\n' | grep . | median)
        row section=ceiling path=local workload=big tool=dd variant="$1 read, $2 at once" rep=1 status=ok \
            flags="dd if=big of=/dev/null bs=4M$([ "$1" = direct ] && echo " iflag=direct") x $2" \
            seconds="$secs" bytes=$(((count / $2) * $2 << 22)) \
            throughput_Bps="$(awk -v b=$(((count / $2) * $2 << 22)) -v s="$secs" 'BEGIN { printf "%.0f", b / s }')" \
            note="the big file read to /dev/null, caches dropped: the disk's read rate"
        log "ceiling  disk read ($1, $2 at once): $(awk -v b=$(((count / $2) * $2 << 22)) -v s="$secs" 'BEGIN { printf "%.2f GB/s", b / s / 1e9 }')"
    done
}

# Seed 001's memory/execution-domain configurations (A-H) for the compression role, and
# its sender/receiver-socket configurations (A-E), expressed with --place; sluice's own
# planner says which need a node this machine lacks (it exits 2), and those are recorded
# as CANNOT_RUN rather than run.
PLACE_AH="A=mem:0,exec:0 B=mem:0,exec:1 C=mem:1,exec:0 D=mem:1,exec:1 E=mem:0,exec:0+1 F=mem:1,exec:0+1 G=mem:0,exec:os H=mem:1,exec:os"
PLACE_NET="A=0:0 B=0:1 C=1:0 D=1:1 E=os:os"

_place_check() { # FLAGS... -> empty if the planner accepts, else its message
    local msg
    # shellcheck disable=SC2068
    msg=$("$SLUICE" plan $@ 2>&1 >/dev/null) && return 0
    echo "$msg" | tail -1
}

run_sweep() {
    local reps=$1 base_cli="$SLUICE_CLI_FLAGS" base_srv="$SLUICE_SRV_FLAGS" p n wl base_dst=$DST
    path_setup lo
    NO_DROP=1 DST=$SHM/dst
    # Memory to memory, no disk in the way: what each tool itself costs on big files
    # (on the disk workloads every tool meets the same disk ceiling). sluice as default.
    if [[ " $SWEEP_WLS " == *" sweep-big "* ]]; then
        local t
        for t in cp sluice gridftp; do run_transfer sweep sweep-big "$t" "$reps"; done
    fi
    SLUICE_CLI_FLAGS="--streams $SLUICE_STREAMS --buffer-mem $SLUICE_BUFFER" SLUICE_SRV_FLAGS="--buffer-mem $SLUICE_BUFFER"
    for wl in $SWEEP_WLS; do
        for p in os bind mts; do
            for n in $SWEEP_IO; do
                SLUICE_CLI_EXTRA="--policy $p --io-threads $n" SLUICE_SRV_EXTRA="--policy $p --io-threads $n"
                run_transfer sweep "$wl" sluice "$reps" "$p io=$n"
            done
        done
    done
    local c spec msg cz=""
    [ "$COMPRESS_FLAG" = 1 ] && cz=" --compress lz4"
    for c in $PLACE_AH; do
        spec=${c#*=}
        msg=$(_place_check --compress-threads 1 --place "compress=$spec")
        SLUICE_CLI_EXTRA="--compress-threads 1 --place compress=$spec$cz" SLUICE_SRV_EXTRA="--decompress-threads 1"
        _sweep_place "compress ${c%%=*}" "$msg" "$reps"
    done
    for c in $PLACE_AH; do
        spec=${c#*=}
        msg=$(_place_check --decompress-threads 1 --place "decompress=$spec")
        SLUICE_CLI_EXTRA="--compress-threads 1$cz" SLUICE_SRV_EXTRA="--decompress-threads 1 --place decompress=$spec"
        _sweep_place "decompress ${c%%=*}" "$msg" "$reps"
    done
    for c in $PLACE_NET; do
        local s=${c#*=} r
        r=${s#*:} s=${s%:*}
        if [ "$s" = os ]; then
            msg="" SLUICE_CLI_EXTRA="--policy os" SLUICE_SRV_EXTRA="--policy os"
        else
            msg=$(_place_check --place "net-send=mem:$s,exec:$s")
            [ -z "$msg" ] && msg=$(_place_check --place "net-recv=mem:$r,exec:$r")
            SLUICE_CLI_EXTRA="--place net-send=mem:$s,exec:$s" SLUICE_SRV_EXTRA="--place net-recv=mem:$r,exec:$r"
        fi
        _sweep_place "send/recv ${c%%=*}" "$msg" "$reps"
    done
    SLUICE_CLI_FLAGS=$base_cli SLUICE_SRV_FLAGS=$base_srv SLUICE_CLI_EXTRA="" SLUICE_SRV_EXTRA=""
    NO_DROP=0 DST=$base_dst
}

_sweep_place() { # VARIANT PLANNER-MESSAGE REPS
    if [ -n "$2" ]; then
        [ -n "$ONLY" ] && ! [[ "sweep/lo/sweep-tomo/sluice/$1" =~ $ONLY ]] && return 0
        row section=sweep path=lo workload=sweep-tomo tool=sluice variant="$1" rep=1 status=CANNOT_RUN \
            flags="sluice cp $SLUICE_CLI_EXTRA / serve $SLUICE_SRV_EXTRA" note="sluice plan refuses it here: $2"
        log "CANNOT_RUN sweep $1: $2"
    else
        run_transfer sweep sweep-tomo sluice "$3" "$1"
    fi
}

# Sweep data lives in /dev/shm (like seed 000's memory file system): the sweep measures
# placement, not the disk.
sweep_prepare() {
    SHM=/dev/shm/sluicebench-$$
    mkdir -p "$SHM" || return 1
    local i n=$((QUICK ? 8 : 128))
    mkdir -p "$SHM/big"
    for ((i = 0; i < 8; i++)); do keystream "$SHM/big/part$i.bin" $((n << 20)) $((500 + i)) || return 1; done
    "$PY" "$BENCH/lib/gen.py" tree "$SHM/small" --files $((QUICK ? 2000 : 24000)) --min-bytes 4096 \
        --max-bytes 32768 --fanout 1000 --seed 5 || return 1
    mkdir -p "$SHM/tomo"
    if [ -d "${WL_PATH[tomo]}" ]; then
        for f in $(ls "${WL_PATH[tomo]}" | head -$((QUICK ? 4 : 24))); do cp "${WL_PATH[tomo]}/$f" "$SHM/tomo/"; done
    fi
    WL_PATH[sweep-big]=$SHM/big WL_KIND[sweep-big]=dir WL_DESC[sweep-big]="8 x $n MiB in /dev/shm"
    WL_PATH[sweep-small]=$SHM/small WL_KIND[sweep-small]=dir
    WL_DESC[sweep-small]="$((QUICK ? 2000 : 24000)) files of 4-32 KiB in /dev/shm"
    WL_PATH[sweep-tomo]=$SHM/tomo WL_KIND[sweep-tomo]=dir
    WL_DESC[sweep-tomo]="$(ls "$SHM/tomo" | wc -l) tomo frames in /dev/shm"
    local w
    for w in sweep-big sweep-small sweep-tomo; do
        "$PY" "$BENCH/lib/gen.py" stats "${WL_PATH[$w]}" >"$DATA/.$w.stats"
    done
}
