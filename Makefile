# `make test` is the one test command: it installs the pinned tools it needs,
# starts a real local S3 server (versitygw) and runs every check and test.
.PHONY: test check tools bench-smoke ui-vendor

test:
	bash scripts/test.sh

# check runs the static checks only (no S3 server, no tests).
check:
	bash scripts/test.sh --check-only

tools:
	bash scripts/tools.sh

# bench-smoke checks the benchmark harness end to end: the objstore
# benchmark briefly on mem and a temporary file store, and the benchmarks'
# own tests including the DBOS peer (which builds bench/dbos).
bench-smoke:
	d=$$(mktemp -d) && go run ./cmd/tqw-bench objstore --store mem://smoke,file://$$d --concurrency 1,4 --ops 200; s=$$?; rm -rf $$d; [ $$s = 0 ] || exit $$s
	TQW_BENCH_SMOKE=1 go test -count=1 ./cmd/tqw-bench/

# ui-vendor refreshes the web UI's vendored JavaScript (server/ui/assets/vendor)
# from the versions pinned in server/ui/package-lock.json; the files are
# committed, so building tqw-dsl needs no Node. Commit what it changes.
ui-vendor:
	cd server/ui && npm ci --no-audit --no-fund --loglevel=error
	cp server/ui/node_modules/mermaid/dist/mermaid.min.js server/ui/assets/vendor/mermaid.min.js
	gzip -9 -n -c server/ui/assets/vendor/mermaid.min.js > server/ui/assets/vendor/mermaid.min.js.gz
	cp server/ui/node_modules/mermaid/LICENSE server/ui/assets/vendor/mermaid.LICENSE
