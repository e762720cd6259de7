/* Makes getpid through the i386 entry point (`int80`) or with the x32 bit
 * (`x32`); prints "survived" when the process is not killed. */
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    long ret = 0;
    if (argc > 1 && strcmp(argv[1], "int80") == 0) {
        long nr = 20; /* i386 getpid */
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr) : "memory");
    } else if (argc > 1 && strcmp(argv[1], "x32") == 0) {
        ret = syscall(0x40000000L | SYS_getpid);
    } else {
        return 2;
    }
    printf("survived %ld\n", ret);
    return 0;
}
