//! A parallel counting sort that moves values into buckets, as the plan needs it twice
//! over for millions of points.

use rayon::prelude::*;

use crate::engine::buffers::{Buffer, Pooled};

/// What a counting sort sorts: items, each placed in a bucket as a value (or left out).
pub(crate) trait Buckets: Sync {
    /// What is placed in a bucket.
    type Value: Pooled + Default + Sync;
    /// The bucket of `item` and what goes there, or `None` to leave it out.
    fn bucket(&self, item: usize) -> Option<(usize, Self::Value)>;

    /// [`Buckets::bucket`] of items `first ..` for each of `keys` and `values` (the key
    /// [`LEFT_OUT`] for an item left out), each kept item counted in `count`: item by item
    /// unless overridden (the plan finds four points at a time).
    fn bucket_all(
        &self,
        first: usize,
        keys: &mut [u32],
        values: &mut [Self::Value],
        count: &mut [u32],
    ) {
        bucket_each(self, first, keys, values, count)
    }
}

/// [`Buckets::bucket_all`] item by item (also for an override to fall back on).
pub(crate) fn bucket_each<B: Buckets + ?Sized>(
    by: &B,
    first: usize,
    keys: &mut [u32],
    values: &mut [B::Value],
    count: &mut [u32],
) {
    for (i, (key, value)) in keys.iter_mut().zip(values.iter_mut()).enumerate() {
        // The values of items left out are never read.
        match by.bucket(first + i) {
            Some((b, v)) => {
                count[b] += 1;
                (*key, *value) = (b as u32, v);
            }
            None => *key = LEFT_OUT,
        }
    }
}

/// The key of an item left out.
pub(crate) const LEFT_OUT: u32 = u32::MAX;

/// A parallel counting sort in two passes over chunks of items: the first finds every
/// item's bucket and value once (kept in item order) and counts the chunk's items per
/// bucket; the second places each kept value at its chunk's next slot in the bucket (every
/// chunk writes a few hundred sequential streams, which caches take well, where gathering
/// by index would miss on every item). Finding a bucket (a point's grid position and
/// cell) costs more than writing and reading back its value, so it is not done twice.
/// Returns the values bucket by bucket, in item order in each, and where each bucket
/// starts (and the end).
pub(crate) fn bucket_sort<B: Buckets>(
    items: usize,
    buckets: usize,
    by: &B,
) -> (Buffer<B::Value>, Vec<usize>) {
    assert!(
        buckets < u32::MAX as usize,
        "{buckets} buckets are too many"
    );
    let chunk = items
        .div_ceil(4 * rayon::current_num_threads())
        .max(1 << 14);
    let mut keys = Buffer::to_overwrite(items, LEFT_OUT);
    let mut values = Buffer::to_overwrite(items, B::Value::default());
    let mut next: Vec<Vec<u32>> = keys
        .par_chunks_mut(chunk)
        .zip(values.par_chunks_mut(chunk))
        .enumerate()
        .map(|(k, (keys, values))| {
            let mut count = vec![0u32; buckets];
            by.bucket_all(k * chunk, keys, values, &mut count);
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
    // Every slot is written below, once.
    let mut sorted = Buffer::to_overwrite(slot, B::Value::default());
    let out = SlotsPtr(sorted.as_mut_ptr());
    let out = &out;
    keys.par_chunks(chunk)
        .zip(values.par_chunks(chunk))
        .zip(next.par_iter_mut())
        .for_each(|((keys, values), next)| {
            for (&b, &value) in keys.iter().zip(values.iter()) {
                if b != LEFT_OUT {
                    let b = b as usize;
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
