/* Prints "<name> <errno>" for each call of SECURITY §4's deny list, made
 * with arguments that fail harmlessly when nothing filters them
 * (errno 0 means the call succeeded). Run inside the sandbox. */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HIGH (1ULL << 32)
#define NOPATH ((long)"/nonexistent/hutch")
#define BAD (-1L)

static void call(const char *name, long nr, long a, long b, long c, long d, long e, long f) {
    errno = 0;
    long r = syscall(nr, a, b, c, d, e, f);
    printf("%s %d\n", name, r < 0 ? errno : 0);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    call("unshare", SYS_unshare, CLONE_NEWUSER, 0, 0, 0, 0, 0);
    call("setns", SYS_setns, -1, 0, 0, 0, 0, 0);
    call("clone_newuser", SYS_clone, CLONE_NEWUSER | CLONE_THREAD, 0, 0, 0, 0, 0);
    call("clone_newns", SYS_clone, CLONE_NEWNS | CLONE_THREAD, 0, 0, 0, 0, 0);
    call("clone_newnet", SYS_clone, CLONE_NEWNET | CLONE_THREAD, 0, 0, 0, 0, 0);
    call("clone_newuser_high", SYS_clone, (long)(CLONE_NEWUSER | CLONE_THREAD | HIGH), 0, 0, 0, 0, 0);
    call("mount", SYS_mount, NOPATH, NOPATH, NOPATH, 0, 0, 0);
    call("umount2", SYS_umount2, NOPATH, 0, 0, 0, 0, 0);
    call("pivot_root", SYS_pivot_root, NOPATH, NOPATH, 0, 0, 0, 0);
    call("chroot", SYS_chroot, NOPATH, 0, 0, 0, 0, 0);
    call("open_by_handle_at", SYS_open_by_handle_at, -1, 0, 0, 0, 0, 0);
    call("add_key", SYS_add_key, 0, 0, 0, 0, 0, 0);
    call("keyctl", SYS_keyctl, 0, -1, 0, 0, 0, 0);
    call("request_key", SYS_request_key, 0, 0, 0, 0, 0, 0);
    call("bpf", SYS_bpf, -1, 0, 0, 0, 0, 0);
    call("perf_event_open", SYS_perf_event_open, 0, 0, -1, -1, 0, 0);
    call("kexec_load", SYS_kexec_load, 0, 0, 0, -1, 0, 0);
    call("kexec_file_load", SYS_kexec_file_load, -1, -1, 0, 0, -1, 0);
    call("init_module", SYS_init_module, 0, 0, 0, 0, 0, 0);
    call("finit_module", SYS_finit_module, -1, 0, 0, 0, 0, 0);
    call("delete_module", SYS_delete_module, (long)"hutch_none", 0, 0, 0, 0, 0);
    call("syslog", SYS_syslog, 10, 0, 0, 0, 0, 0);
    call("acct", SYS_acct, NOPATH, 0, 0, 0, 0, 0);
    call("quotactl", SYS_quotactl, -1, 0, 0, 0, 0, 0);
    call("swapon", SYS_swapon, NOPATH, 0, 0, 0, 0, 0);
    call("swapoff", SYS_swapoff, NOPATH, 0, 0, 0, 0, 0);
    call("reboot", SYS_reboot, 0, 0, 0, 0, 0, 0);
    call("iopl", SYS_iopl, 0, 0, 0, 0, 0, 0);
    call("ioperm", SYS_ioperm, 0, 0, 0, 0, 0, 0);
    call("uselib", SYS_uselib, NOPATH, 0, 0, 0, 0, 0);
    call("userfaultfd", SYS_userfaultfd, -1, 0, 0, 0, 0, 0);
    call("ptrace", SYS_ptrace, 2 /* PEEKDATA */, 1, 0, 0, 0, 0);
    call("process_vm_readv", SYS_process_vm_readv, 1, 0, 0, 0, 0, 0);
    call("process_vm_writev", SYS_process_vm_writev, 1, 0, 0, 0, 0, 0);
    call("kcmp", SYS_kcmp, 1, 1, -1, 0, 0, 0);
    call("pidfd_getfd", SYS_pidfd_getfd, -1, 0, 0, 0, 0, 0);
    call("mbind", SYS_mbind, 0, 0, -1, 0, 0, 0);
    call("set_mempolicy", SYS_set_mempolicy, -1, 0, 0, 0, 0, 0);
    call("migrate_pages", SYS_migrate_pages, -1, 0, 0, 0, 0, 0);
    call("move_pages", SYS_move_pages, -1, 0, 0, 0, 0, 0);
    call("settimeofday", SYS_settimeofday, BAD, 0, 0, 0, 0, 0);
    call("clock_settime", SYS_clock_settime, -1, 0, 0, 0, 0, 0);
    call("clock_adjtime", SYS_clock_adjtime, -1, 0, 0, 0, 0, 0);
    call("personality_addr_no_randomize", SYS_personality, 0x0040000, 0, 0, 0, 0, 0);
    call("personality_high", SYS_personality, (long)(0x0040000 | HIGH), 0, 0, 0, 0, 0);
    call("ioctl_tiocsti", SYS_ioctl, 0, TIOCSTI, (long)"x", 0, 0, 0);
    call("ioctl_tiocsti_high", SYS_ioctl, 0, (long)(TIOCSTI | HIGH), (long)"x", 0, 0, 0);
    call("ioctl_tioclinux", SYS_ioctl, 0, TIOCLINUX, 0, 0, 0, 0);
    call("clone3", SYS_clone3, 0, 0, 0, 0, 0, 0);
    call("io_uring_setup", SYS_io_uring_setup, 1, 0, 0, 0, 0, 0);
    call("io_uring_enter", SYS_io_uring_enter, -1, 0, 0, 0, 0, 0);
    call("io_uring_register", SYS_io_uring_register, -1, 0, 0, 0, 0, 0);
    call("fsopen", SYS_fsopen, 0, 0, 0, 0, 0, 0);
    call("open_tree", SYS_open_tree, -1, 0, 0, 0, 0, 0);
    call("move_mount", SYS_move_mount, -1, 0, -1, 0, 0, 0);
    call("mount_setattr", SYS_mount_setattr, -1, 0, 0, 0, 0, 0);
    call("socket_vsock", SYS_socket, AF_VSOCK, SOCK_STREAM, 0, 0, 0, 0);
    call("socket_packet", SYS_socket, AF_PACKET, SOCK_RAW, 0, 0, 0, 0);
    call("socket_alg", SYS_socket, AF_ALG, SOCK_SEQPACKET, 0, 0, 0, 0);
    call("socket_vsock_high", SYS_socket, (long)(AF_VSOCK | HIGH), SOCK_STREAM, 0, 0, 0, 0);
    call("socket_unix", SYS_socket, AF_UNIX, SOCK_STREAM, 0, 0, 0, 0);
    call("socket_inet", SYS_socket, AF_INET, SOCK_STREAM, 0, 0, 0, 0);
    return 0;
}
