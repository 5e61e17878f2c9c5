//! turbdb._core: Python bindings of turbdb-core. Only conversion, error mapping and GIL
//! release live here; the behaviour is in the core crate.

use pyo3::prelude::*;

mod engine;
mod error;
mod field;
mod morton;
mod reach;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<field::FieldStore>()?;
    m.add_class::<engine::Engine>()?;
    m.add_function(wrap_pyfunction!(morton::morton_encode, m)?)?;
    m.add_function(wrap_pyfunction!(morton::morton_decode, m)?)?;
    m.add_function(wrap_pyfunction!(reach::stencil_reach, m)?)?;
    Ok(())
}
