//! Copies of a few dozen values (an atom's row, a stencil's row), done with fixed-size
//! moves inline: `copy_from_slice` calls `memmove` for a length known only at run time,
//! a library call per row of 96 bytes (`perf`: it showed in both the streaming executor's
//! block fill and the stencil gather).

/// Copies `s` into `d` (of the same length).
#[inline(always)]
pub(crate) fn copy_row(d: &mut [f32], s: &[f32]) {
    assert_eq!(d.len(), s.len(), "a row is copied into a row of its length");
    // SAFETY: both slices hold `s.len()` values, and a `&mut` never overlaps a `&`.
    unsafe { copy_exact(s.as_ptr(), d.as_mut_ptr(), s.len()) }
}

/// Copies exactly `n` values with fixed-size moves that may overlap (as `memcpy` does for
/// short copies), without a call.
///
/// # Safety
/// `src` and `dst` must be valid for `n` values and not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_exact(src: *const f32, dst: *mut f32, n: usize) {
    use std::ptr::copy_nonoverlapping as copy;
    // SAFETY: every move lies in the first `n` values of `src` and `dst` (the caller's
    // promise).
    unsafe {
        if n >= 8 {
            let mut i = 0;
            while i + 8 < n {
                copy(src.add(i), dst.add(i), 8);
                i += 8;
            }
            copy(src.add(n - 8), dst.add(n - 8), 8);
        } else if n >= 4 {
            copy(src, dst, 4);
            copy(src.add(n - 4), dst.add(n - 4), 4);
        } else if n >= 2 {
            copy(src, dst, 2);
            copy(src.add(n - 2), dst.add(n - 2), 2);
        } else if n == 1 {
            *dst = *src;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_is_copied_exactly_and_nothing_past_it() {
        for n in 0..=40 {
            let s: Vec<f32> = (0..n).map(|i| i as f32 + 0.5).collect();
            let mut d = vec![-1.0f32; n + 8];
            copy_row(&mut d[..n], &s);
            assert_eq!(&d[..n], &s[..], "n = {n}");
            assert!(
                d[n..].iter().all(|&v| v == -1.0),
                "n = {n}: wrote past the row"
            );
        }
    }
}
