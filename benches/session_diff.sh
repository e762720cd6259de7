#!/bin/sh
# Session costs against what a platform would do without hutch (issue 13).
#
# A 100 000-file tree (1000 dirs x 100 files) becomes a session baseline,
# a `cp -a` copy and a git commit. Rows:
#   - diff: `hutch session diff --format stat` of 10 changes against
#     `git diff --stat` of the same (target: hutch <= 1/20 of git);
#   - create from a directory against `cp -a` (target: >= 1.0x cp's rate,
#     fingerprinting included);
#   - create from git against `git archive | tar -x` of the same commit
#     (target: >= 1.0x);
#   - seal of 1 000 changed files against diffing them (cost O(changes):
#     target <= 2x the diff);
#   - per-command overhead of a disk quota: `session run -- true` with
#     `--disk-max` against without (root only; target <= 1 ms added).
#   - snapshots, forks and rollback (issue 36), same baseline: snapshot of
#     1 000 changes against diffing them (target <= 2x); fork of 1 child
#     (target <= 10 ms) and of 8 (<= 30 ms); rollback of 1 000 changes
#     (<= 10 ms); the first `run -- true` in a fresh fork against one in
#     the parent (<= 1.2x); disk used by 8 forks before they write (~0).
# The machine should be quiet: every row is wall-clock time.
set -eu
HUTCH=${HUTCH:-$("$(dirname "$0")/hutch-path.sh" --release)}
DIRS=${DIRS:-1000}; PER=${PER:-100}; RUNS=${RUNS:-20}; SEALS=${SEALS:-5}
W=$(mktemp -d /tmp/hutch-bench.XXXXXX)
cleanup() {
  for s in "$W"/state/*/; do
    [ -d "$s" ] && "$HUTCH" session --state-dir "$W/state" close "$(basename "$s")" >/dev/null 2>&1 || true
  done
  chmod -R u+rwx "$W" 2>/dev/null; rm -rf "$W"
}
trap cleanup EXIT
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
sync
t0=$(now); id=$("$HUTCH" session create --from "$W/src"); t1=$(now)
t2=$(now); cp -a "$W/src" "$W/cp"; t3=$(now)
# The git checkout with the same tree, packed as a served repository is.
git -C "$W/cp" init -q
git -C "$W/cp" -c core.fsmonitor=false add -A
git -C "$W/cp" -c gc.auto=0 -c user.name=b -c user.email=b@b commit -qm base
git -C "$W/cp" gc -q
rev=$(git -C "$W/cp" rev-parse HEAD)
git -C "$W/cp" status --porcelain >/dev/null   # warm the index
mkdir "$W/archive"
t4=$(now); git -C "$W/cp" archive "$rev" | tar -x -C "$W/archive"; t5=$(now)
t6=$(now); gid=$("$HUTCH" session create --from-git "$W/cp" --rev "$rev"); t7=$(now)
"$HUTCH" session close "$gid"
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
"$HUTCH" session seal "$id" >/dev/null

# Seals of 1 000 changes (10 files in each of 100 directories) over the
# 100 000-file baseline: diff them, then seal them, SEALS times.
diff_total=0; seal_total=0; k=0
while [ $k -lt "$SEALS" ]; do
  python3 - "$U" "$k" <<'PY'
import os, sys
upper, k = sys.argv[1], int(sys.argv[2])
for d in range(100):
    p = os.path.join(upper, f"d{d * 10:04}")
    os.makedirs(p, exist_ok=True)
    for f in range(10):
        with open(os.path.join(p, f"f{(f + 10 * k) % 100:03}.txt"), "w") as fh:
            fh.write(f"sealed {k} {d} {f}\n")
PY
  s=$(now); "$HUTCH" session diff "$id" --format stat >/dev/null; e=$(now)
  diff_total=$(echo "$diff_total + $e - $s" | bc -l)
  s=$(now); "$HUTCH" session seal "$id" >/dev/null; e=$(now)
  seal_total=$(echo "$seal_total + $e - $s" | bc -l)
  k=$((k + 1))
done

printf 'baseline files:               %d\n' "$N"
printf 'hutch session diff --stat:    %.2f ms\n' "$(echo "$h * 1000" | bc -l)"
printf 'git diff --stat:              %.2f ms\n' "$(echo "$g * 1000" | bc -l)"
printf 'ratio hutch/git:              1/%.1f (target <= 1/20)\n' "$(echo "$g / $h" | bc -l)"
printf 'session create:               %.0f files/s (%.2f s)\n' "$(echo "$N / ($t1 - $t0)" | bc -l)" "$(echo "$t1 - $t0" | bc -l)"
printf 'cp -a:                        %.0f files/s (%.2f s)\n' "$(echo "$N / ($t3 - $t2)" | bc -l)" "$(echo "$t3 - $t2" | bc -l)"
printf 'create rate / cp -a rate:     %.2fx (target >= 1.0x)\n' "$(echo "($t3 - $t2) / ($t1 - $t0)" | bc -l)"
printf 'session create --from-git:    %.2f s\n' "$(echo "$t7 - $t6" | bc -l)"
printf 'git archive | tar -x:         %.2f s\n' "$(echo "$t5 - $t4" | bc -l)"
printf 'git create rate / archive:    %.2fx (target >= 1.0x)\n' "$(echo "($t5 - $t4) / ($t7 - $t6)" | bc -l)"
printf 'diff of 1000 changes:         %.2f ms (mean of %d)\n' "$(echo "$diff_total * 1000 / $SEALS" | bc -l)" "$SEALS"
printf 'seal of 1000 changes:         %.2f ms (mean of %d)\n' "$(echo "$seal_total * 1000 / $SEALS" | bc -l)" "$SEALS"
printf 'seal / diff:                  %.2fx (target <= 2x)\n' "$(echo "$seal_total / $diff_total" | bc -l)"

# Snapshots of 1 000 changes, diffed first, SEALS times (as the seals).
changes() { # k -> 1 000 changed files in the upper
  python3 - "$U" "$1" <<'PY'
import os, sys
upper, k = sys.argv[1], int(sys.argv[2])
for d in range(100):
    p = os.path.join(upper, f"d{d * 10 + 1:04}")
    os.makedirs(p, exist_ok=True)
    for f in range(10):
        with open(os.path.join(p, f"f{(f + 10 * k) % 100:03}.txt"), "w") as fh:
            fh.write(f"snapshot {k} {d} {f}\n")
PY
}
diff_total=0; snap_total=0; k=0
while [ $k -lt "$SEALS" ]; do
  changes "$k"
  s=$(now); "$HUTCH" session diff "$id" --format stat >/dev/null; e=$(now)
  diff_total=$(echo "$diff_total + $e - $s" | bc -l)
  s=$(now); snap=$("$HUTCH" session snapshot "$id"); e=$(now)
  snap_total=$(echo "$snap_total + $e - $s" | bc -l)
  k=$((k + 1))
done
# Forks (the first one publishes the baseline: one rename, untimed here).
"$HUTCH" session close "$("$HUTCH" session fork "$id" --from "$snap")" >/dev/null
du_before=$(du -sk "$W/state" | cut -f1)
s=$(now); kids=$("$HUTCH" session fork "$id" --from "$snap" --count 8); e=$(now)
fork8=$(echo "$e - $s" | bc -l)
du_after=$(du -sk "$W/state" | cut -f1)
for c in $kids; do "$HUTCH" session close "$c" >/dev/null; done
fork1_total=0; child_total=0; parent_total=0; r=0
while [ $r -lt "$SEALS" ]; do
  s=$(now); kid=$("$HUTCH" session fork "$id" --from "$snap"); e=$(now)
  fork1_total=$(echo "$fork1_total + $e - $s" | bc -l)
  # Each command's overlay teardown syncs the upper's filesystem: without
  # a sync first, whichever runs first pays the write-back of what the
  # benchmark wrote before (1.3 s once on the 2-vCPU VM), not its own cost.
  sync
  s=$(now); "$HUTCH" session run "$kid" -- true; e=$(now)
  child_total=$(echo "$child_total + $e - $s" | bc -l)
  sync
  s=$(now); "$HUTCH" session run "$id" -- true; e=$(now)
  parent_total=$(echo "$parent_total + $e - $s" | bc -l)
  "$HUTCH" session close "$kid" >/dev/null
  r=$((r + 1))
done
# Rollbacks of 1 000 changes to the last snapshot.
rb_total=0; k=0
while [ $k -lt "$SEALS" ]; do
  changes $((k + 50))
  sync
  s=$(now); "$HUTCH" session rollback "$id" "$snap" >/dev/null; e=$(now)
  rb_total=$(echo "$rb_total + $e - $s" | bc -l)
  k=$((k + 1))
done
printf 'snapshot of 1000 changes:     %.2f ms (mean of %d)\n' "$(echo "$snap_total * 1000 / $SEALS" | bc -l)" "$SEALS"
printf 'snapshot / diff:              %.2fx (target <= 2x)\n' "$(echo "$snap_total / $diff_total" | bc -l)"
printf 'fork of 1 child:              %.2f ms (mean of %d; target <= 10 ms)\n' "$(echo "$fork1_total * 1000 / $SEALS" | bc -l)" "$SEALS"
printf 'fork of 8 children:           %.2f ms (target <= 30 ms)\n' "$(echo "$fork8 * 1000" | bc -l)"
printf 'rollback of 1000 changes:     %.2f ms (mean of %d; target <= 10 ms)\n' "$(echo "$rb_total * 1000 / $SEALS" | bc -l)" "$SEALS"
printf 'first run -- true in a fork:  %.2f ms against %.2f ms in the parent (%.2fx; target <= 1.2x)\n' \
  "$(echo "$child_total * 1000 / $SEALS" | bc -l)" "$(echo "$parent_total * 1000 / $SEALS" | bc -l)" \
  "$(echo "$child_total / $parent_total" | bc -l)"
printf 'disk of 8 forks:              %d KiB (target ~0)\n' "$((du_after - du_before))"
"$HUTCH" session close "$id"

if [ "$(id -u)" = 0 ]; then
  mkdir "$W/small"; echo x > "$W/small/x"
  plain=$("$HUTCH" session create --from "$W/small")
  quota=$("$HUTCH" session create --from "$W/small" --disk-max 1G)
  # Interleaved rounds, so load changes hit both alike.
  p_total=0; q_total=0; r=0
  while [ $r -lt "$RUNS" ]; do
    s=$(now); "$HUTCH" session run "$plain" -- true; e=$(now)
    p_total=$(echo "$p_total + $e - $s" | bc -l)
    s=$(now); "$HUTCH" session run "$quota" -- true; e=$(now)
    q_total=$(echo "$q_total + $e - $s" | bc -l)
    r=$((r + 1))
  done
  printf 'session run -- true:          %.2f ms\n' "$(echo "$p_total * 1000 / $RUNS" | bc -l)"
  printf 'with --disk-max (loop ext4):  %.2f ms\n' "$(echo "$q_total * 1000 / $RUNS" | bc -l)"
  printf 'quota overhead per command:   %+.2f ms (target <= 1 ms)\n' "$(echo "($q_total - $p_total) * 1000 / $RUNS" | bc -l)"
  "$HUTCH" session close "$plain"; "$HUTCH" session close "$quota"
fi
