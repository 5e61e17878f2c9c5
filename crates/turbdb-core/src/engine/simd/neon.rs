//! NEON on aarch64: float64 lanes in pairs of 128-bit registers (four lanes a vector, as
//! AVX2, so the kernel's row length classes are the same).

use std::arch::aarch64::*;

use super::{Simd, SimdTask};

/// NEON, which every aarch64 CPU has.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Neon;

/// Runs `task` with NEON (enabled for the whole aarch64 target; no extra features).
#[inline]
pub(super) fn run<T: SimdTask>(task: T, simd: Neon) -> T::Output {
    task.run(simd)
}

// SAFETY (every intrinsic below): NEON is part of the aarch64 baseline.
impl Simd for Neon {
    type V = [float64x2_t; 2];
    const LANES: usize = 4;
    #[inline(always)]
    fn enter<T: SimdTask>(self, task: T) -> T::Output {
        run(task, self)
    }

    #[inline(always)]
    fn splat(self, v: f64) -> Self::V {
        unsafe { [vdupq_n_f64(v); 2] }
    }

    #[inline(always)]
    unsafe fn load(self, src: *const f64) -> Self::V {
        // SAFETY: the caller guarantees four readable values.
        unsafe { [vld1q_f64(src), vld1q_f64(src.add(2))] }
    }

    #[inline(always)]
    unsafe fn load_f32(self, src: *const f32) -> Self::V {
        // SAFETY: the caller guarantees four readable values.
        unsafe {
            let v = vld1q_f32(src);
            [vcvt_f64_f32(vget_low_f32(v)), vcvt_high_f64_f32(v)]
        }
    }

    #[inline(always)]
    fn mul_add(self, a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        unsafe { [vfmaq_f64(c[0], a[0], b[0]), vfmaq_f64(c[1], a[1], b[1])] }
    }

    #[inline(always)]
    fn store(self, v: Self::V, out: &mut [f64]) {
        assert!(out.len() >= 4);
        // SAFETY: four values fit (checked above).
        unsafe {
            vst1q_f64(out.as_mut_ptr(), v[0]);
            vst1q_f64(out.as_mut_ptr().add(2), v[1]);
        }
    }

    type N = [float32x4_t; 2];

    #[inline(always)]
    fn splat_narrow(self, v: f32) -> Self::N {
        unsafe { [vdupq_n_f32(v); 2] }
    }

    #[inline(always)]
    unsafe fn load_narrow(self, src: *const f32) -> Self::N {
        // SAFETY: the caller guarantees eight readable values.
        unsafe { [vld1q_f32(src), vld1q_f32(src.add(4))] }
    }

    #[inline(always)]
    fn mul_add_narrow(self, a: Self::N, b: Self::N, c: Self::N) -> Self::N {
        unsafe { [vfmaq_f32(c[0], a[0], b[0]), vfmaq_f32(c[1], a[1], b[1])] }
    }

    #[inline(always)]
    fn widen(self, v: Self::N) -> [Self::V; 2] {
        unsafe { v.map(|half| [vcvt_f64_f32(vget_low_f32(half)), vcvt_high_f64_f32(half)]) }
    }

    /// `[x, y]` and `[z, spare]`.
    type Q = [float64x2_t; 2];

    #[inline(always)]
    fn quad(self, v: [f64; 4]) -> Self::Q {
        // SAFETY: four values are read from the array.
        unsafe { [vld1q_f64(v.as_ptr()), vld1q_f64(v.as_ptr().add(2))] }
    }

    #[inline(always)]
    fn quad_add(self, a: Self::Q, b: Self::Q) -> Self::Q {
        unsafe { [vaddq_f64(a[0], b[0]), vaddq_f64(a[1], b[1])] }
    }

    #[inline(always)]
    fn quad_sub(self, a: Self::Q, b: Self::Q) -> Self::Q {
        unsafe { [vsubq_f64(a[0], b[0]), vsubq_f64(a[1], b[1])] }
    }

    #[inline(always)]
    fn quad_mul(self, a: Self::Q, b: Self::Q) -> Self::Q {
        unsafe { [vmulq_f64(a[0], b[0]), vmulq_f64(a[1], b[1])] }
    }

    #[inline(always)]
    fn store_transposed(self, rows: [Self::Q; 4], out: [&mut [f64; 4]; 3]) {
        let [x, y, z] = out;
        // SAFETY: each output holds four values.
        unsafe {
            let [r0, r1, r2, r3] = rows;
            vst1q_f64(x.as_mut_ptr(), vzip1q_f64(r0[0], r1[0]));
            vst1q_f64(x.as_mut_ptr().add(2), vzip1q_f64(r2[0], r3[0]));
            vst1q_f64(y.as_mut_ptr(), vzip2q_f64(r0[0], r1[0]));
            vst1q_f64(y.as_mut_ptr().add(2), vzip2q_f64(r2[0], r3[0]));
            vst1q_f64(z.as_mut_ptr(), vzip1q_f64(r0[1], r1[1]));
            vst1q_f64(z.as_mut_ptr().add(2), vzip1q_f64(r2[1], r3[1]));
        }
    }
}
