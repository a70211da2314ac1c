#!/usr/bin/env bash
# Adaptive placement proven in the emulated NUMA machines (issue 17 part 6): in each shape a
# paced push with bound threads, a busy loop pinned on the core of the client's io-read-0,
# and the kernel's read-back showing the thread on another core of its node, its buffer pages
# still on the node, the move in the summary (tests/numa-vm/scenarios/adapt.sh).
#
#   tests/numa-vm/adapt.sh [--shape 2n|4n|all] [--bin PATH] [--no-build] [--out DIR]
#                          [--timeout S] [--env NAME=VALUE] [--keep] [--verbose]
#
# Builds sluice in release unless --bin/--no-build. One VM per shape, one at a time. Exit
# status: 0 when every shape passed, else the first failing shape's run.sh status (1: the
# check failed; 124: VM timeout; 125: harness error); 1 when cargo build fails; 2 usage.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PROG=numa-vm-adapt

die() { echo "$PROG: error: $*" >&2; exit 125; }
usage_error() { echo "$PROG: usage error: $*" >&2; exit 2; }
note() { echo "$PROG: $*" >&2; }

SHAPES=(2n 4n)
OUT=
BUILD=1
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
TIMEOUT=600
PASS=()
need_arg() { [[ $# -ge 2 && -n $2 ]] || usage_error "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --shape)
      need_arg "$@"
      case $2 in
        all) SHAPES=(2n 4n) ;;
        2n | 4n) SHAPES=("$2") ;;
        *) usage_error "unknown shape '$2' (2n, 4n or all)" ;;
      esac
      shift 2
      ;;
    --out) need_arg "$@"; OUT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --bin) need_arg "$@"; BIN=$2; BUILD=0; shift 2 ;;
    --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
    --env) need_arg "$@"; PASS+=(--env "$2"); shift 2 ;;
    --keep | --verbose) PASS+=("$1"); shift ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout must be a positive number of seconds"
OUT=${OUT:-$REPO/.numa-vm/adapt/$(date +%Y%m%d-%H%M%S)}

JQ=$(command -v jq) || die "jq is missing (apt-get install jq; tests/numa-vm/transfer.sh installs it)"
if [[ $BUILD -eq 1 ]]; then
  note "cargo build --release -p sluice"
  if ! (cd "$REPO" && cargo build --release -p sluice); then
    echo "$PROG: error: cargo build --release -p sluice failed" >&2
    exit 1
  fi
fi
[[ -x $BIN ]] || die "no sluice binary at $BIN"

rc_all=0
for shape in "${SHAPES[@]}"; do
  mkdir -p "$OUT/$shape"
  note "shape $shape: booting (results in $OUT/$shape)"
  t0=$SECONDS
  rc=0
  "$HERE/run.sh" --shape "$shape" --bin "$BIN" --bin "$JQ" \
    --script "$HERE/scenarios/adapt.sh" --out "$OUT/$shape" --timeout "$TIMEOUT" \
    --log "$OUT/$shape/console.log" "${PASS[@]}" | tee "$OUT/$shape/output.txt" || rc=${PIPESTATUS[0]}
  note "shape $shape: run.sh exit $rc after $((SECONDS - t0)) s"
  if [[ $rc -ne 0 && $rc_all -eq 0 ]]; then
    rc_all=$rc
  fi
done
exit "$rc_all"
