#!/bin/sh
# Image import: `hutch image import` of a Debian-sized OCI layout against
# `umoci unpack` of the same layout, in one run (part (a) of issue 12).
#
#   benches/image.sh [--rounds N] [--rootfs DIR] [--keep]
#
# The image: `debootstrap --variant=minbase bookworm` from the Debian
# mirror apt uses, when it can be reached; otherwise (or with --rootfs
# DIR) a ~200 MB tree copied from the host's /usr/lib and /usr/share.
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
rootfs=""
keep=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) rounds=$2; shift 2 ;;
        --rootfs) rootfs=$2; shift 2 ;;
        --keep) keep=1; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) echo "image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "image.sh: run as root" >&2; exit 2; }
command -v umoci >/dev/null || { echo "image.sh: umoci is needed (apt-get install umoci)" >&2; exit 2; }

cd "$(dirname "$0")/.."
hutch=${HUTCH_BIN:-$(benches/hutch-path.sh --release)}
work=$(mktemp -d "${TMPDIR:-/var/tmp}/hutch-image-bench.XXXXXX")
[ $keep = 1 ] || trap 'rm -rf "$work"' EXIT

what="--rootfs $rootfs"
if [ -z "$rootfs" ]; then
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
        what="host files ($(du -sh "$rootfs" | cut -f1))"
    fi
fi
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
    t0=$(now)
    "$hutch" image --image-store "$work/store" import "$layout" >/dev/null
    t1=$(now)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}
time_umoci() {
    rm -rf "$work/bundle"
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
