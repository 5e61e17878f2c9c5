//! `split_points`: the cluster mediator's split of a point query by group of workers (the
//! hot loop of `turbdb.cluster.routing.split_query`), returned as numpy arrays.

use numpy::{IntoPyArray, PyArray1, PyArray3, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::prelude::*;
use turbdb_core::routing::{split_points as split, Reach};

use crate::error::{without_gil, Result};

/// `(rows, offsets, touched)` for the shards each point's stencil reaches along x, y, z
/// (`(N, K)` int32 tables, -1 for a repeated column), the shard grid `(nx, ny, nz)` and
/// `tables` (`(U, nx·ny·nz)` int32 group indices below `groups`): `rows` (int64) are the
/// point indices by group, then home shard, then index; group `g` has
/// `rows[offsets[g]:offsets[g + 1]]`; `touched[u, g, s]` says that a point reaches shard
/// `s`, held by group `g` under table `u`.
#[pyfunction]
#[pyo3(signature = (xs, ys, zs, *, shards, tables, groups))]
#[allow(clippy::type_complexity)]
pub fn split_points<'py>(
    py: Python<'py>,
    xs: PyReadonlyArray2<'py, i32>,
    ys: PyReadonlyArray2<'py, i32>,
    zs: PyReadonlyArray2<'py, i32>,
    shards: (usize, usize, usize),
    tables: PyReadonlyArray2<'py, i32>,
    groups: usize,
) -> Result<(
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<usize>>,
    Bound<'py, PyArray3<bool>>,
)> {
    let widths = [xs.shape()[1], ys.shape()[1], zs.shape()[1]];
    let columns = [xs.as_slice()?, ys.as_slice()?, zs.as_slice()?];
    let table_count = tables.shape()[0];
    let tables = tables.as_slice()?;
    let shards = [shards.0, shards.1, shards.2];
    let out = without_gil(py, || {
        split(&Reach { columns, widths }, shards, tables, groups)
    })?;
    let count = shards.iter().product::<usize>();
    let touched =
        numpy::ndarray::Array3::from_shape_vec((table_count, groups, count), out.touched)?;
    Ok((
        out.rows.into_pyarray(py),
        out.offsets.into_pyarray(py),
        touched.into_pyarray(py),
    ))
}
