#!/usr/bin/env bash
# The README's main job: set up, build, then `sluice demo`: a daemon on loopback, a
# generated data set (one big file + a tree of small files), a verified push, a
# byte-for-byte comparison and the summary. Extra arguments go to `sluice demo`
# (e.g. --big 4GiB --small-files 50000 --json).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
cargo build --release --locked -q -p sluice
bin=target/release/sluice

echo "== this machine"
"$bin" topo
echo
echo "== the transfer"
"$bin" demo "$@"
