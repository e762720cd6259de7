/* Workloads for the kernel-VM tests (statically linked into the initramfs).
 *
 *   vmhelper memhog MB          allocate and touch MB MiB, 1 MiB at a time
 *   vmhelper spin SECONDS       busy loop for SECONDS of wall time; prints
 *                               "cpu_ms N wall_ms M"
 *   vmhelper forkbomb N         try to fork N children that sleep 3 s; prints
 *                               "forked A failed B"; exit 1 if any failed
 *   vmhelper daemonize MARKER   double-fork a setsid daemon that sleeps
 *                               forever with argv[0]=MARKER, then sleep
 *   vmhelper runas UID GID CMD...  drop to UID/GID and exec CMD
 *   vmhelper timeit N CMD...    run CMD N times (stdout/stderr to /dev/null);
 *                               prints "mean_us U min_us M"; exit 1 if a
 *                               run failed
 *   vmhelper odirect-write DEV MB  write MB MiB to DEV with O_DIRECT, 1 MiB
 *                               per write, then fsync; prints "wall_ms M"
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <fcntl.h>
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    const char *cmd = argv[1];
    if (!strcmp(cmd, "memhog") && argc == 3) {
        long mb = atol(argv[2]);
        for (long i = 0; i < mb; i++) {
            char *p = malloc(1 << 20);
            if (!p) { fprintf(stderr, "malloc failed at %ld MiB\n", i); return 3; }
            for (long j = 0; j < (1 << 20); j += 4096) p[j] = 1;
            if (i % 256 == 255) fprintf(stderr, "touched %ld MiB\n", i + 1);
        }
        printf("touched %ld MiB\n", mb);
        return 0;
    }
    if (!strcmp(cmd, "spin") && argc == 3) {
        double secs = atof(argv[2]);
        double w0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_PROCESS_CPUTIME_ID);
        volatile unsigned long x = 0;
        while (now(CLOCK_MONOTONIC) - w0 < secs)
            for (int i = 0; i < 100000; i++) x++;
        printf("cpu_ms %.0f wall_ms %.0f\n", (now(CLOCK_PROCESS_CPUTIME_ID) - c0) * 1e3,
               (now(CLOCK_MONOTONIC) - w0) * 1e3);
        return 0;
    }
    if (!strcmp(cmd, "forkbomb") && argc == 3) {
        long n = atol(argv[2]), ok = 0, failed = 0;
        for (long i = 0; i < n; i++) {
            pid_t p = fork();
            if (p == 0) { sleep(3); _exit(0); }
            if (p < 0) failed++; else ok++;
        }
        printf("forked %ld failed %ld\n", ok, failed);
        fflush(stdout);
        while (wait(NULL) > 0) {}
        return failed ? 1 : 0;
    }
    if (!strcmp(cmd, "daemonize") && argc == 3) {
        pid_t p = fork();
        if (p == 0) {
            setsid();
            if (fork() == 0) {
                for (int fd = 0; fd < 3; fd++) close(fd);
                execl("/proc/self/exe", argv[2], "daemon-child", (char *)NULL);
                _exit(1);
            }
            _exit(0);
        }
        waitpid(p, NULL, 0);
        printf("daemon started\n");
        fflush(stdout);
        for (;;) pause();
    }
    if (!strcmp(cmd, "daemon-child")) {
        for (;;) pause();
    }
    if (!strcmp(cmd, "runas") && argc >= 5) {
        gid_t g = atoi(argv[3]);
        if (setgroups(1, &g) || setgid(g) || setuid(atoi(argv[2]))) { perror("runas"); return 126; }
        execvp(argv[4], argv + 4);
        perror(argv[4]);
        return 127;
    }
    if (!strcmp(cmd, "timeit") && argc >= 4) {
        long n = atol(argv[2]);
        double total = 0, best = 1e18;
        for (long i = 0; i < n; i++) {
            double t0 = now(CLOCK_MONOTONIC);
            pid_t p = fork();
            if (p == 0) {
                int fd = open("/dev/null", O_RDWR);
                dup2(fd, 0); dup2(fd, 1); dup2(fd, 2);
                execvp(argv[3], argv + 3);
                _exit(127);
            }
            int st;
            waitpid(p, &st, 0);
            double dt = (now(CLOCK_MONOTONIC) - t0) * 1e6;
            if (!WIFEXITED(st) || WEXITSTATUS(st)) { fprintf(stderr, "run %ld failed: %d\n", i, st); return 1; }
            total += dt;
            if (dt < best) best = dt;
        }
        printf("mean_us %.0f min_us %.0f\n", total / n, best);
        return 0;
    }
    if (!strcmp(cmd, "odirect-write") && argc == 4) {
        long mb = atol(argv[3]);
        void *buf;
        if (posix_memalign(&buf, 1 << 20, 1 << 20)) { perror("posix_memalign"); return 1; }
        memset(buf, 0x5a, 1 << 20);
        int fd = open(argv[2], O_WRONLY | O_DIRECT);
        if (fd < 0) { perror(argv[2]); return 1; }
        double t0 = now(CLOCK_MONOTONIC);
        for (long i = 0; i < mb; i++) {
            if (write(fd, buf, 1 << 20) != 1 << 20) { perror("write"); return 1; }
        }
        if (fsync(fd)) { perror("fsync"); return 1; }
        printf("wall_ms %.0f\n", (now(CLOCK_MONOTONIC) - t0) * 1e3);
        return 0;
    }
    fprintf(stderr, "vmhelper: bad arguments\n");
    return 2;
}
