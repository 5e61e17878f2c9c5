//! Which SIMD paths the interpolation kernel can run on this CPU, and which one queries use.

use pyo3::prelude::*;
use turbdb_core::KernelPath;

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
