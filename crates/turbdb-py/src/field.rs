//! `FieldStore`: one field's Zarr array directory, for writing time steps and verifying.

use numpy::{
    IntoPyArray, PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2,
    PyUntypedArray, PyUntypedArrayMethods,
};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use turbdb_core::time_weights;
use turbdb_core::{axis_nodes, read_cutout};
use turbdb_core::{
    evaluate_within, Axis, ChunkCodec, FieldGeometry, FieldReader, IndexLocation, Method,
    Operator, Partitions, QuerySpec, Strategy, StreamStats, Temporal,
};

use crate::error::{to_py, without_gil};

/// One field of a dataset on disk.
#[pyclass(module = "turbdb._core", frozen)]
pub struct FieldStore {
    root: std::path::PathBuf,
    geometry: FieldGeometry,
    codec: ChunkCodec,
    location: IndexLocation,
    /// Long-lived so that shard indexes are read once, not once per query; shared with
    /// the node engine.
    reader: Arc<FieldReader>,
}

/// One axis as Python passes it: `(n, origin, spacing, periodic)`.
pub type AxisTuple = (usize, f64, f64, bool);

pub fn axes_from(axes: [AxisTuple; 3]) -> [Axis; 3] {
    axes.map(|(n, origin, spacing, periodic)| Axis {
        n,
        origin,
        spacing,
        periodic,
    })
}

impl FieldStore {
    /// The field's reader, for the node engine.
    pub fn shared_reader(&self) -> Arc<FieldReader> {
        Arc::clone(&self.reader)
    }
}

#[pymethods]
impl FieldStore {
    /// `grid` is `(nx, ny, nz)`.
    #[new]
    #[pyo3(signature = (root, grid, ncomp, atom, partition, *, zstd=false, crc32c=true, index_at_end=true))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        root: std::path::PathBuf,
        grid: (usize, usize, usize),
        ncomp: usize,
        atom: usize,
        partition: usize,
        zstd: bool,
        crc32c: bool,
        index_at_end: bool,
    ) -> PyResult<Self> {
        let geometry =
            FieldGeometry::new([grid.0, grid.1, grid.2], ncomp, atom, partition).map_err(to_py)?;
        let location = if index_at_end {
            IndexLocation::End
        } else {
            IndexLocation::Start
        };
        let codec = ChunkCodec { zstd, crc32c };
        let reader = Arc::new(FieldReader::new(
            root.clone(),
            geometry.clone(),
            codec,
            location,
        ));
        Ok(Self {
            root,
            geometry,
            codec,
            location,
            reader,
        })
    }

    /// Writes time step `t` from a C-contiguous float32 or float64 array `(nz, ny, nx, ncomp)`.
    /// Returns the bytes written.
    #[pyo3(signature = (t, data, sync=false))]
    fn write_step(
        &self,
        py: Python<'_>,
        t: usize,
        data: &Bound<'_, PyUntypedArray>,
        sync: bool,
    ) -> PyResult<u64> {
        if self.codec.zstd || !self.codec.crc32c || self.location != IndexLocation::End {
            return Err(to_py(turbdb_core::Error::InvalidArgument(
                "turbdb writes only its own layout (raw float32 + crc32c, index at the end)".into(),
            )));
        }
        let [nx, ny, nz] = self.geometry.grid;
        let expected = [nz, ny, nx, self.geometry.ncomp];
        if data.shape() != expected {
            return Err(to_py(turbdb_core::Error::InvalidArgument(format!(
                "data has shape {:?}, expected {expected:?} (nz, ny, nx, ncomp)",
                data.shape()
            ))));
        }
        if let Ok(array) = data.cast::<PyArrayDyn<f32>>() {
            let view = array.readonly();
            let slice = view.as_slice().map_err(|_| not_contiguous())?;
            let written = without_gil(py, || {
                turbdb_core::write_step(&self.root, &self.geometry, t, slice, sync)
            });
            self.reader.clear_cache();
            written
        } else if let Ok(array) = data.cast::<PyArrayDyn<f64>>() {
            let view = array.readonly();
            let slice = view.as_slice().map_err(|_| not_contiguous())?;
            let written = without_gil(py, || {
                turbdb_core::write_step(&self.root, &self.geometry, t, slice, sync)
            });
            self.reader.clear_cache();
            written
        } else {
            Err(to_py(turbdb_core::Error::InvalidArgument(format!(
                "data must be float32 or float64, not {}",
                data.dtype()
            ))))
        }
    }

    /// Checks every stored shard of time steps `0..nt`; returns a dict with `shards`,
    /// `atoms`, `complete_steps` and `problems` (a list of `(path, time_index, message)`).
    fn verify<'py>(&self, py: Python<'py>, nt: usize) -> PyResult<Bound<'py, PyDict>> {
        let reader = FieldReader::new(
            self.root.clone(),
            self.geometry.clone(),
            self.codec,
            self.location,
        );
        let report = py.detach(|| turbdb_core::verify_field(&reader, nt));
        let out = PyDict::new(py);
        out.set_item("shards", report.shards)?;
        out.set_item("atoms", report.atoms)?;
        out.set_item("complete_steps", report.complete_steps)?;
        let problems: Vec<(String, usize, String)> = report
            .problems
            .into_iter()
            .map(|p| (p.path.display().to_string(), p.time_index, p.message))
            .collect();
        out.set_item("problems", problems)?;
        Ok(out)
    }

    /// Evaluates a batch query. `points` is `(N, 3)` float64 physical x, y, z; `axes` is
    /// `((n, origin, spacing, periodic),)*3` for x, y, z; `times` the stored times. Returns
    /// the flat float64 values (`N × ncomp × slots`) and a dict of counters. `partitions`,
    /// a list of `(t, (sx, sy, sz))`, restricts the sums to the atoms of those partitions.
    #[pyo3(signature = (points, *, axes, times, time, method, operator, temporal, strategy, partitions=None))]
    #[allow(clippy::too_many_arguments)]
    fn query<'py>(
        &self,
        py: Python<'py>,
        points: PyReadonlyArray2<'py, f64>,
        axes: [AxisTuple; 3],
        times: PyReadonlyArray1<'py, f64>,
        time: f64,
        method: &str,
        operator: &str,
        temporal: &str,
        strategy: &str,
        partitions: Option<Vec<(usize, [usize; 3])>>,
    ) -> PyResult<(Bound<'py, PyArray1<f64>>, Bound<'py, PyDict>)> {
        let spec = QuerySpec {
            method: Method::parse(method).map_err(to_py)?,
            operator: Operator::parse(operator).map_err(to_py)?,
            temporal: Temporal::parse(temporal).map_err(to_py)?,
            time,
            strategy: Strategy::parse(strategy).map_err(to_py)?,
        };
        if points.shape()[1] != 3 {
            return Err(to_py(turbdb_core::Error::InvalidArgument(
                "points must have shape (N, 3)".into(),
            )));
        }
        let flat = points.as_slice().map_err(|_| not_contiguous())?;
        let points3: &[[f64; 3]] = as_triples(flat);
        let times = times.as_slice().map_err(|_| not_contiguous())?;
        let stats = StreamStats::default();
        let axes = axes_from(axes);
        let within = partitions.map(Partitions::new);
        let values = without_gil(py, || {
            evaluate_within(
                &self.reader,
                axes,
                times,
                points3,
                &spec,
                within.as_ref(),
                &stats,
            )
        })?;
        let (atoms, calls, contributions) = stats.snapshot();
        let counters = PyDict::new(py);
        counters.set_item("atoms_read", atoms)?;
        counters.set_item("read_calls", calls)?;
        counters.set_item("contributions", contributions)?;
        Ok((values.into_pyarray(py), counters))
    }

    /// The stored time steps and weights the temporal method uses for `time`.
    #[staticmethod]
    fn time_levels(
        times: PyReadonlyArray1<'_, f64>,
        time: f64,
        temporal: &str,
    ) -> PyResult<Vec<(usize, f64)>> {
        let temporal = Temporal::parse(temporal).map_err(to_py)?;
        time_weights(
            times.as_slice().map_err(|_| not_contiguous())?,
            time,
            temporal,
        )
        .map_err(to_py)
    }

    /// Reads the nodes `[start, stop)` with `stride` along each axis (`ranges` for x, y, z)
    /// at time index `t`: a float32 array `(nz, ny, nx, ncomp)`.
    fn cutout<'py>(
        &self,
        py: Python<'py>,
        t: usize,
        axes: [AxisTuple; 3],
        ranges: [(i64, i64); 3],
        stride: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        let axes = axes_from(axes);
        let mut nodes: [Vec<usize>; 3] = Default::default();
        for (i, name) in ['x', 'y', 'z'].into_iter().enumerate() {
            nodes[i] =
                axis_nodes(&axes[i], ranges[i].0, ranges[i].1, stride, name).map_err(to_py)?;
        }
        let nc = self.geometry.ncomp;
        let shape = [nodes[2].len(), nodes[1].len(), nodes[0].len(), nc];
        let mut out = vec![0f32; shape.iter().product()];
        let (atom, per_shard) = (self.geometry.atom, self.geometry.atoms_per_side());
        without_gil(py, || {
            read_cutout(&*self.reader, t, &nodes, atom, per_shard, nc, &mut out)
        })?;
        let array = numpy::ndarray::ArrayD::from_shape_vec(shape.to_vec(), out)
            .map_err(|e| pyo3::exceptions::PyRuntimeError::new_err(e.to_string()))?;
        Ok(array.into_pyarray(py))
    }
}

/// Views a flat `(N, 3)` buffer as N triples.
pub fn as_triples(flat: &[f64]) -> &[[f64; 3]] {
    // SAFETY: [f64; 3] has the size and alignment of three consecutive f64.
    unsafe { std::slice::from_raw_parts(flat.as_ptr().cast::<[f64; 3]>(), flat.len() / 3) }
}

pub fn not_contiguous() -> PyErr {
    to_py(turbdb_core::Error::InvalidArgument(
        "data must be C-contiguous".into(),
    ))
}
