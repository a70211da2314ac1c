#!/usr/bin/env bash
# Boot an emulated multi-NUMA-node machine (QEMU TCG) and run one scenario in it.
#
#   tests/numa-vm/run.sh [--shape 2n|4n] [--bin PATH[:GUEST_PATH]]... [--file SRC:GUEST_PATH]...
#                        [--module NAME]... [--env NAME=VALUE]... [--out DIR] [--timeout SECONDS]
#                        [--log FILE] [--disk-mib N] [--keep] [--verbose] --script FILE
#
# See tests/numa-vm/README.md. Exit status: the guest scenario's exit code; 124 when the VM
# ran past --timeout; 125 when the harness itself failed (no exit marker, QEMU error...);
# 2 on a usage error.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${SLUICE_VM_CACHE:-$REPO/.numa-vm}

PROG="numa-vm"
die() { echo "$PROG: error: $*" >&2; exit 125; }
usage_error() { echo "$PROG: usage error: $*" >&2; echo "Run '$0 --help' for usage." >&2; exit 2; }
note() { echo "$PROG: $*" >&2; }

# ---------------------------------------------------------------------------------------------
# Shape table. To add a shape, add one entry with the same key to each of the four arrays.
#   SHAPE_SOCKETS  number of sockets; the CPUs are split evenly (QEMU -smp sockets=, cores=).
#   SHAPE_NODES    one "CPUS:MEM_MiB" per NUMA node, in node-id order (CPUS as QEMU takes it: 0-1).
#   SHAPE_DIST     "A-B:DISTANCE" for every pair of distinct nodes (symmetric; local is 10).
#   SHAPE_DEVS     devices, each behind a pxb-pcie host bridge on its node:
#                    nic:NODE:MAC[:MBPS]  virtio-net-pci, user-mode network, no outside access;
#                                         MBPS is the link speed the guest sees (default 25000)
#                    disk:NODE:SERIAL     virtio-blk-pci on a sparse raw file of --disk-mib MiB
# In the guest, identify NICs by MAC and disks by serial (/sys/block/vdX/serial): the kernel's
# ethX/vdX order does not follow QEMU's.
declare -A SHAPE_SOCKETS=(
  [2n]=2
  [4n]=2
)
declare -A SHAPE_NODES=(
  [2n]="0-1:512 2-3:512"
  [4n]="0-1:384 2-3:384 4-5:384 6-7:384"
)
declare -A SHAPE_DIST=(
  [2n]="0-1:21"
  [4n]="0-1:16 2-3:16 0-2:22 0-3:22 1-2:22 1-3:22"
)
declare -A SHAPE_DEVS=(
  [2n]="nic:1:52:54:00:12:00:01:25000 disk:1:sluice-disk1"
  [4n]="nic:0:52:54:00:12:00:10:100000 nic:3:52:54:00:12:00:13:25000 disk:2:sluice-disk2"
)
# Kernel modules always loaded (dependencies are resolved and loaded first).
BASE_MODULES=(virtio_pci virtio_net virtio_blk)

usage() {
  cat <<EOF
Usage: $0 [options] --script FILE

Boots a QEMU (TCG) machine with the chosen NUMA shape, runs FILE with /bin/sh (busybox)
as the guest's job, prints the job's output and exits with its exit code.

Options:
  --shape NAME         machine shape: ${!SHAPE_NODES[*]} (default 2n)
  --script FILE        scenario script run inside the guest (required)
  --bin PATH[:GUEST]   executable (plus the shared libraries ldd lists) to put in the guest;
                       default guest path /usr/local/bin/NAME (in PATH). Repeatable.
  --file SRC:GUEST     any other file to copy to GUEST (absolute path). Repeatable.
  --module NAME        extra kernel module to insmod (with its dependencies), e.g. veth,
                       sch_netem, ext4. Repeatable.
  --env NAME=VALUE     environment variable for the scenario. Repeatable.
  --out DIR            files the scenario writes under \$SLUICE_VM_OUT are copied to DIR
  --timeout SECONDS    bound on the whole VM run (default 300); exit 124 when exceeded
  --log FILE           also keep the full console log in FILE
  --disk-mib N         size of each virtio-blk disk (default 64)
  --append ARGS        extra kernel command line (e.g. "loglevel=7" to see boot messages)
  --link listen:PORT|connect:PORT
                       the first NIC joins another guest's through QEMU's socket backend
                       (127.0.0.1:PORT; start the listening guest first) instead of the
                       user-mode network: an emulated link between two guests
  --guest-ip N         last octet of the first NIC's address (default 15) and, with --link,
                       of its MAC, so two linked guests differ
  --keep               keep the work directory (initramfs, disk, logs)
  --verbose            stream the guest console to stderr while it runs
  -h, --help           this help

Environment: SLUICE_VM_CACHE (default $REPO/.numa-vm) holds the unpacked Debian kernel.
EOF
}

# ---------------------------------------------------------------------------------------------
# Arguments
SHAPE=2n
SCRIPT=
OUT_DIR=
TIMEOUT=300
LOG_COPY=
DISK_MIB=64
KEEP=0
VERBOSE=0
APPEND=
LINK=
GUEST_IP=15
BINS=()
FILES=()
EXTRA_MODULES=()
ENVS=()

need_arg() { [[ $# -ge 2 && -n $2 ]] || usage_error "$1 needs a value"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --shape) need_arg "$@"; SHAPE=$2; shift 2 ;;
    --script) need_arg "$@"; SCRIPT=$2; shift 2 ;;
    --bin) need_arg "$@"; BINS+=("$2"); shift 2 ;;
    --file) need_arg "$@"; FILES+=("$2"); shift 2 ;;
    --module) need_arg "$@"; EXTRA_MODULES+=("$2"); shift 2 ;;
    --env) need_arg "$@"; ENVS+=("$2"); shift 2 ;;
    --out) need_arg "$@"; OUT_DIR=$2; shift 2 ;;
    --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
    --log) need_arg "$@"; LOG_COPY=$2; shift 2 ;;
    --disk-mib) need_arg "$@"; DISK_MIB=$2; shift 2 ;;
    --append) need_arg "$@"; APPEND+=" $2"; shift 2 ;;
    --link) need_arg "$@"; LINK=$2; shift 2 ;;
    --guest-ip) need_arg "$@"; GUEST_IP=$2; shift 2 ;;
    --keep) KEEP=1; shift ;;
    --verbose | -v) VERBOSE=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

[[ -n $SCRIPT ]] || usage_error "--script FILE is required"
[[ -f $SCRIPT && -r $SCRIPT ]] || usage_error "scenario script '$SCRIPT' is not a readable file"
[[ -n ${SHAPE_NODES[$SHAPE]+x} ]] || usage_error "unknown shape '$SHAPE' (known: ${!SHAPE_NODES[*]})"
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || usage_error "--timeout must be a positive number of seconds"
[[ $DISK_MIB =~ ^[1-9][0-9]*$ ]] || usage_error "--disk-mib must be a positive number"
[[ -z $LINK || $LINK =~ ^(listen|connect):[1-9][0-9]*$ ]] || usage_error "--link: want listen:PORT or connect:PORT"
[[ $GUEST_IP =~ ^[1-9][0-9]?[0-9]?$ && $GUEST_IP -lt 255 ]] || usage_error "--guest-ip: want 1-254"
for b in "${BINS[@]}"; do
  [[ -f ${b%%:*} ]] || usage_error "--bin ${b%%:*}: no such file"
  [[ $b != *:* || ${b#*:} == /* ]] || usage_error "--bin $b: the guest path must be absolute"
done
for f in "${FILES[@]}"; do
  [[ $f == *:/* ]] || usage_error "--file $f: expected SRC:/absolute/guest/path"
  [[ -f ${f%%:*} ]] || usage_error "--file ${f%%:*}: no such file"
done
for e in "${ENVS[@]}"; do
  [[ $e =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || usage_error "--env '$e' is not NAME=VALUE"
done

# ---------------------------------------------------------------------------------------------
# Host tools (Debian packages)
APT_UPDATED=0
apt_install() {
  note "installing Debian packages: $*"
  local -a opts=(-y -q --no-install-recommends)
  if ! DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" >"$CACHE/apt.log" 2>&1; then
    if [[ $APT_UPDATED -eq 0 ]]; then
      note "apt-get install failed; running apt-get update once and retrying"
      apt-get update -q >>"$CACHE/apt.log" 2>&1 || die "apt-get update failed (see $CACHE/apt.log)"
      APT_UPDATED=1
      DEBIAN_FRONTEND=noninteractive apt-get install "${opts[@]}" "$@" >>"$CACHE/apt.log" 2>&1 ||
        die "apt-get install $* failed (see $CACHE/apt.log)"
    else
      die "apt-get install $* failed (see $CACHE/apt.log)"
    fi
  fi
}

is_static_busybox() {
  [[ -x /bin/busybox ]] && ! ldd /bin/busybox >/dev/null 2>&1
}

ensure_host_tools() {
  local -a missing=()
  command -v qemu-system-x86_64 >/dev/null || missing+=(qemu-system-x86)
  is_static_busybox || missing+=(busybox-static)
  command -v cpio >/dev/null || missing+=(cpio)
  command -v lstopo-no-graphics >/dev/null || missing+=(hwloc)
  if [[ ${#missing[@]} -gt 0 ]]; then
    apt_install "${missing[@]}"
  fi
  command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 still missing after installing qemu-system-x86"
  is_static_busybox || die "/bin/busybox is missing or not static after installing busybox-static"
  command -v cpio >/dev/null || die "cpio still missing after installing it"
  local t
  for t in ldd timeout flock base64 awk truncate apt-get dpkg; do
    command -v "$t" >/dev/null || die "required host tool '$t' not found"
  done
}

# ---------------------------------------------------------------------------------------------
# Kernel: Debian's linux-image-<version>-amd64, unpacked once into $CACHE/kernel-<version>
KVER=
KDIR=
ensure_kernel() {
  mkdir -p "$CACHE"
  exec 9>"$CACHE/.lock"
  flock 9
  local d
  d=$(find "$CACHE" -maxdepth 1 -type d -name 'kernel-*-amd64' | sort -V | tail -n 1)
  if [[ -z $d ]]; then
    local pkg
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }' || true)
    if [[ -z $pkg && $APT_UPDATED -eq 0 ]]; then
      note "linux-image-amd64 unknown to apt; running apt-get update once"
      apt-get update -q >"$CACHE/apt.log" 2>&1 || die "apt-get update failed (see $CACHE/apt.log)"
      APT_UPDATED=1
      pkg=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ { print $2; exit }' || true)
    fi
    [[ -n $pkg ]] || die "cannot resolve the kernel package that linux-image-amd64 depends on (apt-cache depends linux-image-amd64)"
    local ver=${pkg#linux-image-}
    local dl
    dl=$(mktemp -d "$CACHE/dl.XXXXXX")
    note "downloading $pkg (apt-get download) into $dl"
    (cd "$dl" && apt-get download -q -o APT::Sandbox::User=root "$pkg" >"$CACHE/apt-download.log" 2>&1) ||
      die "apt-get download $pkg failed (see $CACHE/apt-download.log)"
    local deb
    deb=$(find "$dl" -maxdepth 1 -name "${pkg}_*.deb" | head -n 1)
    [[ -n $deb ]] || die "apt-get download $pkg produced no .deb in $dl"
    rm -rf "$CACHE/kernel-$ver.partial"
    dpkg -x "$deb" "$CACHE/kernel-$ver.partial" || die "dpkg -x $deb failed"
    mv "$CACHE/kernel-$ver.partial" "$CACHE/kernel-$ver"
    rm -rf "$dl"
    d=$CACHE/kernel-$ver
  fi
  flock -u 9
  KVER=${d##*/kernel-}
  KDIR=$d
  [[ -f $KDIR/boot/vmlinuz-$KVER ]] || die "no kernel image at $KDIR/boot/vmlinuz-$KVER (delete $KDIR to re-download)"
  [[ -d $KDIR/lib/modules/$KVER/kernel ]] || die "no modules under $KDIR/lib/modules/$KVER (delete $KDIR to re-download)"
}

# ---------------------------------------------------------------------------------------------
# Kernel modules: resolve dependencies from each .ko's modinfo "depends=" (the unpacked
# package has no modules.dep), emit an insmod order with dependencies first.
declare -A MOD_PATH=()
declare -A MOD_DONE=()
MOD_ORDER=()
index_modules() {
  local f name
  while IFS= read -r f; do
    name=${f##*/}
    name=${name%.ko}
    MOD_PATH[$name]=$f
    MOD_PATH[${name//-/_}]=$f
  done < <(find "$KDIR/lib/modules/$KVER/kernel" -name '*.ko')
}
is_builtin_module() {
  grep -q -E "/$1\.ko\$" "$KDIR/lib/modules/$KVER/modules.builtin" 2>/dev/null
}
resolve_module() {
  local m=${1//-/_} depth=${2:-0}
  [[ -n ${MOD_DONE[$m]+x} ]] && return 0
  [[ $depth -lt 32 ]] || die "module dependency loop at $m"
  if [[ -z ${MOD_PATH[$m]+x} ]]; then
    if is_builtin_module "$m" || is_builtin_module "${1}"; then
      MOD_DONE[$m]=builtin
      return 0
    fi
    die "kernel module '$1' not found in $KDIR/lib/modules/$KVER (and not built in)"
  fi
  local deps dep info
  info=$(tr '\0' '\n' <"${MOD_PATH[$m]}" | grep -a -E '^(depends|softdep)=' || true)
  deps=$(sed -n 's/^depends=//p' <<<"$info" | head -n 1)
  local -a deplist=()
  IFS=, read -r -a deplist <<<"$deps"
  for dep in "${deplist[@]}"; do
    [[ -n $dep ]] && resolve_module "$dep" $((depth + 1))
  done
  # "softdep=pre: crypto-crc32c": load those first too (ext4 cannot mount without crc32c)
  local soft
  local -a softs=()
  read -r -a softs <<<"$(sed -n 's/^softdep=pre: *//p' <<<"$info" | sed 's/ post:.*//' | tr '\n' ' ')"
  for soft in "${softs[@]}"; do
    resolve_alias "$soft" $((depth + 1))
  done
  MOD_DONE[$m]=1
  MOD_ORDER+=("$m")
}
resolve_alias() { # NAME DEPTH: a module name, or an alias such as crypto-crc32c (soft dependency)
  local a=$1 f name
  if [[ -n ${MOD_PATH[${a//-/_}]+x} ]]; then
    resolve_module "$a" "$2"
    return 0
  fi
  is_builtin_module "${a//-/_}" && return 0
  # no modules.alias in the unpacked package: search the modules' own alias= lines, and
  # prefer the generic implementation when there are several (crc32c_generic, crc32c-intel)
  f=$(grep -rlaFxz --include='*.ko' "alias=$a" "$KDIR/lib/modules/$KVER/kernel" | sort | awk '/generic/ { g = $0 } { a[NR] = $0 } END { print (g != "" ? g : a[1]) }')
  if [[ -z $f ]]; then
    note "soft dependency '$a' not found as a module; assuming it is built in"
    return 0
  fi
  name=${f##*/}
  resolve_module "${name%.ko}" "$2"
}

# ---------------------------------------------------------------------------------------------
# Initramfs
copy_into_root() { # SRC DEST(absolute guest path)
  local src=$1 dest=$2
  mkdir -p "$ROOT$(dirname "$dest")"
  cp -L "$src" "$ROOT$dest" || die "cannot copy $src into the initramfs at $dest"
}
copy_libs_of() { # ELF file: copy what ldd lists (incl. the dynamic loader), preserving paths
  local f=$1 out lib
  if ! out=$(ldd "$f" 2>&1); then
    # "not a dynamic executable" (static, e.g. musl) or not an ELF at all: nothing to copy
    return 0
  fi
  while IFS= read -r lib; do
    [[ -f $ROOT$lib ]] || copy_into_root "$lib" "$lib"
  done < <(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' <<<"$out")
}

shell_quote() { # single-quote for sh
  printf "'%s'" "${1//\'/\'\\\'\'}"
}

build_initramfs() {
  ROOT=$WORK/root
  mkdir -p "$ROOT"/{bin,sbin,etc/sluice-vm,proc,sys,dev,tmp,run,root,usr/bin,usr/sbin,usr/local/bin,lib/modules}
  cp /bin/busybox "$ROOT/bin/busybox"
  ln -s busybox "$ROOT/bin/sh"
  # enough of /etc for glibc/musl programs: resolve localhost and the NIC addresses, know root
  {
    echo "127.0.0.1 localhost sluice-vm"
    echo "::1 localhost ip6-localhost"
    local nic i=0
    for nic in $NIC_FACTS; do # NICs in shape order: nic0, nic1...
      local f=${nic#*,*,}
      echo "${f%%,*} nic$i"
      i=$((i + 1))
    done
  } >"$ROOT/etc/hosts"
  echo "hosts: files" >"$ROOT/etc/nsswitch.conf"
  echo "root:x:0:0:root:/root:/bin/sh" >"$ROOT/etc/passwd"
  echo "root:x:0:" >"$ROOT/etc/group"
  echo "sluice-vm" >"$ROOT/etc/hostname"

  # modules
  local m
  for m in "${MOD_ORDER[@]}"; do
    cp "${MOD_PATH[$m]}" "$ROOT/lib/modules/$m.ko"
  done
  printf '%s\n' "${MOD_ORDER[@]}" >"$ROOT/etc/sluice-vm/modules"

  # binaries + libraries
  local spec src dest
  for spec in "${BINS[@]}"; do
    src=${spec%%:*}
    if [[ $spec == *:* ]]; then dest=${spec#*:}; else dest=/usr/local/bin/${src##*/}; fi
    [[ -f $src ]] || die "--bin $src: no such file"
    [[ $dest == /* ]] || die "--bin $spec: guest path must be absolute"
    copy_into_root "$src" "$dest"
    chmod 0755 "$ROOT$dest"
    copy_libs_of "$src"
  done
  for spec in "${FILES[@]}"; do
    [[ $spec == *:/* ]] || die "--file $spec: expected SRC:/absolute/guest/path"
    src=${spec%%:*}
    dest=${spec#*:}
    [[ -f $src ]] || die "--file $src: no such file"
    copy_into_root "$src" "$dest"
  done

  cp "$SCRIPT" "$ROOT/etc/sluice-vm/scenario.sh"
  chmod 0755 "$ROOT/etc/sluice-vm/scenario.sh"
  # busybox ash runs its own applets before searching PATH (standalone shell), so a --bin
  # named like an applet (tc, ip, taskset...) would be shadowed: the scenario gets a function
  # of that name calling the real binary
  local applets name
  applets=" $(/bin/busybox --list | tr '\n' ' ') "
  : >"$ROOT/etc/sluice-vm/overrides.sh"
  for spec in "${BINS[@]}"; do
    src=${spec%%:*}
    if [[ $spec == *:* ]]; then dest=${spec#*:}; else dest=/usr/local/bin/${src##*/}; fi
    name=${dest##*/}
    if [[ $applets == *" $name "* && $name =~ ^[A-Za-z0-9_]+$ ]]; then
      echo "$name() { $(shell_quote "$dest") \"\$@\"; }" >>"$ROOT/etc/sluice-vm/overrides.sh"
    fi
  done
  cp "$HERE/guest/lib.sh" "$ROOT/etc/sluice-vm/lib.sh"
  cp "$HERE/guest/init" "$ROOT/init"
  chmod 0755 "$ROOT/init"

  # facts about the shape, for the scenario
  {
    echo "SLUICE_VM_SHAPE=$(shell_quote "$SHAPE")"
    echo "SLUICE_VM_NODES=$(shell_quote "$NNODES")"
    echo "SLUICE_VM_SOCKETS=$(shell_quote "${SHAPE_SOCKETS[$SHAPE]}")"
    echo "SLUICE_VM_NODE_CPUS=$(shell_quote "$NODE_CPUS")"
    echo "SLUICE_VM_NODE_MEM_MIB=$(shell_quote "$NODE_MEMS")"
    echo "SLUICE_VM_DIST=$(shell_quote "${SHAPE_DIST[$SHAPE]}")"
    echo "SLUICE_VM_NICS=$(shell_quote "${NIC_FACTS# }")"
    echo "SLUICE_VM_DISKS=$(shell_quote "${DISK_FACTS# }")"
    echo "SLUICE_VM_OUT=/sluice-out"
    echo "SLUICE_VM_LIB=/etc/sluice-vm/lib.sh"
    local e
    for e in "${ENVS[@]}"; do
      echo "${e%%=*}=$(shell_quote "${e#*=}")"
    done
  } >"$ROOT/etc/sluice-vm/env"

  (cd "$ROOT" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) >"$WORK/initramfs.cpio" ||
    die "cpio failed to build $WORK/initramfs.cpio"
}

# ---------------------------------------------------------------------------------------------
# QEMU command line for the shape
QEMU_ARGS=()
NNODES=0
NODE_CPUS=
NODE_MEMS=
NIC_FACTS=
DISK_FACTS=
build_qemu_args() {
  local -a nodes=()
  read -r -a nodes <<<"${SHAPE_NODES[$SHAPE]}"
  NNODES=${#nodes[@]}
  local sockets=${SHAPE_SOCKETS[$SHAPE]}
  local i cpus mem ncpus=0 memtotal=0 lo hi
  local -a numa=()
  for i in "${!nodes[@]}"; do
    cpus=${nodes[$i]%%:*}
    mem=${nodes[$i]#*:}
    if [[ $cpus =~ ^([0-9]+)-([0-9]+)$ ]]; then
      lo=${BASH_REMATCH[1]} hi=${BASH_REMATCH[2]}
    elif [[ $cpus =~ ^[0-9]+$ ]]; then
      lo=$cpus hi=$cpus
    else
      die "shape $SHAPE: node $i has bad CPU range '$cpus'"
    fi
    ncpus=$((ncpus + hi - lo + 1))
    memtotal=$((memtotal + mem))
    NODE_CPUS+=" $cpus"
    NODE_MEMS+=" $mem"
    numa+=(-object "memory-backend-ram,id=m$i,size=${mem}M" -numa "node,nodeid=$i,cpus=$cpus,memdev=m$i")
  done
  NODE_CPUS=${NODE_CPUS# }
  NODE_MEMS=${NODE_MEMS# }
  ((ncpus % sockets == 0)) || die "shape $SHAPE: $ncpus CPUs do not split over $sockets sockets"

  local d pair a b npairs=0
  for d in ${SHAPE_DIST[$SHAPE]}; do
    pair=${d%%:*}
    a=${pair%-*} b=${pair#*-}
    numa+=(-numa "dist,src=$a,dst=$b,val=${d#*:}")
    npairs=$((npairs + 1))
  done
  [[ $npairs -eq $((NNODES * (NNODES - 1) / 2)) ]] ||
    die "shape $SHAPE: SHAPE_DIST lists $npairs pairs, QEMU needs all $((NNODES * (NNODES - 1) / 2))"

  # devices: one pxb-pcie per node that has devices, one root port per device
  local -a devs=() devargs=()
  read -r -a devs <<<"${SHAPE_DEVS[$SHAPE]}"
  declare -A pxb_of=()
  local npxb=0 nport=0 nnet=0 ndisk=0 dev kind rest node id
  for dev in "${devs[@]}"; do
    kind=${dev%%:*}
    rest=${dev#*:}
    node=${rest%%:*}
    id=${rest#*:}
    [[ $node =~ ^[0-9]+$ && $node -lt $NNODES ]] || die "shape $SHAPE: device '$dev' names a node that does not exist"
    if [[ -z ${pxb_of[$node]+x} ]]; then
      # bus numbers 32, 64, ... leave room for the root ports behind each bridge
      devargs+=(-device "pxb-pcie,id=pxb$npxb,bus_nr=$((32 * (npxb + 1))),numa_node=$node,bus=pcie.0")
      pxb_of[$node]=pxb$npxb
      npxb=$((npxb + 1))
    fi
    nport=$((nport + 1))
    devargs+=(-device "pcie-root-port,id=rp$nport,bus=${pxb_of[$node]},chassis=$nport,slot=$nport")
    case $kind in
      nic)
        local mac=${id:0:17} speed=${id:18}
        speed=${speed:-25000}
        [[ $mac =~ ^([0-9a-f]{2}:){5}[0-9a-f]{2}$ && $speed =~ ^[0-9]+$ ]] ||
          die "shape $SHAPE: bad NIC '$dev' (want nic:NODE:MAC[:MBPS], lower-case MAC)"
        # each NIC gets its own user-mode subnet 10.0.(2+n).0/24, guest address .15
        local net="10.0.$((2 + nnet))"
        local ip=15
        if [[ -n $LINK && $nnet -eq 0 ]]; then
          # a link to another guest: QEMU's socket backend, frames over host TCP
          devargs+=(-netdev "socket,id=net$nnet,${LINK%%:*}=127.0.0.1:${LINK#*:}")
          ip=$GUEST_IP
          mac=${mac:0:15}$(printf %02x "$GUEST_IP") # the two ends' MACs differ too
        else
          devargs+=(-netdev "user,id=net$nnet,restrict=on,net=$net.0/24")
        fi
        devargs+=(-device "virtio-net-pci,netdev=net$nnet,bus=rp$nport,mac=$mac,speed=$speed,duplex=full,romfile=")
        NIC_FACTS+=" $mac,$node,$net.$ip,$speed"
        nnet=$((nnet + 1))
        ;;
      disk)
        local img=$WORK/disk$ndisk.raw
        truncate -s "${DISK_MIB}M" "$img" || die "cannot create disk image $img"
        devargs+=(-drive "if=none,id=d$ndisk,file=$img,format=raw,cache=unsafe"
          -device "virtio-blk-pci,drive=d$ndisk,bus=rp$nport,serial=$id")
        DISK_FACTS+=" $id,$node"
        ndisk=$((ndisk + 1))
        ;;
      *) die "shape $SHAPE: unknown device kind '$kind' in '$dev'" ;;
    esac
  done

  # shellcheck disable=SC2054 # commas are QEMU option syntax
  QEMU_ARGS=(
    -M q35 -accel tcg,thread=multi -cpu max
    -smp "$ncpus,sockets=$sockets,cores=$((ncpus / sockets)),threads=1"
    -m "${memtotal}M"
    "${numa[@]}"
    "${devargs[@]}"
    -kernel "$KDIR/boot/vmlinuz-$KVER"
    -initrd "$WORK/initramfs.cpio"
    -append "console=ttyS0 quiet loglevel=1 panic=-1$APPEND"
    -serial stdio -display none -nodefaults -no-reboot
  )
}

# ---------------------------------------------------------------------------------------------
# Console log parsing
extract_files() { # LOG DIR
  local log=$1 dir=$2 name enc n=0
  mkdir -p "$dir" || die "cannot create --out directory $dir"
  local blocks=$WORK/files
  rm -rf "$blocks"
  mkdir -p "$blocks"
  # split the blocks out: blocks/N.name, blocks/N.enc, blocks/N.data
  awk -v dir="$blocks" '
    /^SLUICE-VM-FILE-BEGIN(-PLAIN)? / {
      n++; infile = 1
      enc = ($1 == "SLUICE-VM-FILE-BEGIN-PLAIN") ? "plain" : "base64"
      name = $0; sub(/^[^ ]+ /, "", name)
      print name > (dir "/" n ".name"); close(dir "/" n ".name")
      print enc > (dir "/" n ".enc"); close(dir "/" n ".enc")
      printf "" > (dir "/" n ".data")
      next
    }
    /^SLUICE-VM-FILE-END$/ { if (infile) close(dir "/" n ".data"); infile = 0; next }
    infile { print >> (dir "/" n ".data") }
  ' "$log"
  local f
  for f in "$blocks"/*.name; do
    [[ -e $f ]] || break
    n=${f##*/}
    n=${n%.name}
    name=$(<"$f")
    enc=$(<"$blocks/$n.enc")
    case /$name/ in
      *//* | */../* | */./*) die "guest returned a file with an unsafe name: '$name'" ;;
    esac
    mkdir -p "$dir/$(dirname "$name")"
    if [[ $enc == base64 ]]; then
      base64 -d <"$blocks/$n.data" >"$dir/$name" || die "cannot decode returned file '$name' (base64)"
    else
      cp "$blocks/$n.data" "$dir/$name"
    fi
    note "returned file: $dir/$name ($(stat -c %s "$dir/$name") bytes)"
  done
}

# ---------------------------------------------------------------------------------------------
WORK=
RUN_OK=0
# shellcheck disable=SC2317 # called through trap
cleanup() {
  [[ -n $WORK && -d $WORK ]] || return 0
  if [[ $RUN_OK -eq 1 && $KEEP -eq 0 ]]; then
    rm -rf "$WORK"
  else
    note "work directory kept: $WORK"
  fi
}

main() {
  mkdir -p "$CACHE" || die "cannot create cache directory $CACHE"
  ensure_host_tools
  ensure_kernel
  index_modules
  local m
  for m in "${BASE_MODULES[@]}" "${EXTRA_MODULES[@]}"; do
    resolve_module "$m"
  done

  mkdir -p "$CACHE/runs"
  WORK=$(mktemp -d "$CACHE/runs/$(date +%Y%m%d-%H%M%S)-$SHAPE-XXXX")
  trap cleanup EXIT

  build_qemu_args
  build_initramfs

  local log=$WORK/console.log qerr=$WORK/qemu.stderr rc=0 t0 t1
  note "booting shape $SHAPE ($NNODES nodes, CPUs $NODE_CPUS, kernel $KVER), timeout ${TIMEOUT}s"
  printf '%q ' qemu-system-x86_64 "${QEMU_ARGS[@]}" >"$WORK/qemu.cmd"
  t0=$(date +%s.%N)
  if [[ $VERBOSE -eq 1 ]]; then
    timeout -k 10 "$TIMEOUT" qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null 2>"$qerr" | tee "$log" >&2 || rc=${PIPESTATUS[0]}
  else
    timeout -k 10 "$TIMEOUT" qemu-system-x86_64 "${QEMU_ARGS[@]}" </dev/null >"$log" 2>"$qerr" || rc=$?
  fi
  t1=$(date +%s.%N)
  # serial console lines end in \r\n
  sed -i 's/\r$//' "$log"
  [[ -z $LOG_COPY ]] || cp "$log" "$LOG_COPY"
  local secs
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

  if [[ $rc -eq 124 || $rc -eq 137 ]]; then
    note "TIMEOUT: the VM ran past ${TIMEOUT}s; last console lines:"
    tail -n 20 "$log" >&2
    exit 124
  fi

  # scenario output: between the start marker and the exit marker, without file blocks
  awk '
    /^SLUICE-VM-START$/ { on = 1; next }
    /^SLUICE-VM-EXIT=/ { on = 0; next }
    /^SLUICE-VM-FILE-BEGIN/ { skip = 1; next }
    /^SLUICE-VM-FILE-END$/ { skip = 0; next }
    on && !skip { print }
  ' "$log"

  local guest_rc
  guest_rc=$(sed -n 's/^SLUICE-VM-EXIT=\([0-9][0-9]*\)$/\1/p' "$log" | tail -n 1)
  if [[ -z $guest_rc ]]; then
    note "no SLUICE-VM-EXIT marker in the console log (QEMU exit status $rc); last console lines:"
    tail -n 30 "$log" >&2
    if [[ -s $qerr ]]; then
      note "QEMU stderr:"
      cat "$qerr" >&2
    fi
    die "the guest did not report an exit code (log: $log)"
  fi
  if [[ -n $OUT_DIR ]]; then
    extract_files "$log" "$OUT_DIR"
  fi
  note "shape $SHAPE: guest exit code $guest_rc after ${secs}s (boot + run + poweroff)"
  RUN_OK=1
  exit "$guest_rc"
}

main
