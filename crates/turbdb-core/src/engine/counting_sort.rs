//! A parallel counting sort that moves values into buckets, as the plan needs it twice
//! over for millions of points.

use std::ops::Range;

use rayon::prelude::*;

use crate::engine::buffers::{Buffer, Pooled};

/// What a counting sort sorts: items, each placed in a bucket as a value (or left out).
pub(crate) trait Buckets: Sync {
    /// What is placed in a bucket.
    type Value: Pooled + Default;
    /// The bucket of `item` and what goes there, or `None` to leave it out.
    fn bucket(&self, item: usize) -> Option<(usize, Self::Value)>;
}

/// A parallel counting sort in two passes over chunks of items (count, then place each
/// value at its chunk's next slot in the bucket: every chunk writes a few hundred
/// sequential streams, which caches take well, where gathering by index would miss on
/// every item). Returns the values bucket by bucket, in item order in each, and where
/// each bucket starts (and the end).
pub(crate) fn bucket_sort<B: Buckets>(
    items: usize,
    buckets: usize,
    by: &B,
) -> (Buffer<B::Value>, Vec<usize>) {
    let chunk = items
        .div_ceil(4 * rayon::current_num_threads())
        .max(1 << 14);
    let chunks: Vec<Range<usize>> = (0..items)
        .step_by(chunk)
        .map(|s| s..(s + chunk).min(items))
        .collect();
    let mut next: Vec<Vec<u32>> = chunks
        .par_iter()
        .map(|range| {
            let mut count = vec![0u32; buckets];
            for item in range.clone() {
                if let Some((b, _)) = by.bucket(item) {
                    count[b] += 1;
                }
            }
            count
        })
        .collect();
    let mut start = vec![0usize; buckets + 1];
    let mut slot = 0usize;
    for b in 0..buckets {
        start[b] = slot;
        for count in next.iter_mut() {
            let n = count[b] as usize;
            count[b] = slot as u32;
            slot += n;
        }
    }
    start[buckets] = slot;
    let mut sorted = Buffer::filled(slot, B::Value::default());
    let out = SlotsPtr(sorted.as_mut_ptr());
    let out = &out;
    chunks
        .par_iter()
        .zip(next.par_iter_mut())
        .for_each(|(range, next)| {
            for item in range.clone() {
                if let Some((b, value)) = by.bucket(item) {
                    // SAFETY: every slot below `sorted.len()` is handed out exactly once.
                    unsafe { out.0.add(next[b] as usize).write(value) };
                    next[b] += 1;
                }
            }
        });
    (sorted, start)
}

/// The slots of a counting sort, written by all workers at distinct places.
struct SlotsPtr<T>(*mut T);
// SAFETY: workers write disjoint slots.
unsafe impl<T> Sync for SlotsPtr<T> {}
