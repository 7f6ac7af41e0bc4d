#!/usr/bin/env bash
# Installs the pinned tools `make test` needs into ./.bin if they are absent.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSITYGW_VERSION=v1.8.0
STATICCHECK_VERSION=v0.8.2
export GOBIN="$PWD/.bin"
mkdir -p "$GOBIN"
want() { # name version-file version package
  if [ ! -x "$GOBIN/$1" ] || [ "$(cat "$GOBIN/.$1.version" 2>/dev/null)" != "$2" ]; then
    echo "installing $1 $2" >&2
    go install "$3@$2"
    echo "$2" > "$GOBIN/.$1.version"
  fi
}
want versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw
want staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck
