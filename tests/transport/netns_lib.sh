# Sourced by the multi-host tests (netns.sh, netns_ipv6.sh): "hosts" are network namespaces
# joined by veth pairs to a bridge in one more namespace. Traffic never leaves them.
#
#   netns_hosts TAG "BRIDGE_ARGS" HOST...   creates TAG-br (bridge br0 with the extra
#       `ip link add ... type bridge` arguments) and, per HOST, namespace TAG-HOST with lo up
#       and interface TAGHOST up on br0; exits 77 (ctest: skipped) without netns/bridge support.
#       Registers an EXIT trap that deletes them all (and $dir, if set).
#   netns_addresses PREFIX HOST...   gives the hosts PREFIX.1/24, PREFIX.2/24, ... in order,
#       with the multicast route (224.0.0.0/4) on their interface.

netns_hosts() {
	netns_tag=$1
	local bridge_args=$2 h ns
	shift 2
	netns_names=("$@" br)
	trap netns_cleanup EXIT
	if ! ip netns add "$netns_tag-br" 2>/dev/null; then
		echo "SKIP: cannot create network namespaces"
		exit 77
	fi
	# shellcheck disable=SC2086 # the bridge arguments are words
	ip -n "$netns_tag-br" link add br0 type bridge $bridge_args || {
		echo "SKIP: no bridge support"
		exit 77
	}
	ip -n "$netns_tag-br" link set br0 up
	for h in "$@"; do
		ns=$netns_tag-$h
		ip netns add "$ns"
		ip link add "$netns_tag$h" type veth peer name "b$netns_tag$h"
		ip link set "$netns_tag$h" netns "$ns"
		ip link set "b$netns_tag$h" netns "$netns_tag-br"
		ip -n "$netns_tag-br" link set "b$netns_tag$h" master br0 up
		ip -n "$ns" link set lo up
		ip -n "$ns" link set "$netns_tag$h" up
	done
}

netns_addresses() {
	local prefix=$1 h i=1
	shift
	for h in "$@"; do
		ip -n "$netns_tag-$h" addr add "$prefix.$i/24" dev "$netns_tag$h"
		ip -n "$netns_tag-$h" route add 224.0.0.0/4 dev "$netns_tag$h"
		i=$((i + 1))
	done
}

netns_cleanup() {
	local h
	for h in "${netns_names[@]}"; do ip netns del "$netns_tag-$h" 2>/dev/null; done
	[ -n "${dir:-}" ] && rm -rf "$dir"
}
