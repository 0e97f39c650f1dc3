#!/usr/bin/env bash
# Fetches the chart library of md-gateway's web page (examples/marketdata, `--web DIR`):
# TradingView lightweight-charts from npm at an exact version, its sha512 checked against the
# hash below, dist/lightweight-charts.standalone.production.js extracted into DIR (default
# build/web-assets). Never committed to git. Idempotent: does nothing when DIR already holds
# the checked file; fails (exit 1) on a hash mismatch, leaving nothing behind.
#   scripts/fetch-web-assets.sh [DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
version=5.3.0
integrity="sha512-w16fu2/FteUkIJdgc9G2tOCKs1fwFSqnqF8+kMgHGv0uGIfcfpEJhziSaQbML1yrkbeg4nQXV3msjmhBzhLNhw=="
dir=${1:-build/web-assets}
file=lightweight-charts.standalone.production.js
stamp="$dir/.lightweight-charts-$version"
if [ -f "$dir/$file" ] && [ -f "$stamp" ]; then
    echo "fetch-web-assets: lightweight-charts $version already in $dir"
    exit 0
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tgz="$tmp/lightweight-charts-$version.tgz"
if command -v npm >/dev/null; then
    (cd "$tmp" && npm pack --silent "lightweight-charts@$version" >/dev/null)
else  # the same tarball from the registry directly (the hash below decides either way)
    curl -fsSL -o "$tgz" "https://registry.npmjs.org/lightweight-charts/-/lightweight-charts-$version.tgz"
fi
got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
if [ "$got" != "$integrity" ]; then
    echo "fetch-web-assets: lightweight-charts-$version.tgz has $got, expected $integrity" >&2
    exit 1
fi
tar -xzf "$tgz" -C "$tmp" "package/dist/$file"
mkdir -p "$dir"
mv "$tmp/package/dist/$file" "$dir/$file"
touch "$stamp"
echo "fetch-web-assets: lightweight-charts $version (sha512 checked) in $dir/$file"
