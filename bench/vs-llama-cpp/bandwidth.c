#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <immintrin.h>
#include <pthread.h>
#define N (512UL<<20)
static char *buf;
static int nthreads;
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
typedef struct {size_t a,b; long long s;} arg_t;
static void* rd(void*p){arg_t*a=p;__m256i acc=_mm256_setzero_si256();for(size_t i=a->a;i<a->b;i+=128){acc=_mm256_add_epi64(acc,_mm256_load_si256((void*)(buf+i)));acc=_mm256_add_epi64(acc,_mm256_load_si256((void*)(buf+i+32)));acc=_mm256_add_epi64(acc,_mm256_load_si256((void*)(buf+i+64)));acc=_mm256_add_epi64(acc,_mm256_load_si256((void*)(buf+i+96)));}
 long long o[4];_mm256_storeu_si256((void*)o,acc);a->s=o[0]+o[1]+o[2]+o[3];return 0;}
int main(int c,char**v){nthreads=c>1?atoi(v[1]):1;buf=aligned_alloc(64,N);memset(buf,1,N);
 for(int rep=0;rep<5;rep++){pthread_t t[8];arg_t a[8];double t0=now();
 for(int i=0;i<nthreads;i++){a[i].a=N/nthreads*i;a[i].b=N/nthreads*(i+1);pthread_create(&t[i],0,rd,&a[i]);}
 for(int i=0;i<nthreads;i++)pthread_join(t[i],0);double dt=now()-t0;printf("%d threads: %.1f GB/s\n",nthreads,N/dt/1e9);}
}
