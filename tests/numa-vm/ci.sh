#!/usr/bin/env bash
# CI entry for the emulated NUMA machines: real transfers in the 2-node shape (NIC and disk on
# node 1) with placement read from the kernel, sized to fit in a few minutes on the 2-core CI
# machine. Called from .ci/run; the full set (2n and 4n, every scenario, 64 MiB) is
# `tests/numa-vm/transfer.sh`.
#
#   tests/numa-vm/ci.sh [transfer.sh options...]     e.g. --no-build when sluice is built
#
# Environment: SLUICE_VM_CI_SCENARIOS (default "bind mts os"), SLUICE_VM_CI_MIB (default 16).
# Exit status: transfer.sh's (0 pass, 1 a scenario failed, 124 VM timeout, 125 harness error).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
exec "$HERE/transfer.sh" --shape 2n \
  --scenarios "${SLUICE_VM_CI_SCENARIOS:-bind mts os}" \
  --mib "${SLUICE_VM_CI_MIB:-16}" --timeout 900 \
  --env SLUICE_XFER_MIN_SAMPLES=20 "$@"
