//! Which SIMD paths the interpolation kernel can run on this CPU, and which one queries use.

use pyo3::prelude::*;
use turbdb_core::{measured_clock_hz, KernelPath, Operator};

use crate::error::to_py;

/// The SIMD paths this CPU can run (`avx2`, `avx512`, `neon`, `portable`), preferred first
/// for fields: AVX2 before AVX-512, which measured no faster for them on the machines we
/// have (derivatives prefer AVX-512: see `kernel_path`).
#[pyfunction]
pub fn kernel_paths() -> Vec<&'static str> {
    KernelPath::supported()
        .into_iter()
        .map(KernelPath::name)
        .collect()
}

/// The path queries of `operator` (`field`, `gradient`, `hessian`, `laplacian`) run on:
/// the one `TURBDB_KERNEL` names, else the preferred for the operator (AVX-512 for
/// derivatives where the CPU has it, whose 32 registers hold their sums). Raises if
/// `TURBDB_KERNEL` names a path that is unknown or that this CPU cannot run, or if the
/// operator is unknown.
#[pyfunction]
#[pyo3(signature = (operator = "field"))]
pub fn kernel_path(operator: &str) -> PyResult<&'static str> {
    let operator = Operator::parse(operator).map_err(to_py)?;
    KernelPath::selected_for(operator.max_order())
        .map(KernelPath::name)
        .map_err(to_py)
}

/// The clock of the core running this thread in GHz, measured by a chain of dependent
/// additions (one a cycle), or None on CPUs other than x86-64 and aarch64: the
/// benchmark's arithmetic bound uses it rather than `/proc/cpuinfo`'s nominal clock.
#[pyfunction]
pub fn measured_clock_ghz(py: Python<'_>) -> Option<f64> {
    py.detach(measured_clock_hz).map(|hz| hz / 1e9)
}
