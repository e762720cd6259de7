/* benches/confine_cost.c: what a workload's confinement syscalls cost on
 * this machine, in a forked child, without hutch: no-new-privs and 41
 * PR_CAPBSET_DROP, a Landlock ruleset with 16 path rules (open O_PATH,
 * fstat, add_rule each) and restrict_self, then one seccomp filter of N
 * classic-BPF instructions (hutch's default workload filter is 112).
 * Prints the p50 of each over 200 children (docs/warm.md, "Measured").
 *
 *   gcc -O2 -o /tmp/confine_cost benches/confine_cost.c
 *   /tmp/confine_cost 0 112    # flags 0, 112 instructions
 *   /tmp/confine_cost 0 2      # the same with a 2-instruction filter
 *
 * Run as root (or with the capabilities to drop).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <fcntl.h>
#include <time.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/landlock.h>
#include <linux/seccomp.h>
#include <linux/filter.h>
#include <linux/capability.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  if(argc<3){fprintf(stderr,"usage: %s SECCOMP_FLAGS INSTRUCTIONS(1-112)\n",argv[0]);return 2;}
  if(atoi(argv[2])<1||atoi(argv[2])>112){fprintf(stderr,"INSTRUCTIONS: 1 to 112\n");return 2;}
  int n=200; double caps[200],ll[200],sc[200],tot[200];
  const char*paths[]={"/","/usr","/etc","/opt","/bin","/lib","/lib64","/proc","/dev","/dev/shm","/tmp","/run","/var/tmp","/home","/root","/sys",0};
  for(int r=0;r<n;r++){
    int p[2]; pipe(p);
    pid_t c=fork();
    if(c==0){
      double t0=now();
      prctl(PR_SET_NO_NEW_PRIVS,1,0,0,0);
      for(int i=0;i<=40;i++) prctl(PR_CAPBSET_DROP,i,0,0,0);
      double t1=now();
      struct landlock_ruleset_attr a={.handled_access_fs=(1ULL<<16)-1};
      int rs=syscall(SYS_landlock_create_ruleset,&a,sizeof a,0);
      for(int i=0;paths[i];i++){int fd=open(paths[i],O_PATH|O_CLOEXEC); if(fd<0)continue; struct stat st; fstat(fd,&st);
        struct landlock_path_beneath_attr pb={.allowed_access=7,.parent_fd=fd};
        syscall(SYS_landlock_add_rule,rs,LANDLOCK_RULE_PATH_BENEATH,&pb,0); close(fd);}
      syscall(SYS_landlock_restrict_self,rs,0); close(rs);
      double t2=now();
      struct sock_filter f[112]; for(int i=0;i<111;i++){f[i]=(struct sock_filter)BPF_JUMP(BPF_JMP|BPF_JEQ|BPF_K,1000+i,110-i,0);} f[111]=(struct sock_filter)BPF_STMT(BPF_RET|BPF_K,SECCOMP_RET_ALLOW);
      struct sock_fprog pr={atoi(argv[2]),f+112-atoi(argv[2])}; syscall(SYS_seccomp,SECCOMP_SET_MODE_FILTER,atoi(argv[1]),&pr);
      double t3=now();
      double v[3]={t1-t0,t2-t1,t3-t2}; write(p[1],v,sizeof v); _exit(0);
    }
    close(p[1]); double v[3]; read(p[0],v,sizeof v); close(p[0]); waitpid(c,0,0);
    caps[r]=v[0]; ll[r]=v[1]; sc[r]=v[2]; tot[r]=v[0]+v[1]+v[2];
  }
  qsort(caps,n,8,cmp);qsort(ll,n,8,cmp);qsort(sc,n,8,cmp);qsort(tot,n,8,cmp);
  printf("p50 us: 41x capbset_drop %.1f, landlock 16 paths %.1f, seccomp %s-insn filter %.1f, total %.1f (p90 total %.1f)\n",caps[n/2],ll[n/2],argv[2],sc[n/2],tot[n/2],tot[n*9/10]);
}
