//! Large scratch buffers kept from query to query. A million-point query needs about a
//! hundred megabytes of them; memory fresh from the kernel costs a page fault and a cleared
//! page every 4 KiB, which measured about a tenth of such a query. Big new buffers ask
//! for transparent huge pages too, for fewer TLB misses on the scattered accesses. What is
//! kept is bounded: the buffers of one ten-million-point query (about a gigabyte) kept for
//! the life of a process, or a server, held memory no later query used.

use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Buffers smaller than this are left to the allocator.
const LARGE: usize = 1 << 20;

/// Buffers of one type kept for reuse, at most this many.
const KEPT: usize = 4;

/// Bytes kept in all pools together, at most: the buffers of a query of a few million
/// points (about 100 bytes a point). A larger query's buffers go back to the system, and
/// it pays their page faults again next time (about a tenth of its time).
const KEPT_BYTES: usize = 384 << 20;

/// Bytes kept in the pools now.
static KEPT_NOW: AtomicUsize = AtomicUsize::new(0);

/// An element type with a pool of its own.
pub trait Pooled: Copy + Send + 'static {
    /// The buffers kept for reuse.
    fn pool() -> &'static Mutex<Vec<Vec<Self>>>;
}

/// Gives each listed type a pool of its own.
macro_rules! pooled {
    ($($t:ty),*) => {$(
        impl $crate::engine::buffers::Pooled for $t {
            fn pool() -> &'static std::sync::Mutex<Vec<Vec<Self>>> {
                static POOL: std::sync::Mutex<Vec<Vec<$t>>> = std::sync::Mutex::new(Vec::new());
                &POOL
            }
        }
    )*};
}
pub(crate) use pooled;
pooled!(u32, f32, f64, [f64; 3]);

/// A vector that goes back to its pool when dropped.
#[derive(Debug)]
pub struct Buffer<T: Pooled>(Vec<T>);

impl<T: Pooled> Buffer<T> {
    /// `n` copies of `value`, in a kept buffer if there is one.
    pub fn filled(n: usize, value: T) -> Self {
        let mut v = Self::kept(n);
        v.clear();
        v.resize(n, value);
        Self(v)
    }

    /// `n` values for a caller that writes every one of them before reading it: a kept
    /// buffer keeps its stale values (no pass over the memory to clear it, which was a
    /// tenth of the plan), and only what it grows by is set to `fill`.
    pub fn to_overwrite(n: usize, fill: T) -> Self {
        let mut v = Self::kept(n);
        if v.len() >= n {
            v.truncate(n);
        } else {
            v.resize(n, fill);
        }
        Self(v)
    }

    /// An empty vector with room for `n` values: a kept buffer if there is one that fits
    /// (with its old contents), else a new one.
    fn kept(n: usize) -> Vec<T> {
        let bytes = n * std::mem::size_of::<T>();
        let mut v = if bytes >= LARGE {
            let v = take_fitting(&mut T::pool().lock().expect("buffer pool"), n);
            KEPT_NOW.fetch_sub(v.capacity() * std::mem::size_of::<T>(), Ordering::Relaxed);
            v
        } else {
            Vec::new()
        };
        if v.capacity() < n {
            v = Vec::with_capacity(n);
            advise_huge_pages(&mut v, bytes);
        }
        v
    }
}

/// `n` zeros that are read before they are written (sums, marks), each page written once
/// first. A large `vec![0; n]` is fresh memory from the kernel: read first, each page is
/// mapped to the shared zero page and copied at its first write, with a TLB shootdown on
/// every core the process runs on (6 % of the engine's and kernel's CPU in a saturated
/// workload, `perf`: `do_wp_page`, `flush_tlb_mm_range`).
pub(crate) fn zeros_to_update<T: Copy + Default>(n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    let per_page = (4096 / std::mem::size_of::<T>().max(1)).max(1);
    // The last value too: the buffer need not start on a page.
    for i in (0..n).step_by(per_page).chain(n.checked_sub(1)) {
        // SAFETY: `i < n`, the vector's length. Volatile, because a plain store of a zero
        // into memory known to be zero is dropped by the compiler.
        unsafe { std::ptr::write_volatile(v.as_mut_ptr().add(i), T::default()) };
    }
    v
}

/// The smallest kept buffer that holds `n` values, or else the largest (to be grown).
fn take_fitting<T>(pool: &mut Vec<Vec<T>>, n: usize) -> Vec<T> {
    let fitting = pool
        .iter()
        .enumerate()
        .filter(|(_, v)| v.capacity() >= n)
        .min_by_key(|(_, v)| v.capacity())
        .or_else(|| pool.iter().enumerate().max_by_key(|(_, v)| v.capacity()))
        .map(|(i, _)| i);
    fitting.map(|i| pool.swap_remove(i)).unwrap_or_default()
}

impl<T: Pooled> Drop for Buffer<T> {
    fn drop(&mut self) {
        let bytes = self.0.capacity() * std::mem::size_of::<T>();
        if bytes >= LARGE {
            let mut pool = T::pool().lock().expect("buffer pool");
            // Counted under the pool's lock, so a buffer is counted while it is in a pool.
            let room = KEPT_NOW
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |kept| {
                    (kept + bytes <= KEPT_BYTES).then_some(kept + bytes)
                })
                .is_ok();
            if pool.len() < KEPT && room {
                pool.push(std::mem::take(&mut self.0));
            } else if room {
                KEPT_NOW.fetch_sub(bytes, Ordering::Relaxed);
            }
        }
    }
}

impl<T: Pooled> Deref for Buffer<T> {
    type Target = Vec<T>;
    fn deref(&self) -> &Vec<T> {
        &self.0
    }
}

impl<T: Pooled> DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut Vec<T> {
        &mut self.0
    }
}

/// Asks for huge pages behind the first `bytes` of `v`'s allocation (advice only).
fn advise_huge_pages<T>(v: &mut Vec<T>, bytes: usize) {
    #[cfg(target_os = "linux")]
    {
        const HUGE_PAGE: usize = 2 << 20;
        let base = v.as_mut_ptr() as usize;
        let start = base.next_multiple_of(HUGE_PAGE);
        let end = (base + bytes) & !(HUGE_PAGE - 1);
        if end > start {
            // SAFETY: the range lies inside the vector's own allocation; madvise only
            // changes how the kernel backs it.
            unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (v, bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeros_to_update_are_zeros_of_any_length() {
        for n in [0, 1, 511, 512, 513, 3 << 20] {
            let v: Vec<f64> = zeros_to_update(n);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 0.0), "{n}");
        }
    }

    #[test]
    fn the_pools_keep_a_bounded_number_of_bytes() {
        // A buffer past the bound goes back to the system; smaller ones are still kept.
        // (Other tests share the pools: only what this test's buffers do is checked.)
        drop(Buffer::filled(KEPT_BYTES / 8 + 1, 0.0f64));
        assert!(KEPT_NOW.load(Ordering::Relaxed) <= KEPT_BYTES);
        let pool = f64::pool().lock().unwrap();
        assert!(pool.iter().all(|v| v.capacity() * 8 <= KEPT_BYTES));
    }

    #[test]
    fn the_smallest_buffer_that_fits_is_taken() {
        let mut pool = vec![
            Vec::<u8>::with_capacity(10),
            Vec::with_capacity(30),
            Vec::with_capacity(20),
        ];
        assert_eq!(take_fitting(&mut pool, 15).capacity(), 20);
        assert_eq!(take_fitting(&mut pool, 100).capacity(), 30);
        assert_eq!(take_fitting(&mut pool, 5).capacity(), 10);
        assert!(pool.is_empty());
        assert_eq!(take_fitting(&mut pool, 5).capacity(), 0);
    }

    #[test]
    fn a_buffer_from_the_pool_holds_only_the_new_values() {
        let n = LARGE / 8 + 1;
        let mut a = Buffer::filled(n, 1.0f64);
        a[0] = 5.0;
        drop(a);
        let b = Buffer::filled(n, 0.0f64);
        assert_eq!(b.len(), n);
        assert!(b.iter().all(|&v| v == 0.0));
    }

    #[test]
    fn a_buffer_to_overwrite_has_the_length_asked_for_and_a_new_one_is_filled() {
        // Small buffers are never kept, so this one is new: filled throughout.
        let small = Buffer::to_overwrite(100, 3u32);
        assert!(small.len() == 100 && small.iter().all(|&v| v == 3));
        // Kept buffers (other tests share the pool) hold stale values: only the length
        // is promised, whether the buffer grows or shrinks.
        let n = LARGE / 4 + 1;
        drop(Buffer::filled(n, 7u32));
        assert_eq!(Buffer::to_overwrite(2 * n, 3u32).len(), 2 * n);
        assert_eq!(Buffer::to_overwrite(n / 2, 3u32).len(), n / 2);
    }
}
