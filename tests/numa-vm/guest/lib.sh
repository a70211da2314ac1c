# Helpers for numa-vm scenarios (busybox ash). In a scenario: . "$SLUICE_VM_LIB"
#
# Facts about the shape, set in the environment by the init:
#   SLUICE_VM_SHAPE         2n, 4n, ...
#   SLUICE_VM_NODES         number of NUMA nodes
#   SLUICE_VM_SOCKETS       number of sockets (CPUs split evenly, in CPU-id order)
#   SLUICE_VM_NODE_CPUS     CPU list per node in node order, e.g. "0-1 2-3"
#   SLUICE_VM_NODE_MEM_MIB  memory per node in MiB, e.g. "512 512"
#   SLUICE_VM_DIST          "A-B:DIST ..." for every pair of distinct nodes
#   SLUICE_VM_NICS          "MAC,NODE,IPV4,MBPS ..." (interfaces are up with IPV4/24, link
#                           speed MBPS in /sys/class/net/IF/speed); /etc/hosts names them nic0...
#   SLUICE_VM_DISKS         "SERIAL,NODE ..." (virtio-blk, raw and empty)
#   SLUICE_VM_OUT           directory whose files are returned to the host (run.sh --out)

# vm_nic_by_mac MAC: print the interface name that has MAC
vm_nic_by_mac() {
  for _d in /sys/class/net/*; do
    [ "$(cat "$_d/address" 2>/dev/null)" = "$1" ] && { echo "${_d##*/}"; return 0; }
  done
  return 1
}

# vm_disk_by_serial SERIAL: print the block device name (vda...) whose serial is SERIAL
vm_disk_by_serial() {
  for _d in /sys/block/*; do
    [ "$(cat "$_d/serial" 2>/dev/null)" = "$1" ] && { echo "${_d##*/}"; return 0; }
  done
  return 1
}

# vm_dev_node SYSFS_DEVICE: print the NUMA node of a device, walking up to the first
# ancestor that has numa_node (for virtio: the PCI function above virtioN)
vm_dev_node() {
  _p=$(readlink -f "$1")
  while [ -n "$_p" ] && [ "$_p" != / ] && [ "$_p" != /sys/devices ]; do
    if [ -r "$_p/numa_node" ]; then cat "$_p/numa_node"; return 0; fi
    _p=${_p%/*}
  done
  return 1
}

# vm_nic_node IFNAME / vm_disk_node DISK: NUMA node of a NIC / block device
vm_nic_node() { vm_dev_node "/sys/class/net/$1/device"; }
vm_disk_node() { vm_dev_node "/sys/block/$1/device"; }

# vm_node_cpus NODE: expected CPU list of NODE for this shape
# shellcheck disable=SC2086 # split the list on purpose
vm_node_cpus() { set -- "$1" $SLUICE_VM_NODE_CPUS; shift $(($1 + 1)); echo "$1"; }

# vm_distance A B: expected distance between nodes A and B for this shape
vm_distance() {
  [ "$1" = "$2" ] && { echo 10; return 0; }
  for _e in $SLUICE_VM_DIST; do
    case ${_e%%:*} in "$1-$2" | "$2-$1") echo "${_e#*:}"; return 0 ;; esac
  done
  return 1
}

# vm_expand_cpus LIST: a kernel CPU list in full, 0-1,4 -> 0,1,4
vm_expand_cpus() {
  _out=""
  for _item in $(echo "$1" | tr ',' ' '); do
    case $_item in
      *-*) _item=$(seq -s, "${_item%-*}" "${_item#*-}") ;;
    esac
    _out="$_out,$_item"
  done
  echo "${_out#,}"
}

# vm_check_topo TOPO_JSON: compare `sluice topo --json` (saved in TOPO_JSON) with the shape:
# node count, each node's CPUs and distances, the node of every NIC (found by MAC) and disk
# (found by serial). Prints one "ok"/"FAIL" line per fact; needs jq. Sets VM_TOPO_FAILS (the
# number of mismatches), VM_NIC_NAMES and VM_NIC_NODES (interfaces and their nodes, shape order).
vm_check_topo() {
  VM_TOPO_FAILS=0
  VM_NIC_NAMES=""
  VM_NIC_NODES=""
  _vm_check "topo: nodes" "$(jq '.nodes | length' "$1")" "$SLUICE_VM_NODES"
  _n=0
  while [ "$_n" -lt "$SLUICE_VM_NODES" ]; do
    _vm_check "topo: node$_n cpus" \
      "$(jq -r --argjson n "$_n" '.nodes[] | select(.os_index == $n) | .cpus | join(",")' "$1")" \
      "$(vm_expand_cpus "$(vm_node_cpus "$_n")")"
    _want=""
    _m=0
    while [ "$_m" -lt "$SLUICE_VM_NODES" ]; do
      _want="$_want $(vm_distance "$_n" "$_m")"
      _m=$((_m + 1))
    done
    _vm_check "topo: node$_n distances" \
      "$(jq -r --argjson n "$_n" '.nodes[] | select(.os_index == $n) | .distances | join(" ")' "$1")" \
      "${_want# }"
    _n=$((_n + 1))
  done
  for _nic in $SLUICE_VM_NICS; do
    _mac=${_nic%%,*}
    _rest=${_nic#*,}
    _node=${_rest%%,*}
    if _if=$(vm_nic_by_mac "$_mac"); then
      _vm_check "topo: NIC $_if ($_mac) node" \
        "$(jq -r --arg i "$_if" '.nics[] | select(.name == $i) | .numa_node' "$1")" "$_node"
      VM_NIC_NAMES="$VM_NIC_NAMES $_if"
      VM_NIC_NODES="$VM_NIC_NODES $_node"
    else
      echo "FAIL NIC $_mac: no interface with this MAC"
      VM_TOPO_FAILS=$((VM_TOPO_FAILS + 1))
    fi
  done
  for _disk in $SLUICE_VM_DISKS; do
    _serial=${_disk%%,*}
    _node=${_disk#*,}
    if _dev=$(vm_disk_by_serial "$_serial"); then
      _vm_check "topo: disk $_dev ($_serial) node" \
        "$(jq -r --arg d "$_dev" '.block_devices[] | select(.name == $d) | .numa_node' "$1")" "$_node"
    else
      echo "FAIL disk $_serial: no block device with this serial"
      VM_TOPO_FAILS=$((VM_TOPO_FAILS + 1))
    fi
  done
  VM_NIC_NAMES=${VM_NIC_NAMES# }
  VM_NIC_NODES=${VM_NIC_NODES# }
}
_vm_check() { # WHAT GOT WANT
  if [ "$2" = "$3" ]; then
    echo "ok   $1: $2"
  else
    echo "FAIL $1: got '$2', want '$3'"
    VM_TOPO_FAILS=$((VM_TOPO_FAILS + 1))
  fi
}
