//! The one conversion of core errors into the `turbdb.exceptions` hierarchy, and the
//! helper that runs core work without the GIL. Binding functions return [`Result`], so `?`
//! converts core errors and Python errors alike; a panic in the core never crosses into
//! Python as `PanicException` (a `BaseException`): it becomes a `TurbdbError`.

use std::panic::{catch_unwind, AssertUnwindSafe};

use pyo3::prelude::*;
use turbdb_core::engine::kernel_pool;
use turbdb_core::Error;

mod exceptions {
    pyo3::import_exception!(turbdb.exceptions, TurbdbError);
    pyo3::import_exception!(turbdb.exceptions, InvalidRequestError);
    pyo3::import_exception!(turbdb.exceptions, OutOfDomainError);
    pyo3::import_exception!(turbdb.exceptions, UnknownOptionError);
    pyo3::import_exception!(turbdb.exceptions, CorruptDataError);
    pyo3::import_exception!(turbdb.exceptions, StorageError);
    pyo3::import_exception!(turbdb.exceptions, LimitExceededError);
    pyo3::import_exception!(turbdb.exceptions, EngineBusyError);
    pyo3::import_exception!(turbdb.exceptions, QueryCancelledError);
}

/// An error on its way to Python: from the core, from Python itself, or a core panic.
#[derive(Debug)]
pub enum PyTurbdbErr {
    /// An error of the core crate.
    Core(Error),
    /// An error Python raised (argument conversion, numpy).
    Python(PyErr),
    /// The core panicked: a bug, reported as such.
    Panic(String),
}

/// What binding functions return.
pub type Result<T> = std::result::Result<T, PyTurbdbErr>;

impl From<Error> for PyTurbdbErr {
    fn from(err: Error) -> Self {
        PyTurbdbErr::Core(err)
    }
}

impl From<PyErr> for PyTurbdbErr {
    fn from(err: PyErr) -> Self {
        PyTurbdbErr::Python(err)
    }
}

impl From<numpy::AsSliceError> for PyTurbdbErr {
    fn from(_: numpy::AsSliceError) -> Self {
        invalid("arrays must be C-contiguous")
    }
}

impl From<numpy::ndarray::ShapeError> for PyTurbdbErr {
    fn from(err: numpy::ndarray::ShapeError) -> Self {
        invalid(format!("array shape: {err}"))
    }
}

impl From<PyTurbdbErr> for PyErr {
    fn from(err: PyTurbdbErr) -> PyErr {
        use exceptions::*;
        let core = match err {
            PyTurbdbErr::Python(err) => return err,
            PyTurbdbErr::Panic(message) => {
                return TurbdbError::new_err(format!(
                    "internal error in the turbdb engine ({message}); please report it with the \
                     call that caused it"
                ))
            }
            PyTurbdbErr::Core(core) => core,
        };
        let message = core.to_string();
        match core {
            Error::InvalidArgument(_) | Error::Missing(_) => InvalidRequestError::new_err(message),
            Error::Io { .. } => StorageError::new_err(message),
            Error::Corrupt { .. } => CorruptDataError::new_err(message),
            Error::UnknownName(_) => UnknownOptionError::new_err(message),
            Error::OutOfDomain(_) => OutOfDomainError::new_err(message),
            Error::TooLarge(_) => LimitExceededError::new_err(message),
            Error::Busy { retry_after, .. } => EngineBusyError::new_err((message, retry_after)),
            Error::Stopped(_) => QueryCancelledError::new_err(message),
            Error::Internal(_) => TurbdbError::new_err(message),
        }
    }
}

/// A core error as the Python exception it maps to, for code that returns `PyResult`.
pub fn to_py(err: Error) -> PyErr {
    PyTurbdbErr::Core(err).into()
}

/// An invalid argument, as the error the bindings return.
pub fn invalid(message: impl Into<String>) -> PyTurbdbErr {
    PyTurbdbErr::Core(Error::InvalidArgument(message.into()))
}

/// Runs `work` with the GIL released, on the kernel's pool (a forked process's own where
/// its parent's did not survive the fork); a panic inside it comes back as an error.
pub fn without_gil<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> turbdb_core::Result<T> + Send,
) -> Result<T> {
    match py.detach(|| kernel_pool::run(|| catch_unwind(AssertUnwindSafe(work)))) {
        Ok(result) => Ok(result?),
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(PyTurbdbErr::Panic(message))
        }
    }
}
