# shellcheck shell=bash
# Network paths: loopback, or two namespaces we create (client side A, server side B)
# joined by one or two veth pairs, optionally rate-limited with tbf on both ends.
# Addresses live only inside these namespaces, in 10.77.0.0/16; both are deleted on exit.
#
#   link 1: A:vethA1 10.77.1.1/24  <->  B:vethB1 10.77.1.2/24
#   link 2: A:vethA2 10.77.2.1/24  <->  B:vethB2 10.77.2.2/24   (two-NIC paths only)
#
# netem is not built into this kernel (`tc qdisc add ... netem` fails), so no RTT or loss
# is emulated: every path here has a sub-millisecond RTT.

NS_A="slb$$a"
NS_B="slb$$b"
NS_L="slb$$l"  # loopback only: the "lo" path, so that no server is reachable from outside
NS_L_READY=""
VETH_A1="slb$$a1" VETH_B1="slb$$b1" VETH_A2="slb$$a2" VETH_B2="slb$$b2"
NS_CREATED=0

# Every path sets: PATH_NAME SRV_HOST SRV_HOST2 CLI_HOST CLI_X SRV_X CLI_NICS SRV_NICS LINKS RATE
path_names_all="lo veth1 veth2 veth1-tbf5g veth2-tbf5g veth1-tbf1g veth2-tbf1g"

netns_available() {
    is_root || return 1
    command -v ip >/dev/null && command -v tc >/dev/null || return 1
    return 0
}

netns_create() {
    [ "$NS_CREATED" = 1 ] && return 0
    ip netns add "$NS_A" && ip netns add "$NS_B" || return 1
    NS_CREATED=1
    # `ip netns exec` bind-mounts /etc/netns/NAME/hosts over /etc/hosts: our addresses
    # must resolve without DNS (GridFTP reverse-resolves its interface and gives up).
    local ns
    for ns in "$NS_A" "$NS_B"; do
        mkdir -p "/etc/netns/$ns" &&
            printf '127.0.0.1 localhost\n127.0.0.1 %s\n10.77.1.1 slb-a1\n10.77.2.1 slb-a2\n10.77.1.2 slb-b1\n10.77.2.2 slb-b2\n' \
                "$(hostname)" >"/etc/netns/$ns/hosts"
    done
    ip link add "$VETH_A1" type veth peer name "$VETH_B1" &&
        ip link add "$VETH_A2" type veth peer name "$VETH_B2" || return 1
    ip link set "$VETH_A1" netns "$NS_A" && ip link set "$VETH_A2" netns "$NS_A" &&
        ip link set "$VETH_B1" netns "$NS_B" && ip link set "$VETH_B2" netns "$NS_B" || return 1
    ip -n "$NS_A" addr add 10.77.1.1/24 dev "$VETH_A1" &&
        ip -n "$NS_A" addr add 10.77.2.1/24 dev "$VETH_A2" &&
        ip -n "$NS_B" addr add 10.77.1.2/24 dev "$VETH_B1" &&
        ip -n "$NS_B" addr add 10.77.2.2/24 dev "$VETH_B2" || return 1
    local ns
    for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up || return 1; done
    ip -n "$NS_A" link set "$VETH_A1" up && ip -n "$NS_B" link set "$VETH_B1" up || return 1
    return 0
}

netns_destroy() {
    local ns
    for ns in "$NS_L" "$NS_A" "$NS_B"; do
        [ -e "/run/netns/$ns" ] && ip netns del "$ns" 2>/dev/null
        [ -d "/etc/netns/$ns" ] && rm -rf "/etc/netns/${ns:?}"
    done
    NS_L_READY="" NS_CREATED=0
}

_tbf() { # _tbf NS DEV RATE_MBIT|none
    local ns=$1 dev=$2 mbit=$3
    ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null
    [ "$mbit" = none ] && return 0
    # burst: 4 ms at the rate (at least 256 KiB, veth sends 64 KiB GSO segments)
    local burst=$((mbit * 1000000 / 8 / 250))
    [ $burst -lt 262144 ] && burst=262144
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "${mbit}mbit" burst "$burst" latency 20ms
}

# path_setup NAME: configures the path and its variables; false if it cannot be made here.
path_setup() {
    PATH_NAME=$1 SRV_HOST2="" RATE=none LINKS=1
    case $1 in
        lo)
            SRV_HOST=127.0.0.1 CLI_HOST=127.0.0.1 CLI_X="" SRV_X="" CLI_NICS="" SRV_NICS=""
            if [ -z "$NS_L_READY" ] && netns_available && ip netns add "$NS_L" 2>/dev/null; then
                ip -n "$NS_L" link set lo up && NS_L_READY=1
            fi
            if [ -n "$NS_L_READY" ]; then CLI_X="ip netns exec $NS_L" SRV_X=$CLI_X; fi
            return 0
            ;;
    esac
    netns_available || return 1
    netns_create || return 1
    SRV_HOST=10.77.1.2 CLI_HOST=10.77.1.1
    CLI_X="ip netns exec $NS_A" SRV_X="ip netns exec $NS_B"
    CLI_NICS=$VETH_A1 SRV_NICS=$VETH_B1
    case $1 in
        veth2*)
            LINKS=2 SRV_HOST2=10.77.2.2
            CLI_NICS="$VETH_A1 $VETH_A2" SRV_NICS="$VETH_B1 $VETH_B2"
            ip -n "$NS_A" link set "$VETH_A2" up && ip -n "$NS_B" link set "$VETH_B2" up
            ;;
        veth1*)
            ip -n "$NS_A" link set "$VETH_A2" down && ip -n "$NS_B" link set "$VETH_B2" down
            ;;
        *) return 1 ;;
    esac
    case $1 in
        *-tbf1g) RATE=1000 ;;
        *-tbf5g) RATE=5000 ;;
    esac
    _tbf "$NS_A" "$VETH_A1" "$RATE" && _tbf "$NS_B" "$VETH_B1" "$RATE" &&
        _tbf "$NS_A" "$VETH_A2" "$RATE" && _tbf "$NS_B" "$VETH_B2" "$RATE" || return 1
    # wait until both ends answer (IPv4 neighbour resolution on a fresh veth)
    local i
    for ((i = 0; i < 40; i++)); do
        $CLI_X bash -c "exec 3<>/dev/tcp/$SRV_HOST/9" 2>/dev/null
        $CLI_X ip neigh show "$SRV_HOST" | grep -qE 'REACHABLE|STALE|DELAY' && break
        sleep 0.05
    done
    return 0
}

# Bytes the client side has sent on each link so far: "LINK1 LINK2" (lo: "0 0").
link_tx_bytes() {
    if [ "$PATH_NAME" = lo ]; then echo "0 0"; return; fi
    local a b
    a=$(ip netns exec "$NS_A" cat "/sys/class/net/$VETH_A1/statistics/tx_bytes" 2>/dev/null || echo 0)
    b=$(ip netns exec "$NS_A" cat "/sys/class/net/$VETH_A2/statistics/tx_bytes" 2>/dev/null || echo 0)
    echo "$a $b"
}

# Does this kernel have netem? Sets NETEM. (It does not on the machines this suite was
# written on, so no path here has an emulated RTT.)
netem_probe() {
    NETEM="not probed (not root)"
    netns_available || return 0
    NETEM="not probed (namespaces unavailable)"
    netns_create || return 0
    if ip netns exec "$NS_A" tc qdisc add dev lo root netem delay 10ms 2>"$RUNTMP/netem.err"; then
        ip netns exec "$NS_A" tc qdisc del dev lo root 2>/dev/null
        NETEM="available (not used: the suite does not emulate RTT)"
    else
        NETEM="unavailable: $(head -1 "$RUNTMP/netem.err")"
    fi
}
