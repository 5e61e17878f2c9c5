//! turbdb._core: Python bindings of turbdb-core. Only conversion, error mapping and GIL
//! release live here; the behaviour is in the core crate. The names a query accepts are
//! exported from the core's tables, so the Python package cannot drift from them.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use turbdb_core::{
    FieldGeometry, Operator, METHOD_ALIASES, METHOD_NAMES, OPERATOR_ALIASES, OPERATOR_NAMES,
    STRATEGY_NAMES, TEMPORAL_ALIASES, TEMPORAL_NAMES,
};

mod engine;
mod error;
mod field;
mod kernel;
mod limits;
mod morton;
mod reach;
mod routing;
mod stop;

/// Checks a field layout as the store will: `grid` is `(nx, ny, nz)`.
#[pyfunction]
fn check_layout(
    grid: (usize, usize, usize),
    ncomp: usize,
    atom: usize,
    partition: usize,
) -> error::Result<()> {
    FieldGeometry::new([grid.0, grid.1, grid.2], ncomp, atom, partition)?;
    Ok(())
}

fn names<'py>(py: Python<'py>, names: &[&str]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, names)
}

fn aliases<'py>(py: Python<'py>, aliases: &[(&str, &str)]) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (alias, name) in aliases {
        out.set_item(alias, name)?;
    }
    Ok(out)
}

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<field::FieldStore>()?;
    m.add_class::<engine::Engine>()?;
    m.add_class::<engine::PendingQuery>()?;
    m.add_class::<engine::CompletionQueue>()?;
    m.add_class::<stop::StopFlag>()?;
    m.add_function(wrap_pyfunction!(morton::morton_encode, m)?)?;
    m.add_function(wrap_pyfunction!(morton::morton_decode, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::kernel_paths, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::kernel_path, m)?)?;
    m.add_function(wrap_pyfunction!(kernel::measured_clock_ghz, m)?)?;
    m.add_function(wrap_pyfunction!(check_layout, m)?)?;
    m.add_function(wrap_pyfunction!(reach::stencil_reach, m)?)?;
    m.add_function(wrap_pyfunction!(routing::split_points, m)?)?;
    m.add_function(wrap_pyfunction!(limits::get_max_result_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(limits::usable_memory, m)?)?;
    m.add_function(wrap_pyfunction!(limits::set_max_result_bytes, m)?)?;
    Ok(add_names(m)?)
}

/// The names a query accepts, from the core's tables.
fn add_names(m: &Bound<'_, PyModule>) -> error::Result<()> {
    let py = m.py();
    m.add("METHODS", names(py, METHOD_NAMES)?)?;
    m.add("METHOD_ALIASES", aliases(py, METHOD_ALIASES)?)?;
    m.add("OPERATORS", names(py, OPERATOR_NAMES)?)?;
    m.add("OPERATOR_ALIASES", aliases(py, OPERATOR_ALIASES)?)?;
    m.add("TEMPORALS", names(py, TEMPORAL_NAMES)?)?;
    m.add("TEMPORAL_ALIASES", aliases(py, TEMPORAL_ALIASES)?)?;
    m.add("STRATEGIES", names(py, STRATEGY_NAMES)?)?;
    let slots = PyDict::new(py);
    for name in OPERATOR_NAMES {
        slots.set_item(name, Operator::parse(name)?.slots())?;
    }
    m.add("OPERATOR_SLOTS", slots)?;
    Ok(())
}
