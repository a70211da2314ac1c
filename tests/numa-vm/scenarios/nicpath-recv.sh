#!/bin/sh
# The NIC path, receiving end (issue 17 part 6; tests/numa-vm/nicpath.sh): this guest's NIC
# (node 1 of the 2n shape) is joined by QEMU's socket backend to a second guest, which pushes
# SLUICE_NIC_MIB MiB here (scenarios/nicpath-send.sh). While the data arrives, every
# receiving thread of the daemon (net-recv-*, io-write-*) must be allowed and seen only on the
# NIC's node (Cpus_allowed_list, stat field 39), and its buffer pool's pages (numa_maps) must
# be there too; at the end the file must be whole and the NIC must have received it.
set -eu
. "$SLUICE_VM_LIB"
OUT=$SLUICE_VM_OUT
MIB=${SLUICE_NIC_MIB:-16}
fail() { echo "NICPATH FAIL (recv): $*"; exit 1; }
set -- $SLUICE_VM_NICS
mac=${1%%,*}; rest=${1#*,}; rest=${rest#*,}; IP=${rest%%,*}
NIC=$(vm_nic_by_mac "$mac") || fail "no NIC with MAC $mac"
NODE=$(vm_nic_node "$NIC")
CPUS=$(vm_expand_cpus "$(vm_node_cpus "$NODE")")
echo "recv: NIC $NIC ($IP) on node $NODE, CPUs $CPUS"
printf 'nicpath-test-token-0123456789abcdef\n' >/tmp/token
chmod 600 /tmp/token
mkdir -p /tmp/root
sluice serve --root /tmp/root --listen "$IP:7000" --json --log info --policy bind \
  --nic "$NIC" --token-file /tmp/token --buffer-mem 32MiB --chunk-size 1MiB \
  >/tmp/daemon.json 2>"$OUT/daemon.log" &
D=$!
trap 'kill $D 2>/dev/null || true' EXIT

on_node() { case ",$CPUS," in *",$1,"*) return 0 ;; esac; return 1; }
samples=0; seen=""; pages_checked=0
deadline=$(($(date +%s) + ${SLUICE_NIC_DEADLINE_S:-240}))
size=0
while [ "$size" -lt $((MIB * 1048576)) ]; do
  [ "$(date +%s)" -lt "$deadline" ] || fail "only $size bytes arrived"
  kill -0 "$D" 2>/dev/null || fail "the daemon died: $(tail -3 "$OUT/daemon.log")"
  for t in /proc/$D/task/*; do
    name=$(cat "$t/comm" 2>/dev/null) || continue
    case $name in net-recv-* | io-write-*) ;; *) continue ;; esac
    a=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "$t/status" 2>/dev/null) || continue
    last=$(sed 's/.*) //' "$t/stat" 2>/dev/null | cut -d' ' -f37)
    [ -n "$a" ] || continue
    for c in $(vm_expand_cpus "$a" | tr ',' ' '); do
      on_node "$c" || fail "$name may run on CPU $c, off node $NODE ($CPUS)"
    done
    on_node "$last" || fail "$name ran on CPU $last, off node $NODE"
    samples=$((samples + 1))
    case " $seen " in *" $name "*) ;; *) seen="$seen $name" ;; esac
  done
  if [ "$pages_checked" -eq 0 ] && [ -n "$seen" ]; then
    R=$(sed -n 's/.*buffer pool: channel=[0-9]* node=Some(\([0-9]*\)) range=0x\([0-9a-f]*\)-0x\([0-9a-f]*\).*/\1 \2 \3/p' "$OUT/daemon.log" | head -1)
    [ -n "$R" ] || fail "no bound buffer pool in the daemon's log"
    set -- $R
    [ "$1" = "$NODE" ] || fail "the pool is on node $1, the NIC on node $NODE"
    lo=$((0x$2)); hi=$((0x$3)); on=0; off=0
    grep anon= "/proc/$D/numa_maps" >"$OUT/numa_maps.txt" || true
    while read -r addr fields; do
      a=$((0x$addr)); [ "$a" -ge "$lo" ] && [ "$a" -lt "$hi" ] || continue
      for f in $fields; do
        case $f in N[0-9]*=*) n=${f%%=*}; c=${f#*=}
          if [ "${n#N}" = "$NODE" ]; then on=$((on + c)); else off=$((off + c)); fi ;;
        esac
      done
    done <"$OUT/numa_maps.txt"
    [ "$on" -gt 0 ] && [ "$off" -eq 0 ] || fail "pool pages: $on on node $NODE, $off elsewhere"
    echo "recv: buffer pool pages during the session: $on on node $NODE, 0 elsewhere"
    pages_checked=1
  fi
  size=$(stat -c %s /tmp/root/big 2>/dev/null || echo 0)
  sleep 0.3
done
[ "$samples" -gt 0 ] || fail "never saw a receiving thread"
yes sluice-nicpath | head -c $((MIB * 1048576)) | cmp - /tmp/root/big || fail "the file differs"
rx=$(cat "/sys/class/net/$NIC/statistics/rx_bytes")
[ "$rx" -ge $((MIB * 1048576)) ] || fail "$NIC received only $rx bytes: the data did not come over the link"
echo "recv: $samples thread samples of$seen, all on node $NODE; $NIC received $rx bytes"
echo "NICPATH PASS (recv): $MIB MiB over the emulated link, receiving threads and slots on node $NODE"
sleep 2 # let the sender read its summary before this end goes away
