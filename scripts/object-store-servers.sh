#!/usr/bin/env bash
# Builds the object-store servers the object-storage tests start (docs/object-storage.md,
# "Test servers") into /var/tmp/weir-tools/bin (WEIR_TOOLS overrides):
#   weed             SeaweedFS (S3 API), from the Go module proxy
#   azurite-blob     Azurite's Blob service (Azure), from the npm registry (installed globally)
# Idempotent: does nothing for what is already there at the pinned version.
# Prints the bin directory.
set -euo pipefail
TOOLS="${WEIR_TOOLS:-/var/tmp/weir-tools}"
BIN="$TOOLS/bin"
mkdir -p "$BIN"
SEAWEEDFS=v0.0.0-20261109003541-7506e5f91cd6
if ! command -v go >/dev/null 2>&1; then
  echo "object-store-servers: go is needed (the Go toolchain, apt-get install golang)" >&2
  exit 1
fi
if [ ! -x "$BIN/weed" ] || [ "$(cat "$BIN/weed.version" 2>/dev/null)" != "$SEAWEEDFS" ]; then
  # SeaweedFS's go.mod has a replace directive, which `go install pkg@version` refuses:
  # the module is downloaded, then built in a copy of its own tree.
  src="$(GOFLAGS=-mod=mod go mod download -json "github.com/seaweedfs/seaweedfs@$SEAWEEDFS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
  work="$TOOLS/src/seaweedfs-$SEAWEEDFS"
  rm -rf "$work"
  mkdir -p "$TOOLS/src"
  cp -r "$src" "$work"
  chmod -R u+w "$work"
  (cd "$work" && go build -o "$BIN/weed.tmp" ./weed) >&2
  mv "$BIN/weed.tmp" "$BIN/weed"
  echo "$SEAWEEDFS" > "$BIN/weed.version"
fi
AZURITE=3.37.0
if [ "$(azurite-blob --version 2>/dev/null)" != "$AZURITE" ]; then
  npm install -g --silent "azurite@$AZURITE" >&2
fi
echo "$BIN"
