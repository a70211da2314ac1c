#!/usr/bin/env bash
# Cost per file and per byte (issue 16), short and interleaved: sluice binaries (e.g. a
# baseline and a candidate) beside `tar | tar` and `cp -a`, tool after tool in each
# repetition (so a machine shared with other work slows all of them alike; each
# repetition starts one tool later than the one before), with plain
# directories as destinations (what users copy into) on one tmpfs.
#
#   bench/cost.sh [--files N] [--big GIB] [--reps R] [--dir D] [--gridftp] BIN [BIN...]
#
# --files N   N small files (1-8 KiB) in directories of 1,000 (default 20000; 0: none)
# --big GIB   also one GIB GiB file (default 0: none)
# --reps R    repetitions of every tool (default 3); medians are printed
# --dir D     where to mount the tmpfs (default /tmp/sluice-cost)
# --cold      do not warm the tmpfs before each timed run (see warm() below)
# --gridftp   also GridFTP (`globus-url-copy -fast -p 4`, recursive, into a
#             globus-gridftp-server started per run as the sluice daemon is; its CPU
#             counts the session process it forks). For the large file: on 20,000
#             small files it takes minutes a run
# SERVE_ARGS / CP_ARGS (environment): extra flags for every `sluice serve` / `sluice cp`
#
# With one large file and no small ones, the tool `tcp-copy` runs too: the plainest copy
# through TCP (bench/lib/tcp_copy.py: `sendfile` into one loopback connection, `splice`
# into the file by one thread, no checksum, no framing), reported beside each sluice. A
# reference, not a bound: where writing into fresh pages dominates, it is one writer.
# Its CPU seconds are one, though: the last lines say how fast, against GridFTP and
# `cp -a`, any copy through TCP could be on this machine's cores, and how little CPU
# per GB it could spend against GridFTP's.
#
# Prints one line per run and the medians: wall seconds, CPU seconds of the client, the
# daemon during the transfer (its process's CPU read from /proc once it listens and
# again at the end) and the system's softirq time (which carries loopback TCP;
# system-wide, so other load adds to it), and CPU seconds per 1,000 files or per GB;
# then each sluice's ratio to `tar | tar` beside the most it could be on this machine
# (cores x tar's wall / sluice's CPU seconds). The daemon's start-up (planning,
# prefaulting its pools: paid once per daemon, not per transfer) is its own column, not
# in the totals. Runs as root (mounts a tmpfs; no sudo needed); a daemon is started per
# run with default flags, as a new user would.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
FILES=20000 BIG=0 REPS=3 DIR=/tmp/sluice-cost GRIDFTP=0 WARM=1
BINS=()
while [ $# -gt 0 ]; do
    case $1 in
        --files) FILES=$2; shift 2 ;;
        --big) BIG=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --dir) DIR=$2; shift 2 ;;
        --gridftp) GRIDFTP=1; shift ;;
        --cold) WARM=0; shift ;;
        -h|--help) sed -n '2,37p' "$0"; exit 0 ;;
        *) BINS+=("$(realpath "$1")"); shift ;;
    esac
done
[ ${#BINS[@]} -gt 0 ] || { echo "usage: bench/cost.sh [options] BIN [BIN...]" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "bench/cost.sh: run as root (it mounts a tmpfs)" >&2; exit 2; }

TICK=$(getconf CLK_TCK)
mkdir -p "$DIR"
SIZE_MB=$(( (FILES * 8 / 1024 + BIG * 1024) * 2 + 256 ))
mount -t tmpfs -o size=${SIZE_MB}m sluice-cost "$DIR"
DPID=""
cleanup() {
    [ -n "$DPID" ] && kill "$DPID" 2>/dev/null && wait "$DPID" 2>/dev/null
    umount -l "$DIR" 2>/dev/null || true
}
trap cleanup EXIT

python3 - "$DIR/src" "$FILES" "$BIG" <<'EOF'
import os, random, sys
d, n, big = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.makedirs(d, exist_ok=True)
rnd = random.Random(16)
for i in range(n):
    sub = os.path.join(d, "d%03d" % (i // 1000))
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, "f%06d" % i), "wb") as f:
        f.write(os.urandom(rnd.randint(1024, 8192)))
if big:
    with open(os.path.join(d, "big"), "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(big << 10):
            f.write(block)
EOF
BYTES=$(du -sb "$DIR/src" | cut -f1)

# warm: as many bytes as the transfer writes, written into the tmpfs and deleted right
# before each timed run (after its daemon listens), so every tool writes into memory the
# host backs. This VM's balloon hands free guest memory back to the host within seconds
# (free page reporting), and a tool then pays for the host faulting it in again: 4 GiB
# written with dd took 6.3-6.6 s 10 s after a delete, 1.6-2.6 s right after it. Which
# tool paid depended on how long its start-up took; a host without a balloon never pays.
warm() {
    [ "$WARM" = 1 ] || return 0
    dd if=/dev/zero of="$DIR/warm" bs=4M count=$(( BYTES / 4194304 + 1 )) status=none
    rm -f "$DIR/warm"
}
softirq() { awk '/^cpu /{print $8}' /proc/stat; }
# cpu_of PID -> utime+stime of a live process and of its children it has reaped (the
# session processes a GridFTP server forks), in ticks
cpu_of() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat"; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# listening PID PORT: waits for the daemon to listen, then notes its CPU so far
listening() {
    for _ in $(seq 100); do (echo >"/dev/tcp/127.0.0.1/$2") 2>/dev/null && break; sleep 0.05; done
    cpu_of "$1"
}

# run_one TOOL BIN -> "wall client daemon softirq daemon_startup" seconds, then the
# client's and the daemon's peak resident memory in MiB
run_one() {
    local tool=$1 bin=${2-} dst=$DIR/dst t0 t1 s0 s1 out dcpu=0 dstart=0 port dhwm=0
    rm -rf "$dst"; mkdir -p "$dst"
    sync
    case $tool in
        sluice)
            port=$(free_port)
            "$bin" serve ${SERVE_ARGS-} --root "$dst" --listen "127.0.0.1:$port" >/dev/null 2>&1 &
            DPID=$!
            dstart=$(listening "$DPID" "$port") ;;
        gridftp)
            port=$(free_port)
            chmod 777 "$dst"
            globus-gridftp-server -aa -anonymous-user nobody -anonymous-group "$(id -gn nobody 2>/dev/null || echo nogroup)" -p "$port" \
                -control-interface 127.0.0.1 -data-interface 127.0.0.1 -d error >/dev/null 2>&1 &
            DPID=$!
            dstart=$(listening "$DPID" "$port") ;;
    esac
    warm
    s0=$(softirq); t0=$(date +%s.%N)
    local tf=$DIR/time.txt
    case $tool in
        sluice) /usr/bin/time -o "$tf" -f '%U %S %M' "$bin" cp ${CP_ARGS-} -r "$DIR/src/" "sluice://127.0.0.1:$port/" >/dev/null 2>&1 ;;
        tar-tar) /usr/bin/time -o "$tf" -f '%U %S %M' bash -c "tar -C '$DIR/src' -cf - . | tar -C '$dst' -xf -" ;;
        cp-a) /usr/bin/time -o "$tf" -f '%U %S %M' cp -a "$DIR/src/." "$dst/" ;;
        gridftp) /usr/bin/time -o "$tf" -f '%U %S %M' globus-url-copy -fast -p 4 -cc 4 -r -cd \
            "file://$DIR/src/" "ftp://127.0.0.1:$port$dst/" >/dev/null 2>&1 ;;
        tcp-copy) /usr/bin/time -o "$tf" -f '%U %S %M' python3 "$HERE/lib/tcp_copy.py" \
            "$DIR/src/big" "$dst/big" ;;
    esac
    out=$(tail -1 "$tf")
    t1=$(date +%s.%N); s1=$(softirq)
    if [ -n "$DPID" ]; then
        # a GridFTP session's process, reaped, counts in its server's figures
        for _ in $(seq 40); do pgrep -P "$DPID" >/dev/null || break; sleep 0.05; done
        dcpu=$(( $(cpu_of "$DPID") - dstart ))
        dhwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$DPID/status")
        kill -INT "$DPID"; wait "$DPID" 2>/dev/null || true; DPID=""
    fi
    [ "$(find "$dst" -type f | wc -l)" = "$(find "$DIR/src" -type f | wc -l)" ] || { echo "$tool: files missing" >&2; exit 1; }
    awk -v w="$(awk -v a="$t1" -v b="$t0" 'BEGIN{print a-b}')" -v c="$out" -v d="$dcpu" \
        -v s=$((s1 - s0)) -v tk="$TICK" -v ds="$dstart" -v dh="$dhwm" 'BEGIN { split(c, u, " ");
        printf "%.3f %.3f %.3f %.3f %.3f %.0f %.0f\n", w, u[1] + u[2], d / tk, s / tk, ds / tk, u[3] / 1024, dh / 1024 }'
}

declare -A RES
TOOLS=()
for i in "${!BINS[@]}"; do TOOLS+=("sluice:$i"); done
TOOLS+=(tar-tar cp-a)
[ "$GRIDFTP" = 1 ] && TOOLS+=(gridftp)
[ "$FILES" = 0 ] && [ "$BIG" -gt 0 ] && TOOLS+=(tcp-copy)
echo "# $FILES files + ${BIG} GiB, $BYTES bytes, tmpfs to tmpfs (plain directories), $REPS interleaved reps, $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), $([ "$WARM" = 1 ] && echo warmed || echo cold) tmpfs"
echo "# tool rep wall_s client_cpu_s daemon_cpu_s softirq_s daemon_startup_cpu_s client_rss_mib daemon_rss_mib"
NT=${#TOOLS[@]}
for rep in $(seq "$REPS"); do
    # each repetition starts one tool later, so no tool always follows the same one
    for k in $(seq 0 $((NT - 1))); do
        t=${TOOLS[$(( (k + rep - 1) % NT ))]}
        case $t in
            sluice:*) r=$(run_one sluice "${BINS[${t#sluice:}]}"); name="sluice[${t#sluice:}]" ;;
            *) r=$(run_one "$t"); name=$t ;;
        esac
        echo "$name $rep $r"
        RES[$name]+="$r"$'\n'
    done
done
echo "# medians (peak memory: the largest): tool wall_s cpu_total_s cpu_s_per_1000_files cpu_s_per_GB daemon_startup_cpu_s client_rss_mib daemon_rss_mib"
for i in "${!BINS[@]}"; do echo "# sluice[$i] = ${BINS[$i]}"; done
for name in "${!RES[@]}"; do
    printf '%s' "${RES[$name]}" | awk -v n="$name" -v f="$FILES" -v b="$BYTES" '
        { w[NR] = $1; c[NR] = $2 + $3 + $4; d[NR] = $5; if ($6 > cr) cr = $6; if ($7 > dr) dr = $7 }
        function med(a, k,   i, j, t) { for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
            return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2 }
        END { mw = med(w, NR); mc = med(c, NR); md = med(d, NR);
              printf "%-10s %7.3f %7.3f %7.3f %7.3f %7.3f %6d %6d\n", n, mw, mc, (f ? mc * 1000 / f : 0), mc * 1e9 / b, md, cr, dr }'
done | sort | tee "$DIR/medians"
# Each sluice against tar | tar, and the most it could be on this machine: no run takes
# less than its CPU seconds over the cores, so the ratio is at most
# cores x tar's wall / sluice's CPU seconds.
awk -v cores="$(nproc)" '
    { wall[$1] = $2; cpu[$1] = $3 }
    END { if (!("tar-tar" in wall)) exit
          for (n in wall) if (n ~ /^sluice/ && wall[n] > 0 && cpu[n] > 0)
              printf "# %s / tar-tar: %.2fx; bound on %d cores by its CPU: %.2fx\n", n, wall["tar-tar"] / wall[n], cores, cores * wall["tar-tar"] / cpu[n] }' "$DIR/medians" | sort
# Each sluice against the plainest copy through TCP (tcp-copy), where it ran.
awk '
    { wall[$1] = $2; cpu[$1] = $3 }
    END { if (!("tcp-copy" in wall)) exit
          for (n in wall) if (n ~ /^sluice/ && wall[n] > 0)
              printf "# %s / tcp-copy (the plainest TCP copy): %.2fx its speed, %.2fx its CPU seconds\n", n, wall["tcp-copy"] / wall[n], cpu[n] / cpu["tcp-copy"] }' "$DIR/medians" | sort
# What any copy through TCP could reach here at best: no copy through a socket spends
# less CPU than tcp-copy (two kernel copies, no checksum), so none runs faster than its
# CPU seconds over the cores, nor spends less CPU per GB than it does.
awk -v cores="$(nproc)" '
    { wall[$1] = $2; cpu[$1] = $3 }
    END { if (!("tcp-copy" in wall) || cpu["tcp-copy"] <= 0) exit
          for (n in wall) if (n == "gridftp" || n == "cp-a")
              printf "# any TCP copy on %d cores / %s: at most %.2fx its speed (cores x its wall / tcp-copy CPU seconds)%s\n", cores, n, cores * wall[n] / cpu["tcp-copy"], (n == "gridftp" && cpu[n] > 0) ? sprintf("; at least %.2fx its CPU seconds", cpu["tcp-copy"] / cpu[n]) : "" }' "$DIR/medians" | sort
