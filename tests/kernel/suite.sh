#!/bin/sh
# Kernel tests run inside the VM (busybox sh).
#   suite.sh --list     every MODE/NAME the host runner expects
#   suite.sh run MODE   run the tests of MODE (root or user); one line each:
#                       RESULT MODE/NAME PASS|FAIL|SKIP seconds [why]

ROOT_TESTS="cgroup2_controllers cgroup_module"
USER_TESTS="cgroup_delegated cgroup_module"

# --- tests (return non-zero to fail; write details to stdout) -----------

t_cgroup2_controllers() {
    c=$(cat /sys/fs/cgroup/cgroup.controllers)
    echo "controllers: $c"
    for want in memory pids cpu; do
        echo " $c " | grep -q " $want " || { echo "missing $want"; return 1; }
    done
}

t_cgroup_delegated() {
    own=$(sed -n 's/^0:://p' /proc/self/cgroup)
    echo "own cgroup: $own uid $(id -u)"
    case "$own" in /deleg*) ;; *) return 1 ;; esac
    [ -w "/sys/fs/cgroup/deleg/cgroup.procs" ]
}

# The cgroup module against the real kernel (tests/cgroup_kernel.rs).
t_cgroup_module() {
    HUTCH_REQUIRE=all /tests/cgroup_kernel --test-threads=2 2>&1
}

# --- runner --------------------------------------------------------------

if [ "$1" = --list ]; then
    for t in $ROOT_TESTS; do echo "root/$t"; done
    for t in $USER_TESTS; do echo "user/$t"; done
    exit 0
fi
[ "$1" = run ] || { echo "usage: suite.sh --list | run MODE" >&2; exit 2; }
mode=$2
case "$mode" in root) tests=$ROOT_TESTS ;; user) tests=$USER_TESTS ;; *) exit 2 ;; esac
only=$(cat /tests/only 2>/dev/null)
for t in $tests; do
    if [ -n "$only" ] && ! echo " $only " | grep -q " $t "; then continue; fi
    out=/tmp/out.$mode.$t
    start=$(date +%s)
    (cd /tmp && "t_$t") >"$out" 2>&1
    rc=$?
    secs=$(( $(date +%s) - start ))
    if [ $rc = 0 ]; then
        echo "RESULT $mode/$t PASS ${secs}s"
    elif [ $rc = 77 ]; then
        echo "RESULT $mode/$t SKIP ${secs}s $(tail -1 "$out")"
    else
        echo "RESULT $mode/$t FAIL ${secs}s (exit $rc)"
        tail -25 "$out" | sed 's/^/  | /'
    fi
    grep '^BENCH ' "$out"
done
exit 0
