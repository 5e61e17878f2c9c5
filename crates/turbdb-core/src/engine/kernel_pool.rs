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
        let _ = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("{KERNEL_THREAD_PREFIX}{i}"))
            .build_global();
        POOL_OWNER.get_or_init(std::process::id);
    });
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
                rayon::ThreadPoolBuilder::new()
                    .thread_name(|i| format!("{KERNEL_THREAD_PREFIX}{i}"))
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
