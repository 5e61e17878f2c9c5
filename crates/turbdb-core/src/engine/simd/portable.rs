//! Plain Rust, four float64 lanes as an array: runs on any CPU with the baseline target's
//! instructions (SSE2 on x86-64). Multiply and add are separate, since a fused multiply-add
//! without hardware support is a slow library call.

use super::{Simd, SimdTask};

/// The portable path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Portable;

/// Runs `task` with the portable code, in a function of its own as the other paths are.
/// Inlined into [`KernelPath::run`](super::KernelPath::run), an unoptimised build put its
/// stack frame (about a megabyte: the kernel is inlined whole) under every other path's,
/// and the two overflowed a rayon worker's 2 MiB stack.
#[inline(never)]
pub(super) fn run<T: SimdTask>(task: T) -> T::Output {
    task.run(Portable)
}

impl Simd for Portable {
    type V = [f64; 4];
    const LANES: usize = 4;
    #[inline(always)]
    fn enter<T: SimdTask>(self, task: T) -> T::Output {
        run(task)
    }
    // The general kernel only: the reference the fast paths are tested against.
    const FAST_PATHS: bool = false;

    #[inline(always)]
    fn splat(self, v: f64) -> [f64; 4] {
        [v; 4]
    }

    #[inline(always)]
    unsafe fn load(self, src: *const f64) -> [f64; 4] {
        // SAFETY: the caller guarantees four readable values.
        unsafe { src.cast::<[f64; 4]>().read_unaligned() }
    }

    #[inline(always)]
    unsafe fn load_f32(self, src: *const f32) -> [f64; 4] {
        // SAFETY: the caller guarantees four readable values.
        unsafe { src.cast::<[f32; 4]>().read_unaligned() }.map(f64::from)
    }

    #[inline(always)]
    fn mul_add(self, a: [f64; 4], b: [f64; 4], c: [f64; 4]) -> [f64; 4] {
        std::array::from_fn(|i| a[i] * b[i] + c[i])
    }

    #[inline(always)]
    fn store(self, v: [f64; 4], out: &mut [f64]) {
        out[..4].copy_from_slice(&v);
    }

    type N = [f32; 8];

    #[inline(always)]
    fn splat_narrow(self, v: f32) -> [f32; 8] {
        [v; 8]
    }

    #[inline(always)]
    unsafe fn load_narrow(self, src: *const f32) -> [f32; 8] {
        // SAFETY: the caller guarantees eight readable values.
        unsafe { src.cast::<[f32; 8]>().read_unaligned() }
    }

    #[inline(always)]
    fn mul_add_narrow(self, a: [f32; 8], b: [f32; 8], c: [f32; 8]) -> [f32; 8] {
        std::array::from_fn(|i| a[i] * b[i] + c[i])
    }

    #[inline(always)]
    fn widen(self, v: [f32; 8]) -> [[f64; 4]; 2] {
        [0, 4].map(|h| std::array::from_fn(|i| f64::from(v[h + i])))
    }

    type Q = [f64; 4];

    #[inline(always)]
    fn quad(self, v: [f64; 4]) -> [f64; 4] {
        v
    }

    #[inline(always)]
    fn quad_add(self, a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
        std::array::from_fn(|i| a[i] + b[i])
    }

    #[inline(always)]
    fn quad_sub(self, a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
        std::array::from_fn(|i| a[i] - b[i])
    }

    #[inline(always)]
    fn quad_mul(self, a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
        std::array::from_fn(|i| a[i] * b[i])
    }

    #[inline(always)]
    fn store_transposed(self, rows: [[f64; 4]; 4], out: [&mut [f64; 4]; 3]) {
        for (axis, out) in out.into_iter().enumerate() {
            *out = rows.map(|row| row[axis]);
        }
    }
}
