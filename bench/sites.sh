#!/usr/bin/env bash
# Issue 14's benchmark: sluice between "sites" — encrypted big files against scp and
# rsync over ssh, the ssh start-up, third-party copies against a direct push, and the
# time to the first byte of an ssh-started one-file copy against rsync -e ssh.
#
# Three network namespaces on one bridge (no rate limit: the CPU decides, as the issue
# asks): A 10.78.0.2 (holds the data; the client of direct copies), B 10.78.0.3 (the
# destination: a sluice daemon and a real OpenSSH sshd), C 10.78.0.4 (the client of
# third-party copies). Sources and destinations are tmpfs, so neither disk decides.
# Cases run interleaved, run by run, their order reversed every other round; figures
# are medians. CPU is the CPU time of every process the script started (both sides,
# from a cpuacct cgroup) plus the machine's softirq time during each run, per GB moved.
#
#   bench/sites.sh [--size-mib N] [--reps N] [--out DIR] [--sluice BIN]
set -euo pipefail
cd "$(dirname "$0")/.."

SIZE_MIB=2048 REPS=3 OUT="" SLUICE=""
while [ $# -gt 0 ]; do
    case $1 in
        --size-mib) SIZE_MIB=$2; shift 2 ;;
        --reps) REPS=$2; shift 2 ;;
        --out) OUT=$2; shift 2 ;;
        --sluice) SLUICE=$2; shift 2 ;;
        -h | --help) sed -n 2,15p "$0"; exit 0 ;;
        *) echo "sites.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "sites.sh: needs root (namespaces, sshd)" >&2; exit 2; }
for t in ip sshd ssh scp rsync ssh-keygen; do
    command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || { echo "sites.sh: $t not installed" >&2; exit 2; }
done
if [ -z "$SLUICE" ]; then
    cargo build --release --locked -q -p sluice
    SLUICE=$PWD/target/release/sluice
fi
OUT=${OUT:-bench/runs/$(date +%F)-sites}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
W=$(mktemp -d /tmp/sluice-sites.XXXXXX)
T=$$
NS_A=sta$T NS_B=stb$T NS_C=stc$T BR=stbr$T
A=10.78.0.2 B=10.78.0.3 C=10.78.0.4
declare -a PIDS=()

# CPU seconds of every process this script started (both sides: daemons, sshd and its
# session processes, clients), from a cgroup they all inherit, plus the machine's softirq
# time (bench/lib/hosts.sh).
. bench/lib/hosts.sh
cpu_cgroup_enter "sluice-sites-$T"

cleanup() {
    set +e
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    sleep 0.5
    for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
    bridge_down "$BR" $NS_A $NS_B $NS_C
    for n in $NS_A $NS_B $NS_C; do rm -rf "/etc/netns/$n"; done
    umount "$W/a" "$W/b" 2>/dev/null
    rm -rf "$W"
    cpu_cgroup_leave
}
trap cleanup EXIT

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- the hosts -----------------------------------------------------------------------
bridge_up "$BR" "st$T" 10.78.0 $NS_A $NS_B $NS_C
for n in $NS_A $NS_B $NS_C; do
    mkdir -p "/etc/netns/$n"
    printf '127.0.0.1 localhost\n%s site-a\n%s site-b\n%s site-c\n' $A $B $C >"/etc/netns/$n/hosts"
done
inA() { ip netns exec "$NS_A" "$@"; }
inB() { ip netns exec "$NS_B" "$@"; }
inC() { ip netns exec "$NS_C" "$@"; }

mkdir -p "$W/a" "$W/b" "$W/home"
mount -t tmpfs -o size=$((SIZE_MIB * 2 + 512))m tmpfs "$W/a"
mount -t tmpfs -o size=$((SIZE_MIB * 3 + 512))m tmpfs "$W/b"
log "making a ${SIZE_MIB} MiB file (incompressible)"
head -c $((SIZE_MIB << 20)) /dev/urandom >"$W/a/big"
head -c 4096 /dev/urandom >"$W/a/small"
BYTES=$((SIZE_MIB << 20))
printf 'sites benchmark token %s\n' "$RANDOM$RANDOM" >"$W/token"
chmod 600 "$W/token"

# --- sshd on B -------------------------------------------------------------------------
ssh-keygen -q -t ed25519 -N '' -f "$W/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$W/client_key"
mkdir -p "$W/ssh"
cp "$W/client_key.pub" "$W/ssh/authorized_keys"
cat >"$W/sshd_config" <<CFG
ListenAddress $B
Port 22
HostKey $W/host_key
AuthorizedKeysFile $W/ssh/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
UsePAM no
StrictModes no
PidFile $W/sshd.pid
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
mkdir -p /run/sshd
# Started with `ip netns exec` directly (which execs the server), so that $! is the
# server itself and the cleanup's kill reaches it.
ip netns exec "$NS_B" /usr/sbin/sshd -D -e -f "$W/sshd_config" 2>"$W/sshd.log" &
PIDS+=($!)
echo "$B $(cut -d' ' -f1,2 "$W/host_key.pub")" >"$W/known_hosts"
cat >"$W/ssh_config" <<CFG
Host *
  IdentityFile $W/client_key
  UserKnownHostsFile $W/known_hosts
  StrictHostKeyChecking yes
  BatchMode yes
  User root
CFG
SSH="ssh -F $W/ssh_config"

# --- sluice daemons: B (destination) and A (source of third-party copies) ----------------
export SLUICE_KNOWN_HOSTS=$W/sluice_known_hosts SLUICE_STATE_DIR=$W/state
ip netns exec "$NS_B" "$SLUICE" serve --root "$W/b" --listen "$B:7878" --token-file "$W/token" \
    --encrypt never 2>"$W/daemon-b.log" &
PIDS+=($!)
ip netns exec "$NS_A" "$SLUICE" serve --root "$W/a" --listen "$A:7878" --token-file "$W/token" \
    --state-dir "$W/state-a" 2>"$W/daemon-a.log" &
PIDS+=($!)
for _ in $(seq 100); do
    inB ss -Hltn "sport = :22" | grep -q . && inB ss -Hltn "sport = :7878" | grep -q . &&
        inA ss -Hltn "sport = :7878" | grep -q . && break
    sleep 0.1
done

# --- the cases ---------------------------------------------------------------------------
TOK=(--token-file "$W/token")
case_cmd() { # NAME -> runs one copy of the big file into $W/b/out
    case $1 in
        sluice-clear) inA "$SLUICE" cp --encrypt never "${TOK[@]}" "$W/a/big" "sluice://$B:7878/out" ;;
        sluice-tls) inA "$SLUICE" cp "${TOK[@]}" "$W/a/big" "sluice://$B:7878/out" ;;
        sluice-ssh) inA "$SLUICE" cp -e "$SSH" --sluice-path "$SLUICE" "$W/a/big" "root@$B:$W/b/out" ;;
        sluice-3rd) inC "$SLUICE" cp "${TOK[@]}" "sluice://$A:7878/big" "sluice://$B:7878/out" ;;
        scp-aes128gcm) inA scp -q -F "$W/ssh_config" -c aes128-gcm@openssh.com "$W/a/big" "root@$B:$W/b/out" ;;
        rsync-ssh) inA rsync -e "$SSH" "$W/a/big" "root@$B:$W/b/out" ;;
        small-sluice-ssh) inA "$SLUICE" cp -e "$SSH" --sluice-path "$SLUICE" "$W/a/small" "root@$B:$W/b/out" ;;
        small-rsync-ssh) inA rsync -e "$SSH" "$W/a/small" "root@$B:$W/b/out" ;;
    esac
}
echo "case,rep,status,seconds,bytes,cpu_s" >"$OUT/raw.csv"
run_one() { # NAME REP BYTES
    rm -f "$W/b/out"
    sync
    local t0 c0 t1 c1 st=ok
    c0=$(cpu_busy) t0=$(date +%s.%N)
    case_cmd "$1" >"$W/run.out" 2>"$W/run.err" || st=fail
    t1=$(date +%s.%N) c1=$(cpu_busy)
    if [ $st = ok ] && [ "$(stat -c %s "$W/b/out" 2>/dev/null || echo 0)" != "$3" ]; then st=wrong-size; fi
    [ $st = ok ] || log "$1 rep $2: $st: $(head -c 300 "$W/run.err")"
    echo "$1,$2,$st,$(awk -v a="$t1" -v b="$t0" 'BEGIN{printf "%.3f", a-b}'),$3,$(awk -v a="$c1" -v b="$c0" 'BEGIN{printf "%.2f", a-b}')" >>"$OUT/raw.csv"
}

BIG=(sluice-clear sluice-tls sluice-ssh sluice-3rd scp-aes128gcm rsync-ssh)
SMALL=(small-sluice-ssh small-rsync-ssh)
# Warm-up (pins the daemon's certificate for the TLS cases; not recorded).
for c in sluice-tls sluice-3rd; do case_cmd "$c" >/dev/null 2>&1 || true; rm -f "$W/b/out"; done
for r in $(seq "$REPS"); do
    order=("${BIG[@]}")
    [ $((r % 2)) = 0 ] && order=($(printf '%s\n' "${BIG[@]}" | tac))
    for c in "${order[@]}"; do log "rep $r: $c"; run_one "$c" "$r" "$BYTES"; done
done
for r in $(seq $((REPS < 5 ? 5 : REPS))); do
    for c in "${SMALL[@]}"; do run_one "$c" "$r" 4096; done
done

# --- the report ----------------------------------------------------------------------------
python3 - "$OUT" "$SIZE_MIB" "$REPS" "$("$SLUICE" --version)" <<'PY'
import csv, statistics, sys
out, size_mib, reps, version = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = list(csv.DictReader(open(f"{out}/raw.csv")))
def med(case, key):
    v = [float(r[key]) for r in rows if r["case"] == case and r["status"] == "ok"]
    return statistics.median(v) if v else None
fails = {r["case"] for r in rows if r["status"] != "ok"}
rate = {}
lines = [f"# sites benchmark ({version})", "",
         f"{size_mib} MiB incompressible file, tmpfs to tmpfs, between network namespaces on one",
         f"bridge (no rate limit), {reps} interleaved runs per case, medians. CPU: every process of",
         "both sides (a cpuacct cgroup) plus the machine's softirq time during the run, per GB.", "",
         "| case | median s | MB/s | CPU s/GB | vs scp | vs rsync -e ssh | vs sluice clear |",
         "|---|---|---|---|---|---|---|"]
big = ["sluice-clear", "sluice-tls", "sluice-ssh", "sluice-3rd", "scp-aes128gcm", "rsync-ssh"]
for c in big:
    s = med(c, "seconds"); cpu = med(c, "cpu_s")
    if s: rate[c] = size_mib * 1.048576 / s
for c in big:
    s = med(c, "seconds"); cpu = med(c, "cpu_s")
    if not s:
        lines.append(f"| {c} | failed | | | | | |"); continue
    gb = size_mib * 1.048576 / 1000
    r = rate[c]
    ratio = lambda p: f"{r / rate[p]:.2f}x" if p in rate else "-"
    lines.append(f"| {c}{' (some runs failed)' if c in fails else ''} | {s:.2f} | {r:.0f} | {cpu / gb:.2f} | {ratio('scp-aes128gcm')} | {ratio('rsync-ssh')} | {ratio('sluice-clear')} |")
lines += ["", "Third-party (`sluice-3rd`, client in a third namespace) against the direct push"
          " (`sluice-tls`, client on the source host): "
          + (f"{rate['sluice-3rd'] / rate['sluice-tls']:.2f}x" if {'sluice-3rd', 'sluice-tls'} <= rate.keys() else "n/a"), ""]
a, b = med("small-sluice-ssh", "seconds"), med("small-rsync-ssh", "seconds")
lines += ["## ssh start-up: a 4 KiB file, command start to exit (median)", "",
          "| tool | seconds |", "|---|---|",
          f"| sluice cp over ssh | {a if a is None else f'{a:.3f}'} |",
          f"| rsync -e ssh | {b if b is None else f'{b:.3f}'} |", ""]
open(f"{out}/results.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
cp "$W"/daemon-*.log "$OUT/" 2>/dev/null || true
