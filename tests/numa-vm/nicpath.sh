#!/usr/bin/env bash
# The NIC path proven (issue 17 part 6): two 2n guests whose NICs (node 1 of each) are joined
# by QEMU's socket network backend; one pushes to the other over that link, and the
# receiving guest checks from /proc that its receiving threads and buffer slots stayed on
# the NIC's node (scenarios/nicpath-recv.sh, scenarios/nicpath-send.sh).
#
#   tests/numa-vm/nicpath.sh [--bin PATH] [--no-build] [--out DIR] [--timeout S] [--env N=V]
#
# Exit status: 0 when both guests passed, else the receiving guest's run.sh status, else
# the sending one's (1 failed, 124 VM timeout, 125 harness error); 2 on a usage error.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
PROG=numa-vm-nicpath
die() { echo "$PROG: error: $*" >&2; exit 125; }
usage_error() { echo "$PROG: usage error: $*" >&2; exit 2; }
BIN=${CARGO_TARGET_DIR:-$REPO/target}/release/sluice
BUILD=1
OUT=
TIMEOUT=600
PASS=()
need_arg() { [[ $# -ge 2 && -n $2 ]] || usage_error "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) need_arg "$@"; BIN=$2; BUILD=0; shift 2 ;;
    --no-build) BUILD=0; shift ;;
    --out) need_arg "$@"; OUT=$2; shift 2 ;;
    --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
    --env) need_arg "$@"; PASS+=(--env "$2"); shift 2 ;;
    -h | --help) sed -n '2,11p' "$0"; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done
OUT=${OUT:-$REPO/.numa-vm/nicpath/$(date +%Y%m%d-%H%M%S)}
JQ=$(command -v jq) || die "jq is missing (apt-get install jq)"
if [[ $BUILD -eq 1 ]]; then
  (cd "$REPO" && cargo build --release -p sluice) || { echo "$PROG: error: cargo build failed" >&2; exit 1; }
fi
[[ -x $BIN ]] || die "no sluice binary at $BIN"
# a free host port for the link (QEMU listens on loopback only)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
mkdir -p "$OUT/recv" "$OUT/send"
"$HERE/run.sh" --shape 2n --bin "$BIN" --bin "$JQ" --link "listen:$PORT" --guest-ip 15 \
  --script "$HERE/scenarios/nicpath-recv.sh" --out "$OUT/recv" --timeout "$TIMEOUT" \
  --log "$OUT/recv/console.log" "${PASS[@]}" >"$OUT/recv/output.txt" 2>&1 &
RECV=$!
trap 'kill $RECV 2>/dev/null || true' EXIT
# the connecting QEMU needs the listening one up
for _ in $(seq 1 100); do
  # listening (not a test connection: QEMU's socket backend takes the first one as its peer)
  [[ -n $(ss -ltnH "sport = :$PORT" 2>/dev/null) ]] && break
  kill -0 $RECV 2>/dev/null || break
  sleep 0.3
done
rc_send=0
"$HERE/run.sh" --shape 2n --bin "$BIN" --bin "$JQ" --link "connect:$PORT" --guest-ip 16 \
  --script "$HERE/scenarios/nicpath-send.sh" --out "$OUT/send" --timeout "$TIMEOUT" \
  --log "$OUT/send/console.log" "${PASS[@]}" >"$OUT/send/output.txt" 2>&1 || rc_send=$?
rc_recv=0
wait $RECV || rc_recv=$?
trap - EXIT
echo "--- receiving guest"; cat "$OUT/recv/output.txt"
echo "--- sending guest"; cat "$OUT/send/output.txt"
echo "$PROG: recv exit $rc_recv, send exit $rc_send (results in $OUT)"
[[ $rc_recv -ne 0 ]] && exit "$rc_recv"
exit "$rc_send"
