#!/usr/bin/env bash
# The one test command (`make test`, also run by .ci/run). It needs only Go:
#   1. installs the pinned tools into ./.bin (scripts/tools.sh): staticcheck
#      first; the tests' tools (versitygw, npm projects, Debian packages)
#      install in the background while the static checks run;
#   2. static checks: gofmt, go vet (every file once, the invariants-tagged
#      ones included, so `go test` need not vet again), staticcheck;
#   3. builds tqw-dsl once for every end-to-end test (TQW_TEST_TQW_DSL) and
#      runs the examples' test cases with it (tqw-dsl test workflows/);
#   4. starts versitygw (a real S3 server, posix backend) on 127.0.0.1 on a
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
#   TQW_GO_TEST_P       go test -p: packages built and tested at once (default 4)
#   TQW_RACE_EXIT_SLEEP_MS  the race detector's sleep at exit (default 100)
set -euo pipefail
cd "$(dirname "$0")/.."
# -trimpath keeps the checkout's path out of the build cache's keys, so a
# fresh clone (or CI with a cached GOCACHE) reuses the compiles of the
# packages it did not change instead of building the whole tree again.
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"

check_only=0
for arg in "$@"; do
  case "$arg" in
    --check-only) check_only=1 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "test.sh: unknown argument $arg (use --check-only)" >&2; exit 2 ;;
  esac
done

say() { printf '\n== %s\n' "$*" >&2; }

# Whatever happens, the S3 server is stopped and a background tool install
# is waited for (it is not killed half-way through an npm ci).
tools_pid=""
gw_pid=""
gw_dir=""
bin_dir=""
cleanup() {
  if [ -n "$tools_pid" ]; then wait "$tools_pid" 2>/dev/null || true; fi
  if [ -n "$gw_pid" ]; then
    kill "$gw_pid" 2>/dev/null || true
    wait "$gw_pid" 2>/dev/null || true
  fi
  if [ -n "$gw_dir" ]; then rm -rf "$gw_dir"; fi
  if [ -n "$bin_dir" ]; then rm -rf "$bin_dir"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p .bin
say "tools"
bash scripts/tools.sh static
tools_log=""
if [ "$check_only" = 0 ]; then
  tools_log=$(mktemp "$PWD/.bin/tools.XXXXXX")
  echo "installing the tests' tools in the background (scripts/tools.sh tests)" >&2
  bash scripts/tools.sh tests >"$tools_log" 2>&1 &
  tools_pid=$!
fi

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

# go vet runs once over every file (go test -vet=off below): all packages
# as built by default (shared with staticcheck and the tqw-dsl build), then
# the few with files that build only under the tests' invariants tag.
say "go vet"
go vet "${check_pkgs[@]}"
tagged=()
while IFS= read -r f; do tagged+=("$(dirname "$f")"); done < <(
  grep -rlE --include='*.go' --exclude-dir=.bin --exclude-dir=node_modules '^//go:build .*invariants' . | sort -u)
if [ "${#tagged[@]}" -gt 0 ]; then
  go vet -tags invariants $(printf '%s\n' "${tagged[@]}" | sort -u)
fi

say "staticcheck"
.bin/staticcheck "${check_pkgs[@]}"

if [ "$check_only" = 1 ]; then
  say "static checks passed"
  exit 0
fi

say "waiting for the tests' tools"
tools_status=0
wait "$tools_pid" || tools_status=$?
tools_pid=""
cat "$tools_log" >&2
rm -f "$tools_log"
if [ "$tools_status" != 0 ]; then
  echo "test.sh: scripts/tools.sh tests failed (exit $tools_status)" >&2
  exit "$tools_status"
fi

# ---- local S3 server -------------------------------------------------------
# Under .bin, not $TMPDIR: versitygw keeps ETags in extended attributes,
# which a tmpfs /tmp may lack (and its --sidecar mode loses If-Match races).
gw_dir=$(mktemp -d "$PWD/.bin/s3.XXXXXX")

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

# One tqw-dsl binary for the end-to-end tests of every package
# (internal/tqwdslbin), instead of a build in each.
say "building tqw-dsl for the tests"
# In a folder of its own under $TMPDIR, not under the checkout: a test run
# as root runs it as nobody too (cmd/tqw-dsl's read-only test), who may
# not pass through the checkout's parents (a fresh clone's mktemp -d is
# 0700).
bin_dir=$(mktemp -d)
chmod 755 "$bin_dir"
export TQW_TEST_TQW_DSL="$bin_dir/tqw-dsl"
go build -o "$TQW_TEST_TQW_DSL" ./cmd/tqw-dsl

# The examples' own test cases (workflows/*.test.yaml), as a user's CI
# runs them: mocked actions, a virtual clock, no network.
say "tqw-dsl test workflows/"
"$TQW_TEST_TQW_DSL" test workflows/

# The race detector sleeps a second before every race-built process exits
# (GORACE atexit_sleep_ms, default 1000), for goroutines still running to
# report; every test binary then holds one of go test's -p slots for it.
# Races found during a test are reported by the test itself, not by this.
export GORACE="${GORACE:+$GORACE }atexit_sleep_ms=${TQW_RACE_EXIT_SLEEP_MS:-100}"
# -p 4 -parallel 4: the long tests (cmd/tqw-dsl's end-to-end tests, the
# kill tests) mostly wait for child processes, so with go test's default
# of one package and one test per core (2 here) the cores sit idle while
# they wait and the compiles queue behind them.
test_flags=(-race -tags invariants -vet=off -count=1 -p "${TQW_GO_TEST_P:-4}" -parallel 4 -timeout "${TQW_GO_TEST_TIMEOUT:-30m}")
log="$gw_dir/go-test.log"
say "go test ${test_flags[*]} ${extra[*]} ${pkgs[*]}"
set +e
go test "${test_flags[@]}" "${extra[@]}" "${pkgs[@]}" 2>&1 | tee "$log"
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
