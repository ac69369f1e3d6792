#!/usr/bin/env bash
# bench/compare.sh OLD [NEW]: two builds of dsync measured in alternating
# runs on the same machine, then set side by side (bench compare). OLD and
# NEW are git revisions (NEW defaults to the work tree as it is). Both are
# measured by the same bench program, the work tree's, built against each
# revision's library (a revision whose library it cannot build against is
# measured by its own bench program, with a warning); the runs alternate
# old, new, old, new... so that both see the same noise, and every ratio is
# taken within a round (dsync over the floor of the same round).
#
# Environment: COMPARE_PAIRS (3) pairs of runs; each run is the uncontended
# scenario pinned to CPU 0 (COMPARE_PINNED_ROUNDS 20 of 100ms), then
# contention on both CPUs (COMPARE_ROUNDS 3 of 1s slices).
set -euo pipefail
cd "$(dirname "$0")"
old=${1:?usage: bench/compare.sh OLD [NEW]}
new=${2:-}
pairs=${COMPARE_PAIRS:-3}
prounds=${COMPARE_PINNED_ROUNDS:-20}
rounds=${COMPARE_ROUNDS:-3}
command -v taskset >/dev/null || { echo "compare.sh: taskset not found (util-linux)" >&2; exit 1; }

tmp=$(mktemp -d)
cleanup() {
  git -C .. worktree remove --force "$tmp/old-src" 2>/dev/null || true
  [ -z "$new" ] || git -C .. worktree remove --force "$tmp/new-src" 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT

build() { # build REV DIR OUT: this bench program against revision REV's library
  git -C .. worktree add -q --detach "$2" "$1"
  mv "$2/bench" "$2/bench.own"
  cp -r . "$2/bench"
  rm -rf "$2/bench/results"
  # A revision from before the etcd backend became a module of its own has
  # its packages in the root module: drop the requirements of repository
  # modules whose directory is not a module there.
  (cd "$2/bench" && awk '/=>/ { sub(/^replace /, ""); print $1, $3 }' go.mod | while read -r path dir; do
    if [ ! -f "$dir/go.mod" ]; then go mod edit -dropreplace="$path" -droprequire="$path"; fi
  done)
  if ! (cd "$2/bench" && go build -o "$3" . 2>"$tmp/build.err"); then
    echo "compare.sh: this bench program does not build against $1 ($(head -1 "$tmp/build.err")); measuring $1 with its own" >&2
    rm -rf "$2/bench" && mv "$2/bench.own" "$2/bench"
    (cd "$2/bench" && go build -o "$3" .)
  fi
}
echo "building $old"
build "$old" "$tmp/old-src" "$tmp/old"
if [ -n "$new" ]; then
  echo "building $new"
  build "$new" "$tmp/new-src" "$tmp/new"
else
  echo "building the work tree"
  go build -o "$tmp/new" .
fi

olds=() news=()
for i in $(seq "$pairs"); do
  for b in old new; do
    echo "pair $i: $b"
    taskset -c 0 "$tmp/$b" run -scenarios uncontended -mode pinned -rounds "$prounds" -slice 100ms \
      -commit "$b" -out "$tmp/$b-pinned-$i.json"
    "$tmp/$b" run -scenarios contention -mode "2 CPUs" -rounds "$rounds" -contention-slice 1s \
      -commit "$b" -out "$tmp/$b-cont-$i.json"
  done
  olds+=("$tmp/old-pinned-$i.json" "$tmp/old-cont-$i.json")
  news+=("$tmp/new-pinned-$i.json" "$tmp/new-cont-$i.json")
done
join() { local IFS=,; echo "$*"; }
"$tmp/new" compare -old "$(join "${olds[@]}")" -new "$(join "${news[@]}")"
