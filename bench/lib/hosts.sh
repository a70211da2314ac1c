# shellcheck shell=bash
# Hosts on one bridge and the CPU they burn, for the benchmarks that need several hosts
# and count every process of every side (bench/sites.sh, bench/tpc.sh).
#
#   bridge_up BR LINK_PREFIX SUBNET NS...   a bridge and one namespace per NS, each with
#                                           eth0 at SUBNET.(i+1)/24 (i = 1, 2, ...)
#   bridge_down BR NS...                    deletes them (for a trap; never fails)
#   cpu_cgroup_enter NAME                   puts this shell (and so every process it
#                                           starts from now on) in a CPU-accounting cgroup
#   cpu_cgroup_leave                        moves back and removes it (for a trap)
#   cpu_busy                                CPU seconds of that cgroup plus the machine's
#                                           softirq time (loopback and veth TCP run there);
#                                           without a cgroup, the whole machine's busy time

bridge_up() {
    local br=$1 prefix=$2 subnet=$3 i=0 n
    shift 3
    ip link add "$br" type bridge && ip link set "$br" up
    for n in "$@"; do
        i=$((i + 1))
        ip netns add "$n"
        ip link add "$prefix$i" type veth peer name eth0 netns "$n"
        ip link set "$prefix$i" master "$br" up
        ip -n "$n" addr add "$subnet.$((i + 1))/24" dev eth0
        ip -n "$n" link set eth0 up
        ip -n "$n" link set lo up
    done
}

bridge_down() {
    local br=$1 n
    shift
    for n in "$@"; do ip netns del "$n" 2>/dev/null; done
    ip link del "$br" 2>/dev/null
    return 0
}

CPU_CG=""
cpu_cgroup_enter() {
    local root
    for root in /sys/fs/cgroup/cpuacct /sys/fs/cgroup/cpu,cpuacct /sys/fs/cgroup; do
        if [ -w "$root" ] && mkdir -p "$root/$1" 2>/dev/null; then
            CPU_CG=$root/$1
            echo $$ >"$CPU_CG/cgroup.procs"
            return 0
        fi
    done
}

cpu_cgroup_leave() {
    [ -n "$CPU_CG" ] || return 0
    echo $$ >"$(dirname "$CPU_CG")/cgroup.procs" 2>/dev/null
    rmdir "$CPU_CG" 2>/dev/null
    return 0
}

cpu_busy() {
    local softirq
    softirq=$(awk '/^cpu / { print $8 / 100; exit }' /proc/stat)
    if [ -n "$CPU_CG" ] && [ -f "$CPU_CG/cpuacct.usage" ]; then
        awk -v u="$(cat "$CPU_CG/cpuacct.usage")" -v s="$softirq" 'BEGIN { printf "%.3f", u / 1e9 + s }'
    elif [ -n "$CPU_CG" ] && [ -f "$CPU_CG/cpu.stat" ]; then
        awk -v s="$softirq" '/^usage_usec/ { printf "%.3f", $2 / 1e6 + s }' "$CPU_CG/cpu.stat"
    else
        awk '/^cpu / { print ($2 + $3 + $4 + $7 + $8) / 100; exit }' /proc/stat
    fi
}
