//! Eight float64 lanes: one AVX-512 register where the CPU has it (the build targets the
//! machine it runs on), two four-lane vectors of `wide` elsewhere. The row sums of every
//! stencil are fused multiply-adds of these.

#[cfg(all(target_arch = "x86_64", target_feature = "avx512f"))]
mod imp {
    use std::arch::x86_64::*;

    /// Eight float64 lanes.
    #[derive(Clone, Copy)]
    pub struct F64x8(__m512d);

    impl F64x8 {
        /// All lanes zero.
        #[inline(always)]
        pub fn zero() -> Self {
            // SAFETY: avx512f is enabled at compile time (cfg above).
            Self(unsafe { _mm512_setzero_pd() })
        }

        /// All lanes `v`.
        #[inline(always)]
        pub fn splat(v: f64) -> Self {
            // SAFETY: as above.
            Self(unsafe { _mm512_set1_pd(v) })
        }

        /// The first eight values of `src`.
        #[inline(always)]
        pub fn from_f64(src: &[f64]) -> Self {
            assert!(src.len() >= 8);
            // SAFETY: eight values are in bounds (checked above); unaligned load.
            Self(unsafe { _mm512_loadu_pd(src.as_ptr()) })
        }

        /// The first eight values of `src`, widened.
        #[inline(always)]
        pub fn from_f32(src: &[f32]) -> Self {
            assert!(src.len() >= 8);
            // SAFETY: eight values are in bounds (checked above); unaligned load.
            Self(unsafe { _mm512_cvtps_pd(_mm256_loadu_ps(src.as_ptr())) })
        }

        /// `self * a + b`, fused.
        #[inline(always)]
        pub fn mul_add(self, a: Self, b: Self) -> Self {
            // SAFETY: as above.
            Self(unsafe { _mm512_fmadd_pd(self.0, a.0, b.0) })
        }

        /// The lanes.
        #[inline(always)]
        pub fn to_array(self) -> [f64; 8] {
            let mut out = [0.0; 8];
            // SAFETY: `out` holds eight values; unaligned store.
            unsafe { _mm512_storeu_pd(out.as_mut_ptr(), self.0) };
            out
        }
    }
}

#[cfg(not(all(target_arch = "x86_64", target_feature = "avx512f")))]
mod imp {
    use wide::f64x4;

    /// Eight float64 lanes.
    #[derive(Clone, Copy)]
    pub struct F64x8([f64x4; 2]);

    impl F64x8 {
        /// All lanes zero.
        #[inline(always)]
        pub fn zero() -> Self {
            Self([f64x4::ZERO; 2])
        }

        /// All lanes `v`.
        #[inline(always)]
        pub fn splat(v: f64) -> Self {
            Self([f64x4::splat(v); 2])
        }

        /// The first eight values of `src`.
        #[inline(always)]
        pub fn from_f64(src: &[f64]) -> Self {
            let s = &src[..8];
            Self([
                f64x4::new([s[0], s[1], s[2], s[3]]),
                f64x4::new([s[4], s[5], s[6], s[7]]),
            ])
        }

        /// The first eight values of `src`, widened.
        #[inline(always)]
        pub fn from_f32(src: &[f32]) -> Self {
            let s = &src[..8];
            let w = |i: usize| f64::from(s[i]);
            Self([
                f64x4::new([w(0), w(1), w(2), w(3)]),
                f64x4::new([w(4), w(5), w(6), w(7)]),
            ])
        }

        /// `self * a + b`, fused.
        #[inline(always)]
        pub fn mul_add(self, a: Self, b: Self) -> Self {
            Self([
                self.0[0].mul_add(a.0[0], b.0[0]),
                self.0[1].mul_add(a.0[1], b.0[1]),
            ])
        }

        /// The lanes.
        #[inline(always)]
        pub fn to_array(self) -> [f64; 8] {
            let (a, b) = (self.0[0].to_array(), self.0[1].to_array());
            [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]]
        }
    }
}

pub use imp::F64x8;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_load_widen_and_fuse() {
        let a: Vec<f64> = (0..9).map(|i| i as f64).collect();
        let b: Vec<f32> = (0..9).map(|i| i as f32 * 0.5).collect();
        let r = F64x8::from_f64(&a).mul_add(F64x8::splat(2.0), F64x8::from_f32(&b[1..]));
        let expected: Vec<f64> = (0..8)
            .map(|i| 2.0 * i as f64 + (i + 1) as f64 * 0.5)
            .collect();
        assert_eq!(r.to_array().to_vec(), expected);
        assert_eq!(F64x8::zero().to_array(), [0.0; 8]);
    }
}
