//! Why a reconcile run could not compare: each variant keeps its cause, and none holds
//! the admin key (messages quote at most the start of a provider's error body, with the
//! key struck out should the provider echo it).

use crate::store::StoreError;
use std::error::Error;
use std::fmt;
use std::path::PathBuf;

#[derive(Debug)]
pub enum ReconcileError {
    /// A command-line value that cannot be used, with its flag.
    Argument {
        flag: &'static str,
        message: String,
    },
    /// The admin key's environment variable is not set.
    NoAdminKey {
        var: &'static str,
    },
    /// A saved report that cannot be read.
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A report (file or page) that is not the provider's shape, with where it broke.
    Parse {
        what: String,
        /// Where in the document it broke (`data[0].results[1].input_tokens`).
        at: String,
        source: serde_json::Error,
    },
    /// The usage API could not be reached or broke off.
    Http {
        url: String,
        context: &'static str,
        source: Box<dyn Error + Send + Sync>,
    },
    /// The usage API answered with an error status.
    Status {
        url: String,
        status: u16,
        body: String,
    },
    /// The usage API's pages do not end (a cursor seen twice, or too many pages).
    Pagination {
        url: String,
        message: String,
    },
    Store(StoreError),
    /// More records in one day than one query may read: the sums would be wrong.
    TooManyRecords {
        day: String,
        limit: usize,
    },
}

impl fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReconcileError::Argument { flag, message } => write!(f, "{flag}: {message}"),
            ReconcileError::NoAdminKey { var } => write!(
                f,
                "{var} is not set: the usage report needs the organization's admin key (or give --file)"
            ),
            ReconcileError::Read { path, .. } => write!(f, "cannot read {}", path.display()),
            ReconcileError::Parse { what, at, .. } => {
                write!(f, "{what} is not a usage report page: at `{at}`")
            }
            ReconcileError::Http { url, context, .. } => write!(f, "GET {url}: {context}"),
            ReconcileError::Status { url, status, body } => {
                write!(f, "GET {url}: the provider answered {status}: {body}")
            }
            ReconcileError::Pagination { url, message } => write!(f, "GET {url}: {message}"),
            ReconcileError::Store(_) => write!(f, "cannot read the usage records"),
            ReconcileError::TooManyRecords { day, limit } => write!(
                f,
                "{day} has more than {limit} usage records for these channels; reconcile fewer channels at a time"
            ),
        }
    }
}

impl Error for ReconcileError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            ReconcileError::Read { source, .. } => Some(source),
            ReconcileError::Parse { source, .. } => Some(source),
            ReconcileError::Http { source, .. } => Some(source.as_ref()),
            ReconcileError::Store(e) => Some(e),
            ReconcileError::Argument { .. }
            | ReconcileError::NoAdminKey { .. }
            | ReconcileError::Status { .. }
            | ReconcileError::Pagination { .. }
            | ReconcileError::TooManyRecords { .. } => None,
        }
    }
}

impl From<StoreError> for ReconcileError {
    fn from(e: StoreError) -> Self {
        ReconcileError::Store(e)
    }
}

/// The error and its causes on one line: `a: b: c`. The store's, which does not repeat
/// a cause its error's own text already ends with (a store error prints its cause).
pub use crate::store::chain;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_names_every_cause() {
        let e = ReconcileError::Read {
            path: "/nope/report.json".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "No such file"),
        };
        assert_eq!(chain(&e), "cannot read /nope/report.json: No such file");
        let e = ReconcileError::Store(StoreError::unavailable("down"));
        assert_eq!(
            chain(&e),
            "cannot read the usage records: store unavailable: down"
        );
    }
}
