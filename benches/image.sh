#!/bin/sh
# Images (issue 12's benchmark), in one run:
#   (a) `hutch image import` of a Debian-sized OCI layout against `umoci
#       unpack` of the same layout (target hutch <= 1.0x umoci);
#   (b) `hutch run --image D -- true` against `hutch run -- true` on the
#       host's system directories (target <= 1.1x);
#   (c) the same image run by crun (else runc) from a bundle whose rootfs
#       is a read-only overlay of the same unpacked layers, as containerd
#       would stack them (target hutch <= 1.0x the peer);
#   (d) `hutch image pull` of the part-(a) image by digest from a local
#       registry (docker-registry on loopback, pushed by skopeo) against
#       `skopeo copy` of it to an OCI layout plus `hutch image import` of
#       that layout (target <= 0.8x their sum). Not in the default parts.
#       Prints wall and CPU (user+sys of the called processes) medians
#       and both ratios, and what a file creation costs before the rounds
#       (ext4 without a journal, as on this VM, makes every create scan
#       past the inodes removed in the last minutes: the "slow phase").
#
#   benches/image.sh [--parts a,b,c,d] [--rounds N] [--runs N] [--rootfs DIR]
#                    [--store-fs journaled|here] [--keep]
#
# Part (d)'s stores (both sides') are on a fresh ext4 with a journal,
# loop-mounted in the work directory (`--store-fs journaled`, the default
# as root with mkfs.ext4): the common setup of a host. This VM's root is
# ext4 *without* a journal, where every file created within minutes of a
# large removal scans past the removed inodes (see below), adding the same
# seconds to both sides whatever hutch does; `--store-fs here` measures on
# the work directory's own file system instead.
#
# (b) and (c) run in one hyperfine invocation (--shell=none, --runs N,
# default 300, in a fresh temporary directory as the workspace) and print
# the mean of each row and the ratios. D is the part-(a) image (or
# --rootfs DIR) when it has /bin/true and runs: a Debian tree has files of
# several owners, so its rows are range-mapped (root's /etc/subuid range,
# else a private range hutch allocates: docs/images.md, "Id ranges");
# only a tree that cannot run falls back to a static busybox tree.
#
# The image: the Debian minbase tree tests/setup caches
# (/opt/hutch-test-debian/current/rootfs: `debootstrap --variant=minbase
# bookworm` with python3) when present, else a fresh debootstrap from the
# Debian mirror apt uses, when it can be reached; otherwise (or with
# --rootfs DIR) a ~200 MB tree copied from the host's /usr/lib and /usr/share.
# umoci packs it as an OCI layout (one gzip layer, umoci's own writer).
# Each round, in alternating order, times: hutch importing the layout into
# an empty store (verify the blobs, decompress, unpack, record owners,
# index), and umoci unpacking it into an empty bundle (verify, decompress,
# unpack, write its mtree manifest). Both read a warm page cache. Prints
# the median of each and the ratio hutch/umoci (target: <= 1.0).
# HUTCH_BIN=/path/to/hutch skips the build. Run as root (umoci unpack
# keeps owners only as root; hutch then takes its root path too).
set -eu

rounds=5
runs=300
parts=a,b,c
rootfs=""
keep=0
store_fs=journaled
while [ $# -gt 0 ]; do
    case "$1" in
        --parts) parts=$2; shift 2 ;;
        --runs) runs=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --rootfs) rootfs=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        --store-fs) store_fs=$2; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
part() { case ",$parts," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
[ "$(id -u)" = 0 ] || { echo "image.sh: run as root" >&2; exit 2; }
! part a || command -v umoci >/dev/null || { echo "image.sh: umoci is needed (apt-get install umoci)" >&2; exit 2; }
if part b || part c; then
    command -v hyperfine >/dev/null || { echo "image.sh: hyperfine is needed" >&2; exit 2; }
fi

# HUTCH_BIN may be relative to the caller's directory; we leave it.
[ -z "${HUTCH_BIN:-}" ] || HUTCH_BIN=$(realpath "$HUTCH_BIN")
cd "$(dirname "$0")/.."
hutch=${HUTCH_BIN:-$(benches/hutch-path.sh --release)}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/hutch-image-bench.XXXXXX")
# One cleanup for every part: the registry, the bundle's read-only
# mount (rm cannot go through it), then the work directory.
registry_pid= bundle_mount= stores_mount=
cleanup() {
    [ -z "$registry_pid" ] || kill "$registry_pid" 2>/dev/null || true
    [ -z "$bundle_mount" ] || umount "$bundle_mount" 2>/dev/null || true
    [ -z "$stores_mount" ] || umount "$stores_mount" 2>/dev/null || true
    [ $keep = 1 ] || rm -rf "$work"
}
trap cleanup EXIT

what="--rootfs $rootfs"
cached=/opt/hutch-test-debian/current/rootfs
if [ -z "$rootfs" ] && [ -x "$cached/usr/bin/true" ]; then
    rootfs=$cached
    what="debootstrap --variant=minbase $(cat "$cached/etc/debian_version" 2>/dev/null) (tests/setup's cached tree)"
fi
if [ -z "$rootfs" ] && ! part a && ! part b && ! part c && ! part d; then
    :
elif [ -z "$rootfs" ]; then
    rootfs=$work/rootfs
    mirror=http://deb.debian.org/debian
    if command -v debootstrap >/dev/null &&
        timeout 900 debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
        what="debootstrap --variant=minbase bookworm"
        # Device nodes are not image content (hutch refuses them by default).
        rm -rf "$rootfs/dev" && mkdir "$rootfs/dev"
    else
        echo "image.sh: debootstrap failed (see $work/debootstrap.log); using host files" >&2
        rm -rf "$rootfs" && mkdir -p "$rootfs/usr"
        # About 200 MB of real files: libraries, locales, docs, many small files.
        budget=$((200 * 1024 * 1024))
        for d in /usr/lib/x86_64-linux-gnu /usr/share /usr/lib/python3; do
            [ -d "$d" ] || continue
            used=$(du -sb "$rootfs" | cut -f1)
            [ "$used" -lt "$budget" ] || break
            find "$d" -xdev \( -type f -o -type l -o -type d \) -print 2>/dev/null |
                head -n 40000 | cpio -pdm --quiet "$rootfs" 2>/dev/null || true
        done
        # Runnable, and owned as a Debian tree is (root:shadow, utmp,
        # mail, staff), so that the spawn rows map a range as they would
        # on the debootstrap tree: /bin/true and /bin/sh with their
        # libraries.
        for tool in /usr/bin/true /bin/sh; do
            for f in "$tool" $(ldd "$tool" 2>/dev/null | grep -o '/[^ ]*'); do
                [ -e "$f" ] && cp -L --parents "$f" "$rootfs" 2>/dev/null || true
            done
        done
        mkdir -p "$rootfs/bin"
        [ -e "$rootfs/bin/true" ] || cp -L /usr/bin/true "$rootfs/bin/true"
        mkdir -p "$rootfs/etc" "$rootfs/var/log" "$rootfs/var/mail" "$rootfs/usr/local"
        : >"$rootfs/etc/shadow" && chown 0:42 "$rootfs/etc/shadow" && chmod 640 "$rootfs/etc/shadow"
        : >"$rootfs/var/log/wtmp" && chown 0:43 "$rootfs/var/log/wtmp"
        chown 0:8 "$rootfs/var/mail" && chown 0:50 "$rootfs/usr/local"
        what="host files ($(du -sh "$rootfs" | cut -f1))"
    fi
fi
import_bench() {
    size=$(du -sh "$rootfs" | cut -f1)
    files=$(find "$rootfs" | wc -l)
    echo "image: $what: $size, $files entries"

    layout=$work/layout
    umoci init --layout "$layout"
    umoci new --image "$layout:bench"
    umoci insert --image "$layout:bench" "$rootfs" / >/dev/null
    echo "layout: $(du -sh "$layout" | cut -f1) (gzip)"

    now() { date +%s.%N; }
    time_hutch() {
        rm -rf "$work/store"
        sync   # the last call's and the rm's dirty pages, outside the timing
        t0=$(now)
        "$hutch" image --image-store "$work/store" import "$layout" >/dev/null
        t1=$(now)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
    }
    time_umoci() {
        rm -rf "$work/bundle"
        sync   # the last call's and the rm's dirty pages, outside the timing
        t0=$(now)
        umoci unpack --image "$layout:bench" "$work/bundle" >/dev/null 2>&1
        t1=$(now)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
    }
    # Warm the page cache and check both work.
    time_hutch >/dev/null
    time_umoci >/dev/null
    : >"$work/h"
    : >"$work/u"
    i=0
    while [ $i -lt "$rounds" ]; do
        if [ $((i % 2)) = 0 ]; then
            time_hutch >>"$work/h"; time_umoci >>"$work/u"
        else
            time_umoci >>"$work/u"; time_hutch >>"$work/h"
        fi
        i=$((i + 1))
    done
    median() { sort -n "$1" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
    h=$(median "$work/h")
    u=$(median "$work/u")
    echo "hutch image import: median ${h}s over $rounds rounds ($(tr '\n' ' ' <"$work/h"))"
    echo "umoci unpack:       median ${u}s over $rounds rounds ($(tr '\n' ' ' <"$work/u"))"
    awk -v h="$h" -v u="$u" 'BEGIN { printf "ratio hutch/umoci: %.2fx (target <= 1.0)\n", h / u }'
}
part a && import_bench

if part b || part c; then
    # The spawn image: D itself when it can run `true` (a Debian tree has
    # files of several owners: mapped through an id range), else a static
    # busybox tree.
    busybox_root() {
        [ -x /bin/busybox ] || { echo "image.sh: /bin/busybox (busybox-static) is needed" >&2; exit 2; }
        spawnroot=$work/spawnroot
        # Mount points: the peer cannot create them in a read-only root.
        mkdir -p "$spawnroot/bin" "$spawnroot/etc" "$spawnroot/proc" "$spawnroot/dev" "$spawnroot/sys" "$spawnroot/tmp"
        cp /bin/busybox "$spawnroot/bin/busybox"
        for t in sh true; do ln -sf busybox "$spawnroot/bin/$t"; done
    }
    store=$work/spawn-store
    import_spawn() {
        rm -rf "$store"
        digest=$("$hutch" image --image-store "$store" import --rootfs "$spawnroot" --name spawn | head -n 1)
    }
    mkdir -p "$work/ws"
    spawnroot=$rootfs
    if [ -n "$spawnroot" ] && [ -x "$spawnroot/bin/true" ]; then
        import_spawn
        if ! (cd "$work/ws" && "$hutch" run --quiet --image-store "$store" --image "$digest" -- true) 2>"$work/try.log"; then
            echo "image.sh: the part-(a) image does not run here ($(cat "$work/try.log")); using busybox" >&2
            busybox_root
            import_spawn
        fi
    else
        busybox_root
        import_spawn
    fi
    echo "spawn image: $digest ($(du -sh "$spawnroot" | cut -f1)), id map: $(cd "$work/ws" && "$hutch" run --quiet --image-store "$store" --image "$digest" --status-file "$work/map.json" -- true >/dev/null 2>&1; grep -o '"id_map":"[a-z]*"' "$work/map.json" | tail -n 1)"
    ws=$work/ws
    cd "$ws"
    set -- --shell=none --warmup 10 --runs "$runs" --export-csv "$work/spawn.csv"
    set -- "$@" -n host "$hutch run --quiet -- true"
    set -- "$@" -n image "$hutch run --quiet --image-store $store --image $digest -- true"
    if part c; then
        bundle=$work/bundle-spawn
        mkdir -p "$bundle/rootfs"
        # The same layers as a read-only overlay (no upper); a one-layer
        # image (overlayfs wants two lowers then) as a read-only bind.
        # A --rootfs image has one layer, so their order does not arise.
        lowers=$(ls -d "$store"/layers/*/root | tr '\n' ':' | sed 's/:$//')
        case $lowers in
            *:*) mount -t overlay overlay -o "ro,lowerdir=$lowers" "$bundle/rootfs" ;;
            *) mount --bind "$lowers" "$bundle/rootfs" && mount -o remount,bind,ro "$bundle/rootfs" ;;
        esac
        bundle_mount=$bundle/rootfs
        (cd "$bundle" && crun spec 2>/dev/null || runc spec)
        python3 - "$bundle/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["process"]["args"] = ["/bin/true"]
c["process"]["terminal"] = False
json.dump(c, open(p, "w"))
PY
        # crun first; runc when crun cannot run here (e.g. crun refuses a
        # hybrid cgroup hierarchy).
        peer=""
        for p in crun runc; do
            command -v $p >/dev/null || continue
            if $p run --bundle "$bundle" "hutch-bench-probe-$$" >"$work/$p.log" 2>&1; then
                peer=$(command -v $p)
                break
            fi
            echo "image.sh: $p cannot run the bundle here: $(head -c 200 "$work/$p.log")" >&2
        done
        [ -n "$peer" ] || { echo "image.sh: part (c) needs crun or runc that can run a bundle" >&2; exit 2; }
        set -- "$@" -n "$(basename "$peer")" "$peer run --bundle $bundle hutch-bench-$$"
    fi
    hyperfine "$@" >"$work/hyperfine.log" 2>&1 || { cat "$work/hyperfine.log" >&2; exit 1; }
    cd - >/dev/null
    # command,mean,stddev,median,user,system,min,max (seconds)
    awk -F, 'NR > 1 { printf "%-8s mean %.2f ms, median %.2f ms (min %.2f, max %.2f) over '"$runs"' runs\n", $1, $2 * 1000, $4 * 1000, $7 * 1000, $8 * 1000 }' "$work/spawn.csv"
    awk -F, 'NR > 1 { m[$1] = $2 }
        END {
            printf "ratio image/host (b): %.2fx (target <= 1.1)\n", m["image"] / m["host"]
            for (k in m) if (k != "image" && k != "host")
                printf "ratio image/%s (c): %.2fx (target <= 1.0)\n", k, m["image"] / m[k]
        }' "$work/spawn.csv"
fi

if part d; then
    for tool in docker-registry skopeo umoci; do
        command -v $tool >/dev/null || { echo "image.sh: part (d) needs $tool" >&2; exit 2; }
    done
    layout=$work/layout
    if [ ! -d "$layout" ]; then
        umoci init --layout "$layout"
        umoci new --image "$layout:bench"
        umoci insert --image "$layout:bench" "$rootfs" / >/dev/null
    fi
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    host=127.0.0.1:$port
    printf 'version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\nhttp:\n  addr: %s\n' \
        "$work/registry" "$host" >"$work/registry.yml"
    docker-registry serve "$work/registry.yml" >"$work/registry.log" 2>&1 &
    registry_pid=$!
    until python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$port" 2>/dev/null; do
        kill -0 $registry_pid || { cat "$work/registry.log" >&2; exit 1; }
        sleep 0.05
    done
    echo '{}' >"$work/skopeo-auth.json"
    dest=docker://$host/bench/image:1
    skopeo copy --quiet --authfile "$work/skopeo-auth.json" --dest-tls-verify=false "oci:$layout:bench" "$dest"
    digest=sha256:$(skopeo inspect --raw --authfile "$work/skopeo-auth.json" --tls-verify=false "$dest" | sha256sum | cut -d' ' -f1)
    ref=$host/bench/image@$digest
    # Each timed call prints "wall user+sys" (seconds) of what it ran:
    # CPU time is what a loaded machine disturbs least.
    cat >"$work/timed.py" <<'PY'
import os, subprocess, sys, time
t0 = time.monotonic()
p = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
_, status, ru = os.wait4(p.pid, 0)
wall = time.monotonic() - t0
if status:
    sys.exit(f"{sys.argv[1]} failed ({status})")
print(f"{wall:.3f} {ru.ru_utime + ru.ru_stime:.3f}")
PY
    timed() { python3 "$work/timed.py" "$@"; }
    stores=$work
    case "$store_fs" in
        journaled)
            if [ "$(id -u)" = 0 ] && command -v mkfs.ext4 >/dev/null; then
                truncate -s 12G "$work/stores.img"
                mkfs.ext4 -q -F "$work/stores.img"
                mkdir "$work/stores"
                mount -o loop "$work/stores.img" "$work/stores"
                stores_mount=$work/stores stores=$work/stores
                echo "(d) stores on a fresh journaled ext4 (loop-mounted in the work directory)"
            else
                echo "(d) stores on $(df --output=fstype "$work" | tail -n 1) of $work (a journaled ext4 needs root and mkfs.ext4)"
            fi ;;
        here) echo "(d) stores on $(df --output=fstype "$work" | tail -n 1) of $work (--store-fs here)" ;;
        *) echo "image.sh: --store-fs journaled|here, not $store_fs" >&2; exit 2 ;;
    esac
    # A store of the last round is moved aside, not removed: on an ext4
    # without a journal (this VM's root) a removed inode is "recently
    # deleted" for 60 s, and every file created in its block group until
    # then scans past all of them (ext4's recently_deleted, O(deleted) per
    # create): removing a 6,700-entry store before each timed call made
    # the calls after it 2-4x slower, growing round after round (the
    # "slow phase"). The aside stores are removed after the last round.
    n=0
    retire() {
        for d in "$@"; do
            [ -e "$d" ] || continue
            mkdir -p "$stores/aside"
            mv "$d" "$stores/aside/$n"
            n=$((n + 1))
        done
        sync   # the last call's dirty pages, outside the timing
    }
    time_pull() {
        retire "$stores/pstore"
        timed "$hutch" image --image-store "$stores/pstore" pull "$ref" --insecure-registry "$host"
    }
    time_peer() {
        retire "$stores/peer" "$stores/istore"
        a=$(timed skopeo copy --quiet --authfile "$work/skopeo-auth.json" --src-tls-verify=false "$dest" "oci:$stores/peer:bench")
        b=$(timed "$hutch" image --image-store "$stores/istore" import "$stores/peer")
        echo "$a $b" | awk '{ printf "%.3f %.3f\n", $1 + $3, $2 + $4 }'
    }
    echo "(d) load before: $(uptime)"
    # What creating a file costs here now, beside the stores: ~10 us of
    # system time on this VM normally, 80-160 us for minutes after a large
    # removal on the file system (the recently-deleted scan above, e.g.
    # the previous run's cleanup or a test suite's), which then slows both
    # sides alike, the pull relatively more (its own cost is the smaller).
    # An indicator only: the stores' files spread over more block groups
    # than the probe's. Its files are kept (a removal would start it again).
    mkdir "$stores/probe"
    python3 - "$stores/probe" <<'PY'
import os, resource, sys
r0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
for i in range(2000):
    os.close(os.open(f"{sys.argv[1]}/{i}", os.O_CREAT | os.O_WRONLY, 0o600))
cost = (resource.getrusage(resource.RUSAGE_SELF).ru_stime - r0) / 2000 * 1e6
print(f"(d) file-creation probe: {cost:.0f} us of system time per create (2,000 files)")
PY
    time_pull >/dev/null
    time_peer >/dev/null
    : >"$work/p"
    : >"$work/q"
    i=0
    while [ $i -lt "$rounds" ]; do
        if [ $((i % 2)) = 0 ]; then
            time_pull >>"$work/p"; time_peer >>"$work/q"
        else
            time_peer >>"$work/q"; time_pull >>"$work/p"
        fi
        i=$((i + 1))
    done
    echo "(d) load after: $(uptime)"
    # median FILE COLUMN
    median() { cut -d' ' -f"$2" "$1" | sort -n | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
    col() { cut -d' ' -f"$2" "$1" | tr '\n' ' '; }
    p=$(median "$work/p" 1)
    q=$(median "$work/q" 1)
    pc=$(median "$work/p" 2)
    qc=$(median "$work/q" 2)
    echo "(d) hutch image pull: median ${p}s over $rounds rounds ($(col "$work/p" 1)); CPU median ${pc}s ($(col "$work/p" 2))"
    echo "(d) skopeo copy + hutch image import: median ${q}s ($(col "$work/q" 1)); CPU median ${qc}s ($(col "$work/q" 2))"
    awk -v a="$p" -v b="$q" 'BEGIN { printf "ratio pull/(skopeo+import) (d): %.2fx (target <= 0.8)\n", a / b }'
    awk -v a="$pc" -v b="$qc" 'BEGIN { printf "CPU ratio pull/(skopeo+import) (d): %.2fx (user+sys of the called processes)\n", a / b }'
fi
