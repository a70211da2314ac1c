#!/usr/bin/env bash
# Installs what building and testing sluice needs on a Debian machine (idempotent).
set -euo pipefail

need_apt=()
for pkg in libhwloc-dev libudev-dev hwloc pkg-config util-linux rsync iproute2 iputils-ping iperf3 \
  openssl tcpdump openssh-client openssh-server \
  prometheus zsh fish man-db groff-base lintian dpkg-dev systemd \
  gfal2 gfal2-plugin-http gfal2-util-scripts python3-gfal2-util davix \
  python3-venv python3-dev strace linux-perf; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if ((${#need_apt[@]})); then
  echo "setup: installing ${need_apt[*]}" >&2
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "setup: cargo not found: install Rust (rustup, stable >= 1.88) first" >&2
  exit 1
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
