//! `stencil_reach`: the first stencil node of every point and the stencil width, for the
//! cluster mediator to send each point to the partitions its stencil touches.

use numpy::{IntoPyArray, PyArray2, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use turbdb_core::{Method, Operator};

use crate::error::{to_py, without_gil};
use crate::field::{as_triples, axes_from, not_contiguous, AxisTuple};

/// `(first, width)`: `first` is `(N, 3)` uint32, the first stencil node of each point along
/// x, y, z (wrapped or shifted inside as a query places it); the stencil covers `width`
/// nodes from there on each axis. Raises the errors a query would for bad points.
#[pyfunction]
#[pyo3(signature = (points, *, axes, method, operator))]
pub fn stencil_reach<'py>(
    py: Python<'py>,
    points: PyReadonlyArray2<'py, f64>,
    axes: [AxisTuple; 3],
    method: &str,
    operator: &str,
) -> PyResult<(Bound<'py, PyArray2<u32>>, usize)> {
    let method = Method::parse(method).map_err(to_py)?;
    let operator = Operator::parse(operator).map_err(to_py)?;
    if points.shape()[1] != 3 {
        return Err(to_py(turbdb_core::Error::InvalidArgument(
            "points must have shape (N, 3)".into(),
        )));
    }
    let flat = points.as_slice().map_err(|_| not_contiguous())?;
    let points3 = as_triples(flat);
    let axes = axes_from(axes);
    let (first, width) = without_gil(py, || {
        turbdb_core::stencil_reach(points3, method, operator, &axes)
    })?;
    let n = first.len();
    let flat: Vec<u32> = first.into_iter().flatten().collect();
    let array = numpy::ndarray::Array2::from_shape_vec((n, 3), flat)
        .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
    Ok((array.into_pyarray(py), width))
}
