#!/bin/sh
# numa-vm smoke scenario: the guest's NUMA layout, and where its NICs and disks sit, must match
# the shape that run.sh booted. Prints what it sees; exits 1 on any mismatch.
#   tests/numa-vm/run.sh --shape 2n --script tests/numa-vm/scenarios/smoke.sh
# shellcheck source=tests/numa-vm/guest/lib.sh
. "$SLUICE_VM_LIB"

fails=0
check() { # WHAT GOT WANT
  if [ "$2" = "$3" ]; then
    echo "ok   $1: $2"
  else
    echo "FAIL $1: got '$2', want '$3'"
    fails=$((fails + 1))
  fi
}

echo "shape $SLUICE_VM_SHAPE on $(uname -r), $(nproc) CPUs online"
nodes=$(find /sys/devices/system/node -maxdepth 1 -name 'node[0-9]*' | wc -l)
check "NUMA nodes" "$nodes" "$SLUICE_VM_NODES"

n=0
while [ "$n" -lt "$SLUICE_VM_NODES" ]; do
  d=/sys/devices/system/node/node$n
  check "node$n cpulist" "$(cat "$d/cpulist" 2>/dev/null)" "$(vm_node_cpus "$n")"
  want=""
  m=0
  while [ "$m" -lt "$SLUICE_VM_NODES" ]; do
    want="$want $(vm_distance "$n" "$m")"
    m=$((m + 1))
  done
  check "node$n distance" "$(cat "$d/distance" 2>/dev/null)" "${want# }"
  echo "     node$n $(grep MemTotal "$d/meminfo" 2>/dev/null | sed 's/.*MemTotal: *//')"
  n=$((n + 1))
done

# sockets: CPUs are split evenly over SLUICE_VM_SOCKETS packages, in CPU-id order
ncpus=$(nproc)
per=$((ncpus / SLUICE_VM_SOCKETS))
cpu=0
got=""
want=""
while [ "$cpu" -lt "$ncpus" ]; do
  got="$got $(cat "/sys/devices/system/cpu/cpu$cpu/topology/physical_package_id")"
  want="$want $((cpu / per))"
  cpu=$((cpu + 1))
done
check "package of CPUs 0..$((ncpus - 1))" "${got# }" "${want# }"

for nic in $SLUICE_VM_NICS; do
  mac=${nic%%,*}
  rest=${nic#*,}
  want=${rest%%,*}
  rest=${rest#*,}
  addr=${rest%%,*}
  mbps=${rest#*,}
  if ifname=$(vm_nic_by_mac "$mac"); then
    check "NIC $mac ($ifname) node" "$(vm_nic_node "$ifname")" "$want"
    check "NIC $mac ($ifname) speed" "$(cat "/sys/class/net/$ifname/speed" 2>/dev/null)" "$mbps"
    check "NIC $mac ($ifname) address" "$(ip -4 -o addr show dev "$ifname" | awk '{ print $4 }')" "$addr/24"
  else
    echo "FAIL NIC $mac: no interface with this MAC"
    fails=$((fails + 1))
  fi
done

for disk in $SLUICE_VM_DISKS; do
  serial=${disk%%,*}
  want=${disk#*,}
  if dev=$(vm_disk_by_serial "$serial"); then
    check "disk $serial ($dev, $(($(cat "/sys/block/$dev/size") / 2048)) MiB) node" "$(vm_disk_node "$dev")" "$want"
  else
    echo "FAIL disk $serial: no block device with this serial"
    fails=$((fails + 1))
  fi
done

# facts that matter for placement tests (information only)
echo "     numa_balancing=$(cat /proc/sys/kernel/numa_balancing 2>/dev/null)" \
  "thp=$(cat /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null)"

# CPU binding is real in the guest: pin a shell to the last CPU and read it back
last=$(($(nproc) - 1))
check "taskset -c $last" "$(taskset -c "$last" sh -c 'taskset -p $$' | sed 's/.*: //')" "$(printf '%x' $((1 << last)))"

if [ "$fails" -ne 0 ]; then
  echo "smoke: $fails check(s) failed"
  exit 1
fi
echo "smoke: all checks passed"
