//! The profiling examples' points: a fixed-seed generator of uniform numbers in [0, 1)
//! (no dependency for it), the same points run after run so timings compare.

/// Uniform numbers in [0, 1), the same sequence every run.
pub fn uniform() -> impl FnMut() -> f64 {
    let mut state = 12345u64;
    move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 11) as f64 / (1u64 << 53) as f64
    }
}
