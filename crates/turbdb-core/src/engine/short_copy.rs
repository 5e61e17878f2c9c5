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
    // SAFETY: `n` values are `4 n` bytes (the caller's promise).
    unsafe { copy_bytes_exact(src.cast::<u8>(), dst.cast::<u8>(), 4 * n) }
}

/// Copies exactly `n` bytes (a multiple of 4) with fixed-size moves that may overlap, at
/// any alignment: a row of stored little-endian values, read in place from a mapped file.
///
/// # Safety
/// `src` and `dst` must be valid for `n` bytes and not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_bytes_exact(src: *const u8, dst: *mut u8, n: usize) {
    use std::ptr::copy_nonoverlapping as copy;
    debug_assert_eq!(n % 4, 0);
    // SAFETY: every move lies in the first `n` bytes of `src` and `dst` (the caller's
    // promise); byte pointers need no alignment.
    unsafe {
        if n >= 32 {
            let mut i = 0;
            while i + 32 < n {
                copy(src.add(i), dst.add(i), 32);
                i += 32;
            }
            copy(src.add(n - 32), dst.add(n - 32), 32);
        } else if n >= 16 {
            copy(src, dst, 16);
            copy(src.add(n - 16), dst.add(n - 16), 16);
        } else if n >= 8 {
            copy(src, dst, 8);
            copy(src.add(n - 8), dst.add(n - 8), 8);
        } else if n >= 4 {
            copy(src, dst, 4);
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

    #[test]
    fn every_length_of_bytes_is_copied_exactly_at_any_alignment() {
        let s: Vec<u8> = (0..200).map(|i| i as u8).collect();
        for offset in 0..4 {
            for n in (0..=160).step_by(4) {
                let mut d = vec![0xffu8; n + 40];
                // SAFETY: both hold at least `n` bytes past the offsets.
                unsafe { copy_bytes_exact(s.as_ptr().add(offset), d.as_mut_ptr().add(1), n) };
                assert_eq!(&d[1..1 + n], &s[offset..offset + n], "n = {n}");
                assert!(d[0] == 0xff && d[1 + n..].iter().all(|&v| v == 0xff));
            }
        }
    }
}
