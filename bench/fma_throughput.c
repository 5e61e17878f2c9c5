/* Whether two CPUs of a (virtual) machine share a core: a loop of 16 independent AVX2
 * multiply-add chains, which keeps a core's FMA units busy, run alone and then on two CPUs
 * at once. CPUs that are one core's two hyperthreads (or that a hypervisor runs on one
 * core) each run it markedly slower together; separate cores do not:
 *
 *     gcc -O2 -mavx2 -mfma -static bench/fma_throughput.c -o /tmp/fma
 *     taskset -c 0 /tmp/fma
 *     for k in $(seq 1 15); do (taskset -c 0 /tmp/fma & taskset -c $k /tmp/fma & wait); done
 *
 * docs/queries.md ("On 16 cores") has what it found on a lent 16-vCPU VM.
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAINS 16
#define ROUNDS 200000000L

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    __m256d sums[CHAINS];
    const __m256d x = _mm256_set1_pd(1.0000001), y = _mm256_set1_pd(0.9999999);
    for (int i = 0; i < CHAINS; i++) sums[i] = _mm256_set1_pd(i);
    double start = now();
    for (long k = 0; k < ROUNDS; k++) {
#pragma GCC unroll 16
        for (int i = 0; i < CHAINS; i++) sums[i] = _mm256_fmadd_pd(sums[i], x, y);
    }
    double seconds = now() - start;
    __m256d total = sums[0];
    for (int i = 1; i < CHAINS; i++) total = _mm256_add_pd(total, sums[i]);
    double out[4];
    _mm256_storeu_pd(out, total);
    /* The sum is printed so that the loop is not optimised away. */
    printf("fma: %.3f vector FMAs/ns (%.2f s) %g\n", (double)CHAINS * ROUNDS / seconds / 1e9, seconds, out[0]);
    return 0;
}
