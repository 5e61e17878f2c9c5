//! The most bytes one call may hand back to Python (a cutout, a query's values), so that a
//! request too large for this machine is refused with a way to split it before anything is
//! allocated, instead of aborting the interpreter. Default: half the memory the process may use
//! (the machine's, or its container's or batch job's limit where smaller), or
//! `TURBDB_MAX_RESULT_BYTES`; `turbdb.set_max_result_bytes` changes it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use pyo3::prelude::*;

use crate::error::{invalid, Result};

/// 0 until set: the default then applies.
static MAX_RESULT_BYTES: AtomicU64 = AtomicU64::new(0);

/// The limit in force.
pub fn max_result_bytes() -> u64 {
    match MAX_RESULT_BYTES.load(Ordering::Relaxed) {
        0 => default_limit(),
        set => set,
    }
}

fn default_limit() -> u64 {
    if let Some(bytes) = std::env::var("TURBDB_MAX_RESULT_BYTES")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&b| b > 0)
    {
        return bytes;
    }
    // Half the memory a container or batch job allows, where it is less than the machine's;
    // found once (reading the cgroup files took 49 µs, as long as a small query).
    static HALF_MEMORY: OnceLock<u64> = OnceLock::new();
    *HALF_MEMORY
        .get_or_init(|| turbdb_core::memory::usable_memory().map_or(8 << 30, |bytes| bytes / 2))
}

/// The bytes of memory this process may use: the machine's, or its control group's limit
/// (a container, a batch job) where smaller; None where neither is known.
#[pyfunction]
pub fn usable_memory() -> Option<u64> {
    turbdb_core::memory::usable_memory()
}

/// The most bytes one call may return (a cutout, a query's values).
#[pyfunction]
pub fn get_max_result_bytes() -> u64 {
    max_result_bytes()
}

/// Sets the most bytes one call may return; `None` restores the default (half the
/// memory this process may use, or `TURBDB_MAX_RESULT_BYTES`).
#[pyfunction]
#[pyo3(signature = (nbytes))]
pub fn set_max_result_bytes(nbytes: Option<u64>) -> Result<()> {
    if nbytes == Some(0) {
        return Err(invalid(
            "the result size limit must be a positive number of bytes",
        ));
    }
    MAX_RESULT_BYTES.store(nbytes.unwrap_or(0), Ordering::Relaxed);
    Ok(())
}
