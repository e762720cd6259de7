/* The pod's pause container for tests/oci_cri.rs (what registry.k8s.io/pause
 * does): hold the pod's namespaces, reap what is reparented to it, exit 0
 * on SIGINT/SIGTERM. Built with gcc -static by the test, offline. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
    (void)sig;
    _exit(0);
}

static void reap(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0)
        ;
}

int main(void) {
    struct sigaction a;
    memset(&a, 0, sizeof a);
    a.sa_handler = stop;
    sigaction(SIGINT, &a, NULL);
    sigaction(SIGTERM, &a, NULL);
    a.sa_handler = reap;
    a.sa_flags = SA_NOCLDSTOP;
    sigaction(SIGCHLD, &a, NULL);
    for (;;)
        pause();
}
