//! Vectorised Morton codes for Python (tests and tools; the engine uses them internally).

use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1};
use pyo3::prelude::*;
use turbdb_core::morton;

use crate::error::{invalid, Result};

/// Morton codes of integer positions (x, y, z arrays of equal length).
#[pyfunction]
pub fn morton_encode<'py>(
    py: Python<'py>,
    x: PyReadonlyArray1<'py, u32>,
    y: PyReadonlyArray1<'py, u32>,
    z: PyReadonlyArray1<'py, u32>,
) -> Result<Bound<'py, PyArray1<u64>>> {
    let (x, y, z) = (x.as_array(), y.as_array(), z.as_array());
    if x.len() != y.len() || x.len() != z.len() {
        return Err(invalid("x, y and z must have the same length"));
    }
    if x.iter()
        .chain(y.iter())
        .chain(z.iter())
        .any(|&v| v > morton::MAX_COORD)
    {
        return Err(invalid("coordinates must be below 2**21"));
    }
    let codes: Vec<u64> = (0..x.len())
        .map(|i| morton::encode(x[i], y[i], z[i]))
        .collect();
    Ok(codes.into_pyarray(py))
}

/// Positions (x, y, z arrays) of Morton codes.
#[pyfunction]
#[allow(clippy::type_complexity)]
pub fn morton_decode<'py>(
    py: Python<'py>,
    codes: PyReadonlyArray1<'py, u64>,
) -> (
    Bound<'py, PyArray1<u32>>,
    Bound<'py, PyArray1<u32>>,
    Bound<'py, PyArray1<u32>>,
) {
    let decoded: Vec<(u32, u32, u32)> = codes
        .as_array()
        .iter()
        .map(|&c| morton::decode(c))
        .collect();
    let x: Vec<u32> = decoded.iter().map(|p| p.0).collect();
    let y: Vec<u32> = decoded.iter().map(|p| p.1).collect();
    let z: Vec<u32> = decoded.iter().map(|p| p.2).collect();
    (x.into_pyarray(py), y.into_pyarray(py), z.into_pyarray(py))
}
