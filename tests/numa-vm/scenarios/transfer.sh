#!/bin/sh
# numa-vm scenario: real transfers (`sluice serve` + `sluice cp` over the guest's loopback),
# with the placement of every thread and buffer page read from the kernel while the data
# moves, and compared with the plan each process printed. Run it through
# tests/numa-vm/transfer.sh, which builds sluice and boots the shapes:
#
#   tests/numa-vm/transfer.sh --shape 2n          # bind, mts, os
#   tests/numa-vm/transfer.sh --shape 4n          # mts, nmts, smts, manual
#
# or by hand:
#   tests/numa-vm/run.sh --shape 2n --bin target/release/sluice --bin /usr/bin/jq \
#       --script tests/numa-vm/scenarios/transfer.sh --out /tmp/xfer-2n
#
# For each scenario (a placement policy): one daemon, one push (`cp -r SRC sluice://ADDR/`)
# and one pull (`cp -r sluice://ADDR/src BACK/`), both trees compared byte for byte with
# the source. While each client runs, both processes are sampled about every 100 ms:
# /proc/PID/task/*/stat (field 39: the CPU the thread last ran on; the name is the thread's
# comm, `<role>-<index>` for data-path threads), Cpus_allowed_list of every thread, and
# /proc/PID/numa_maps (pages per node of every buffer pool, found by the address range
# `--log info` prints for each channel). Tables of planned vs observed go to stdout and to
# $SLUICE_VM_OUT/<scenario>.md; $SLUICE_VM_OUT/results.tsv has one line per scenario.
#
# A scenario fails (exit 1) when a transfer fails or differs, when no data-path thread was
# sampled, or, for a policy that binds: a data-path thread ran on or was allowed a CPU
# outside its planned set, or a buffer page was (in any sample) off its planned node, or a
# pool was not entirely present, or sluice logged that it could not pin a thread. A thread is
# judged from its first sample on its planned CPUs with its planned mask: samples before that
# are its spawn window (std names a thread before the closure that pins it runs), counted in
# their own column; a thread seen once, in that window, and gone is "inconclusive", not failed.
# For `os` the kernel's choices are reported, not judged.
# Control threads (main, conn, scan, control-tx/rx) are reported; they fail the scenario
# only with SLUICE_XFER_STRICT_CONTROL=1 (the engine does not pin them).
#
# Environment (run.sh --env): SLUICE_XFER_SCENARIOS (default by shape: 2n "bind mts os",
# 4n "mts nmts smts manual"), SLUICE_XFER_MIB (big file, default 64), SLUICE_XFER_SMALL
# (small files, default 200), SLUICE_XFER_PIPELINE (client's --pipeline, default queued:
# every role runs on the client side), SLUICE_XFER_MIN_SAMPLES (samples with data-path
# threads a client must give, else the transfer is repeated, up to 4 runs; default 20),
# SLUICE_XFER_TIMEOUT (seconds per transfer, default 300). The `manual` scenario keeps its
# data on the shape's first disk (ext4: run.sh --module ext4 --disk-mib 512).
# shellcheck source=tests/numa-vm/guest/lib.sh
. "$SLUICE_VM_LIB"

command -v sluice >/dev/null || { echo "FAIL no sluice in the guest: --bin target/release/sluice"; exit 2; }
command -v jq >/dev/null || { echo "FAIL no jq in the guest: add --bin /usr/bin/jq"; exit 2; }

case $SLUICE_VM_SHAPE in
  2n) default_scenarios="bind mts os" ;;
  4n) default_scenarios="mts nmts smts manual" ;;
  *) default_scenarios="mts os" ;;
esac
SCENARIOS=${SLUICE_XFER_SCENARIOS:-$default_scenarios}
MIB=${SLUICE_XFER_MIB:-64}
SMALL=${SLUICE_XFER_SMALL:-200}
PIPELINE=${SLUICE_XFER_PIPELINE:-queued}
MIN_SAMPLES=${SLUICE_XFER_MIN_SAMPLES:-20}
XFER_TIMEOUT=${SLUICE_XFER_TIMEOUT:-300}
STRICT_CONTROL=${SLUICE_XFER_STRICT_CONTROL:-0}
MAX_RUNS=4
JOB="--buffer-mem 64MiB --chunk-size 1MiB --streams 2 --io-threads 2"

W=/tmp/xfer
mkdir -p "$W"
RESULTS=$SLUICE_VM_OUT/results.tsv
: >"$RESULTS"

# Pages must stay where they were put while they are observed.
echo 0 >/proc/sys/kernel/numa_balancing
echo "shape $SLUICE_VM_SHAPE: $SLUICE_VM_NODES nodes, CPUs $SLUICE_VM_NODE_CPUS;" \
  "numa_balancing=$(cat /proc/sys/kernel/numa_balancing);" \
  "THP $(cat /sys/kernel/mm/transparent_hugepage/enabled); scenarios: $SCENARIOS"

uptime_s() { # whole seconds since boot, no fork
  read -r _up _idle </proc/uptime
  echo "${_up%.*}"
}
t_boot=$(uptime_s)

# --- topology as sluice sees it ------------------------------------------------------
echo
echo "=== sluice topo"
sluice topo
topo_rc=0
sluice topo --json >"$W/topo.json" || topo_rc=$?
if [ "$topo_rc" -ne 0 ]; then
  echo "FAIL sluice topo --json exited $topo_rc"
  VM_TOPO_FAILS=1
else
  vm_check_topo "$W/topo.json"
fi
printf 'topo\t%s\t%s\n' "$([ "$VM_TOPO_FAILS" -eq 0 ] && echo 0 || echo 1)" 0 >>"$RESULTS"
disk_node=""
disk_dev=""
for d in $SLUICE_VM_DISKS; do
  disk_node=${d#*,}
  disk_dev=$(vm_disk_by_serial "${d%%,*}") || disk_dev=""
  break
done

# --- data ----------------------------------------------------------------------------
# One MiB of random bytes, repeated MIB times, each copy after a distinct 16-byte marker:
# no two 1 MiB chunks of the big file are alike, so a misplaced chunk cannot compare equal.
SRC=$W/src
t0=$(uptime_s)
mkdir -p "$SRC/small/sub"
head -c 1048576 /dev/urandom >"$W/block"
i=0
while [ "$i" -lt "$MIB" ]; do
  printf 'sluice-blk-%05d' "$i"
  cat "$W/block"
  i=$((i + 1))
done >"$SRC/big"
i=0
while [ "$i" -lt "$SMALL" ]; do
  dir=$SRC/small
  [ $((i % 4)) -eq 0 ] && dir=$SRC/small/sub
  head -c $((i * 61 % 9000 + 1)) /dev/urandom >"$dir/f$i"
  i=$((i + 1))
done
echo
echo "data: $SRC: big $(wc -c <"$SRC/big") bytes + $SMALL small files, made in $(($(uptime_s) - t0)) s"

# --- sampling ------------------------------------------------------------------------
# sample_loop PID RAW STOPFILE DEADLINE: append samples of PID to RAW every ~100 ms until
# PID exits (or is a zombie), STOPFILE exists, or uptime passes DEADLINE (then PID is killed).
sample_loop() {
  _pid=$1
  _raw=$2
  _stop=$3
  _deadline=$4
  _n=0
  while [ ! -e "$_stop" ]; do
    read -r _stat 2>/dev/null <"/proc/$_pid/stat" || break
    _st=${_stat##*) }
    [ "${_st%% *}" = Z ] && break
    # between fork and exec the child is still the shell: wait for sluice
    read -r _comm 2>/dev/null <"/proc/$_pid/comm"
    if [ "$_comm" != sluice ]; then
      sleep 0.05
      continue
    fi
    _n=$((_n + 1))
    {
      echo "@T $_n $_pid"
      echo "@S"
      cat /proc/"$_pid"/task/*/stat
      echo "@A"
      grep -H Cpus_allowed_list /proc/"$_pid"/task/*/status
      echo "@V"
      cat "/proc/$_pid/maps"
      echo "@M"
      grep anon= "/proc/$_pid/numa_maps"
    } >>"$_raw" 2>/dev/null
    if [ $((_n % 10)) -eq 0 ] && [ "$(uptime_s)" -ge "$_deadline" ]; then
      echo "FAIL pid $_pid still running after ${XFER_TIMEOUT}s: killed"
      kill -9 "$_pid" 2>/dev/null
      break
    fi
    sleep 0.1
  done
}

# sample PID RAW STOPFILE TIMEOUT_S: sample_loop's job done by sluice-vm-sampler
# (tests/numa-vm/sampler.rs, shipped by transfer.sh), which keeps the ~100 ms period without
# forking; the shell loop above is the fallback
sample() {
  if command -v sluice-vm-sampler >/dev/null; then
    sluice-vm-sampler "$1" "$2" "$3" "$4"
  else
    sample_loop "$1" "$2" "$3" $(($(uptime_s) + $4))
  fi
}

# data_ticks RAW: samples in which a data-path thread was alive
data_ticks() {
  awk '/^@T / { t = $0 } /^[0-9]+ \((net-send|net-recv|io-read|io-write)-[0-9]+\) / { s[t] = 1 }
    END { n = 0; for (k in s) n++; print n }' "$1"
}

# plan_tsv JSON_WITH_PLAN: the plan as lines for analyze.awk
plan_tsv() {
  jq -r '.plan.channels[] | . as $c
    | (["C", $c.id, ($c.numa_node // "-"), $c.buffer_bytes, ($c.nodes | map(tostring) | join(","))] | @tsv),
      ($c.threads[] | ["T", $c.id, ($c.numa_node // "-"), .role, .index,
        (if .cpus == null then "-" else (.cpus | map(tostring) | join(",")) end),
        (if .manual then 1 else 0 end)] | @tsv)' "$1"
}

# pools_of LOG PID: "P pid channel node start end pages populate" from the `buffer pool:`
# lines that PID logged with --log info (populate: now, or on-demand for a client, whose
# pages appear as its job first uses them)
pools_of() {
  sed -n 's/.*buffer pool: channel=\([0-9]*\) node=\([^ ]*\) range=0x\([0-9a-f]*\)-0x\([0-9a-f]*\) populate=\([a-z-]*\).*/\1 \2 \3 \4 \5/p' "$1" |
    while read -r _c _node _s _e _pop; do
      case $_node in Some*) _node=${_node#Some(}; _node=${_node%)} ;; *) _node=- ;; esac
      printf 'P %s %s %s %016x %016x %d %s\n' "$2" "$_c" "$_node" "$((0x$_s))" "$((0x$_e))" "$(((0x$_e - 0x$_s) / 4096))" "$_pop"
    done
}

cat >"$W/analyze.awk" <<'AWK'
# analyze.awk -v proc=NAME -v strict_control=0|1 PLAN_TSV POOLS RAW
# RAW: samples from the sampler, possibly of several processes (repeated runs); POOLS: the
# pools of each of those processes (pools_of), matched to the samples by pid.
# Prints markdown rows (threads, then pools) and, last, "VERDICT fails=N checked=M ...".
#
# A data-path thread of a bound plan is judged per thread (tid): its samples until the
# first one with the planned mask and a planned CPU are the spawn window (std names a
# thread before its closure runs and pins it: it starts with its creator's mask) and are
# counted apart; it must reach that state, and every later sample must stay there.
function norm(list,   n, p, i, a, c, f, out) { # "0-1,4" / "1,0,4" -> "0,1,4"
  if (list == "" || list == "-") return "-"
  if (list in normc) return normc[list]
  delete f
  n = split(list, p, ",")
  for (i = 1; i <= n; i++) {
    if (p[i] ~ /-/) { split(p[i], a, "-"); for (c = a[1] + 0; c <= a[2] + 0; c++) f[c] = 1 }
    else if (p[i] != "") f[p[i] + 0] = 1
  }
  out = ""
  for (c = 0; c < 1024; c++) if (c in f) out = out "," c
  normc[list] = substr(out, 2)
  return normc[list]
}
function within(cpu, set) { return index("," set ",", "," cpu ",") > 0 }
function pad(hex) { hex = sprintf("%16s", hex); gsub(/ /, "0", hex); return "x" hex } # compared as strings
function datapath(comm) { return comm ~ /^(net-send|net-recv|io-read|io-write)-[0-9]+$/ }
function planned_of(comm,   role, idx) { # planned CPUs of a data-path thread ("-": unbound)
  role = comm; sub(/-[0-9]+$/, "", role)
  idx = comm; sub(/^.*-/, "", idx)
  if (!(role in nrole)) return ""
  return tcpus[role, idx % nrole[role]]
}
function observe(comm, cpu, mask) { # aggregate what a sample of comm showed
  ocpu[comm, cpu]++; osamples[comm]++
  if (!((comm, "c") in olist)) olist[comm, "c"] = ""
  if (!within(cpu, olist[comm, "c"])) olist[comm, "c"] = olist[comm, "c"] "," cpu
  if (mask != "" && !((comm, mask) in omask)) { omask[comm, mask] = 1; omasks[comm] = omasks[comm] " " mask }
}
function thread_sample(tid,   comm, cpu, mask, planned, key, good) {
  comm = tidcomm[tid]; cpu = tcpu[tid]; mask = (tid in tmask) ? tmask[tid] : ""
  if (!(comm in seen)) { seen[comm] = 1; comms[++ncomm] = comm }
  samples[comm]++
  planned = datapath(comm) ? planned_of(comm) : ""
  if (planned == "" || planned == "-") { observe(comm, cpu, mask); return }
  key = tpid SUBSEP tid
  if (!(key in tcomm)) { tcomm[key] = comm; nthr[comm]++ }
  good = within(cpu, planned) && (mask == "" || norm(mask) == planned)
  if (!(key in settled)) {
    if (!good) {
      pre[comm]++; prek[key]++
      if (!((comm, cpu, mask) in prel)) { prel[comm, cpu, mask] = 1; prelist[comm] = prelist[comm] "; cpu " cpu " mask " (mask == "" ? "?" : mask) }
      return
    }
    settled[key] = 1
  } else if (!good) {
    bad[comm]++
    if (!((comm, cpu, mask) in badl)) { badl[comm, cpu, mask] = 1; badlist[comm] = badlist[comm] " cpu " cpu " mask " mask }
  }
  observe(comm, cpu, mask)
}
function flush(   p, k, e, n, f, i, a, nodes, total, on, share, merged, tid) {
  if (tick == "") return
  ticks++
  for (tid in tidcomm) thread_sample(tid)
  for (p = 1; p <= npool; p++) {
    if (ppid[p] != tpid) continue
    total = 0; on = 0; nodes = ""; merged = 0
    delete cnt
    # every VMA (numa_maps line, extent from maps) overlapping the pool's range
    for (k = 0; k < nm; k++) {
      e = (maddr[k] in vend) ? vend[maddr[k]] : maddr[k]
      if (maddr[k] < pend[p] && e > pstart[p]) {
        if (maddr[k] < pstart[p] || e > pend[p]) merged = 1
        n = split(mline[k], f, " ")
        for (i = 1; i <= n; i++) if (f[i] ~ /^N[0-9]+=/) {
          split(substr(f[i], 2), a, "=")
          cnt[a[1] + 0] += a[2]; total += a[2]
          if (a[1] + 0 > maxnode) maxnode = a[1] + 0
        }
        if (pol[p] == "") pol[p] = f[2]
      }
    }
    if (total == 0) continue
    # a VMA reaching past the pool: merged with a neighbour (same flags and policy, e.g.
    # another pool on the same node); its pages are counted with the pool's
    if (merged) pmerged[p] = 1
    psamples[p]++
    for (i = 0; i <= maxnode; i++) if (i in cnt) nodes = nodes " N" i "=" cnt[i]
    if (pnode[p] != "-") {
      on = cnt[pnode[p] + 0] + 0
      share = on / total
      if (!(p in pminshare) || share < pminshare[p]) pminshare[p] = share
    }
    if (total >= pmax[p]) { pmax[p] = total; pbest[p] = substr(nodes, 2); pon[p] = on }
  }
  nm = 0
}
BEGIN { FS = "\t" }
FILENAME == ARGV[1] && $1 == "C" { cnode[$2] = $3; next }
FILENAME == ARGV[1] && $1 == "T" {
  role = $4
  k = role SUBSEP (nrole[role] + 0)
  nrole[role]++
  tchan[k] = $2; tnode[k] = $3; tcpus[k] = norm($6); tman[k] = $7
  if (role == "control" && $6 != "-") ctl = ctl "," $6
  next
}
FILENAME == ARGV[2] {
  split($0, f, " ")
  npool++
  ppid[npool] = f[2]; pchan[npool] = f[3]; pnode[npool] = f[4]
  pstart[npool] = "x" f[5]; pend[npool] = "x" f[6]; ppages[npool] = f[7]; ppop[npool] = f[8]
  next
}
/^@T / {
  flush(); tick = $0; split($0, f, " "); tpid = f[3]; sec = ""
  delete tidcomm; delete tcpu; delete tmask; delete vend
  next
}
/^@S$/ { sec = "S"; next }
/^@A$/ { sec = "A"; next }
/^@V$/ { sec = "V"; next }
/^@M$/ { sec = "M"; nm = 0; next }
sec == "S" {
  # "TID (COMM) STATE ...": sluice's thread names have no ") " in them
  i = index($0, "("); line = $0
  j = index(line, ") ")
  if (i == 0 || j == 0) next
  tid = substr(line, 1, i - 2) + 0
  comm = substr(line, i + 1, j - i - 1)
  n = split(substr(line, j + 2), f, " ")
  if (n < 37) next
  tidcomm[tid] = comm
  tcpu[tid] = f[37]
  if (datapath(comm)) dtick[tick] = 1
  next
}
sec == "A" {
  split($0, f, "/"); tid = f[5] + 0
  n = split($0, a, /[ \t]+/)
  if (tid in tidcomm) tmask[tid] = a[n]
  next
}
sec == "V" {
  split($0, f, " "); split(f[1], a, "-")
  vend[pad(a[1])] = pad(a[2])
  next
}
sec == "M" {
  split($0, f, " ")
  maddr[nm] = pad(f[1]); mline[nm] = $0; nm++
  next
}
function ranges(list,   n, p, i, out, lo, prev) { # "0,1,2,4" -> "0-2,4"
  if (list == "-" || list == "") return "-"
  n = split(list, p, ",")
  out = ""; lo = p[1]; prev = p[1]
  for (i = 2; i <= n + 1; i++) {
    if (i <= n && p[i] == prev + 1) { prev = p[i]; continue }
    out = out "," (lo == prev ? lo : lo "-" prev)
    if (i <= n) { lo = p[i]; prev = p[i] }
  }
  return substr(out, 2)
}
function observed(comm,   n, p, i, out, c) { # "2 (95%), 3 (5%)"
  if (!(comm in osamples)) return "-"
  n = split(norm(substr(olist[comm, "c"], 2)), p, ",")
  out = ""
  for (i = 1; i <= n; i++) {
    c = p[i]
    out = out ", " c " (" int(100 * ocpu[comm, c] / osamples[comm] + 0.5) "%)"
  }
  return substr(out, 3)
}
function row(comm,   m, role, k, chan, planned, verdict, bad1, j, nn, p, unsettled, brief, key, win) {
  m = omasks[comm]; sub(/^ /, "", m); if (m == "") m = "-"
  win = (comm in pre) ? pre[comm] " (" substr(prelist[comm], 3) ")" : "0"
  if (datapath(comm)) {
    role = comm; sub(/-[0-9]+$/, "", role)
    if (!(role in nrole)) {
      fails++
      printf "| %s | %s | - | - | %s | %s | %d | %s | FAIL: role not in the plan |\n", proc, comm, observed(comm), m, samples[comm], win
      return
    }
    k = role SUBSEP (substr(comm, length(role) + 2) % nrole[role])
    planned = tcpus[k]
    chan = tchan[k] " (node " tnode[k] ")" (tman[k] ? ", manual" : "")
    if (planned == "-") {
      verdict = "os: kernel's choice"
    } else {
      checked++
      unsettled = 0; brief = 0
      for (key in tcomm) if (tcomm[key] == comm && !(key in settled)) {
        if (prek[key] >= 2) unsettled++; else brief++
      }
      if (unsettled) { verdict = "FAIL: " unsettled " thread(s) never seen where planned"; fails++ }
      else if (comm in bad) { verdict = "FAIL: " bad[comm] " sample(s) off plan after the pin:" badlist[comm]; fails++ }
      else if (brief) verdict = "inconclusive: seen in 1 sample only, in its spawn window, then gone (no pin warning in its log)"
      else verdict = "ok"
    }
    printf "| %s | %s | %s | %s | %s | %s | %d | %s | %s |\n", proc, comm, chan, ranges(planned), observed(comm), m, samples[comm], win, verdict
    return
  }
  planned = norm(substr(ctl, 2))
  if (planned == "-") verdict = "os: kernel's choice"
  else if (m == "-") verdict = "mask not sampled (short-lived)"
  else {
    bad1 = ""
    nn = split(m, p, " ")
    for (j = 1; j <= nn; j++) if (norm(p[j]) != planned) bad1 = bad1 " mask " p[j]
    if (bad1 == "") verdict = "ok"
    else if (strict_control) { verdict = "FAIL: control thread not pinned:" bad1; fails++ }
    else verdict = "not pinned (the engine leaves control threads unbound)"
  }
  printf "| %s | %s | control | %s | %s | %s | %d | - | %s |\n", proc, comm, ranges(planned), observed(comm), m, samples[comm], verdict
}
END {
  flush()
  nd = 0; for (t in dtick) nd++
  print "THREADS"
  for (i = 1; i <= ncomm; i++) if (!datapath(comms[i])) row(comms[i])
  # data-path threads by name
  n = 0
  for (i = 1; i <= ncomm; i++) if (datapath(comms[i])) dp[++n] = comms[i]
  for (i = 2; i <= n; i++) { v = dp[i]; for (j = i - 1; j >= 1 && dp[j] > v; j--) dp[j + 1] = dp[j]; dp[j + 1] = v }
  for (i = 1; i <= n; i++) row(dp[i])
  print "POOLS"
  for (p = 1; p <= npool; p++) {
    range = "0x" substr(pstart[p], 2) "-0x" substr(pend[p], 2); gsub(/0x0+/, "0x", range)
    range = range " (pid " ppid[p] ")"
    if (!(p in psamples)) {
      verdict = "FAIL: never seen in numa_maps"; fails++
      printf "| %s | channel %s %s | - | %d | 0 | - | - | - | 0 | %s |\n", proc, pchan[p], range, ppages[p], verdict
      continue
    }
    if (pnode[p] == "-") {
      verdict = "os: kernel's choice"
      sharetxt = "-"
      ontxt = "-"
    } else {
      checked++
      sharetxt = sprintf("%.1f %%", 100 * pminshare[p])
      ontxt = pon[p]
      if (pminshare[p] < 1) { verdict = "FAIL: pages off node " pnode[p]; fails++ }
      else if (ppop[p] == "on-demand") verdict = "ok (on demand: " pmax[p] " of " ppages[p] " pages used)"
      else if (pmax[p] < ppages[p]) { verdict = "FAIL: " pmax[p] " of " ppages[p] " pages present"; fails++ }
      else verdict = "ok"
    }
    if (pmerged[p]) verdict = verdict " (its VMA reaches past the pool: merged with a neighbour, counted together)"
    printf "| %s | channel %s %s | %s | %d | %d | %s | %s | %s | %d | %s |\n", proc, pchan[p], range, pol[p], ppages[p], pmax[p], ontxt, sharetxt, pbest[p], psamples[p], verdict
  }
  if (npool == 0) { print "NOPOOLS"; fails++ }
  printf "VERDICT fails=%d checked=%d samples=%d data_samples=%d\n", fails, checked, ticks, nd
}
AWK

# analyze LABEL JSON POOLS RAW OUTPREFIX: tables for one process; adds to $fails
analyze() {
  _label=$1
  if ! plan_tsv "$2" >"$5.plan" 2>"$5.jqerr" || [ ! -s "$5.plan" ]; then
    echo "FAIL $_label: no plan in $2: $(head -c 300 "$2") $(cat "$5.jqerr")"
    fails=$((fails + 1))
    return
  fi
  awk -v proc="$_label" -v strict_control="$STRICT_CONTROL" -f "$W/analyze.awk" \
    "$5.plan" "$3" "$4" >"$5.rows"
  sed -n '/^THREADS$/,/^POOLS$/p' "$5.rows" | grep '^|' >>"$threads_md"
  sed -n '/^POOLS$/,$p' "$5.rows" | grep '^|' >>"$pools_md"
  _v=$(grep '^VERDICT' "$5.rows")
  _f=$(echo "$_v" | sed -n 's/.*fails=\([0-9]*\).*/\1/p')
  grep -q '^NOPOOLS' "$5.rows" && echo "FAIL $_label: no 'buffer pool:' line in its --log info output"
  echo "$_label: ${_v#VERDICT }"
  [ -n "$_f" ] || _f=1
  fails=$((fails + _f))
  _ds=$(echo "$_v" | sed -n 's/.*data_samples=\([0-9]*\).*/\1/p')
  if [ "${_ds:-0}" -eq 0 ]; then
    echo "FAIL $_label: no data-path thread was sampled"
    fails=$((fails + 1))
  fi
}

# tree_cmp A B WHAT: B holds the same files as A, byte for byte (one busybox diff -r)
tree_cmp() {
  _na=$(find "$1" -type f | wc -l)
  if _diff=$(diff -r -q "$1" "$2" 2>&1); then
    echo "ok   $3: $_na files byte-identical ($1 -> $2)"
    return 0
  fi
  echo "FAIL $3: $1 and $2 differ: $(echo "$_diff" | head -n 5 | tr '\n' ' ')"
  return 1
}

# client DIR NAME ARGS...: run one `sluice cp` (repeated while too short to sample), sampled
# with the daemon; its --json summary in DIR/NAME.json, stderr in DIR/NAME.err
client() {
  _dir=$1
  _name=$2
  shift 2
  _run=1
  while :; do
    echo "\$ sluice cp $* (run $_run)"
    _t0=$(uptime_s)
    # shellcheck disable=SC2086 # $JOB is split on purpose
    sluice cp --json --log info $JOB "$@" >"$_dir/$_name.json" 2>"$_dir/$_name.err" &
    _cpid=$!
    sample "$_cpid" "$_dir/$_name.raw" "$_dir/$_name.stop" "$XFER_TIMEOUT"
    wait "$_cpid"
    _rc=$?
    pools_of "$_dir/$_name.err" "$_cpid" >>"$_dir/$_name.pools"
    if grep -q "cannot pin" "$_dir/$_name.err"; then
      echo "FAIL $_name: sluice could not pin a thread: $(grep "cannot pin" "$_dir/$_name.err" | head -n 3)"
      fails=$((fails + 1))
    fi
    _secs=$(($(uptime_s) - _t0))
    echo "  exit $_rc after ${_secs} s; sluice: $(jq -c '{ok, bytes, files, seconds, pipeline}' "$_dir/$_name.json" 2>/dev/null)"
    if [ "$_rc" -ne 0 ]; then
      echo "FAIL $_name: sluice cp exited $_rc; stdout: $(head -c 400 "$_dir/$_name.json"); stderr:"
      grep -v ' INFO ' "$_dir/$_name.err" | tail -n 5
      fails=$((fails + 1))
      return 1
    fi
    _ticks=$(data_ticks "$_dir/$_name.raw")
    if [ "$_ticks" -ge "$MIN_SAMPLES" ] || [ "$_run" -ge "$MAX_RUNS" ]; then
      echo "  $_ticks samples with data-path threads"
      return 0
    fi
    echo "  only $_ticks samples with data-path threads (want $MIN_SAMPLES): again"
    _run=$((_run + 1))
  done
}

# scenario NAME: one daemon, a push and a pull, all checked
scenario() {
  name=$1
  fails=0
  t_scen=$(uptime_s)
  dir=$W/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  data=$W/data-$name
  src=$SRC
  place_d=""
  place_push=""
  place_pull=""
  policy=$name
  case $name in
    manual)
      # seed 001 style: the storage threads and their buffers on the disk's node, the rest
      # as mts places it; the data lives on that disk
      if [ -z "$disk_node" ] || [ -z "$disk_dev" ]; then
        echo "FAIL manual: this shape has no disk"
        fails=1
      else
        mkdir -p /mnt/disk
        if ! grep -q ' /mnt/disk ' /proc/mounts; then
          if ! mke2fs -F "/dev/$disk_dev" >/dev/null 2>&1 || ! mount -t ext4 "/dev/$disk_dev" /mnt/disk; then
            echo "FAIL manual: cannot make or mount ext4 on /dev/$disk_dev (run.sh --module ext4 --disk-mib 512)"
            fails=1
          fi
        fi
        data=/mnt/disk/$name
        if [ "$fails" -eq 0 ] && ! { mkdir -p "$data" && cp -a "$SRC" "$data/src"; }; then
          echo "FAIL manual: cannot copy the data to the disk"
          fails=1
        fi
        src=$data/src
        policy=mts
        p="mem:$disk_node,exec:$disk_node"
        place_d="--place io-read=$p --place io-write=$p"
        place_push="--place io-read=$p"
        place_pull="--place io-write=$p"
        echo "manual: disk $disk_dev on node $disk_node (ext4 at /mnt/disk); io threads and their buffers placed there"
      fi
      ;;
  esac
  [ "$fails" -eq 0 ] || { printf '%s\t1\t%s\n' "$name" 0 >>"$RESULTS"; return; }
  dst=$data/dst
  back=$data/back
  mkdir -p "$dst" "$back"
  threads_md=$dir/threads.md
  pools_md=$dir/pools.md
  : >"$threads_md"
  : >"$pools_md"

  echo
  echo "=== scenario $name: policy $policy $place_d (shape $SLUICE_VM_SHAPE)"
  # shellcheck disable=SC2086 # $JOB and $place_d are split on purpose
  sluice serve --root "$dst" --listen 127.0.0.1:0 --json --log info --policy "$policy" $place_d $JOB \
    >"$dir/daemon.json" 2>"$dir/daemon.err" &
  dpid=$!
  # the daemon allocates and prefaults its pools before it prints its line (slow under TCG)
  _t0=$(uptime_s)
  addr=""
  while [ -z "$addr" ]; do
    if ! kill -0 "$dpid" 2>/dev/null; then
      echo "FAIL $name: sluice serve exited before listening:"
      tail -n 5 "$dir/daemon.err"
      printf '%s\t1\t%s\n' "$name" "$(($(uptime_s) - t_scen))" >>"$RESULTS"
      return
    fi
    if [ "$(uptime_s)" -ge $((_t0 + 120)) ]; then
      echo "FAIL $name: sluice serve printed no --json line in 120 s"
      kill -9 "$dpid"
      printf '%s\t1\t%s\n' "$name" "$(($(uptime_s) - t_scen))" >>"$RESULTS"
      return
    fi
    sleep 0.2
    addr=$(jq -r '.listen // empty' "$dir/daemon.json" 2>/dev/null)
  done
  echo "daemon pid $dpid on $addr after $(($(uptime_s) - _t0)) s"
  sample "$dpid" "$dir/daemon.raw" "$dir/daemon.stop" $((4 * XFER_TIMEOUT)) &
  spid=$!

  # shellcheck disable=SC2086 # $place_push is split on purpose
  if client "$dir" push -r --policy "$policy" $place_push --pipeline "$PIPELINE" "$src" "sluice://$addr/"; then
    tree_cmp "$src" "$dst/src" "$name push" || fails=$((fails + 1))
  fi
  # shellcheck disable=SC2086
  if client "$dir" pull -r --policy "$policy" $place_pull --pipeline "$PIPELINE" "sluice://$addr/src" "$back/"; then
    tree_cmp "$src" "$back/src" "$name pull" || fails=$((fails + 1))
  fi

  touch "$dir/daemon.stop"
  wait "$spid"
  kill "$dpid" 2>/dev/null
  wait "$dpid" 2>/dev/null

  pools_of "$dir/daemon.err" "$dpid" >"$dir/daemon.pools"
  t_an=$(uptime_s)
  if grep -q "cannot pin" "$dir/daemon.err"; then
    echo "FAIL daemon: sluice could not pin a thread: $(grep "cannot pin" "$dir/daemon.err" | head -n 3)"
    fails=$((fails + 1))
  fi
  analyze daemon "$dir/daemon.json" "$dir/daemon.pools" "$dir/daemon.raw" "$dir/daemon"
  [ -s "$dir/push.json" ] && analyze "client push" "$dir/push.json" "$dir/push.pools" "$dir/push.raw" "$dir/push"
  [ -s "$dir/pull.json" ] && analyze "client pull" "$dir/pull.json" "$dir/pull.pools" "$dir/pull.raw" "$dir/pull"

  echo "analysis took $(($(uptime_s) - t_an)) s"
  secs=$(($(uptime_s) - t_scen))
  {
    echo "### $SLUICE_VM_SHAPE / $name: --policy $policy $place_d"
    echo
    echo "Push: \`sluice cp -r --policy $policy $place_push --pipeline $PIPELINE $JOB SRC sluice://ADDR/\`;" \
      "pull: \`sluice cp -r ... $place_pull sluice://ADDR/src BACK/\`; daemon \`sluice serve --policy $policy $place_d $JOB\`" \
      "(inline pipeline). $(wc -c <"$src/big") + $SMALL small files, ${secs} s in all."
    echo
    echo "| process | thread | channel (node) | planned CPUs | observed CPUs (share of samples) | mask | samples | spawn window (samples before the pin) | verdict |"
    echo "|---|---|---|---|---|---|---|---|---|"
    cat "$threads_md"
    echo
    echo "| process | partition | policy | pages | pages seen (max) | on planned node | share on planned node (min) | by node | samples | verdict |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    cat "$pools_md"
    echo
  } >"$SLUICE_VM_OUT/$name.md"
  cat "$SLUICE_VM_OUT/$name.md"
  if [ "$fails" -eq 0 ]; then
    echo "scenario $name: PASS (${secs} s)"
  else
    echo "scenario $name: FAIL, $fails problem(s) (${secs} s)"
  fi
  printf '%s\t%s\t%s\n' "$name" "$([ "$fails" -eq 0 ] && echo 0 || echo 1)" "$secs" >>"$RESULTS"
  rm -rf "$dst" "$back"
  [ "$name" = manual ] && rm -rf "$data"
}

for s in $SCENARIOS; do
  case $s in
    bind | mts | nmts | smts | os | manual) scenario "$s" ;;
    *)
      echo "FAIL unknown scenario '$s' (known: bind mts nmts smts os manual)"
      printf '%s\t2\t0\n' "$s" >>"$RESULTS"
      ;;
  esac
done

echo
echo "=== results ($SLUICE_VM_SHAPE, $(($(uptime_s) - t_boot)) s in the guest)"
rc=0
while IFS="$(printf '\t')" read -r n r secs; do
  echo "$n: $([ "$r" -eq 0 ] && echo PASS || echo FAIL) (${secs} s)"
  [ "$r" -eq 0 ] || rc=1
done <"$RESULTS"
exit "$rc"
