//! AVX-512F: eight float64 lanes in a 512-bit register.

use std::arch::x86_64::*;

use super::{Avx2, Simd, SimdTask};

/// Proof that the CPU has AVX-512F.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512(());

impl Avx512 {
    /// The token, if the CPU has the instructions.
    pub(crate) fn new() -> Option<Self> {
        is_x86_feature_detected!("avx512f").then_some(Self(()))
    }
}

/// Runs `task` compiled for AVX-512F.
///
/// # Safety
/// None beyond holding the token, which proves the CPU has the instructions.
// Never inlined: a task entered from code of the same path ([`Simd::enter`]) must stay
// a function of its own.
#[inline(never)]
#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn run<T: SimdTask>(task: T, simd: Avx512) -> T::Output {
    task.run(simd)
}

// SAFETY (every intrinsic below): an `Avx512` exists only where the CPU has AVX-512F (which
// implies AVX2 and FMA).
impl Simd for Avx512 {
    type V = __m512d;
    const LANES: usize = 8;
    #[inline(always)]
    fn enter<T: SimdTask>(self, task: T) -> T::Output {
        // SAFETY: the token proves the CPU has AVX-512F.
        unsafe { run(task, self) }
    }

    #[inline(always)]
    fn splat(self, v: f64) -> __m512d {
        unsafe { _mm512_set1_pd(v) }
    }

    #[inline(always)]
    unsafe fn load(self, src: *const f64) -> __m512d {
        // SAFETY: the caller guarantees eight readable values; unaligned load.
        unsafe { _mm512_loadu_pd(src) }
    }

    #[inline(always)]
    unsafe fn load_f32(self, src: *const f32) -> __m512d {
        // SAFETY: the caller guarantees eight readable values; unaligned load.
        unsafe { _mm512_cvtps_pd(_mm256_loadu_ps(src)) }
    }

    #[inline(always)]
    fn mul_add(self, a: __m512d, b: __m512d, c: __m512d) -> __m512d {
        unsafe { _mm512_fmadd_pd(a, b, c) }
    }

    #[inline(always)]
    fn store(self, v: __m512d, out: &mut [f64]) {
        assert!(out.len() >= 8);
        // SAFETY: eight values fit (checked above); unaligned store.
        unsafe { _mm512_storeu_pd(out.as_mut_ptr(), v) }
    }

    type N = __m512;

    #[inline(always)]
    fn splat_narrow(self, v: f32) -> __m512 {
        unsafe { _mm512_set1_ps(v) }
    }

    #[inline(always)]
    unsafe fn load_narrow(self, src: *const f32) -> __m512 {
        // SAFETY: the caller guarantees sixteen readable values; unaligned load.
        unsafe { _mm512_loadu_ps(src) }
    }

    #[inline(always)]
    unsafe fn load_narrow_split(self, left: *const f32, right: *const f32, d: usize) -> __m512 {
        debug_assert!(d < 16);
        // SAFETY: the caller's promise: sixteen values of `left` and those of `right` the
        // mask takes are readable (a masked load touches only the lanes it takes).
        unsafe {
            let take: __mmask16 = (0xffff_u32 << d) as u16;
            _mm512_mask_loadu_ps(_mm512_loadu_ps(left), take, right.wrapping_sub(d))
        }
    }

    #[inline(always)]
    fn mul_add_narrow(self, a: __m512, b: __m512, c: __m512) -> __m512 {
        unsafe { _mm512_fmadd_ps(a, b, c) }
    }

    #[inline(always)]
    fn widen(self, v: __m512) -> [__m512d; 2] {
        // The upper half moved as four float64 lanes: AVX-512F has no float32 extract.
        unsafe {
            let high = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v));
            [
                _mm512_cvtps_pd(_mm512_castps512_ps256(v)),
                _mm512_cvtps_pd(_mm256_castpd_ps(high)),
            ]
        }
    }

    // Four lanes are a 256-bit register: the AVX2 path's.
    type Q = __m256d;

    #[inline(always)]
    fn quad(self, v: [f64; 4]) -> __m256d {
        Avx2::from(self).quad(v)
    }

    #[inline(always)]
    fn quad_add(self, a: __m256d, b: __m256d) -> __m256d {
        Avx2::from(self).quad_add(a, b)
    }

    #[inline(always)]
    fn quad_sub(self, a: __m256d, b: __m256d) -> __m256d {
        Avx2::from(self).quad_sub(a, b)
    }

    #[inline(always)]
    fn quad_mul(self, a: __m256d, b: __m256d) -> __m256d {
        Avx2::from(self).quad_mul(a, b)
    }

    #[inline(always)]
    fn store_transposed(self, rows: [__m256d; 4], out: [&mut [f64; 4]; 3]) {
        Avx2::from(self).store_transposed(rows, out)
    }
}
