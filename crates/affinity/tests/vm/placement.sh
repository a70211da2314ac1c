#!/bin/sh
# numa-vm scenario: run the affinity and buffers test binaries inside an emulated
# multi-node machine, where binding is real and nodes differ (on the one-node CI machine
# every page is on node 0 whatever we do). Host side, from the repository root:
#
#   bins=$(cargo test -p sluice-affinity -p sluice-buffers --no-run --message-format=json |
#          jq -r 'select(.executable != null and .profile.test) | .executable')
#   args=""; for b in $bins; do args="$args --bin $b:/usr/local/bin/sluice-test-$(basename $b)"; done
#   tests/numa-vm/run.sh --shape 2n $args --script crates/affinity/tests/vm/placement.sh
#
# Exits non-zero if any test binary fails.
# shellcheck source=tests/numa-vm/guest/lib.sh
. "$SLUICE_VM_LIB"

echo "placement tests on shape $SLUICE_VM_SHAPE: $SLUICE_VM_NODES nodes, CPUs $SLUICE_VM_NODE_CPUS"
fails=0
found=0
for bin in /usr/local/bin/sluice-test-*; do
  [ -x "$bin" ] || continue
  found=$((found + 1))
  echo "== $(basename "$bin")"
  if ! "$bin" --nocapture --test-threads=2; then
    echo "FAIL $(basename "$bin")"
    fails=$((fails + 1))
  fi
done
[ "$found" -gt 0 ] || { echo "no sluice-test-* binaries in the guest"; exit 1; }
echo "placement: $found binaries, $fails failed"
[ "$fails" -eq 0 ]
