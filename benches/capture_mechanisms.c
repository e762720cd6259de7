// Capture mechanisms for transparent egress, measured side by side in a
// user-owned network namespace (benches/capture_mechanisms.sh): N sequential
// connections to a synthetic address, each until the listener's one-byte
// answer, with (a) a local route + a listener on 0.0.0.0:443 + getsockname()
// or (b) nftables REDIRECT to 127.0.0.1:PORT + SO_ORIGINAL_DST.
// usage: capture_mechanisms LISTEN_PORT ORIGINAL_DST(0|1) N
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <linux/netfilter_ipv4.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static int lfd; static int orig;
static void* acc(void*_){for(;;){struct sockaddr_in o; socklen_t l=sizeof o; int c=accept(lfd,0,0); if(c<0)continue;
  if(orig) getsockopt(c,SOL_IP,SO_ORIGINAL_DST,&o,&l); else getsockname(c,(void*)&o,&l);
  write(c,"!",1); close(c);} return 0;}
int main(int argc,char**argv){
  int lport=atoi(argv[1]); orig=atoi(argv[2]); int n=atoi(argv[3]);
  lfd=socket(AF_INET,SOCK_STREAM,0); int one=1; setsockopt(lfd,SOL_SOCKET,SO_REUSEADDR,&one,4);
  struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(lport)}; a.sin_addr.s_addr=htonl(orig?0x7f000001:0);
  if(bind(lfd,(void*)&a,sizeof a)||listen(lfd,1024)){perror("listen");return 1;}
  pthread_t t; pthread_create(&t,0,acc,0);
  struct sockaddr_in d={.sin_family=AF_INET,.sin_port=htons(443)}; inet_pton(AF_INET,"198.18.0.7",&d.sin_addr);
  double t0=0; for(int i=0;i<n+200;i++){ if(i==200)t0=now(); int s=socket(AF_INET,SOCK_STREAM,0);
    if(connect(s,(void*)&d,sizeof d)){perror("connect");return 1;} char g; if(read(s,&g,1)!=1){fprintf(stderr,"no byte\n");return 1;} close(s);}
  printf("%s %.1f us\n", orig?"nft-redirect":"local-route", (now()-t0)/n*1e6); return 0;}
