#!/bin/sh
# Kernel tests run inside the VM (busybox sh).
#   suite.sh --list     every MODE/NAME the host runner expects
#   suite.sh run MODE   run the tests of MODE (root or user); one line each:
#                       RESULT MODE/NAME PASS|FAIL|SKIP seconds [why]

ROOT_TESTS="cgroup2_controllers cgroup_module oom_4g_under_2g forkbomb_pids_64 default_pids_cap cpus_half timeout_daemons_cleaned landlock_floor spawn_overhead default_profile_on_tmpfs io_max_wbps oci_resources"
USER_TESTS="cgroup_delegated cgroup_module oom_small forkbomb_pids_64 default_pids_cap cpus_half timeout_daemons_cleaned landlock_floor io_max_wbps"

# hutch run with explicit mounts, so that the limit tests do not depend on
# the workspace overlay (the VM's filesystems are all tmpfs, which has no
# idmapped mounts before Linux 6.3; default_profile_on_tmpfs covers that).
SANDBOX="hutch run --bare --ro-bind /usr /usr --ro-bind /bin /bin --ro-bind /lib /lib"
SANDBOX="$SANDBOX --ro-bind-try /lib64 /lib64 --proc /proc --dev /dev --tmpfs /tmp"
sandbox() { $SANDBOX "$@"; }

# Field of the exit event in a --status-file (first match: top level).
exit_field() { # FILE KEY
    grep '"event":"exit"' "$1" | grep -o "\"$2\":[^,}]*" | head -1 | cut -d: -f2- | tr -d '"'
}

# No sandbox cgroup may outlive its run.
no_leaves() {
    left=$(find /sys/fs/cgroup -type d -name 'hutch-*' ! -name hutch-supervisor)
    [ -z "$left" ] || { echo "cgroups left behind: $left"; return 1; }
}

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
    # role_entry is the helper processes' entry point, not a test.
    HUTCH_REQUIRE=all /tests/cgroup_kernel --test-threads=2 --nocapture --skip role_entry 2>&1
}

# 4 GiB touched under a 2 GiB cap: the sandbox is OOM-killed as a group,
# the report says so, and the VM goes on.
t_oom_4g_under_2g() {
    sandbox --memory 2G --status-file $W/oom.json -- vmhelper memhog 4096
    rc=$?
    cat $W/oom.json
    echo "rc=$rc"
    [ $rc = 137 ] || return 1
    [ "$(exit_field $W/oom.json reason)" = oom-killed ] || return 1
    peak=$(exit_field $W/oom.json memory_peak)
    echo "memory_peak=$peak"
    [ "$peak" -le $((2 << 30)) ] && [ "$peak" -gt $((1 << 30)) ] || return 1
    [ "$(exit_field $W/oom.json oom_kill)" -ge 1 ] || return 1
    vmhelper memhog 256 || return 1
    no_leaves
}

t_oom_small() {
    sandbox --memory 128M --status-file $W/oom.json -- vmhelper memhog 1024
    rc=$?
    cat $W/oom.json
    [ $rc = 137 ] && [ "$(exit_field $W/oom.json reason)" = oom-killed ] && no_leaves
}

# A fork bomb under --pids 64 is contained and reported; meanwhile the
# host user can still fork.
t_forkbomb_pids_64() {
    sandbox --pids 64 --status-file $W/fb.json -- vmhelper forkbomb 1000 >$W/fb.out &
    hp=$!
    sleep 1
    ok=0
    for i in $(seq 20); do sh -c true && ok=$((ok + 1)); done
    wait $hp
    rc=$?
    cat $W/fb.out $W/fb.json
    echo "rc=$rc host forks ok: $ok/20"
    [ $ok = 20 ] || return 1
    [ $rc = 1 ] || return 1
    [ "$(exit_field $W/fb.json reason)" = pids-limit-hit ] || return 1
    forked=$(sed -n 's/forked \([0-9]*\) failed.*/\1/p' $W/fb.out)
    [ -n "$forked" ] && [ "$forked" -lt 64 ] || return 1
    no_leaves
}

# The default profile's preferred process cap (4096) is enforced by the
# leaf's pids.max where the controller is delegated: the fork bomb is
# refused and the run is reported as pids-limit-hit.
t_default_pids_cap() {
    rm -rf $W/pws && mkdir -p $W/pws && chmod 755 $W/pws
    (cd $W/pws && hutch run --quiet --status-file $W/dpc.json -- vmhelper forkbomb 6000) >$W/dpc.out 2>&1
    rc=$?
    cat $W/dpc.out $W/dpc.json
    echo "rc=$rc"
    [ $rc = 1 ] || return 1
    [ "$(exit_field $W/dpc.json reason)" = pids-limit-hit ] || return 1
    grep -q '"limit":"pids","value":4096,"by":"cgroup pids.max"' $W/dpc.json || return 1
    failed=$(sed -n 's/forked [0-9]* failed \([0-9]*\)/\1/p' $W/dpc.out)
    [ -n "$failed" ] && [ "$failed" -gt 0 ] || return 1
    no_leaves
}

# --cpus 0.5 holds a busy loop near half a CPU.
t_cpus_half() {
    out=$(sandbox --cpus 0.5 --status-file $W/cpu.json -- vmhelper spin 4) || return 1
    echo "$out"
    cpu=$(echo "$out" | cut -d' ' -f2)
    wall=$(echo "$out" | cut -d' ' -f4)
    pct=$((cpu * 100 / wall))
    echo "BENCH cpus_half_${mode} cpu_percent=$pct"
    throttled=$(exit_field $W/cpu.json cpu_throttled_usec)
    echo "throttled_usec=$throttled"
    [ "$pct" -ge 35 ] && [ "$pct" -le 60 ] && [ "$throttled" -gt 0 ]
}

# --io-max DEV:wbps=1M holds O_DIRECT writes to a disk (the brd RAM disk
# /dev/ram0, see init) near 1 MiB/s: 4 MiB take clearly longer than
# without the limit, and the exit report names io.max and counts the bytes.
t_io_max_wbps() {
    dev=/dev/ram0
    [ -b $dev ] || { echo "no $dev (brd did not load)"; return 1; }
    free=$(sandbox --dev-bind $dev $dev -- vmhelper odirect-write $dev 4) || return 1
    slow=$(sandbox --dev-bind $dev $dev --io-max $dev:wbps=1M --status-file $W/io.json \
        -- vmhelper odirect-write $dev 4) || { cat $W/io.json; return 1; }
    cat $W/io.json
    f=$(echo "$free" | cut -d' ' -f2)
    s=$(echo "$slow" | cut -d' ' -f2)
    echo "BENCH io_max_wbps_${mode} unlimited_ms=$f wbps_1M_ms=$s (4 MiB O_DIRECT)"
    grep -q '"by":"cgroup io.max (1:0 wbps=1048576)"' $W/io.json || { echo "io.max not in the report"; return 1; }
    wbytes=$(exit_field $W/io.json io_wbytes)
    echo "io_wbytes=$wbytes"
    [ "$wbytes" -ge $((4 << 20)) ] || return 1
    [ "$f" -lt 1500 ] && [ "$s" -ge 2500 ] || return 1
    # A character device is refused before anything runs.
    out=$(sandbox --io-max /dev/null:wbps=1M -- true 2>&1)
    rc=$?
    echo "rc=$rc: $out"
    [ $rc = 125 ] && echo "$out" | grep -q "not a block device" || return 1
    no_leaves
}

# A timed-out sandbox whose workload daemonized leaves no process and no
# cgroup behind.
t_timeout_daemons_cleaned() {
    sandbox --timeout 3s --status-file $W/to.json -- vmhelper daemonize hutch-daemon-marker
    rc=$?
    echo "rc=$rc"
    cat $W/to.json
    [ $rc = 124 ] && [ "$(exit_field $W/to.json reason)" = timed-out ] || return 1
    for p in /proc/[0-9]*; do
        if tr '\0' ' ' <"$p/cmdline" 2>/dev/null | grep -q '^hutch-daemon-marker'; then
            echo "left behind: $p $(cat "$p/status" | head -3)"
            return 1
        fi
    done
    no_leaves
}

# The Landlock floor on an older kernel: without --landlock-min-abi the
# exit report shows the lower ABI this kernel enforces; asking for more
# than it offers fails closed (125) with a line naming the kernel's ABI.
t_landlock_floor() {
    sandbox --status-file $W/ll.json -- true || { cat $W/ll.json; return 1; }
    abi=$(grep '"event":"exit"' $W/ll.json | grep -o '"enforced_abi":[0-9]*' | cut -d: -f2)
    echo "enforced_abi=$abi"
    [ -n "$abi" ] && [ "$abi" -ge 1 ] && [ "$abi" -lt 7 ] || { cat $W/ll.json; return 1; }
    out=$(sandbox --landlock-min-abi $((abi + 1)) -- true 2>&1)
    rc=$?
    echo "rc=$rc: $out"
    [ $rc = 125 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "ABI $abi" || return 1
}

# Spawn cost of the cgroup leaf (create, CLONE_INTO_CGROUP, remove):
# `hutch run -- true` from a cgroup hutch may not use (no leaf) against the
# same from the root cgroup with --pids/--cpus (leaf with limits).
# The default profile, launched by root from a tmpfs workspace: tmpfs has
# no idmapped mounts on 6.1, so hutch attaches the layer as it is, says so
# on stderr and in the report, and the run works.
t_default_profile_on_tmpfs() {
    rm -rf $W/ws && mkdir -p $W/ws && chmod 755 $W/ws && echo hello >$W/ws/in.txt
    (cd $W/ws && hutch run --status-file $W/dp.json -- sh -c 'cat in.txt; echo x >out.txt; cat out.txt') \
        >$W/dp.out 2>$W/dp.err
    rc=$?
    cat $W/dp.out $W/dp.err
    echo "rc=$rc"
    [ $rc = 0 ] || { cat $W/dp.json; return 1; }
    [ "$(cat $W/dp.out)" = "$(printf 'hello\nx')" ] || return 1
    grep -q "without idmapped mounts" $W/dp.err || return 1
    grep -q '"layers_without_idmap":\["'"$W"'/ws"\]' $W/dp.json || { cat $W/dp.json; return 1; }
    [ ! -e $W/ws/out.txt ] || { echo "the host workspace was written"; return 1; }
}

t_spawn_overhead() {
    n=20
    mkdir -p /sys/fs/cgroup/bench-plain
    # Once with output, so a failure shows why.
    sh -c "echo \$\$ > /sys/fs/cgroup/bench-plain/cgroup.procs && exec $SANDBOX -- true" || return 1
    plain=$(sh -c "echo \$\$ > /sys/fs/cgroup/bench-plain/cgroup.procs && exec vmhelper timeit $n $SANDBOX -- true") || return 1
    with=$(vmhelper timeit $n $SANDBOX --pids 1000 --cpus 2 -- true) || return 1
    rmdir /sys/fs/cgroup/bench-plain
    p=$(echo "$plain" | cut -d' ' -f2)
    w=$(echo "$with" | cut -d' ' -f2)
    echo "BENCH spawn_overhead runs=$n no_cgroup_mean_us=$p cgroup_mean_us=$w delta_us=$((w - p)) ratio_pct=$((w * 100 / p)) (TCG)"
    no_leaves
}

# hutch-oci with linux.resources (issue 16), as an engine drives it:
# create (the cgroup at cgroupsPath gets memory.max, pids.max, cpu.max,
# cpu.weight before anything runs), start, the keeper's exit report, delete
# (the cgroup goes). A memory hog under 64 MiB is OOM-killed and reported
# so; a fork bomb under pids 16 cannot fork beyond it.
oci_bundle() { # DIR ARGS-JSON RESOURCES-JSON CGROUPS-PATH
    rm -rf $1 && mkdir -p $1/rootfs/bin $1/rootfs/usr $1/rootfs/lib $1/rootfs/lib64 $1/rootfs/proc $1/rootfs/dev $1/rootfs/tmp
    mkdir -p /lib64
    ro='"options": ["rbind", "ro"]'
    cat >$1/config.json <<EOF
{"ociVersion": "1.2.0",
 "process": {"args": $2, "env": ["PATH=/usr/local/bin:/usr/bin:/bin"], "cwd": "/",
             "user": {"uid": 0, "gid": 0}, "noNewPrivileges": true},
 "root": {"path": "rootfs"},
 "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs"},
            {"destination": "/bin", "type": "bind", "source": "/bin", $ro},
            {"destination": "/usr", "type": "bind", "source": "/usr", $ro},
            {"destination": "/lib", "type": "bind", "source": "/lib", $ro},
            {"destination": "/lib64", "type": "bind", "source": "/lib64", $ro}],
 "annotations": {"run.hutch.status-file": "$1/status.jsonl"},
 "linux": {"namespaces": [{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}],
           "cgroupsPath": "$4", "resources": $3}}
EOF
}

# Wait (up to 120 s: TCG is slow) for the keeper's exit report.
oci_wait_exit() { # STATUS-FILE
    for i in $(seq 600); do
        grep -q '"event":"exit"' "$1" 2>/dev/null && return 0
        sleep 0.2
    done
    echo "no exit report in $1"; return 1
}

t_oci_resources() {
    oci="hutch-oci --root $W/oci-state"
    cg=/sys/fs/cgroup/hutch-oci-test
    b=$W/oci-mem
    oci_bundle $b '["vmhelper", "memhog", "512"]' \
        '{"memory": {"limit": 67108864}, "pids": {"limit": 16}, "cpu": {"quota": 50000, "period": 100000, "shares": 512}}' \
        /hutch-oci-test/mem
    $oci create --bundle $b --pid-file $b/pid mem || return 1
    for f in memory.max:67108864 pids.max:16 "cpu.max:50000 100000" cpu.weight:59; do
        got=$(cat "$cg/mem/${f%%:*}")
        echo "${f%%:*} = $got"
        [ "$got" = "${f#*:}" ] || return 1
    done
    grep -qx "$(cat $b/pid)" $cg/mem/cgroup.procs || { echo "init not in the cgroup"; return 1; }
    # update (containerd's shim: the resources JSON on stdin).
    echo '{"pids": {"limit": 12}}' | $oci update --resources - mem || return 1
    [ "$(cat $cg/mem/pids.max)" = 12 ] || { echo "update: pids.max $(cat $cg/mem/pids.max)"; return 1; }
    $oci start mem || return 1
    oci_wait_exit $b/status.jsonl || return 1
    cat $b/status.jsonl
    [ "$(exit_field $b/status.jsonl reason)" = oom-killed ] && [ "$(exit_field $b/status.jsonl status)" = 137 ] || return 1
    $oci delete mem || return 1
    [ ! -e $cg/mem ] || { echo "the cgroup outlived delete"; return 1; }
    [ ! -e $W/oci-state/mem ] || return 1

    b=$W/oci-pids
    oci_bundle $b '["vmhelper", "forkbomb", "100"]' '{"pids": {"limit": 16}}' /hutch-oci-test/pids
    $oci create --bundle $b --pid-file $b/pid pids >$b/out 2>&1 || { cat $b/out; return 1; }
    $oci start pids || return 1
    oci_wait_exit $b/status.jsonl || return 1
    cat $b/out $b/status.jsonl
    forked=$(sed -n 's/forked \([0-9]*\) failed.*/\1/p' $b/out)
    echo "forked=$forked"
    [ -n "$forked" ] && [ "$forked" -lt 16 ] || return 1
    [ "$(exit_field $b/status.jsonl reason)" = pids-limit-hit ] || return 1
    $oci delete pids || return 1
    [ ! -e $cg/pids ] || { echo "the cgroup outlived delete"; return 1; }

    # A key the kernel has no file for fails create, and nothing is left.
    b=$W/oci-bad
    oci_bundle $b '["true"]' '{"unified": {"memory.bogus": "1"}}' /hutch-oci-test/bad
    out=$($oci create --bundle $b bad 2>&1)
    rc=$?
    echo "rc=$rc: $out"
    [ $rc != 0 ] && echo "$out" | grep -q "linux.resources.unified.memory.bogus" || return 1
    [ ! -e $cg/bad ] && [ ! -e $W/oci-state/bad ] || return 1
    [ ! -e $cg ] || { echo "the parent hutch-oci made outlived its last container"; return 1; }
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
W=/tmp/w.$mode
mkdir -p $W
for t in $tests; do
    if [ -n "$only" ] && ! echo " $only " | grep -q " $t "; then continue; fi
    out=/tmp/out.$mode.$t
    start=$(date +%s)
    (cd $W && "t_$t") >"$out" 2>&1
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
