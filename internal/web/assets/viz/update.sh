#!/bin/sh
# Fetches @viz-js/viz from npm and replaces viz-global.js with its
# dist/viz-global.js. Usage: ./update.sh [VERSION] (default: latest).
set -eu
cd "$(dirname "$0")"
version=${1:-latest}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$tmp" && npm pack --silent "@viz-js/viz@$version" >/dev/null && tar xzf ./*.tgz)
cp "$tmp/package/dist/viz-global.js" viz-global.js
grep -m1 -o 'Viz.js [0-9.]*' viz-global.js
node -e 'console.log("package", require(process.argv[1]).version)' "$tmp/package/package.json"
echo "now update README.md and LICENSE with the versions above"
