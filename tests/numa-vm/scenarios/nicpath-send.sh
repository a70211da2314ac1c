#!/bin/sh
# The NIC path, sending end (tests/numa-vm/nicpath.sh): pushes SLUICE_NIC_MIB MiB to the
# receiving guest (10.0.2.15:7000) over the emulated link, retrying while it boots.
set -eu
. "$SLUICE_VM_LIB"
OUT=$SLUICE_VM_OUT
MIB=${SLUICE_NIC_MIB:-16}
fail() { echo "NICPATH FAIL (send): $*"; exit 1; }
set -- $SLUICE_VM_NICS
mac=${1%%,*}
NIC=$(vm_nic_by_mac "$mac") || fail "no NIC with MAC $mac"
NODE=$(vm_nic_node "$NIC")
echo "send: NIC $NIC on node $NODE"
printf 'nicpath-test-token-0123456789abcdef\n' >/tmp/token
chmod 600 /tmp/token
yes sluice-nicpath | head -c $((MIB * 1048576)) >/tmp/big
i=0
until sluice cp --json --policy bind --nic "$NIC" --token-file /tmp/token \
  --buffer-mem 32MiB --chunk-size 1MiB --bwlimit "${SLUICE_NIC_RATE:-2M}" \
  /tmp/big sluice://10.0.2.15:7000/big >"$OUT/summary.json" 2>"$OUT/client.err"; do
  i=$((i + 1))
  [ $i -lt "${SLUICE_NIC_TRIES:-60}" ] || fail "no copy after $i tries: $(tail -2 "$OUT/client.err")"
  sleep 2
done
jq -e --argjson n "$NODE" '.ok and .plan.channels[0].numa_node == $n' "$OUT/summary.json" >/dev/null ||
  fail "summary: $(jq -c '{ok, node: .plan.channels[0].numa_node}' "$OUT/summary.json")"
echo "NICPATH PASS (send): $MIB MiB pushed after $i retries, sending plan on node $NODE"
