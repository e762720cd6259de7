// Transparent-egress client for benches/proxy_transparent.sh, run inside a
// `--egress-mode transparent` sandbox (and, for dnsmasq, on the host).
//   transparent_bench setup connect|transparent HOST PORT N
//       N sequential connections to HOST:PORT, each until the upstream's
//       one-byte greeting arrives (so both paths include the upstream
//       connect): through the CONNECT door (127.0.0.1:3128), or by name
//       (getaddrinfo, which asks the resolver every time, + connect). After
//       50 warm-up rounds; prints the mean in us.
//   transparent_bench dns SERVER_IP PORT NAME N
//       N sequential A queries for NAME over UDP; prints the mean in us.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec/1e9;}
static int open_one(int via_connect, const char*host, const char*port){
  int s;
  if(via_connect){
    struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(3128)}; a.sin_addr.s_addr=htonl(0x7f000001);
    s=socket(AF_INET,SOCK_STREAM,0);
    if(connect(s,(void*)&a,sizeof a)){perror("connect 3128");exit(1);}
    char req[300]; int rl=snprintf(req,sizeof req,"CONNECT %s:%s HTTP/1.1\r\n\r\n",host,port);
    if(write(s,req,rl)!=rl){perror("write");exit(1);}
    char buf[1024]; int got=0;
    while(got<4||memcmp(buf+got-4,"\r\n\r\n",4)){int r=read(s,buf+got,1); if(r<=0){fprintf(stderr,"closed\n");exit(1);} got+=r;}
    if(memcmp(buf+9,"200",3)){fprintf(stderr,"refused: %.*s\n",got,buf);exit(1);}
  } else {
    struct addrinfo h={.ai_family=AF_INET,.ai_socktype=SOCK_STREAM},*ai;
    int e=getaddrinfo(host,port,&h,&ai); if(e){fprintf(stderr,"getaddrinfo: %s\n",gai_strerror(e));exit(1);}
    s=socket(AF_INET,SOCK_STREAM,0);
    if(connect(s,ai->ai_addr,ai->ai_addrlen)){perror("connect");exit(1);}
    freeaddrinfo(ai);
  }
  char g; if(read(s,&g,1)!=1){fprintf(stderr,"no greeting\n");exit(1);}
  return s;
}
static int dns_query(unsigned char*q,const char*name,unsigned short id){
  int n=0; q[n++]=id>>8; q[n++]=id; q[n++]=1; q[n++]=0; q[n++]=0; q[n++]=1; memset(q+n,0,6); n+=6;
  const char*p=name; while(*p){const char*d=strchr(p,'.'); int l=d?d-p:(int)strlen(p); q[n++]=l; memcpy(q+n,p,l); n+=l; p+=l; if(*p)p++;}
  q[n++]=0; q[n++]=0; q[n++]=1; q[n++]=0; q[n++]=1; return n;
}
int main(int argc,char**argv){
  if(argc>=6&&!strcmp(argv[1],"setup")){
    int via=!strcmp(argv[2],"connect"); int n=atoi(argv[5]); double t0=0;
    for(int i=0;i<n+50;i++){ if(i==50)t0=now(); close(open_one(via,argv[3],argv[4])); }
    printf("%.1f\n",(now()-t0)/n*1e6); return 0;
  }
  if(argc>=6&&!strcmp(argv[1],"dns")){
    struct sockaddr_in a={.sin_family=AF_INET,.sin_port=htons(atoi(argv[3]))}; inet_pton(AF_INET,argv[2],&a.sin_addr);
    int s=socket(AF_INET,SOCK_DGRAM,0); if(connect(s,(void*)&a,sizeof a)){perror("connect");return 1;}
    int n=atoi(argv[5]); unsigned char q[300],r[1500]; double t0=0;
    for(int i=0;i<n+50;i++){
      if(i==50)t0=now();
      int ql=dns_query(q,argv[4],(unsigned short)i);
      if(send(s,q,ql,0)!=ql){perror("send");return 1;}
      int got=recv(s,r,sizeof r,0);
      if(got<12||r[0]!=q[0]||r[1]!=q[1]||(r[3]&15)||r[7]!=1){fprintf(stderr,"bad answer (%d bytes, rcode %d)\n",got,got>3?r[3]&15:-1);return 1;}
    }
    printf("%.1f\n",(now()-t0)/n*1e6); return 0;
  }
  fprintf(stderr,"usage: see the comment at the top\n"); return 2;
}
