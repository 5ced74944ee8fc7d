//! The simulator's errors.

use crate::{CheckError, QuotaError};
use std::fmt;
use std::path::PathBuf;

/// What can go wrong when simulating or replaying. Malformed log lines are
/// not errors: a replay counts and reports them.
#[derive(Debug)]
#[non_exhaustive]
pub enum SimError {
    /// A file could not be read or written.
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A policy string could not be understood.
    Policy {
        /// The text given.
        input: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The quota cannot be represented by the algorithm it was given to.
    Quota(QuotaError),
    /// A request the scenario sends can never pass (a bug in a scenario).
    Check(CheckError),
    /// A replay was given no policy to apply.
    NoPolicy,
    /// A replay's nginx log format, or its key or cost variable, cannot be
    /// used (the message says why).
    Format(String),
    /// A replay's option cannot be used (the message says why).
    Invalid(String),
    /// A file the replay writes (the decisions) could not be written.
    Output {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Drawing a chart failed.
    Plot(String),
    /// Writing the JSON summary failed.
    Json(String),
}

impl fmt::Display for SimError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SimError::Io { path, source } => write!(f, "{}: {source}", path.display()),
            SimError::Policy { input, reason } => write!(f, "policy {input:?}: {reason}"),
            SimError::Quota(e) => write!(f, "{e}"),
            SimError::Check(e) => write!(f, "{e}"),
            SimError::NoPolicy => {
                f.write_str("no policy given (for example --policy \"token:100/m\")")
            }
            SimError::Format(e) => write!(f, "log format: {e}"),
            SimError::Invalid(e) => f.write_str(e),
            SimError::Output { path, source } => write!(f, "{}: {source}", path.display()),
            SimError::Plot(e) => write!(f, "drawing a chart: {e}"),
            SimError::Json(e) => write!(f, "writing JSON: {e}"),
        }
    }
}

impl std::error::Error for SimError {
    // Display already prints the wrapped error's message, so the chain
    // continues below it (as `#[error(transparent)]` does): printed once.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SimError::Io { source, .. } | SimError::Output { source, .. } => source.source(),
            SimError::Quota(e) => e.source(),
            SimError::Check(e) => e.source(),
            _ => None,
        }
    }
}

impl From<QuotaError> for SimError {
    fn from(e: QuotaError) -> Self {
        SimError::Quota(e)
    }
}

impl From<CheckError> for SimError {
    fn from(e: CheckError) -> Self {
        SimError::Check(e)
    }
}

impl SimError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> SimError {
        SimError::Io {
            path: path.into(),
            source,
        }
    }
}
