#!/usr/bin/env bash
# Builds the Debian package of sluice (issue 22) with cargo-deb:
#   scripts/package.sh [OUT_DIR]        (default: target/debian)
# The binary (release build), /etc/sluice/sluice.toml (a conffile), the man pages and
# bash/zsh/fish completions generated from the binary's own clap definition, the hardened
# unit (packaging/sluice.service) and a `sluice` system user created on install
# (systemd-sysusers, packaging/sluice.sysusers). Dependencies come from the linked
# libraries (dpkg-shlibdeps, `$auto`). lintian runs on the result when installed and
# must be clean (overrides in packaging/sluice.lintian-overrides, each justified).
# The last line printed is the .deb's path.
set -euo pipefail

cd "$(dirname "$0")/.."
out=${1:-target/debian}
gen=target/release/package-assets

if ! command -v cargo-deb >/dev/null 2>&1; then
  echo "package: installing cargo-deb" >&2
  cargo install --locked cargo-deb >&2
fi

echo "package: release build" >&2
cargo build --release --locked -p sluice >&2
bin=target/release/sluice

# Man pages and completions from the binary just built: they cannot drift from --help.
rm -rf "$gen"
mkdir -p "$gen/man" "$gen/completions"
"$bin" man "$gen/man" >/dev/null
gzip -9n "$gen"/man/*.1
"$bin" completions bash >"$gen/completions/sluice"
"$bin" completions zsh >"$gen/completions/_sluice"
"$bin" completions fish >"$gen/completions/sluice.fish"

mkdir -p "$out"
deb=$(cargo deb -p sluice --no-build --locked --strip --output "$out" | tail -n 1)
[ -f "$deb" ] || { echo "package: cargo deb made no package ($deb)" >&2; exit 1; }

if command -v lintian >/dev/null 2>&1; then
  echo "package: lintian" >&2
  lintian --fail-on error,warning "$deb" >&2
else
  echo "package: SKIPPED lintian: not installed (apt-get install -y lintian)" >&2
fi
echo "$deb"
