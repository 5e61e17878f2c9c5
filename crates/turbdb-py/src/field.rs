//! `FieldStore`: one field's Zarr array directory, for writing time steps and verifying.

use numpy::{
    IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArray,
    PyUntypedArrayMethods,
};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use turbdb_core::time_weights;
use turbdb_core::{axis_nodes, cutout_shape, human_bytes, read_cutout};
use turbdb_core::{
    evaluate_within_f32, evaluate_within_f64, Axis, ChunkCodec, Error, FieldGeometry, FieldReader,
    IndexLocation, Method, Operator, Partitions, QuerySpec, Sample, Strategy, StreamStats,
    Temporal,
};

use crate::error::{invalid, to_py, without_gil, Result};
use crate::limits::max_result_bytes;
use crate::stop::{flag_of, StopFlag};

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

    /// Writes step `t` from `values` without the GIL, then forgets the shards read so far.
    fn write_values<T: Sample>(
        &self,
        py: Python<'_>,
        t: usize,
        values: &[T],
        sync: bool,
    ) -> Result<u64> {
        let written = without_gil(py, || {
            turbdb_core::write_step(
                &self.root,
                &self.geometry,
                self.reader.field_id(),
                t,
                values,
                sync,
            )
        });
        self.reader.clear_cache();
        written
    }
}

#[pymethods]
impl FieldStore {
    /// `grid` is `(nx, ny, nz)`. `headers_required`: every shard must carry the header
    /// binding it to its place (fields created since headers exist). `field_id`: the id the
    /// field's metadata gives it, which every shard's header must carry and which writes
    /// record (`None`: a field made before ids existed).
    #[new]
    #[pyo3(signature = (root, grid, ncomp, atom, partition, *, zstd=false, crc32c=true, index_at_end=true, headers_required=false, field_id=None))]
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
        headers_required: bool,
        field_id: Option<u64>,
    ) -> Result<Self> {
        let geometry = FieldGeometry::new([grid.0, grid.1, grid.2], ncomp, atom, partition)?;
        let location = if index_at_end {
            IndexLocation::End
        } else {
            IndexLocation::Start
        };
        let codec = ChunkCodec { zstd, crc32c };
        let reader = Arc::new(
            FieldReader::new(root.clone(), geometry.clone(), codec, location)
                .require_headers(headers_required)
                .with_field_id(field_id),
        );
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
    ) -> Result<u64> {
        if self.codec.zstd || !self.codec.crc32c || self.location != IndexLocation::End {
            return Err(invalid(
                "turbdb writes only its own layout (raw float32 + crc32c, index at the end)",
            ));
        }
        let [nx, ny, nz] = self.geometry.grid;
        let expected = [nz, ny, nx, self.geometry.ncomp];
        if data.shape() != expected {
            return Err(invalid(format!(
                "data has shape {:?}, expected {expected:?} (nz, ny, nx, ncomp)",
                data.shape()
            )));
        }
        if let Ok(array) = data.cast::<PyArrayDyn<f32>>() {
            self.write_values(py, t, array.readonly().as_slice()?, sync)
        } else if let Ok(array) = data.cast::<PyArrayDyn<f64>>() {
            self.write_values(py, t, array.readonly().as_slice()?, sync)
        } else {
            Err(invalid(format!(
                "data must be float32 or float64, not {}",
                data.dtype()
            )))
        }
    }

    /// Forgets the shard indexes and mappings read so far: a step was rewritten (by another
    /// process too), and later reads must open the new shards.
    fn forget_cached(&self) {
        self.reader.clear_cache();
    }

    /// Checks every stored shard of time steps `0..nt`; returns a dict with `shards`,
    /// `atoms`, `complete_steps`, `unbound_shards` (shards without a header binding them
    /// to their place) and `problems` (a list of `(path, time_index, message)`).
    fn verify<'py>(&self, py: Python<'py>, nt: usize) -> Result<Bound<'py, PyDict>> {
        let reader = FieldReader::new(
            self.root.clone(),
            self.geometry.clone(),
            self.codec,
            self.location,
        )
        .require_headers(self.reader.headers_required())
        .with_field_id(self.reader.field_id());
        let report = without_gil(py, || Ok(turbdb_core::verify_field(&reader, nt)))?;
        let out = PyDict::new(py);
        out.set_item("shards", report.shards)?;
        out.set_item("atoms", report.atoms)?;
        out.set_item("complete_steps", report.complete_steps)?;
        out.set_item("unbound_shards", report.unbound_shards)?;
        let problems: Vec<(String, usize, String)> = report
            .problems
            .into_iter()
            .map(|p| (p.path.display().to_string(), p.time_index, p.message))
            .collect();
        out.set_item("problems", problems)?;
        Ok(out)
    }

    /// Whether [`Self::query`] takes the answer's dtype (`turbdb.query` asks).
    #[classattr]
    fn takes_dtype() -> bool {
        true
    }

    /// Evaluates a batch query. `points` is `(N, 3)` float64 physical x, y, z; `axes` is
    /// `((n, origin, spacing, periodic),)*3` for x, y, z; `times` the stored times. Returns
    /// the flat values (`N × ncomp × slots`; float64, or `dtype` float32: the sums are
    /// float64 either way) and a dict of counters. `partitions`, a list of
    /// `(t, (sx, sy, sz))`, restricts the sums to the atoms of those partitions.
    /// `stop`: a `StopFlag` that stops the evaluation at its next cell (`QueryCancelledError`).
    #[pyo3(signature = (points, *, axes, times, time, method, operator, temporal, strategy, partitions=None, dtype=None, stop=None))]
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
        dtype: Option<Bound<'py, PyAny>>,
        stop: Option<PyRef<'py, StopFlag>>,
    ) -> Result<(Bound<'py, PyAny>, Bound<'py, PyDict>)> {
        let single = match dtype.map(|d| d.str()).transpose()? {
            None => false,
            Some(name) => match name.to_str()? {
                "float64" => false,
                "float32" => true,
                other => {
                    return Err(invalid(format!(
                        "dtype must be float32 or float64, not {other}"
                    )))
                }
            },
        };
        let spec = QuerySpec {
            method: Method::parse(method)?,
            operator: Operator::parse(operator)?,
            temporal: Temporal::parse(temporal)?,
            time,
            strategy: Strategy::parse(strategy)?,
        };
        if points.shape()[1] != 3 {
            return Err(invalid("points must have shape (N, 3)"));
        }
        let flat = points.as_slice()?;
        let points3: &[[f64; 3]] = as_triples(flat);
        self.check_answer_size(points3.len(), spec.operator.slots())?;
        let times = times.as_slice()?;
        let stats = StreamStats {
            stop: flag_of(stop),
            ..StreamStats::default()
        };
        let axes = axes_from(axes);
        let within = partitions.map(Partitions::new);
        let reader = &self.reader;
        let values = if single {
            let values = without_gil(py, || {
                evaluate_within_f32(reader, axes, times, points3, &spec, within.as_ref(), &stats)
            })?;
            values.into_pyarray(py).into_any()
        } else {
            let values = without_gil(py, || {
                evaluate_within_f64(reader, axes, times, points3, &spec, within.as_ref(), &stats)
            })?;
            values.into_pyarray(py).into_any()
        };
        let (atoms, calls, contributions) = stats.snapshot();
        let counters = PyDict::new(py);
        counters.set_item("atoms_read", atoms)?;
        counters.set_item("read_calls", calls)?;
        counters.set_item("contributions", contributions)?;
        for (phase, seconds) in stats.phases.seconds() {
            counters.set_item(format!("{phase}_seconds"), seconds)?;
        }
        counters.set_item("kernel", stats.kernel().map(|p| p.name()))?;
        Ok((values, counters))
    }

    /// The stored time steps and weights the temporal method uses for `time`.
    #[staticmethod]
    fn time_levels(
        times: PyReadonlyArray1<'_, f64>,
        time: f64,
        temporal: &str,
    ) -> Result<Vec<(usize, f64)>> {
        let temporal = Temporal::parse(temporal)?;
        let times = times.as_slice()?;
        Ok(time_weights(times, time, temporal)?)
    }

    /// Reads the nodes `[start, stop)` with `stride` along each axis (`ranges` for x, y, z)
    /// at time index `t`: a float32 array `(nz, ny, nx, ncomp)`. Its size is checked
    /// against the result size limit before anything is allocated.
    fn cutout<'py>(
        &self,
        py: Python<'py>,
        t: usize,
        axes: [AxisTuple; 3],
        ranges: [(i64, i64); 3],
        stride: usize,
    ) -> Result<Bound<'py, PyArrayDyn<f32>>> {
        let (shape, nodes) = self.cutout_nodes(axes, ranges, stride)?;
        let mut out = vec![0f32; shape.iter().product()];
        self.read_nodes(py, t, &nodes, &mut out)?;
        let array = numpy::ndarray::ArrayD::from_shape_vec(shape.to_vec(), out)?;
        Ok(array.into_pyarray(py))
    }

    /// [`Self::cutout`] into `out`, a C-contiguous float32 array of the cutout's shape
    /// (a slab of a larger answer, say): the values land where the caller wants them,
    /// without a second array to allocate and copy.
    fn cutout_into(
        &self,
        py: Python<'_>,
        t: usize,
        axes: [AxisTuple; 3],
        ranges: [(i64, i64); 3],
        stride: usize,
        out: &Bound<'_, PyArrayDyn<f32>>,
    ) -> Result<()> {
        let (shape, nodes) = self.cutout_nodes(axes, ranges, stride)?;
        if out.shape() != shape.as_slice() {
            return Err(invalid(format!(
                "the output array has shape {:?}; this cutout needs {shape:?}",
                out.shape()
            )));
        }
        let mut out = out.try_readwrite().map_err(|e| invalid(e.to_string()))?;
        let out = out.as_slice_mut()?;
        self.read_nodes(py, t, &nodes, out)
    }
}

impl FieldStore {
    /// A cutout's shape (checked against the result size limit) and its nodes per axis.
    fn cutout_nodes(
        &self,
        axes: [AxisTuple; 3],
        ranges: [(i64, i64); 3],
        stride: usize,
    ) -> Result<([usize; 4], [Vec<usize>; 3])> {
        let axes = axes_from(axes);
        let shape = cutout_shape(
            &axes,
            ranges,
            stride,
            self.geometry.ncomp,
            max_result_bytes(),
        )?;
        let mut nodes: [Vec<usize>; 3] = Default::default();
        for (i, name) in ['x', 'y', 'z'].into_iter().enumerate() {
            nodes[i] = axis_nodes(&axes[i], ranges[i].0, ranges[i].1, stride, name)?;
        }
        Ok((shape, nodes))
    }

    /// Reads the stored values on `nodes` at time index `t` into `out`, the GIL released.
    fn read_nodes(
        &self,
        py: Python<'_>,
        t: usize,
        nodes: &[Vec<usize>; 3],
        out: &mut [f32],
    ) -> Result<()> {
        let (atom, per_shard, nc) = (
            self.geometry.atom,
            self.geometry.atoms_per_side(),
            self.geometry.ncomp,
        );
        without_gil(py, || {
            read_cutout(&*self.reader, t, nodes, atom, per_shard, nc, out)
        })
    }

    /// Refuses a query whose float64 answer (`points × ncomp × slots`) would exceed the
    /// result size limit.
    fn check_answer_size(&self, points: usize, slots: usize) -> Result<()> {
        let limit = max_result_bytes();
        let bytes = (points as u128) * (self.geometry.ncomp * slots * 8) as u128;
        if bytes <= u128::from(limit) {
            return Ok(());
        }
        let batch = limit as u128 / (self.geometry.ncomp * slots * 8) as u128;
        Err(Error::TooLarge(format!(
            "the answer for {points} points is {} of float64; one call may return at most {}: \
             send batches of at most {batch} points",
            human_bytes(bytes as f64),
            human_bytes(limit as f64)
        ))
        .into())
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
