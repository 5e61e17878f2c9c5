//! The kernel's worker threads (rayon's global pool), named. Unnamed, they took the name
//! of the thread that first used the pool (the engine's, or a client's cutting its
//! query), so `perf` and `top` counted the kernel's work on the batch tasks as that
//! thread's own. The engine names them as a query first reaches it, not when it is made:
//! threads started early would be missing in a process forked before its first query.

use std::sync::Once;

/// Name the kernel's workers' threads take, with their index.
pub const KERNEL_THREAD_PREFIX: &str = "turbdb-kernel-";

/// Builds rayon's global pool with threads named `turbdb-kernel-N`, as many as rayon
/// would start (`RAYON_NUM_THREADS`, else one per CPU), unless something built it first
/// (a query evaluated without the engine, or the host program): then it is kept.
pub fn name_kernel_threads() {
    static NAMED: Once = Once::new();
    NAMED.call_once(|| {
        // An error only says the pool exists already; its threads keep their names.
        let _ = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("{KERNEL_THREAD_PREFIX}{i}"))
            .build_global();
    });
}
