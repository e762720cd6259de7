/* A multi-threaded program that also uses posix_spawn: 8 threads sum in
 * parallel, then /bin/sh is spawned and its status checked. Prints "ok". */
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <sys/wait.h>

extern char **environ;
static long sums[8];

static void *work(void *arg) {
    long i = (long)arg, s = 0;
    for (long k = 0; k < 1000000; k++) s += k % (i + 2);
    sums[i] = s;
    return NULL;
}

int main(void) {
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        if (pthread_create(&t[i], NULL, work, (void *)i) != 0) { perror("pthread_create"); return 1; }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 8; i++) if (sums[i] == 0) return 2;
    pid_t pid;
    char *argv[] = {"sh", "-c", "exit 3", NULL};
    int err = posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, environ);
    if (err != 0) { fprintf(stderr, "posix_spawn: %d\n", err); return 3; }
    int status;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 3) return 4;
    puts("ok");
    return 0;
}
