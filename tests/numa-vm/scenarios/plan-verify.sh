#!/bin/sh
# numa-vm scenario: `sluice topo` and `sluice plan --apply --verify` in an emulated
# multi-node machine, where remote nodes exist and binding is real (on the one-node build
# machine every page is on node 0 whatever happens).
#
#   cargo build --release -p sluice
#   tests/numa-vm/run.sh --shape 2n --bin target/release/sluice --bin /usr/bin/jq \
#       --script tests/numa-vm/scenarios/plan-verify.sh
#   (and --shape 4n)
#
# Checks, failing on any mismatch:
# - `sluice topo --json`: the shape's nodes, their CPUs and distances, and every NIC and
#   disk on the node the shape puts it on;
# - `sluice plan --apply --verify` with policies bind (once per NIC, `--nic` it), mts,
#   nmts and smts: exit 0, `verification.ok`, every bound thread inside its channel's
#   node(s), bind entirely on its NIC's node, net threads of mts/nmts on a NIC's node,
#   smts channels spanning one socket each, every checked page on its planned node.
# Prints the verification tables of every run. jq must be in the guest (--bin /usr/bin/jq).
# shellcheck source=tests/numa-vm/guest/lib.sh
. "$SLUICE_VM_LIB"

fails=0
check() { # WHAT GOT WANT
  if [ "$2" = "$3" ]; then
    echo "ok   $1: $2"
  else
    echo "FAIL $1: got '$2', want '$3'"
    fails=$((fails + 1))
  fi
}

command -v sluice >/dev/null || { echo "FAIL no sluice in the guest: --bin target/release/sluice"; exit 2; }
command -v jq >/dev/null || { echo "FAIL no jq in the guest: add --bin /usr/bin/jq"; exit 2; }

# Pages must stay where they were bound while they are checked.
echo 0 >/proc/sys/kernel/numa_balancing
echo "shape $SLUICE_VM_SHAPE: $SLUICE_VM_NODES nodes, CPUs $SLUICE_VM_NODE_CPUS," \
  "numa_balancing=$(cat /proc/sys/kernel/numa_balancing)"

# --- sluice topo --------------------------------------------------------------------
work=/tmp/plan-verify
mkdir -p "$work"
topo=$work/topo.json
sluice topo
if ! sluice topo --json >"$topo"; then
  echo "FAIL sluice topo --json exited $?"
  exit 1
fi
vm_check_topo "$topo"
fails=$((fails + VM_TOPO_FAILS))
nic_names=$VM_NIC_NAMES
nic_nodes=$VM_NIC_NODES
nic_nodes_json="[$(echo "$nic_nodes" | tr ' ' ',')]"

# --- sluice plan --apply --verify ---------------------------------------------------
# Few CPUs in the guest: one stream and one I/O thread per direction, a small buffer (the
# check maps, locks and touches up to 64 MiB per channel under TCG).
job="--streams 1 --io-threads 1 --buffer-mem 64MiB"

# Threads outside their channel's node(s) (manual placements excepted), one per line.
# shellcheck disable=SC2016 # a jq program: $topo and $ch are jq variables
misplaced='($topo[0].nodes | map({key: (.os_index | tostring), value: .cpus}) | from_entries) as $cpus
  | .channels[] | . as $ch | .threads[] | select(.cpus != null and (.manual | not))
  | select(all(.cpus[]; . as $c | any($ch.nodes[]; . as $n | any($cpus[$n | tostring][]; . == $c))) | not)
  | "\(.role) \(.index) on cpus \(.cpus | join(",")) outside channel \($ch.id) nodes \($ch.nodes | join(","))"'

# plan_verify NAME ARGS...: one policy run, checked; its JSON in $work/NAME.json.
plan_verify() {
  name=$1
  shift
  echo
  echo "=== sluice plan --apply --verify $* $job"
  # shellcheck disable=SC2086 # $job is split on purpose
  sluice plan --apply --verify "$@" $job
  rc=$?
  check "$name: exit code of the table run" "$rc" 0
  json=$work/$name.json
  # shellcheck disable=SC2086
  sluice plan --apply --verify --json "$@" $job >"$json"
  rc=$?
  check "$name: exit code of the --json run" "$rc" 0
  check "$name: verification.ok" "$(jq '.verification.ok' "$json")" true
  check "$name: thread rows not ok" \
    "$(jq '[.verification.threads[] | select(.ok | not)] | length' "$json")" 0
  check "$name: partitions with pages off their node" \
    "$(jq '[.verification.partitions[] | select(.planned_node != null and .pages_on_node != .pages)] | length' "$json")" 0
  check "$name: threads outside their channel's nodes" \
    "$(jq -r --slurpfile topo "$topo" "[$misplaced] | if . == [] then \"none\" else join(\"; \") end" "$json")" none
  check "$name: unbound threads" \
    "$(jq '[.channels[].threads[] | select(.cpus == null)] | length' "$json")" 0
}

# bind, once per NIC: everything on that NIC's node.
# shellcheck disable=SC2086 # one positional parameter per NIC node
set -- $nic_nodes
for ifname in $nic_names; do
  node=$1
  shift
  plan_verify "bind-$ifname" --policy bind --nic "$ifname"
  check "bind-$ifname: channel nodes" \
    "$(jq -c '[.channels[].numa_node] | unique' "$work/bind-$ifname.json")" "[$node]"
  check "bind-$ifname: buffer bytes on node $node" \
    "$(jq --argjson n "$node" '[.channels[] | select(.numa_node == $n) | .buffer_bytes] | add' "$work/bind-$ifname.json")" \
    "$((64 << 20))"
  check "bind-$ifname: partitions with pages off node $node" \
    "$(jq --argjson n "$node" '[.verification.partitions[] | select(.by_node[$n | tostring] != .pages)] | length' "$work/bind-$ifname.json")" 0
done

for policy in mts nmts; do
  plan_verify "$policy" --policy "$policy"
  check "$policy: channels with net threads off a NIC node" \
    "$(jq --argjson nics "$nic_nodes_json" '[.channels[] | select(any(.threads[]; .role == "net-send" or .role == "net-recv")) | select(.numa_node as $n | $nics | index([$n]) | not)] | length' "$work/$policy.json")" 0
  check "$policy: one node per channel" \
    "$(jq '[.channels[] | select((.nodes | length) != 1)] | length' "$work/$policy.json")" 0
done

plan_verify smts --policy smts
per_socket=$((SLUICE_VM_NODES / SLUICE_VM_SOCKETS))
check "smts: nodes per channel (one socket each)" \
  "$(jq -c '[.channels[].nodes | length] | unique' "$work/smts.json")" "[$per_socket]"
check "smts: channels with net threads off a NIC's socket" \
  "$(jq --argjson nics "$nic_nodes_json" '[.channels[] | select(any(.threads[]; .role == "net-send" or .role == "net-recv")) | select(any(.nodes[]; . as $n | $nics | index([$n])) | not)] | length' "$work/smts.json")" 0

echo
if [ "$fails" -ne 0 ]; then
  echo "plan-verify: $fails check(s) failed"
  exit 1
fi
echo "plan-verify: all checks passed"
