//! The one error type of turbdb-core; the Python bindings map each variant to a
//! `turbdb.TurbdbError` subclass.

use std::path::PathBuf;

/// Everything that can go wrong in the core.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller passed arguments that cannot be honoured (shapes, sizes, ranges).
    #[error("{0}")]
    InvalidArgument(String),

    /// A file could not be read, written or renamed.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },

    /// Stored bytes failed a checksum or do not decode to an atom.
    #[error("{path}: {message}")]
    Corrupt {
        /// The shard file concerned.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },

    /// A method, operator, temporal mode or strategy name that does not exist (the core
    /// knows no dataset or field names: those are checked in Python).
    #[error("{0}")]
    UnknownName(String),

    /// A point outside the domain on a non-periodic axis, or too far from it on a periodic
    /// one to wrap onto it.
    #[error("{0}")]
    OutOfDomain(String),

    /// Data that a request needs has not been written (yet).
    #[error("{0}")]
    Missing(String),

    /// A request whose answer would exceed the size one call may return; the message says
    /// how to split it.
    #[error("{0}")]
    TooLarge(String),
    /// The node engine holds as much work as it may; the request can be retried.
    #[error("{message}")]
    Busy {
        /// What is full and what to do.
        message: String,
        /// Seconds after which a retry is likely to be admitted.
        retry_after: f64,
    },

    /// The evaluation was stopped before it ended (its caller set the stop flag: the
    /// client went away).
    #[error("{0}")]
    Stopped(String),

    /// A bug inside the engine (a panic caught while serving a batch): the queries it hit
    /// failed, the engine went on.
    #[error("{0}")]
    Internal(String),
}

/// Result alias of the core.
pub type Result<T> = std::result::Result<T, Error>;

/// A number as an error message shows it: as Python prints it, its shortest digits, with
/// an exponent when very large or small (`{}` wrote 1e308 as 309 digits).
pub(crate) fn number(x: f64) -> String {
    let magnitude = x.abs();
    if x == 0.0 || !x.is_finite() || (1e-4..1e16).contains(&magnitude) {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// A computed bound (origin + n·spacing) as an error message shows it: to 12 significant
/// digits, so that 0.050000000000000044 reads 0.05.
pub(crate) fn bound(x: f64) -> String {
    number(format!("{x:.11e}").parse().unwrap_or(x))
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// A copy of this error, for each of the queries that share one failure (several
    /// queries waiting for one corrupt atom).
    pub fn duplicate(&self) -> Self {
        match self {
            Error::InvalidArgument(m) => Error::InvalidArgument(m.clone()),
            Error::Io { path, source } => Error::Io {
                path: path.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Corrupt { path, message } => Error::Corrupt {
                path: path.clone(),
                message: message.clone(),
            },
            Error::UnknownName(m) => Error::UnknownName(m.clone()),
            Error::OutOfDomain(m) => Error::OutOfDomain(m.clone()),
            Error::Missing(m) => Error::Missing(m.clone()),
            Error::TooLarge(m) => Error::TooLarge(m.clone()),
            Error::Busy {
                message,
                retry_after,
            } => Error::Busy {
                message: message.clone(),
                retry_after: *retry_after,
            },
            Error::Stopped(m) => Error::Stopped(m.clone()),
            Error::Internal(m) => Error::Internal(m.clone()),
        }
    }

    /// A corruption found in `path`.
    pub fn corrupt(path: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{bound, number};

    #[test]
    fn numbers_in_messages_are_short() {
        assert_eq!(number(0.07), "0.07");
        assert_eq!(number(-5.0), "-5");
        assert_eq!(number(0.0), "0");
        assert_eq!(number(1e308), "1e308");
        assert_eq!(number(-2.5e-7), "-2.5e-7");
        assert_eq!(number(123456.75), "123456.75");
        assert_eq!(number(f64::NAN), "NaN");
    }

    #[test]
    fn computed_bounds_are_shown_without_rounding_noise() {
        assert_eq!(bound(-0.5 + 11.0 * 0.05), "0.05"); // 0.050000000000000044
        assert_eq!(bound(0.1 + 0.2), "0.3");
        assert_eq!(bound(6.283185307179586), "6.28318530718");
        assert_eq!(bound(1e308), "1e308");
        assert_eq!(bound(f64::INFINITY), "inf");
    }
}
