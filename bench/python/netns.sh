#!/bin/sh
# Two namespaces joined by a veth pair shaped to 1 Gbit/s each way (tbf), on the
# 10.65.0.0/16 subnet: py-a (10.65.0.1, the sender) and py-b (10.65.0.2, the receiver).
# `netns.sh up` creates them (removing leftovers first), `netns.sh down` removes them.
set -eu
down() {
    ip netns del py-a 2>/dev/null || true
    ip netns del py-b 2>/dev/null || true
}
case "${1:-}" in
up)
    down
    ip netns add py-a
    ip netns add py-b
    ip link add py-va netns py-a type veth peer name py-vb netns py-b
    ip -n py-a addr add 10.65.0.1/24 dev py-va
    ip -n py-b addr add 10.65.0.2/24 dev py-vb
    for n in a b; do
        ip -n py-$n link set lo up
        ip -n py-$n link set py-v$n up
        # 1 Gbit/s; a 4 MB bucket, up to 20 ms queued.
        ip netns exec py-$n tc qdisc add dev py-v$n root tbf rate 1gbit burst 4mb latency 20ms
    done
    ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
