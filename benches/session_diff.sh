#!/bin/sh
# Session diff cost vs git, and session creation vs cp -a.
#
# A 100 000-file tree (1000 dirs x 100 files) becomes a session baseline
# and a git checkout; the same 10 files change in both. Prints the time of
# `hutch session diff --format stat` (cost grows with the change: only the
# upper is walked) against `git diff --stat` (which stats the whole
# checkout), the ratio (target: hutch <= 1/20 of git), and the creation
# rate in files/s against `cp -a` of the same tree.
set -eu
HUTCH=${HUTCH:-$("$(dirname "$0")/hutch-path.sh" --release)}
DIRS=${DIRS:-1000}; PER=${PER:-100}; RUNS=${RUNS:-20}
W=$(mktemp -d /tmp/hutch-bench.XXXXXX)
trap 'chmod -R u+rwx "$W" 2>/dev/null; rm -rf "$W"' EXIT
export HUTCH_STATE_DIR="$W/state"
mkdir "$W/src"
python3 - "$W/src" "$DIRS" "$PER" <<'PY'
import os, sys
root, dirs, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for d in range(dirs):
    p = os.path.join(root, f"d{d:04}")
    os.mkdir(p)
    for f in range(per):
        with open(os.path.join(p, f"f{f:03}.txt"), "w") as fh:
            fh.write(f"file {d} {f}\n" * 4)
PY
N=$((DIRS * PER))
now() { date +%s.%N; }
t0=$(now); id=$("$HUTCH" session create --from "$W/src"); t1=$(now)
t2=$(now); cp -a "$W/src" "$W/cp"; t3=$(now)
# The git checkout with the same tree.
git -C "$W/cp" init -q
git -C "$W/cp" -c core.fsmonitor=false add -A
git -C "$W/cp" -c user.name=b -c user.email=b@b commit -qm base
git -C "$W/cp" status --porcelain >/dev/null   # warm the index
U="$W/state/$id/upper"
for i in 0 1 2 3 4 5 6 7 8 9; do
  d=$(printf 'd%04d' $((i * 97)))
  mkdir -p "$U/$d"
  { cat "$W/src/$d/f000.txt"; echo "changed $i"; } > "$U/$d/f000.txt"
  cp "$U/$d/f000.txt" "$W/cp/$d/f000.txt"
done
time_runs() { # command... -> average seconds over RUNS runs
  s=$(now)
  i=0; while [ $i -lt "$RUNS" ]; do "$@" >/dev/null; i=$((i + 1)); done
  e=$(now)
  echo "($e - $s) / $RUNS" | bc -l
}
h=$(time_runs "$HUTCH" session diff "$id" --format stat)
g=$(time_runs git -C "$W/cp" diff --stat)
"$HUTCH" session diff "$id" --format stat | tail -1
git -C "$W/cp" diff --stat | tail -1
printf 'baseline files:               %d\n' "$N"
printf 'hutch session diff --stat:    %.2f ms\n' "$(echo "$h * 1000" | bc -l)"
printf 'git diff --stat:              %.2f ms\n' "$(echo "$g * 1000" | bc -l)"
printf 'ratio hutch/git:              1/%.1f (target <= 1/20)\n' "$(echo "$g / $h" | bc -l)"
printf 'session create:               %.0f files/s (%.2f s)\n' "$(echo "$N / ($t1 - $t0)" | bc -l)" "$(echo "$t1 - $t0" | bc -l)"
printf 'cp -a:                        %.0f files/s (%.2f s)\n' "$(echo "$N / ($t3 - $t2)" | bc -l)" "$(echo "$t3 - $t2" | bc -l)"
"$HUTCH" session close "$id"
