#!/usr/bin/env bash
# bench/run.sh: dsync next to its Go peers, in one run, on servers the bench
# program starts itself (6 redis-server processes and an embedded etcd
# member, on free loopback ports) and stops at the end.
#
#   1. the uncontended scenario with everything pinned to CPU 0
#      (taskset -c 0: the bench program, hence the redis-servers it starts
#      and the etcd member it embeds): per-operation cost is compared here;
#   2. every scenario on both CPUs;
#   3. bench/results/latest.md, latest.json and contention.png.
#
# Takes about 7 minutes. Environment: BENCH_ROUNDS (default 8),
# BENCH_SLICE (400ms), BENCH_CONTENTION_SLICE (1s), and for the pinned run
# BENCH_PINNED_ROUNDS (40) of BENCH_PINNED_SLICE (100ms): short slices, so
# that the targets compared see the same noise.
# Needs redis-server (apt-get install -y redis-server), taskset and Go.
set -euo pipefail

cd "$(dirname "$0")"
rounds=${BENCH_ROUNDS:-8}
slice=${BENCH_SLICE:-400ms}
cslice=${BENCH_CONTENTION_SLICE:-1s}
prounds=${BENCH_PINNED_ROUNDS:-40}
pslice=${BENCH_PINNED_SLICE:-100ms}

command -v redis-server >/dev/null || { echo "run.sh: redis-server not found (apt-get install -y redis-server)" >&2; exit 1; }
command -v taskset >/dev/null || { echo "run.sh: taskset not found (util-linux)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

commit=$(git -C .. rev-parse --short HEAD 2>/dev/null || echo unknown)
if [ -n "$(git -C .. status --porcelain -- . ':(exclude)bench' 2>/dev/null)" ]; then
	commit="$commit with uncommitted changes"
fi

echo "building the bench program"
go build -o "$tmp/bench" .

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "1/2: uncontended, pinned to CPU 0"
taskset -c 0 "$tmp/bench" run -scenarios uncontended -mode "pinned to CPU 0" \
	-rounds "$prounds" -slice "$pslice" -commit "$commit" -out "$tmp/pinned.json"

echo "2/2: every scenario, 2 CPUs"
"$tmp/bench" run -mode "2 CPUs" -rounds "$rounds" -slice "$slice" -contention-slice "$cslice" \
	-commit "$commit" -out "$tmp/full.json"

mkdir -p results
"$tmp/bench" report -full "$tmp/full.json" -pinned "$tmp/pinned.json" -dir results
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wrote results/latest.md, results/latest.json and results/contention.png"
