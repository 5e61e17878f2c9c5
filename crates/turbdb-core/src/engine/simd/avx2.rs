//! AVX2 with FMA: four float64 lanes in a 256-bit register.

use std::arch::x86_64::*;

use super::{Simd, SimdTask};

/// Proof that the CPU has AVX2 and FMA.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2(());

impl Avx2 {
    /// The token, if the CPU has the instructions.
    pub(crate) fn new() -> Option<Self> {
        (is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")).then_some(Self(()))
    }
}

impl From<super::Avx512> for Avx2 {
    /// Every CPU with AVX-512F has AVX2 and FMA (the AVX-512 path is compiled with them).
    fn from(_: super::Avx512) -> Self {
        Self(())
    }
}

/// Runs `task` compiled for AVX2 and FMA.
///
/// # Safety
/// None beyond holding the token, which proves the CPU has the instructions.
// Never inlined: a task entered from code of the same path ([`Simd::enter`]) must stay
// a function of its own.
#[inline(never)]
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn run<T: SimdTask>(task: T, simd: Avx2) -> T::Output {
    task.run(simd)
}

// SAFETY (every intrinsic below): an `Avx2` exists only where the CPU has AVX2 and FMA.
impl Simd for Avx2 {
    type V = __m256d;
    const LANES: usize = 4;
    #[inline(always)]
    fn enter<T: SimdTask>(self, task: T) -> T::Output {
        // SAFETY: the token proves the CPU has AVX2 and FMA.
        unsafe { run(task, self) }
    }

    #[inline(always)]
    fn splat(self, v: f64) -> __m256d {
        unsafe { _mm256_set1_pd(v) }
    }

    #[inline(always)]
    unsafe fn load(self, src: *const f64) -> __m256d {
        // SAFETY: the caller guarantees four readable values; unaligned load.
        unsafe { _mm256_loadu_pd(src) }
    }

    #[inline(always)]
    unsafe fn load_f32(self, src: *const f32) -> __m256d {
        // SAFETY: the caller guarantees four readable values; unaligned load.
        unsafe { _mm256_cvtps_pd(_mm_loadu_ps(src)) }
    }

    #[inline(always)]
    fn mul_add(self, a: __m256d, b: __m256d, c: __m256d) -> __m256d {
        unsafe { _mm256_fmadd_pd(a, b, c) }
    }

    #[inline(always)]
    fn store(self, v: __m256d, out: &mut [f64]) {
        assert!(out.len() >= 4);
        // SAFETY: four values fit (checked above); unaligned store.
        unsafe { _mm256_storeu_pd(out.as_mut_ptr(), v) }
    }

    type N = __m256;

    #[inline(always)]
    fn splat_narrow(self, v: f32) -> __m256 {
        unsafe { _mm256_set1_ps(v) }
    }

    #[inline(always)]
    unsafe fn load_narrow(self, src: *const f32) -> __m256 {
        // SAFETY: the caller guarantees eight readable values; unaligned load.
        unsafe { _mm256_loadu_ps(src) }
    }

    #[inline(always)]
    unsafe fn load_narrow_split(self, left: *const f32, right: *const f32, d: usize) -> __m256 {
        debug_assert!(d < 8);
        /// Read from `8 − d` on: `d` lanes clear, then the lanes taken from `right`.
        static FROM: [i32; 16] = [0, 0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, -1, -1, -1];
        // SAFETY: the caller's promise: eight values of `left` and those of `right` the
        // mask takes are readable (a masked load touches only the lanes it takes, so the
        // address of the lanes before `right` is never read).
        unsafe {
            let take = _mm256_loadu_si256(FROM.as_ptr().add(8 - d).cast());
            let high = _mm256_maskload_ps(right.wrapping_sub(d), take);
            _mm256_blendv_ps(_mm256_loadu_ps(left), high, _mm256_castsi256_ps(take))
        }
    }

    #[inline(always)]
    fn mul_add_narrow(self, a: __m256, b: __m256, c: __m256) -> __m256 {
        unsafe { _mm256_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    fn widen(self, v: __m256) -> [__m256d; 2] {
        unsafe {
            [
                _mm256_cvtps_pd(_mm256_castps256_ps128(v)),
                _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(v)),
            ]
        }
    }

    type Q = __m256d;

    #[inline(always)]
    fn quad(self, v: [f64; 4]) -> __m256d {
        // SAFETY: four values are read from the array.
        unsafe { _mm256_loadu_pd(v.as_ptr()) }
    }

    #[inline(always)]
    fn quad_add(self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_add_pd(a, b) }
    }

    #[inline(always)]
    fn quad_sub(self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_sub_pd(a, b) }
    }

    #[inline(always)]
    fn quad_mul(self, a: __m256d, b: __m256d) -> __m256d {
        unsafe { _mm256_mul_pd(a, b) }
    }

    #[inline(always)]
    fn store_transposed(self, rows: [__m256d; 4], out: [&mut [f64; 4]; 3]) {
        // SAFETY: each output holds four values; unaligned stores.
        unsafe {
            // [x0 x1 z0 z1], [y0 y1 _ _], [x2 x3 z2 z3], [y2 y3 _ _]
            let xz01 = _mm256_unpacklo_pd(rows[0], rows[1]);
            let y01 = _mm256_unpackhi_pd(rows[0], rows[1]);
            let xz23 = _mm256_unpacklo_pd(rows[2], rows[3]);
            let y23 = _mm256_unpackhi_pd(rows[2], rows[3]);
            let [x, y, z] = out;
            _mm256_storeu_pd(x.as_mut_ptr(), _mm256_permute2f128_pd::<0x20>(xz01, xz23));
            _mm256_storeu_pd(y.as_mut_ptr(), _mm256_permute2f128_pd::<0x20>(y01, y23));
            _mm256_storeu_pd(z.as_mut_ptr(), _mm256_permute2f128_pd::<0x31>(xz01, xz23));
        }
    }
}
