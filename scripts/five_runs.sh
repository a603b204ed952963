#!/usr/bin/env bash
# Issue 33's check: a fresh clone of this repository's HEAD, `make install` once, then `make test` five
# times, runs 3 and 4 beside `stress --cpu 2` (Debian's `stress`). One line per run in $OUT/five.log:
# its exit status, how long `make test` took, and pytest's summary line. Each run's log is beside it.
#
#     bash scripts/five_runs.sh            # about 30 minutes on 2 cores
set -u
repo=$(git rev-parse --show-toplevel)
out=${OUT:-/tmp/five-runs}
rm -rf "$out" && mkdir -p "$out" && git clone -q "$repo" "$out/clone" && cd "$out/clone" || exit 1
echo "commit $(git rev-parse --short HEAD)" > "$out/five.log"
make install > "$out/install.log" 2>&1 || { echo "install failed" >> "$out/five.log"; exit 1; }
for run in 1 2 3 4 5; do
  stressing=""
  if [ $run = 3 ] || [ $run = 4 ]; then stress --cpu 2 --timeout 900 >/dev/null 2>&1 & stressing=$!; fi
  start=$(date +%s)
  DCAF_REQUIRE_SERVICES=1 make test > "$out/run$run.log" 2>&1
  rc=$?
  end=$(date +%s)
  [ -n "$stressing" ] && kill "$stressing" 2>/dev/null && wait "$stressing" 2>/dev/null
  line=$(grep -E "(passed|failed).* in [0-9.]+s" "$out/run$run.log" | tail -1)
  echo "run $run ${stressing:+(stress --cpu 2) }rc=$rc make test $((end-start)) s: $line" >> "$out/five.log"
done
cat "$out/five.log"
