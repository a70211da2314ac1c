#!/usr/bin/env bash
# Builds every fuzz target of sluice-wire and runs each for N seconds (default 10).
#
#   fuzz/run.sh [SECONDS]        e.g. fuzz/run.sh 60
#   FUZZ_TARGETS="frame manifest" fuzz/run.sh 5
#
# Needs a nightly toolchain (rustup toolchain install nightly) and cargo-fuzz, which this
# script installs from crates.io when it is missing. A crash leaves its input under
# fuzz/artifacts/TARGET/ and fails the script; replay it with
#   cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...
# Each target starts from the committed seeds in fuzz/seeds/ (regenerate them with
#   SLUICE_FUZZ_SEEDS=fuzz/seeds cargo test -p sluice-wire --test fuzz_seeds)
# and keeps what it learns in fuzz/corpus/TARGET/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")"

seconds="${1:-${FUZZ_SECONDS:-10}}"
targets="${FUZZ_TARGETS:-frame chunk_header manifest handshake}"

if ! cargo +nightly --version >/dev/null 2>&1; then
  echo "fuzz: a nightly toolchain is needed: rustup toolchain install nightly" >&2
  exit 2
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "fuzz: installing cargo-fuzz" >&2
  cargo install cargo-fuzz --locked
fi

cargo +nightly fuzz build
status=0
for t in $targets; do
  mkdir -p "corpus/$t"
  echo "== fuzz $t for ${seconds}s"
  # -malloc_limit_mb: any single allocation above 4 MiB is a bug (the largest legal one
  # is the 1 MiB frame buffer); -rss_limit_mb bounds the whole process.
  if ! cargo +nightly fuzz run "$t" "$PWD/corpus/$t" "$PWD/seeds" -- \
      -max_total_time="$seconds" -malloc_limit_mb=4 -rss_limit_mb=1024 -print_final_stats=1 \
      2>"corpus/$t.log"; then
    echo "fuzz: $t FAILED; last lines of its log:" >&2
    tail -n 40 "corpus/$t.log" >&2
    status=1
  else
    grep -E "stat::number_of_executed_runs|stat::new_units_added|Done [0-9]+ runs" "corpus/$t.log" | sed "s/^/  /" || true
  fi
done
exit "$status"
