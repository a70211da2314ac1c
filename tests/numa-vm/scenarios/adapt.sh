#!/bin/sh
# Adaptive placement in the emulated NUMA machine (issue 17 part 6). A paced push
# (`sluice cp --policy bind --bwlimit`) binds its io-read threads one core each on a node;
# a busy loop is pinned (taskset) on the core of the client's io-read-0. The kernel's
# read-back (/proc/PID/task/TID/status Cpus_allowed_list, stat field 39) must show the
# thread on another core of the same node within ADAPT_DEADLINE_S seconds, the buffer
# pool's pages (/proc/PID/numa_maps, the pool found by the range the engine logs) must
# all still be on that node, and the `--json` summary's placement_moves must record the
# move. Then every core of the node is hogged: no thread may leave the node (the idle
# nodes are never a target), and placement_refusals must say why. Needs sluice, jq and
# busybox's taskset in the guest (tests/numa-vm/adapt.sh ships them).
#
# Environment: SLUICE_ADAPT_MIB (file size, default 24), SLUICE_ADAPT_RATE (default 1M, the
# lowest --bwlimit), SLUICE_ADAPT_DEADLINE_S (default 60; the monitor needs ~4 s, TCG is
# slow), SLUICE_ADAPT_FULL_S (seconds the whole node is hogged, default 8),
# SLUICE_ADAPT_MODE (default on; `off` is the negative control: the scenario then fails).
set -eu
. "$SLUICE_VM_LIB"
MIB=${SLUICE_ADAPT_MIB:-24}
RATE=${SLUICE_ADAPT_RATE:-1M}
DEADLINE=${SLUICE_ADAPT_DEADLINE_S:-60}
OUT=$SLUICE_VM_OUT
mkdir -p "$OUT" /tmp/root /tmp/src
fail() { echo "ADAPT FAIL ($SLUICE_VM_SHAPE): $*"; exit 1; }
HOG=
HOGS=
DAEMON=
cleanup() {
  [ -z "$HOG" ] || kill "$HOG" 2>/dev/null || true
  for h in $HOGS; do kill "$h" 2>/dev/null || true; done
  [ -z "$DAEMON" ] || kill "$DAEMON" 2>/dev/null || true
}
trap cleanup EXIT

head -c $((MIB * 1048576)) /dev/urandom >/tmp/src/big
sluice serve --root /tmp/root --listen 127.0.0.1:0 --json --policy bind \
  --buffer-mem 32MiB --chunk-size 1MiB >/tmp/daemon.json 2>"$OUT/daemon.log" &
DAEMON=$!
i=0
until grep -q listen /tmp/daemon.json 2>/dev/null; do
  i=$((i + 1)); [ $i -lt 600 ] || fail "the daemon never printed its address"; sleep 0.1
done
ADDR=$(jq -r .listen /tmp/daemon.json)

sluice cp --json --log info --policy bind --adapt "${SLUICE_ADAPT_MODE:-on}" --bwlimit "$RATE" \
  --buffer-mem 32MiB --chunk-size 1MiB /tmp/src/big "sluice://$ADDR/big" \
  >"$OUT/summary.json" 2>"$OUT/client.log" &
CP=$!

# allowed TID: the thread's Cpus_allowed_list; last TID: the CPU it last ran on (field 39)
allowed() { sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$CP/task/$1/status" 2>/dev/null; }
last() { sed 's/.*) //' "/proc/$CP/task/$1/stat" 2>/dev/null | cut -d' ' -f37; }
node_of() { for n in /sys/devices/system/node/node*; do [ -e "$n/cpu$1" ] && echo "${n##*node}"; done; }

TID=
i=0
while [ -z "$TID" ]; do
  for t in /proc/$CP/task/*; do
    [ "$(cat "$t/comm" 2>/dev/null)" = io-read-0 ] && TID=${t##*/}
  done
  kill -0 "$CP" 2>/dev/null || fail "the copy ended early: $(tail -3 "$OUT/client.log")"
  i=$((i + 1)); [ $i -lt 600 ] || fail "the client's io-read-0 thread never ran"; sleep 0.1
done
FROM=$(allowed "$TID")
case $FROM in *[!0-9]*|'') fail "io-read-0 is not bound to one CPU: '$FROM'" ;; esac
NODE=$(node_of "$FROM")
echo "io-read-0 (tid $TID) bound to CPU $FROM of node $NODE (node CPUs $(vm_node_cpus "$NODE"))"

taskset -c "$FROM" sh -c 'while :; do :; done' &
HOG=$!
start=$(date +%s)
TO=$FROM
while [ "$TO" = "$FROM" ]; do
  [ $(($(date +%s) - start)) -lt "$DEADLINE" ] || fail "io-read-0 still on CPU $FROM after ${DEADLINE} s"
  kill -0 "$CP" 2>/dev/null || fail "the copy ended before io-read-0 moved"
  sleep 0.2
  TO=$(allowed "$TID")
done
took=$(($(date +%s) - start))
sleep 0.5
RAN=$(last "$TID")
kill "$HOG"; HOG=
echo "kernel read-back: io-read-0 Cpus_allowed_list $FROM -> $TO after ~${took} s; last ran on CPU $RAN"
[ "$(node_of "$TO")" = "$NODE" ] || fail "moved to CPU $TO, not on node $NODE"
[ "$(node_of "$RAN")" = "$NODE" ] || fail "ran on CPU $RAN, not on node $NODE"

# the pool's pages, after the move: every present page of its VMA(s) on NODE
RANGE=$(sed -n 's/.*buffer pool: channel=[0-9]* node=Some(\([0-9]*\)) range=0x\([0-9a-f]*\)-0x\([0-9a-f]*\).*/\1 \2 \3/p' "$OUT/client.log" | head -1)
[ -n "$RANGE" ] || fail "no bound buffer pool in the client's log"
set -- $RANGE
[ "$1" = "$NODE" ] || fail "the pool is on node $1, the thread's node is $NODE"
lo=$((0x$2)); hi=$((0x$3))
grep anon= "/proc/$CP/numa_maps" >"$OUT/numa_maps.txt" || true
on=0; off=0
while read -r addr rest; do
  a=$((0x$addr))
  [ "$a" -ge "$lo" ] && [ "$a" -lt "$hi" ] || continue
  for f in $rest; do
    case $f in
      N[0-9]*=*) n=${f%%=*}; c=${f#*=}
        if [ "${n#N}" = "$NODE" ]; then on=$((on + c)); else off=$((off + c)); fi ;;
    esac
  done
done <"$OUT/numa_maps.txt"
echo "buffer pool pages after the move: $on on node $NODE, $off elsewhere"
[ "$on" -gt 0 ] || fail "no pool page found in numa_maps"
[ "$off" -eq 0 ] || fail "$off pool pages left node $NODE"

# every core of the node taken: the io-read threads stay on the node, refused and said
for c in $(vm_expand_cpus "$(vm_node_cpus "$NODE")" | tr ',' ' '); do
  taskset -c "$c" sh -c 'while :; do :; done' &
  HOGS="$HOGS $!"
done
sleep "${SLUICE_ADAPT_FULL_S:-8}"
for t in /proc/$CP/task/*; do
  case $(cat "$t/comm" 2>/dev/null) in
    io-read-*)
      a=$(allowed "${t##*/}")
      [ -z "$a" ] || [ "$(node_of "$a")" = "$NODE" ] || fail "$(cat "$t/comm") left node $NODE for CPU $a"
      echo "node $NODE full: $(cat "$t/comm") stays on CPU $a" ;;
  esac
done
for h in $HOGS; do kill "$h"; done
HOGS=

wait "$CP" || fail "the copy failed: $(tail -3 "$OUT/client.log")"
jq -e --argjson n "$NODE" '.placement_refusals | any(.node == $n and .role == "io-read")' \
  "$OUT/summary.json" >/dev/null || fail "no refusal on the full node $NODE: $(jq -c .placement_refusals "$OUT/summary.json")"
jq -e --argjson n "$NODE" '[.placement_moves[] | select(.node != $n)] | length == 0' \
  "$OUT/summary.json" >/dev/null || fail "a move off node $NODE: $(jq -c .placement_moves "$OUT/summary.json")"
echo "refusals: $(jq -c '[.placement_refusals[] | {role, cpu, node, reason}]' "$OUT/summary.json")"
cmp /tmp/src/big /tmp/root/big || fail "the copy differs"
jq -e --argjson f "$FROM" --argjson t "$TO" --argjson n "$NODE" \
  '.placement_moves | any(.role == "io-read" and .from_cpu == $f and .to_cpu == $t and .node == $n)' \
  "$OUT/summary.json" >/dev/null || fail "placement_moves lacks $FROM -> $TO: $(jq -c .placement_moves "$OUT/summary.json")"
echo "summary: $(jq -c '.placement_moves' "$OUT/summary.json")"
grep 'placement: moved' "$OUT/client.log" || true
echo "ADAPT PASS ($SLUICE_VM_SHAPE): io-read-0 moved CPU $FROM -> $TO within node $NODE in ~${took} s, pool pages stayed on node $NODE; with node $NODE full, nothing left it"
