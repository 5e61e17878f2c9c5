//! `StopFlag`: what stops an evaluation already running, from another thread (the
//! service's event loop sets it when a client goes away).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

/// A flag an evaluation looks at before each cell it sums; once set, it fails with
/// `QueryCancelledError`. Given as `stop=` to `FieldStore.query` and `Engine.submit`.
#[pyclass(module = "turbdb._core", frozen)]
pub struct StopFlag {
    pub(crate) flag: Arc<AtomicBool>,
}

#[pymethods]
impl StopFlag {
    #[new]
    fn new() -> Self {
        Self {
            flag: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Stops the evaluations given this flag, at their next cell.
    fn set(&self) {
        self.flag.store(true, Ordering::Relaxed);
    }

    /// Whether it was set.
    fn is_set(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }
}

/// The flag of `stop`, for the core.
pub fn flag_of(stop: Option<PyRef<'_, StopFlag>>) -> Option<Arc<AtomicBool>> {
    stop.map(|s| Arc::clone(&s.flag))
}
