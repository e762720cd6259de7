/* Whether the executable behind /proc/PID/exe (argv[1]) is on a read-only
 * mount: opened O_PATH (as a CVE-2019-5736 attacker keeps it, to reopen it
 * for writing once the binary no longer runs), then fstatvfs. Prints "ro",
 * "rw", or why it could not be opened. Linked statically: it runs in a
 * busybox rootfs. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/statvfs.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: exe_mount /proc/PID/exe\n");
        return 2;
    }
    int fd = open(argv[1], O_PATH | O_CLOEXEC);
    if (fd < 0) {
        printf("%s\n", strerror(errno));
        return 1;
    }
    struct statvfs st;
    if (fstatvfs(fd, &st) != 0) {
        printf("fstatvfs: %s\n", strerror(errno));
        return 1;
    }
    printf("%s\n", (st.f_flag & ST_RDONLY) ? "ro" : "rw");
    return 0;
}
