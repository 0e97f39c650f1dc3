#!/usr/bin/env bash
# Installs everything prizma needs to build, test and benchmark, from Debian 12 packages only.
# Idempotent; works as root or through sudo.
set -euo pipefail
packages=(
    cmake g++ ninja-build pkg-config git ccache util-linux
    libibverbs-dev libibumad-dev ibverbs-providers
    # the SA join against a real OpenSM on a simulated fabric (tests/verbs/sa)
    ibsim-utils opensm infiniband-diags
    libpgm-dev libbenchmark-dev catch2 libfmt-dev libcli11-dev libsodium-dev libxxhash-dev
    # JSON documents of the tools and md-gateway (header-only)
    nlohmann-json3-dev
    clang libclang-rt-14-dev clang-format tshark iproute2 iptables
    # examples/marketdata (md-gateway and its tests)
    libboost-dev liblmdb-dev curl openssl python3-websocket python3-selenium chromium
    chromium-driver wrk nginx-light libhiredis-dev redis-server redis-tools
    # examples/execlog (execlog-fix: a FIX 4.4 drop-copy acceptor on QuickFIX)
    libquickfix-dev
    # its metrics files, read by a real node-exporter in the tests (execlog.divergence_quorum)
    prometheus-node-exporter
)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "setup-debian: all ${#packages[@]} packages present"
    "$(dirname "$0")/fetch-web-assets.sh" || echo "setup-debian: warning: no chart library (marketdata.web will fail)"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup-debian: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections 2>/dev/null || true
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The chart library of md-gateway's page (npm, exact version, hash checked; not in git). Without
# it (no network, a hash mismatch: the script says which) only the marketdata.web test fails.
"$(dirname "$0")/fetch-web-assets.sh" || echo "setup-debian: warning: no chart library (marketdata.web will fail)"
