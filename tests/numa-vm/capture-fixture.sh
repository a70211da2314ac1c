#!/usr/bin/env bash
# Re-capture testdata/topologies/qemu-2node-nic1.xml: boot the numa-vm "2n" shape (2 nodes x 2
# CPUs, virtio NIC eth0 and virtio disk vda on node 1), run lstopo-no-graphics inside it, check
# the XML on the host and save it.
#   tests/numa-vm/capture-fixture.sh [DEST]     (default: testdata/topologies/qemu-2node-nic1.xml)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
DEST=${1:-$REPO/testdata/topologies/qemu-2node-nic1.xml}

die() { echo "capture-fixture: error: $*" >&2; exit 1; }

if ! command -v lstopo-no-graphics >/dev/null || ! command -v hwloc-calc >/dev/null; then
  echo "capture-fixture: installing hwloc" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends hwloc >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends hwloc >/dev/null; } ||
    die "cannot install the hwloc package (lstopo-no-graphics, hwloc-calc)"
fi
LSTOPO=$(command -v lstopo-no-graphics)

TMP=$(mktemp -d /tmp/sluice-capture.XXXXXX)

# the guest runs: lstopo-no-graphics --of xml --filter io:all $SLUICE_VM_OUT/topology.xml
"$HERE/run.sh" --shape 2n --bin "$LSTOPO" --script "$HERE/scenarios/lstopo-xml.sh" \
  --out "$TMP" --timeout 300 || die "the VM run failed (exit $?)"
XML=$TMP/topology.xml
[[ -s $XML ]] || die "the guest returned no topology.xml"

# checks on the host, with the host's hwloc
expect() { # WHAT GOT WANT
  [[ $2 == "$3" ]] || die "$1: got '$2', want '$3' (captured XML kept in $TMP)"
  echo "capture-fixture: ok $1 = $2" >&2
}
lstopo-no-graphics -i "$XML" --of console >/dev/null || die "host lstopo cannot load the captured XML (kept in $TMP)"
expect "NUMA nodes" "$(hwloc-calc -i "$XML" --number-of numanode machine:0)" 2
expect "PUs" "$(hwloc-calc -i "$XML" --number-of pu machine:0)" 4
expect "node 0 PUs" "$(hwloc-calc -i "$XML" -I pu numa:0)" "0,1"
expect "node 1 PUs" "$(hwloc-calc -i "$XML" -I pu numa:1)" "2,3"
expect "eth0 node" "$(hwloc-calc -i "$XML" -I numa os=eth0)" 1
expect "vda node" "$(hwloc-calc -i "$XML" -I numa os=vda)" 1
grep -q '<info name="Address" value="52:54:00:12:00:01"/>' "$XML" || die "eth0's MAC 52:54:00:12:00:01 is not in the XML (kept in $TMP)"
grep -q '>10 21 21 10 </u64values>' "$XML" || die "the 10/21 NUMA distance matrix is not in the XML (kept in $TMP)"

mkdir -p "$(dirname "$DEST")"
cp "$XML" "$DEST"
rm -rf "$TMP"
echo "capture-fixture: saved $DEST" >&2
