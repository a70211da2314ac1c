#!/usr/bin/env bash
# CI entry for the emulated NUMA machines: real transfers in the 2-node shape (NIC and disk on
# node 1) with placement read from the kernel, sized to fit in a few minutes on the 2-core CI
# machine, then adaptive placement's proof in the same shape (tests/numa-vm/adapt.sh: one
# more boot, ~40 s). Called from .ci/run; the full set (2n and 4n, every scenario, 64 MiB) is
# `tests/numa-vm/transfer.sh` and `tests/numa-vm/adapt.sh`.
#
#   tests/numa-vm/ci.sh [transfer.sh options...]     e.g. --no-build when sluice is built
#
# Environment: SLUICE_VM_CI_SCENARIOS (default "bind mts os"), SLUICE_VM_CI_MIB (default 16),
# SLUICE_VM_CI_ADAPT (default 1; 0 skips the adaptive placement proof).
# Exit status: the first failure's (0 pass, 1 a scenario failed, 124 VM timeout, 125 harness
# error).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
rc=0
"$HERE/transfer.sh" --shape 2n \
  --scenarios "${SLUICE_VM_CI_SCENARIOS:-bind mts os}" \
  --mib "${SLUICE_VM_CI_MIB:-16}" --timeout 900 \
  --env SLUICE_XFER_MIN_SAMPLES=20 "$@" || rc=$?
if [[ ${SLUICE_VM_CI_ADAPT:-1} != 0 ]]; then
  # the binary transfer.sh used (built by it, or named with --bin)
  bin=()
  while [[ $# -gt 0 ]]; do
    [[ $1 == --bin && $# -ge 2 ]] && bin=(--bin "$2")
    shift
  done
  [[ ${#bin[@]} -gt 0 ]] || bin=(--no-build)
  arc=0
  "$HERE/adapt.sh" --shape 2n "${bin[@]}" --timeout 600 || arc=$?
  [[ $rc -ne 0 ]] || rc=$arc
fi
exit "$rc"
