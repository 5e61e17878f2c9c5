/* What widening float32 to float64 costs the kernel's inner loop, on rows held in L1.
 *
 * One lag8 point of a 3-component field is 64 rows of 24 values, each row multiplied by
 * its (y, z) weight and added into per-x sums (docs/queries.md, "The kernel"). This runs
 * that loop with 12 independent sums on float32 rows widened per multiply-add (what the
 * kernel does) and on float64 rows (no widening), and prints ns per point and the ratio:
 *
 *     gcc -O3 -funroll-loops -mavx2 -mfma bench/widening.c -o /tmp/widening && /tmp/widening
 *     gcc -O3 -funroll-loops -mavx512f -DWIDTH512 bench/widening.c -o /tmp/widening512 && /tmp/widening512
 *
 * It bounds the arithmetic only: the real kernel's rows come from L2 (kernel_profile).
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define ROWS 64
#define ROW 24
#define REPS 2000000L

static float f32[ROWS * ROW + 32];
static double f64[ROWS * ROW + 32];
static double weights[ROWS];

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

#ifdef WIDTH512
typedef __m512d vec;
#define LANES 8
#define ZERO() _mm512_setzero_pd()
#define SPLAT(p) _mm512_set1_pd(*(p))
#define FMA(a, b, c) _mm512_fmadd_pd(a, b, c)
#define LOAD32(p) _mm512_cvtps_pd(_mm256_loadu_ps(p))
#define LOAD64(p) _mm512_loadu_pd(p)
#else
typedef __m256d vec;
#define LANES 4
#define ZERO() _mm256_setzero_pd()
#define SPLAT(p) _mm256_broadcast_sd(p)
#define FMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#define LOAD32(p) _mm256_cvtps_pd(_mm_loadu_ps(p))
#define LOAD64(p) _mm256_loadu_pd(p)
#endif

#define PER_ROW (ROW / LANES)
/* Rows summed into independent sets of sums, so the loop is not bound by FMA latency. */
#define SETS (12 / PER_ROW)

#define POINT(LOAD, data)                                                         \
    for (int k = 0; k < 12; k++) acc[k] = ZERO();                                 \
    for (long it = 0; it < REPS; it++) {                                          \
        for (int row = 0; row < ROWS; row += SETS)                                \
            for (int s = 0; s < SETS; s++) {                                      \
                vec w = SPLAT(&weights[row + s]);                                 \
                for (int k = 0; k < PER_ROW; k++)                                 \
                    acc[s * PER_ROW + k] =                                        \
                        FMA(LOAD(data + (row + s) * ROW + LANES * k), w,          \
                            acc[s * PER_ROW + k]);                                \
            }                                                                     \
        for (int k = 0; k < 12; k++) __asm__ volatile("" ::"v"(acc[k]));          \
    }

int main(void) {
    for (int i = 0; i < ROWS * ROW + 32; i++) {
        f32[i] = i * 0.001f;
        f64[i] = i * 0.001;
    }
    for (int i = 0; i < ROWS; i++) weights[i] = 1.0 / (i + 1);
    vec acc[12];
    double widened = 1e9, plain = 1e9;
    for (int round = 0; round < 5; round++) {
        double t0 = now();
        POINT(LOAD32, f32);
        double t = (now() - t0) / REPS;
        if (t < widened) widened = t;
        t0 = now();
        POINT(LOAD64, f64);
        t = (now() - t0) / REPS;
        if (t < plain) plain = t;
    }
    double load[1];
    getloadavg(load, 1);
    printf("%d-bit, 1 thread, load %.2f: per lag8 point (1 536 multiply-adds, rows in L1) "
           "float32 widened %.1f ns, float64 %.1f ns: widening costs %.2fx\n",
           LANES * 64, load[0], widened * 1e9, plain * 1e9, widened / plain);
    return 0;
}
