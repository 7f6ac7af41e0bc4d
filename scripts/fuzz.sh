#!/usr/bin/env bash
# Runs every fuzz target in the tree, one after the other, and prints a
# table: target, executions, result. Targets are discovered with
# `go test -list '^Fuzz'`, so a new one is picked up without editing this.
# Exits 1 when any target failed (its failing input is in the package's
# testdata/fuzz/<target>/, as go test writes it), 2 on a usage error.
#
# Usage: scripts/fuzz.sh [-fuzztime D] [-parallel N] [-match RE] [-logdir DIR] [PKG...]
#   -fuzztime D   how long each target runs (go test -fuzztime; default 5m)
#   -parallel N   fuzzing workers per target (default: go test's, GOMAXPROCS)
#   -match RE     run only targets whose "package/path.FuzzName" matches RE (grep -E)
#   -logdir DIR   keep each target's go test output in DIR (default: a new temp dir)
#   PKG...        package patterns to search (default ./...)
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=5m parallel="" match="" logdir=""
pkgs=()
while [ $# -gt 0 ]; do
  case "$1" in
    -fuzztime|--fuzztime) fuzztime="${2:?-fuzztime needs a duration}"; shift 2 ;;
    -fuzztime=*|--fuzztime=*) fuzztime="${1#*=}"; shift ;;
    -parallel|--parallel) parallel="${2:?-parallel needs a number}"; shift 2 ;;
    -parallel=*|--parallel=*) parallel="${1#*=}"; shift ;;
    -match|--match) match="${2:?-match needs a regular expression}"; shift 2 ;;
    -match=*|--match=*) match="${1#*=}"; shift ;;
    -logdir|--logdir) logdir="${2:?-logdir needs a directory}"; shift 2 ;;
    -logdir=*|--logdir=*) logdir="${1#*=}"; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) pkgs+=("$1"); shift ;;
  esac
done
[ ${#pkgs[@]} -gt 0 ] || pkgs=(./...)
if [ -n "$parallel" ] && ! [[ "$parallel" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz.sh: -parallel $parallel: want a positive number" >&2; exit 2
fi
[ -n "$logdir" ] || logdir="$(mktemp -d "${TMPDIR:-/tmp}/tqw-fuzz.XXXXXX")"
mkdir -p "$logdir"

# Discovery: `go test -list` prints a package's matching names, then its
# "ok <import path>" line.
module="$(go list -m)"
list="$logdir/list.txt"
if ! go test -list '^Fuzz' "${pkgs[@]}" > "$list" 2>&1; then
  cat "$list" >&2
  echo "fuzz.sh: listing the fuzz targets failed" >&2; exit 1
fi
targets=() names=()
while IFS= read -r line; do
  if [[ "$line" =~ ^Fuzz[A-Za-z0-9_]*$ ]]; then
    names+=("$line")
  elif [[ "$line" =~ ^ok[[:space:]]+([^[:space:]]+) ]]; then
    pkg="${BASH_REMATCH[1]}"
    for n in "${names[@]}"; do targets+=("$pkg $n"); done
    names=()
  fi
done < "$list"
selected=()
for t in "${targets[@]}"; do
  read -r pkg name <<< "$t"
  label="${pkg#"$module"/}.$name"
  if [ -z "$match" ] || grep -Eq -- "$match" <<< "$label"; then selected+=("$t"); fi
done
if [ ${#selected[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzz target found in ${pkgs[*]}${match:+ matching $match}" >&2; exit 1
fi

echo "fuzz.sh: ${#selected[@]} targets, -fuzztime $fuzztime each${parallel:+, -parallel $parallel}; logs in $logdir" >&2
rows=() failed=0 total_execs=0
for t in "${selected[@]}"; do
  read -r pkg name <<< "$t"
  label="${pkg#"$module"/}.$name"
  log="$logdir/${label//\//_}.log"
  args=(test "$pkg" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" -timeout 0)
  [ -z "$parallel" ] || args+=(-parallel "$parallel")
  echo "fuzz.sh: $label" >&2
  start=$SECONDS
  if go "${args[@]}" > "$log" 2>&1; then result=ok; else result=FAIL; failed=$((failed + 1)); fi
  # The last progress line carries the total executions.
  execs="$(grep -Eo 'execs: [0-9]+' "$log" | tail -n 1 | grep -Eo '[0-9]+' || true)"
  total_execs=$((total_execs + ${execs:-0}))
  if [ "$result" = FAIL ]; then
    grep -E -- '--- FAIL|Error|panic|fatal|hung|terminated|\.go:[0-9]+' "$log" | head -n 8 | sed 's/^/    /' >&2 || true
    failing="$(grep -Eo 'testdata/fuzz/[^ ]+' "$log" | tail -n 1 || true)"
    result="FAIL; see $log"
    if [ -n "$failing" ]; then
      # A worker that dies (out of memory, stack overflow, a fatal error)
      # loses its output, and the input it was running when it died is
      # saved; replaying that input alone tells a failure it causes from
      # one that needed earlier inputs (state kept across calls) or
      # depends on chance (map order, scheduling).
      if go test "$pkg" -run "^${name}/${failing##*/}\$" -count=1 >> "$log" 2>&1; then
        replay="replays clean: it needs earlier inputs or is nondeterministic"
      else
        replay="replay fails"
      fi
      result="FAIL ($failing, $replay); see $log"
    fi
  fi
  rows+=("$(printf '%-52s %14s %6ss  %s' "$label" "${execs:-?}" "$((SECONDS - start))" "$result")")
done

printf '\n%-52s %14s %7s  %s\n' target executions time result
for r in "${rows[@]}"; do echo "$r"; done
printf '%-52s %14s\n' "total (${#selected[@]} targets, $failed failed)" "$total_execs"
[ "$failed" -eq 0 ]
