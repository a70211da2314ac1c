#!/usr/bin/env bash
# The README's main job: set up, build, and show sluice deciding and proving placement on
# this machine and on a 2-socket data-transfer node.
#
# The transfer engine (daemon + client over loopback) is issue 3; until it lands, the
# main job is the foundation it stands on: discover the machine, plan every thread and
# buffer, apply the plan here and verify it from the kernel.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo build --release --locked -q
bin=target/release/sluice

echo "== this machine"
"$bin" topo
echo
echo "== plan for this machine, applied and verified from the kernel"
"$bin" plan --apply --verify --explain
echo
echo "== the same job on a 2-socket DTN (fixture), NIC eth1 on node 1, policy mts"
"$bin" plan --topology testdata/topologies/dtn-2x-e5-2643-2nic.xml --nic eth1 --policy mts --streams 4 --io-threads 4
echo
echo "demo: ok"
