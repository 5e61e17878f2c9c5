//! Which SIMD paths the interpolation kernel can run on this CPU, and which one queries use.

use pyo3::prelude::*;
use turbdb_core::{measured_clock_hz, KernelPath};

use crate::error::to_py;

/// The SIMD paths this CPU can run (`avx2`, `avx512`, `neon`, `portable`), preferred first:
/// AVX2 before AVX-512, which measured no faster on the machines we have.
#[pyfunction]
pub fn kernel_paths() -> Vec<&'static str> {
    KernelPath::supported()
        .into_iter()
        .map(KernelPath::name)
        .collect()
}

/// The path queries run on: the one `TURBDB_KERNEL` names, else the preferred. Raises if
/// `TURBDB_KERNEL` names a path that is unknown or that this CPU cannot run.
#[pyfunction]
pub fn kernel_path() -> PyResult<&'static str> {
    KernelPath::selected().map(KernelPath::name).map_err(to_py)
}

/// The clock of the core running this thread in GHz, measured by a chain of dependent
/// additions (one a cycle), or None on CPUs other than x86-64 and aarch64: the
/// benchmark's arithmetic bound uses it rather than `/proc/cpuinfo`'s nominal clock.
#[pyfunction]
pub fn measured_clock_ghz(py: Python<'_>) -> Option<f64> {
    py.detach(measured_clock_hz).map(|hz| hz / 1e9)
}
