//! The one conversion of core errors into the `turbdb.exceptions` hierarchy, and the
//! helper that runs core work without the GIL.

use pyo3::prelude::*;
use turbdb_core::Error;

/// Maps a core error to the matching `turbdb.exceptions` class.
pub fn to_py(err: Error) -> PyErr {
    let class = match &err {
        Error::InvalidArgument(_) => "InvalidRequestError",
        Error::Io { .. } => "StorageError",
        Error::Corrupt { .. } => "CorruptDataError",
        Error::Missing(_) => "InvalidRequestError",
        Error::UnknownName(_) => "UnknownNameError",
        Error::OutOfDomain(_) => "OutOfDomainError",
        Error::Busy { .. } => "EngineBusyError",
    };
    let retry_after = match &err {
        Error::Busy { retry_after, .. } => Some(*retry_after),
        _ => None,
    };
    let message = err.to_string();
    Python::attach(|py| {
        match py
            .import("turbdb.exceptions")
            .and_then(|m| m.getattr(class))
        {
            Ok(cls) => {
                let instance = match retry_after {
                    Some(seconds) => cls.call1((message.clone(), seconds)),
                    None => cls.call1((message.clone(),)),
                };
                match instance {
                    Ok(instance) => PyErr::from_value(instance),
                    Err(e) => e,
                }
            }
            Err(e) => e,
        }
    })
}

/// Runs `work` with the GIL released and converts its error.
pub fn without_gil<T: Send>(
    py: Python<'_>,
    work: impl FnOnce() -> turbdb_core::Result<T> + Send,
) -> PyResult<T> {
    py.detach(work).map_err(to_py)
}
