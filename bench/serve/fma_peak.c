/* The host's peak f32 multiply-add rate: T threads each running 16 independent chains of 512-bit
 * FMAs (AVX-512) or 12 of 256-bit ones (AVX2, `-DWIDTH=256`), no memory traffic. The ceiling the
 * batched host step's products are measured against in bench/serve/README.md. Not part of CI.
 *
 *   gcc -O3 -funroll-all-loops -mavx512f -mfma bench/serve/fma_peak.c -o /tmp/fma_peak -lpthread
 *   /tmp/fma_peak 1 && /tmp/fma_peak 2
 */
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ITERS 200000000L
#ifndef WIDTH
#define WIDTH 512
#endif
#if WIDTH == 512
#define CHAINS 16
#define LANES 16
typedef __m512 vec;
#define SET1 _mm512_set1_ps
#define FMA _mm512_fmadd_ps
#define SUM(v) _mm512_reduce_add_ps(v)
#else
#define CHAINS 12
#define LANES 8
typedef __m256 vec;
#define SET1 _mm256_set1_ps
#define FMA _mm256_fmadd_ps
static float SUM(__m256 v) { float b[8]; _mm256_storeu_ps(b, v); return b[0] + b[7]; }
#endif

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void *run(void *out) {
    vec acc[CHAINS];
    for (int i = 0; i < CHAINS; i++) acc[i] = SET1((float)i);
    vec x = SET1(1.0000001f), y = SET1(0.9999999f);
    for (long it = 0; it < ITERS; it++)
        for (int i = 0; i < CHAINS; i++) acc[i] = FMA(acc[i], x, y);
    float s = 0;
    for (int i = 0; i < CHAINS; i++) s += SUM(acc[i]);
    *(float *)out = s; /* kept, so the chains are not optimised away */
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1;
    if (n < 1 || n > 64) { fprintf(stderr, "threads: 1 to 64\n"); return 2; }
    pthread_t t[64];
    float r[64];
    double t0 = now();
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, run, &r[i]);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    double dt = now() - t0, fmas = (double)n * CHAINS * ITERS;
    printf("%d thread(s), %d-bit: %.2f G FMA instructions/s, %.1f G f32 multiply-adds/s (check %g)\n", n, WIDTH,
           fmas / dt / 1e9, fmas * LANES / dt / 1e9, (double)r[0]);
    return 0;
}
