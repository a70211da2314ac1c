# shellcheck shell=bash
# WAN paths: two namespaces joined by sluice-delayline (a user-space forwarder between a
# TUN device in each; this kernel has no netem), with a fixed one-way delay, an optional
# rate limit and optional random loss. Used by bench/wan.sh and bench/delay/prove.sh.
#
#   link k: A:dla<k> 10.44.k.1  <->  B:dlb<k> 10.44.k.2      (k = 1, 2)
#
# wan_ns_create PREFIX     makes namespaces PREFIXa and PREFIXb (WAN_NS_A, WAN_NS_B)
# wan_up DELAY_MS RATE LOSS LINKS MTU [QUEUE_MS]
#                          starts the forwarder (WAN_PID) and waits until it is ready
# wan_down                 stops it; WAN_STATS holds its counters (a JSON line)
# wan_ns_destroy           deletes the namespaces (call it from a trap)
# wan_dest_ramdisk DIR GIB mounts on DIR an ext4 on a loop device over memory written
#                          once beforehand (WAN_IMG_MNT, WAN_IMG_LOOP); wan_dest_destroy
# wan_dest_ceiling DIR BYTES SRC  prints "DIRECT_BPS BUFFERED_BPS": a fresh file of BYTES
#                          written into DIR with O_DIRECT, then through the page cache

WAN_NS_A="" WAN_NS_B="" WAN_PID="" WAN_STATS="" WAN_LOG="" WAN_READY=""
WAN_SUBNET=${WAN_SUBNET:-10.44}

wan_ns_create() {
    WAN_NS_A="${1}a" WAN_NS_B="${1}b"
    local ns
    for ns in "$WAN_NS_A" "$WAN_NS_B"; do
        ip netns add "$ns" && ip -n "$ns" link set lo up || return 1
        # no per-destination metrics cache: every run starts from the same state
        ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_no_metrics_save=1 || return 1
        # names resolve without DNS (GridFTP reverse-resolves its interface)
        mkdir -p "/etc/netns/$ns" &&
            printf '127.0.0.1 localhost\n127.0.0.1 %s\n%s.1.1 wan-a1\n%s.2.1 wan-a2\n%s.1.2 wan-b1\n%s.2.2 wan-b2\n' \
                "$(hostname)" "$WAN_SUBNET" "$WAN_SUBNET" "$WAN_SUBNET" "$WAN_SUBNET" >"/etc/netns/$ns/hosts"
    done
}

wan_ns_destroy() {
    wan_down
    local ns
    for ns in "$WAN_NS_A" "$WAN_NS_B"; do
        [ -n "$ns" ] || continue
        [ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
        [ -d "/etc/netns/$ns" ] && rm -rf "/etc/netns/${ns:?}"
    done
    WAN_NS_A="" WAN_NS_B=""
}

# The destination that keeps up. On this VM every page of memory the guest touches
# afresh is faulted in by the host (freed memory goes back to it at once: free page
# reporting), so a fresh file written into tmpfs moves at 0.2-0.4 GB/s with one writer,
# less than two 1 Gbit/s links need; memory already touched writes at 2-3 GB/s. A DTN's
# NVMe array is not that slow, so the paths' destination is an ext4 on a loop device
# whose backing memory (a file in a tmpfs of its own) is written once here, never
# discarded (nodiscard): O_DIRECT writes land in pages that are already there. Writes
# through the page cache still take fresh pages; wan_dest_ceiling measures both.
WAN_IMG_MNT="" WAN_IMG_LOOP="" WAN_DEST_MNT=""
wan_dest_ramdisk() {
    local dir=$1 gib=$2
    WAN_IMG_MNT=$(mktemp -d /tmp/sluice-wan-img.XXXXXX) || return 1
    mount -t tmpfs -o "size=$((gib * 1024 + 64))m" tmpfs "$WAN_IMG_MNT" || { rmdir "$WAN_IMG_MNT"; WAN_IMG_MNT=""; return 1; }
    # written, not truncated: every page of the image is touched now, not during a run
    dd if=/dev/zero of="$WAN_IMG_MNT/img" bs=4M count=$((gib * 256)) status=none &&
        WAN_IMG_LOOP=$(losetup --find --show "$WAN_IMG_MNT/img") &&
        mkfs.ext4 -q -F -E nodiscard,lazy_itable_init=0,lazy_journal_init=0 "$WAN_IMG_LOOP" &&
        mkdir -p "$dir" && mount -o nodiscard,noatime "$WAN_IMG_LOOP" "$dir" && WAN_DEST_MNT=$dir && return 0
    wan_dest_destroy
    return 1
}

wan_dest_destroy() {
    [ -n "$WAN_DEST_MNT" ] && { umount "$WAN_DEST_MNT" 2>/dev/null || umount -l "$WAN_DEST_MNT" 2>/dev/null; }
    [ -n "$WAN_IMG_LOOP" ] && losetup -d "$WAN_IMG_LOOP" 2>/dev/null
    # The loop device lets its backing file go a moment after `losetup -d`: until then
    # the tmpfs holding it is busy. Retried, then detached lazily: a tmpfs left mounted
    # would keep the image's memory (6 GiB) after the run.
    if [ -n "$WAN_IMG_MNT" ]; then
        local i
        for ((i = 0; i < 20; i++)); do
            umount "$WAN_IMG_MNT" 2>/dev/null && break
            sleep 0.1
        done
        mountpoint -q "$WAN_IMG_MNT" && umount -l "$WAN_IMG_MNT" 2>/dev/null
        rmdir "$WAN_IMG_MNT" 2>/dev/null
    fi
    WAN_DEST_MNT="" WAN_IMG_LOOP="" WAN_IMG_MNT=""
}

# wan_dest_ceiling DIR BYTES SRC: how fast a fresh file of BYTES (copied from SRC) goes
# into DIR, bits/s: with O_DIRECT (sluice's default), then through the page cache with
# the final fsync (rsync, scp, GridFTP); the file is removed after each.
wan_dest_ceiling() {
    local dir=$1 bytes=$2 src=$3 f out="" t0 t1 flag
    f=$dir/.ceiling.$$
    for flag in oflag=direct conv=fsync; do
        sleep 3  # the pages a write just freed are not the host's again at once
        t0=$EPOCHREALTIME
        if dd if="$src" of="$f" bs=4M count=$((bytes >> 22)) "$flag" status=none 2>/dev/null; then
            t1=$EPOCHREALTIME
            out="$out $(awk -v b="$bytes" -v s="$t0" -v e="$t1" 'BEGIN { printf "%.0f", b * 8 / (e - s) }')"
        else
            out="$out 0"
        fi
        rm -f "$f"
    done
    echo "${out# }"
}

# wan_up DELAY_MS RATE LOSS LINKS MTU [QUEUE_MS]: RATE none or e.g. 1gbit; LOSS a fraction.
wan_up() {
    wan_down
    local q=()
    [ -n "${6-}" ] && q=(--queue-ms "$6")
    WAN_LOG=${WAN_TMP:-/tmp}/delayline.$$.out
    rm -f "$WAN_LOG"  # the old one's "ready" must not be read for the new one's
    "$DELAYLINE" up --ns-a "$WAN_NS_A" --ns-b "$WAN_NS_B" --delay-ms "$1" --rate "$2" --loss "$3" \
        --links "$4" --mtu "$5" --subnet "$WAN_SUBNET" --seed "${WAN_SEED:-1}" "${q[@]}" >"$WAN_LOG" 2>&1 &
    WAN_PID=$!
    local i
    for ((i = 0; i < 200; i++)); do
        WAN_READY=$(grep -m1 '^ready' "$WAN_LOG" 2>/dev/null) && [ -n "$WAN_READY" ] && return 0
        kill -0 "$WAN_PID" 2>/dev/null || break
        sleep 0.05
    done
    echo "sluice-delayline did not come up: $(tail -c 300 "$WAN_LOG")" >&2
    wan_down
    return 1
}

wan_down() {
    WAN_STATS=""
    [ -n "$WAN_PID" ] || return 0
    kill -TERM "$WAN_PID" 2>/dev/null
    wait "$WAN_PID" 2>/dev/null
    WAN_STATS=$(grep -m1 '^{"directions"' "$WAN_LOG" 2>/dev/null)
    WAN_PID=""
}

# CPU seconds (user + system) the forwarder has used so far.
wan_cpu_s() {
    awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$WAN_PID/stat" 2>/dev/null || echo 0
}

# wan_iperf HOST STREAMS SECS [WINDOW]: iperf3 from A to B; prints
# "BITS_PER_SECOND SND_WND_BYTES RTT_US RETRANSMITS" (the window and RTT of the last
# interval's first stream, from TCP_INFO), or nothing when it failed.
wan_iperf() {
    local res try
    for try in 1 2; do  # a second try when the first produced no result (logged)
        res=$(_wan_iperf_once "$@") && [ -n "$res" ] && { echo "$res"; return 0; }
        echo "iperf3 try $try through the delay line gave no result: $(tail -c 300 "${WAN_TMP:-/tmp}/iperf.$$.json" | tr '\n' ' ')" >&2
    done
    return 1
}

_wan_iperf_once() {
    local host=$1 streams=$2 secs=$3 w=() port=$((5201 + RANDOM % 1000)) json
    [ -n "${4-}" ] && w=(-w "$4")
    json=${WAN_TMP:-/tmp}/iperf.$$.json
    timeout $((secs + 40)) ip netns exec "$WAN_NS_B" iperf3 -s -1 -B "$host" -p "$port" >/dev/null 2>&1 &
    local srv=$! i
    for ((i = 0; i < 100; i++)); do
        ip netns exec "$WAN_NS_B" ss -Hltn "sport = :$port" | grep -q . && break
        sleep 0.05
    done
    timeout $((secs + 30)) ip netns exec "$WAN_NS_A" iperf3 -c "$host" -p "$port" -P "$streams" -t "$secs" -O 1 \
        "${w[@]}" -J >"$json" 2>&1
    wait "$srv" 2>/dev/null
    python3 - "$json" <<'PY' 2>/dev/null
import json, sys
d = json.load(open(sys.argv[1]))
s = d["intervals"][-1]["streams"][0]
print(int(d["end"]["sum_received"]["bits_per_second"]), s.get("snd_wnd", 0), s.get("rtt", 0),
      d["end"]["sum_sent"].get("retransmits", 0))
PY
}
