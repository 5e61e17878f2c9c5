//! `FieldStore`: one field's Zarr array directory, for writing time steps and verifying.

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use turbdb_core::{ChunkCodec, FieldGeometry, FieldReader, IndexLocation};

use crate::error::{to_py, without_gil};

/// One field of a dataset on disk.
#[pyclass(module = "turbdb._core", frozen)]
pub struct FieldStore {
    root: std::path::PathBuf,
    geometry: FieldGeometry,
    codec: ChunkCodec,
    location: IndexLocation,
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
        let geometry = FieldGeometry::new([grid.0, grid.1, grid.2], ncomp, atom, partition).map_err(to_py)?;
        let location = if index_at_end { IndexLocation::End } else { IndexLocation::Start };
        Ok(Self { root, geometry, codec: ChunkCodec { zstd, crc32c }, location })
    }

    /// Writes time step `t` from a C-contiguous float32 or float64 array `(nz, ny, nx, ncomp)`.
    /// Returns the bytes written.
    #[pyo3(signature = (t, data, sync=false))]
    fn write_step(&self, py: Python<'_>, t: usize, data: &Bound<'_, PyUntypedArray>, sync: bool) -> PyResult<u64> {
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
            without_gil(py, || turbdb_core::write_step(&self.root, &self.geometry, t, slice, sync))
        } else if let Ok(array) = data.cast::<PyArrayDyn<f64>>() {
            let view = array.readonly();
            let slice = view.as_slice().map_err(|_| not_contiguous())?;
            without_gil(py, || turbdb_core::write_step(&self.root, &self.geometry, t, slice, sync))
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
        let reader = FieldReader::new(self.root.clone(), self.geometry.clone(), self.codec, self.location);
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
}

fn not_contiguous() -> PyErr {
    to_py(turbdb_core::Error::InvalidArgument("data must be C-contiguous".into()))
}
