#!/bin/sh
# numa-vm scenario: capture the guest's hwloc topology (with I/O devices) as XML.
# Needs lstopo-no-graphics in the guest: see tests/numa-vm/capture-fixture.sh.
set -e
lstopo-no-graphics --of console --filter io:all
lstopo-no-graphics --of xml --filter io:all "$SLUICE_VM_OUT/topology.xml"
echo "topology.xml: $(wc -c <"$SLUICE_VM_OUT/topology.xml") bytes"
