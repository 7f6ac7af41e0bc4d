#!/usr/bin/env bash
# The one test command (`make test`, also run by .ci/run). It needs only Go:
#   1. installs the pinned tools into ./.bin (scripts/tools.sh);
#   2. static checks: gofmt, go vet, staticcheck;
#   3. starts versitygw (a real S3 server, posix backend) on 127.0.0.1 on a
#      free port with a temporary folder and random credentials, creates the
#      test bucket, exports TQW_TEST_S3_* and runs `go test -race -tags invariants` on every
#      package; the server is stopped whatever happens, Ctrl-C included.
#
# Usage: scripts/test.sh [--check-only]
#   --check-only        static checks only; no server, no tests
# Environment, for local use:
#   TQW_GO_TEST_ARGS    extra `go test` arguments, e.g. "-run Contract -v";
#                       package patterns in it (./x/... or github.com/...)
#                       replace the default ./...
#   TQW_CHECK_PKGS      packages for the static checks (default ./...)
#   TQW_GO_TEST_TIMEOUT go test -timeout (default 30m)
set -euo pipefail
cd "$(dirname "$0")/.."

check_only=0
for arg in "$@"; do
  case "$arg" in
    --check-only) check_only=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $arg (use --check-only)" >&2; exit 2 ;;
  esac
done

say() { printf '\n== %s\n' "$*" >&2; }

say "tools"
bash scripts/tools.sh

read -r -a check_pkgs <<< "${TQW_CHECK_PKGS:-./...}"

say "gofmt"
fmt_dirs=()
for p in "${check_pkgs[@]}"; do fmt_dirs+=("${p%/...}"); done
unformatted=$(gofmt -l "${fmt_dirs[@]}" | grep -v '^\.bin/' || true)
if [ -n "$unformatted" ]; then
  echo "gofmt: these files need formatting (run gofmt -w on them):" >&2
  echo "$unformatted" >&2
  exit 1
fi

say "go vet"
go vet "${check_pkgs[@]}"

say "staticcheck"
.bin/staticcheck "${check_pkgs[@]}"

if [ "$check_only" = 1 ]; then
  say "static checks passed"
  exit 0
fi

# ---- local S3 server -------------------------------------------------------
gw_pid=""
# Under .bin, not $TMPDIR: versitygw keeps ETags in extended attributes,
# which a tmpfs /tmp may lack (and its --sidecar mode loses If-Match races).
mkdir -p .bin
gw_dir=$(mktemp -d "$PWD/.bin/s3.XXXXXX")
cleanup() {
  if [ -n "$gw_pid" ]; then
    kill "$gw_pid" 2>/dev/null || true
    wait "$gw_pid" 2>/dev/null || true
  fi
  rm -rf "$gw_dir"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rand_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

access_key="tqw$(rand_hex 8)"
secret_key="$(rand_hex 20)"
mkdir -p "$gw_dir/root"

say "starting versitygw"
started=0
for attempt in 1 2 3 4 5 6 7 8 9 10; do
  port=$(( 20000 + $(od -An -tu2 -N2 /dev/urandom | tr -d ' ') % 40000 ))
  if port_busy "$port"; then continue; fi
  .bin/versitygw --port "127.0.0.1:$port" --access "$access_key" --secret "$secret_key" \
    --quiet posix "$gw_dir/root" >"$gw_dir/versitygw.log" 2>&1 &
  gw_pid=$!
  # Wait until it listens (or dies, e.g. when another process took the port).
  for _ in $(seq 1 300); do
    if ! kill -0 "$gw_pid" 2>/dev/null; then break; fi
    if port_busy "$port"; then started=1; break; fi
    sleep 0.1
  done
  if [ "$started" = 1 ] && kill -0 "$gw_pid" 2>/dev/null; then break; fi
  started=0
  kill "$gw_pid" 2>/dev/null || true
  wait "$gw_pid" 2>/dev/null || true
  gw_pid=""
done
if [ "$started" != 1 ]; then
  echo "test.sh: versitygw did not start; its log:" >&2
  cat "$gw_dir/versitygw.log" >&2 || true
  exit 1
fi
echo "versitygw pid $gw_pid on 127.0.0.1:$port, root $gw_dir/root" >&2

export TQW_TEST_S3_ENDPOINT="127.0.0.1:$port"
export TQW_TEST_S3_ACCESS_KEY="$access_key"
export TQW_TEST_S3_SECRET_KEY="$secret_key"
export TQW_TEST_S3_BUCKET="tqw-test"
go run ./internal/s3setup -wait 30s

# ---- tests -----------------------------------------------------------------
read -r -a extra <<< "${TQW_GO_TEST_ARGS:-}"
pkgs=(./...)
for a in "${extra[@]}"; do
  case "$a" in ./*|../*|github.com/*) pkgs=() ;; esac
done
log="$gw_dir/go-test.log"
say "go test -race -tags invariants -count=1 -timeout ${TQW_GO_TEST_TIMEOUT:-30m} ${extra[*]} ${pkgs[*]}"
set +e
go test -race -tags invariants -count=1 -timeout "${TQW_GO_TEST_TIMEOUT:-30m}" "${extra[@]}" "${pkgs[@]}" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e

say "summary"
n_ok=$(grep -c '^ok ' "$log" || true)
n_fail=$(grep -c '^FAIL[[:space:]]' "$log" || true)
n_none=$(grep -c '^?[[:space:]]' "$log" || true)
echo "packages: $n_ok ok, $n_fail failed, $n_none without tests" >&2
grep -E '^(--- FAIL|FAIL[[:space:]])' "$log" >&2 || true
if [ "$status" != 0 ]; then
  echo "go test failed (exit $status)" >&2
  exit "$status"
fi
echo "all tests passed" >&2
