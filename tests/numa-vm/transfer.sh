#!/usr/bin/env bash
# Real transfers in emulated multi-node machines, placement verified from the kernel.
#
#   tests/numa-vm/transfer.sh [--shape 2n|4n|all] [--scenarios "LIST"] [--mib N] [--out DIR]
#                             [--no-build] [--bin PATH] [--timeout SECONDS] [--keep] [--verbose]
#
# Builds sluice in release (`cargo build --release -p sluice`), boots each shape with
# tests/numa-vm/run.sh (one VM per shape, one at a time) and runs
# tests/numa-vm/scenarios/transfer.sh in it: per scenario a daemon, a push and a pull over the
# guest's loopback, both trees compared byte for byte, every thread's CPU and affinity and
# every buffer page's node sampled from /proc while the data moves and compared with the plan.
# Scenarios: 2n "bind mts os", 4n "mts nmts smts manual" (see the scenario script).
#
# Prints each scenario's tables and a summary; the tables, results.tsv and console output of
# each shape land in DIR/<shape>/ (default .numa-vm/transfer/<date>). Exit status: 0 when every
# scenario of every shape passed; otherwise the first failing shape's run.sh status (1: a
# scenario failed; 124: the VM ran past --timeout; 125: the harness failed); 1 when
# `cargo build` fails; 2 on a usage error.
# Everything it needs comes from Debian packages (run.sh installs QEMU, busybox, cpio, hwloc,
# the kernel; this script installs jq, which is copied into the guest).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PROG=numa-vm-transfer

die() { echo "$PROG: error: $*" >&2; exit 125; }
usage_error() { echo "$PROG: usage error: $*" >&2; echo "Run '$0 --help' for usage." >&2; exit 2; }
note() { echo "$PROG: $*" >&2; }

usage() {
  cat <<EOF
Usage: $0 [options]

Builds sluice (release), boots the emulated NUMA shapes and runs real transfers in them with
placement verified from /proc (see tests/numa-vm/README.md, "Transfers").

Options:
  --shape S          2n, 4n or all (default all: 2n then 4n)
  --scenarios LIST   scenarios to run in each shape, e.g. "bind os" (default per shape:
                     2n "bind mts os", 4n "mts nmts smts manual")
  --mib N            size of the big file in MiB (default 64; 200 small files beside it)
  --out DIR          where each shape's tables and logs go (default .numa-vm/transfer/DATE)
  --no-build         use the existing binary, do not run cargo
  --bin PATH         the sluice binary (default target/release/sluice; implies --no-build)
  --timeout S        bound on each VM run in seconds (default 1500)
  --env NAME=VALUE   extra environment for the scenario (e.g. SLUICE_XFER_PIPELINE=inline)
  --keep, --verbose  passed to run.sh
  -h, --help         this help
EOF
}

SHAPES=(2n 4n)
SCENARIOS=
MIB=
OUT=
BUILD=1
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
TIMEOUT=1500
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
    --scenarios) need_arg "$@"; SCENARIOS=$2; shift 2 ;;
    --mib) need_arg "$@"; MIB=$2; shift 2 ;;
    --out) need_arg "$@"; OUT=$2; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --bin) need_arg "$@"; BIN=$2; BUILD=0; shift 2 ;;
    --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
    --env) need_arg "$@"; PASS+=(--env "$2"); shift 2 ;;
    --keep | --verbose) PASS+=("$1"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
[[ -z $MIB || $MIB =~ ^[1-9][0-9]*$ ]] || usage_error "--mib must be a positive number"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout must be a positive number of seconds"
[[ -z $SCENARIOS || $SCENARIOS =~ ^[a-z\ ]+$ ]] || usage_error "--scenarios: names separated by spaces"
OUT=${OUT:-$REPO/.numa-vm/transfer/$(date +%Y%m%d-%H%M%S)}

# jq runs in the guest (copied with its libraries by run.sh)
if ! command -v jq >/dev/null; then
  note "installing jq (Debian package)"
  mkdir -p "$REPO/.numa-vm"
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends jq >"$REPO/.numa-vm/apt-jq.log" 2>&1; then
    apt-get update -q >>"$REPO/.numa-vm/apt-jq.log" 2>&1 || die "apt-get update failed (see .numa-vm/apt-jq.log)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends jq >>"$REPO/.numa-vm/apt-jq.log" 2>&1 ||
      die "apt-get install jq failed (see .numa-vm/apt-jq.log)"
  fi
fi
JQ=$(command -v jq) || die "jq still missing"

if [[ $BUILD -eq 1 ]]; then
  note "cargo build --release -p sluice"
  t0=$SECONDS
  # a build failure is sluice's failure, not the harness's: exit 1, not 125
  if ! (cd "$REPO" && cargo build --release -p sluice); then
    echo "$PROG: error: cargo build --release -p sluice failed" >&2
    exit 1
  fi
  note "built in $((SECONDS - t0)) s"
fi
[[ -x $BIN ]] || die "no sluice binary at $BIN (build it: cargo build --release -p sluice)"

# the guest's sampler (std-only Rust, one file): ~100 ms samples without forking
SAMPLER=$REPO/.numa-vm/sluice-vm-sampler
if [[ ! -x $SAMPLER || $HERE/sampler.rs -nt $SAMPLER ]]; then
  mkdir -p "$REPO/.numa-vm"
  rustc -O --edition 2021 -o "$SAMPLER" "$HERE/sampler.rs" || die "rustc could not build $HERE/sampler.rs"
fi

ENVS=("${PASS[@]}")
[[ -z $SCENARIOS ]] || ENVS+=(--env "SLUICE_XFER_SCENARIOS=$SCENARIOS")
[[ -z $MIB ]] || ENVS+=(--env "SLUICE_XFER_MIB=$MIB")

mkdir -p "$OUT" || die "cannot create $OUT"
rc_all=0
declare -A SHAPE_RC=() SHAPE_SECS=()
for shape in "${SHAPES[@]}"; do
  mkdir -p "$OUT/$shape"
  note "shape $shape: booting (results in $OUT/$shape)"
  t0=$SECONDS
  rc=0
  # ext4 and a 512 MiB disk for the `manual` scenario, whose data lives on the disk
  "$HERE/run.sh" --shape "$shape" --bin "$BIN" --bin "$JQ" \
    --bin "$SAMPLER:/usr/local/bin/sluice-vm-sampler" --module ext4 --disk-mib 512 \
    --script "$HERE/scenarios/transfer.sh" --out "$OUT/$shape" --timeout "$TIMEOUT" \
    --log "$OUT/$shape/console.log" "${ENVS[@]}" | tee "$OUT/$shape/output.txt" || rc=${PIPESTATUS[0]}
  SHAPE_RC[$shape]=$rc
  SHAPE_SECS[$shape]=$((SECONDS - t0))
  if [[ $rc -ne 0 && $rc_all -eq 0 ]]; then
    rc_all=$rc
  fi
done

# summary: every scenario with its result, and the tables in one file
{
  for shape in "${SHAPES[@]}"; do
    for f in "$OUT/$shape"/*.md; do
      [[ -e $f ]] && cat "$f"
    done
  done
} >"$OUT/results.md"
echo
echo "=== numa-vm transfers (tables: $OUT/results.md)"
printf '%-6s %-8s %-6s %s\n' shape scenario result "guest seconds"
for shape in "${SHAPES[@]}"; do
  tsv=$OUT/$shape/results.tsv
  if [[ -s $tsv ]]; then
    while IFS=$'\t' read -r name r secs; do
      printf '%-6s %-8s %-6s %s\n' "$shape" "$name" "$([[ $r -eq 0 ]] && echo PASS || echo "FAIL")" "$secs"
    done <"$tsv"
  fi
  echo "$shape: run.sh exit ${SHAPE_RC[$shape]} after ${SHAPE_SECS[$shape]} s (boot + scenarios + poweroff)"
done
exit "$rc_all"
