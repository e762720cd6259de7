// CONNECT setup latency for benches/proxy.sh: N sequential (connect, CONNECT,
// read the answer head, close) after 50 warm-up rounds; prints mean us.
// usage: connect_latency PROXY_PORT|0 TARGET_PORT N [TARGET_HOST]  (0 = direct)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
int main(int argc,char**argv){
  int pp=atoi(argv[1]), up=atoi(argv[2]), n=atoi(argv[3]); int direct = pp==0;
  struct sockaddr_in a={.sin_family=AF_INET}; a.sin_addr.s_addr=htonl(0x7f000001);
  char req[128]; const char*host=argc>4?argv[4]:"127.0.0.1"; int rl=snprintf(req,sizeof req,"CONNECT %s:%d HTTP/1.1\r\n\r\n",host,up);
  double t0=0;
  for(int i=0;i<n+50;i++){
    if(i==50) t0=now();
    int s=socket(AF_INET,SOCK_STREAM,0); int one=1; setsockopt(s,IPPROTO_TCP,TCP_NODELAY,&one,4);
    a.sin_port=htons(direct?up:pp);
    if(connect(s,(void*)&a,sizeof a)){perror("connect");return 1;}
    if(!direct){
      if(write(s,req,rl)!=rl){perror("write");return 1;}
      char buf[1024]; int got=0;
      while(got<4||memcmp(buf+got-4,"\r\n\r\n",4)){int r=read(s,buf+got,sizeof buf-got); if(r<=0){fprintf(stderr,"closed\n");return 1;} got+=r;}
      if(memcmp(buf+9,"200",3)){fprintf(stderr,"refused: %.*s\n",got,buf);return 1;}
    }
    close(s);
  }
  printf("%.1f\n",(now()-t0)/n*1e6);
  return 0;
}
