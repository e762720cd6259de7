// The kernel's part of the resident sandbox (docs/decisions/0007, "Addendum
// (s10)"): one sandbox kept for many commands, each command in namespaces
// of its own inside it. What does a command cost there, against a plain
// spawn in the same sandbox? Driven by benches/resident_floor.sh.
//
// The sandbox is built once, the way hutch builds one: a user namespace
// (root mapped), mount, pid, ipc, net and uts namespaces, a tmpfs root with
// /usr bound read-only, /proc with masks (a read-only /proc/sys, a file and
// a directory covered), /tmp, /dev/shm, pivot_root, lo up. Its pid 1 (the
// "resident init") then serves requests from the parent over a socket pair;
// each request runs /usr/bin/true and answers once it is over. Modes:
//   plain          vfork+execve of true by the resident init (the peer)
//   fresh          a per-command init cloned at the request with
//                  CLONE_NEWPID|CLONE_NEWNS|CLONE_NEWIPC, which mounts a new
//                  /proc over the old one, /tmp and /dev/shm, then spawns
//                  true, kills and reaps what is left and reports *before*
//                  it exits (its namespaces are torn down off the path)
//   fresh-net      the same with CLONE_NEWNET and lo brought up
//   ahead          the per-command init of `fresh` made before the request
//                  (right after the previous answer), waiting for it
//   ahead-net      the same with CLONE_NEWNET
//   teardown-net   `fresh-net`, but the answer waits for the per-command
//                  init's exit (what a report after the teardown costs)
// usage: resident_floor MODE N GAP_MS
// prints: MODE p50_ms p90_ms cpu_ms_per_command (all of the sandbox's CPU,
// its build and the warm-up included, over N)
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/sched.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum mode { PLAIN, FRESH, FRESH_NET, AHEAD, AHEAD_NET, TEARDOWN_NET };
static const char *names[] = {"plain", "fresh", "fresh-net", "ahead", "ahead-net", "teardown-net"};
static enum mode mode;

static void die(const char *what) {
    fprintf(stderr, "resident_floor: %s: %s\n", what, strerror(errno));
    _exit(1);
}
static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text)) die(path);
    close(fd);
}
static void must_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                       const char *data) {
    if (mount(src, dst, type, flags, data) < 0) die(dst);
}
static void lo_up(void) {
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq r;
    memset(&r, 0, sizeof r);
    strcpy(r.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &r) < 0) die("lo flags");
    r.ifr_flags |= IFF_UP;
    if (ioctl(s, SIOCSIFFLAGS, &r) < 0) die("lo up");
    close(s);
}
static void run_true(void) {
    pid_t p = vfork();
    if (p == 0) {
        char *argv[] = {"true", 0}, *envp[] = {0};
        execve("/usr/bin/true", argv, envp);
        _exit(127);
    }
    int status;
    if (p < 0 || waitpid(p, &status, 0) < 0 || status != 0) die("true");
}
static int with_net(void) { return mode == FRESH_NET || mode == AHEAD_NET || mode == TEARDOWN_NET; }

// A per-command init: fresh namespaces and mounts; waits for `go` (when
// made ahead), runs the command, ends what is left, reports on `done`.
struct percmd { pid_t pid; int go, done; };
static struct percmd start_percmd(int wait_for_go) {
    int go[2], done[2];
    if (pipe2(go, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0) die("pipe");
    struct clone_args a;
    memset(&a, 0, sizeof a);
    a.flags = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | (with_net() ? CLONE_NEWNET : 0);
    a.exit_signal = SIGCHLD;
    pid_t p = syscall(SYS_clone3, &a, sizeof a);
    if (p < 0) die("clone3");
    if (p == 0) {
        close(go[1]);
        close(done[0]);
        // Over the old /proc, not after unmounting it: a new proc mount
        // needs a visible one in the mount namespace (mount_too_revealing).
        must_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
        must_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777");
        must_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=1777");
        if (with_net()) lo_up();
        char c;
        if (wait_for_go && read(go[0], &c, 1) != 1) _exit(0);
        run_true();
        kill(-1, SIGKILL);
        while (wait(0) > 0) {}
        c = 1;
        if (write(done[1], &c, 1) != 1) _exit(1);
        _exit(0);
    }
    close(go[0]);
    close(done[1]);
    return (struct percmd){p, go[1], done[0]};
}
static void finish_percmd(struct percmd c, int made_ahead) {
    char byte = 1;
    if (made_ahead && write(c.go, &byte, 1) != 1) die("per-command init: go");
    if (read(c.done, &byte, 1) != 1) die("per-command init: done");
    close(c.go);
    close(c.done);
    if (mode == TEARDOWN_NET && waitpid(c.pid, 0, 0) < 0) die("waitpid");
}

static void resident_init(int sock) {
    // The new root: a tmpfs over /tmp of this mount namespace only.
    must_mount(0, "/", 0, MS_SLAVE | MS_REC, 0);
    must_mount("tmpfs", "/tmp", "tmpfs", 0, "mode=0755");
    if (chdir("/tmp") < 0) die("chdir root");
    const char *dirs[] = {"usr", "proc", "tmp", "dev", "old", 0};
    for (int i = 0; dirs[i]; i++) mkdir(dirs[i], 0755);
    must_mount("/usr", "usr", 0, MS_BIND | MS_REC, 0);
    must_mount(0, "usr", 0, MS_BIND | MS_REMOUNT | MS_RDONLY, 0);
    if (symlink("usr/bin", "bin") < 0 || symlink("usr/lib", "lib") < 0 ||
        symlink("usr/lib64", "lib64") < 0)
        die("symlink");
    must_mount("proc", "proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, 0);
    must_mount("proc/sys", "proc/sys", 0, MS_BIND | MS_REC, 0);
    must_mount(0, "proc/sys", 0, MS_BIND | MS_REMOUNT | MS_RDONLY, 0);
    if (close(open("dev/.mask", O_CREAT | O_WRONLY | O_CLOEXEC, 0400)) < 0) die("mask file");
    must_mount("dev/.mask", "proc/timer_list", 0, MS_BIND, 0);
    must_mount("tmpfs", "proc/acpi", "tmpfs", MS_RDONLY, 0);
    must_mount("tmpfs", "tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    mkdir("dev/shm", 01777);
    must_mount("tmpfs", "dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    if (syscall(SYS_pivot_root, ".", "old") < 0) die("pivot_root");
    if (umount2("/old", MNT_DETACH) < 0) die("umount old root");
    if (chdir("/") < 0) die("chdir /");
    lo_up();
    struct percmd ahead = {0, -1, -1};
    char c;
    while (read(sock, &c, 1) == 1) {
        switch (mode) {
        case PLAIN: run_true(); break;
        case FRESH: case FRESH_NET: case TEARDOWN_NET: finish_percmd(start_percmd(0), 0); break;
        case AHEAD: case AHEAD_NET:
            if (ahead.go < 0) ahead = start_percmd(1);
            finish_percmd(ahead, 1);
            break;
        }
        if (write(sock, &c, 1) != 1) die("answer");
        // Off the path: reap what ended, make the next per-command init.
        while (waitpid(-1, 0, WNOHANG) > 0) {}
        if (mode == AHEAD || mode == AHEAD_NET) ahead = start_percmd(1);
    }
    _exit(0);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: resident_floor MODE N GAP_MS\n");
        return 2;
    }
    int found = 0;
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++)
        if (!strcmp(argv[1], names[i])) mode = i, found = 1;
    int n = atoi(argv[2]);
    double gap = atof(argv[3]);
    if (!found || n < 10) {
        fprintf(stderr, "resident_floor: unknown mode %s or N < 10\n", argv[1]);
        return 2;
    }
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) die("socketpair");
    uid_t uid = getuid();
    gid_t gid = getgid();
    pid_t outer = fork();
    if (outer == 0) {
        close(sv[0]);
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWNET | CLONE_NEWUTS) < 0)
            die("unshare");
        char map[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "0 %u 1", uid);
        write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "0 %u 1", gid);
        write_file("/proc/self/gid_map", map);
        if (unshare(CLONE_NEWPID) < 0) die("unshare pid");
        pid_t init = fork();
        if (init == 0) resident_init(sv[1]);
        int status;
        waitpid(init, &status, 0);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    close(sv[1]);
    double *took = malloc(n * sizeof *took);
    char c = 'x';
    for (int i = 0; i < 20; i++)  // warm-up
        if (write(sv[0], &c, 1) != 1 || read(sv[0], &c, 1) != 1) die("warm-up");
    struct rusage before, after;
    getrusage(RUSAGE_CHILDREN, &before);
    for (int i = 0; i < n; i++) {
        double t = now_ms();
        if (write(sv[0], &c, 1) != 1 || read(sv[0], &c, 1) != 1) die("request");
        took[i] = now_ms() - t;
        if (gap > 0) usleep((useconds_t)(gap * 1000));
    }
    close(sv[0]);
    int status;
    waitpid(outer, &status, 0);
    getrusage(RUSAGE_CHILDREN, &after);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "resident_floor: the sandbox failed\n");
        return 1;
    }
#define MS(tv) ((tv).tv_sec * 1e3 + (tv).tv_usec / 1e3)
    double cpu = MS(after.ru_utime) - MS(before.ru_utime) + MS(after.ru_stime) - MS(before.ru_stime);
    qsort(took, n, sizeof *took, by_value);
    printf("%s %.3f %.3f %.3f\n", names[mode], took[n / 2], took[n * 9 / 10], cpu / n);
    return 0;
}
