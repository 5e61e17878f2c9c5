//! The kernel's worker threads: rayon's global pool, named, and a pool of its own for a
//! process forked from one that had started it.
//!
//! Unnamed, the workers took the name of the thread that first used the pool (the
//! engine's, or a client's cutting its query), so `perf` and `top` counted the kernel's
//! work on the batch tasks as that thread's own.
//!
//! A fork copies rayon's global pool but not its threads: in the child every parallel loop
//! would hand its work to workers that do not exist and wait for them forever (a Python
//! `multiprocessing` child that queries after its parent did). [`run`] gives such a child
//! a pool of its own.

use std::sync::{Arc, Mutex, Once, OnceLock};

use rayon::ThreadPool;

/// Name the kernel's workers' threads take, with their index.
pub const KERNEL_THREAD_PREFIX: &str = "turbdb-kernel-";

/// The process that owns rayon's global pool: the one where it was built, or found built.
static POOL_OWNER: OnceLock<u32> = OnceLock::new();

/// Builds rayon's global pool with threads named `turbdb-kernel-N`, as many as rayon
/// would start (`RAYON_NUM_THREADS`, else one per CPU), unless something built it first
/// (the host program): then it is kept. [`run`] calls it on the first entry into the
/// kernel, not at import: threads started early would be missing in a process forked
/// before its first query.
pub fn name_kernel_threads() {
    static NAMED: Once = Once::new();
    NAMED.call_once(|| {
        // An error only says the pool exists already; its threads keep their names.
        let _ = kernel_pool_builder().build_global();
        POOL_OWNER.get_or_init(std::process::id);
    });
}

/// Kernel threads at most per CPU: `RAYON_NUM_THREADS=99999` started 7 000 threads in a
/// few minutes before the machine stalled (a load average of 4 000), for no gain past one
/// a CPU.
pub const MOST_THREADS_PER_CPU: usize = 4;

/// The kernel's pool: threads named `turbdb-kernel-N`, as many as `RAYON_NUM_THREADS`
/// asks (else one per CPU), at most [`MOST_THREADS_PER_CPU`] a CPU.
fn kernel_pool_builder() -> rayon::ThreadPoolBuilder {
    let builder =
        rayon::ThreadPoolBuilder::new().thread_name(|i| format!("{KERNEL_THREAD_PREFIX}{i}"));
    match capped_threads(std::env::var("RAYON_NUM_THREADS").ok().as_deref(), cpus()) {
        Some(threads) => builder.num_threads(threads),
        None => builder,
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The threads to start in place of `asked` (`RAYON_NUM_THREADS`) when it asks for more
/// than [`MOST_THREADS_PER_CPU`] a CPU; None leaves rayon to read it.
pub fn capped_threads(asked: Option<&str>, cpus: usize) -> Option<usize> {
    let asked: usize = asked?.trim().parse().ok()?;
    let most = MOST_THREADS_PER_CPU * cpus.max(1);
    (asked > most).then_some(most)
}

/// Runs `work`, whose parallel loops go to rayon's global pool, or, in a process forked
/// from the one that owns that pool, to a pool of this process's own (made on first use;
/// `install` runs `work` on one of its workers). Every entry into the kernel from outside
/// a pool goes through here: the calls from Python and the engine thread's batches.
pub fn run<R: Send>(work: impl FnOnce() -> R + Send) -> R {
    name_kernel_threads();
    if POOL_OWNER.get() == Some(&std::process::id()) {
        return work();
    }
    forked_pool().install(work)
}

/// This process's own pool (a forked child's), made on first use.
fn forked_pool() -> Arc<ThreadPool> {
    // The pool and the process it belongs to: a child of a child needs its own again.
    static OWN: Mutex<Option<(u32, Arc<ThreadPool>)>> = Mutex::new(None);
    let pid = std::process::id();
    // A fork taken while another thread held the lock leaves it poisoned or held in the
    // child; poisoning is harmless here (the value is replaced below).
    let mut own = OWN.lock().unwrap_or_else(|e| e.into_inner());
    match own.as_ref() {
        Some((owner, pool)) if *owner == pid => Arc::clone(pool),
        _ => {
            let pool = Arc::new(
                kernel_pool_builder()
                    .build()
                    .expect("start the kernel's threads"),
            );
            // The parent's pool (if any) has no threads here: dropping it would only
            // signal workers that do not exist, so it is left alone.
            if let Some(old) = own.replace((pid, Arc::clone(&pool))) {
                std::mem::forget(old);
            }
            pool
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_past_four_a_cpu_are_capped_and_others_left_to_rayon() {
        assert_eq!(capped_threads(Some("99999"), 16), Some(64));
        assert_eq!(capped_threads(Some(" 65 "), 16), Some(64));
        assert_eq!(capped_threads(Some("64"), 16), None);
        assert_eq!(capped_threads(Some("0"), 2), None);
        assert_eq!(capped_threads(Some("lots"), 2), None);
        assert_eq!(capped_threads(None, 2), None);
    }
}
