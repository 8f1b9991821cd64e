#!/usr/bin/env bash
# Vendors the report's charting library into assets/vega/ (compiled into the
# binary by src/report/page.rs): Vega, Vega-Lite and vega-embed, each its
# npm package's minified browser build and its licence (BSD-3-Clause), at
# the pinned versions below, checked against the hashes of the files this
# repository holds. Needs npm and the registry.
#
#     bash scripts/vendor-vega.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=assets/vega
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fetch() { # package version build-file
    (cd "$work" && npm pack --silent "$1@$2" >/dev/null && mkdir "$1" && tar -xzf "$1-$2.tgz" -C "$1" --strip-components 1)
    cp "$work/$1/build/$3" "$out/$3"
    cp "$work/$1/LICENSE" "$out/LICENSE-$1"
}
mkdir -p "$out"
fetch vega 6.4.0 vega.min.js
fetch vega-lite 6.5.0 vega-lite.min.js
fetch vega-embed 7.3.0 vega-embed.min.js
(cd "$out" && sha256sum -c --quiet <<'SUMS'
8f6a3587cf8d4f42c7e08120e3eb05d067e746d554e39d2dcf52acc0bd5ba28f  vega.min.js
83e215e84e308ee8688fa6503ba0f1cf8a3c05c0d61df2841a0b92bf86809e00  vega-lite.min.js
b1455caba2fb1a72fb46025ba0ba1316e2dbc7f0dd40a3f6040172bf9c08ba91  vega-embed.min.js
SUMS
)
echo "vendored into $out"
