#!/usr/bin/env bash
# Builds the replaywatch Grafana data source plugin: dist/ as Grafana loads
# it (module.js, plugin.json, the logo, README.md, CHANGELOG.md and the
# backend gpx_replaywatch for linux/amd64 and linux/arm64), and the zip
# Grafana's plugin zips are laid out as: one folder named after the plugin
# id, holding dist/'s files.
#
#   dashboards/plugin/build.sh          # from anywhere
#
# Needs node and npm (the npm registry, the first time), go and zip (or
# python3). Environment:
#   PLUGIN_ZIP_DIR   where the zip goes (default: dashboards/plugin)
#   GOFLAGS          passed on to go build, as set
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
id=replaywatch-sessions-datasource
executable=gpx_replaywatch

log() { printf '==> %s\n' "$*" >&2; }

for tool in node npm go; do
	command -v "$tool" >/dev/null || { log "build.sh needs $tool"; exit 1; }
done

cd "$here"
version="$(node -p 'require("./package.json").version')"

# npm ci installs exactly the lockfile's packages (the lockfile is committed);
# install makes the lockfile when there is none yet.
if [ -f package-lock.json ]; then
	log "npm ci (Node packages of the frontend)"
	npm ci --no-audit --no-fund --loglevel=error
else
	log "npm install (no package-lock.json yet: it makes one)"
	npm install --no-audit --no-fund --loglevel=error
fi

log "typecheck (tsc --noEmit)"
npm run --silent typecheck

# The frontend first: webpack cleans dist/ (keeping only the backend's
# binaries, which are rebuilt below anyway).
log "frontend (webpack, production) into dist/"
rm -rf dist
npm run --silent build

log "backend $executable for linux/amd64 and linux/arm64 into dist/"
for arch in amd64 arm64; do
	(cd "$root" && CGO_ENABLED=0 GOOS=linux GOARCH="$arch" \
		go build -trimpath -ldflags='-s -w' -o "$here/dist/${executable}_linux_${arch}" ./dashboards/plugin/pkg)
done
chmod 0755 dist/${executable}_linux_*

zipdir="${PLUGIN_ZIP_DIR:-$here}"
mkdir -p "$zipdir"
zipdir="$(cd "$zipdir" && pwd)"
zip_path="$zipdir/$id-$version.zip"
log "zip $zip_path"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
cp -R dist "$stage/$id"
rm -f "$zip_path"
if command -v zip >/dev/null; then
	(cd "$stage" && zip -q -r -X "$zip_path" "$id")
elif command -v python3 >/dev/null; then
	(cd "$stage" && python3 -m zipfile -c "$zip_path" "$id")
else
	log "build.sh needs zip (Debian package zip) or python3 to write the zip"; exit 1
fi

log "plugin folder: $here/dist"
echo "$zip_path"
