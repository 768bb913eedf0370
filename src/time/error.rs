//! The errors of the ambient calls: [`Elapsed`], as `tokio::time::error::Elapsed`, and
//! [`ConfigureError`].

use crate::error::BuildError;
pub use crate::error::Elapsed;
use std::fmt;

/// Why [`time::configure`](crate::time::configure) did not take its builder.
///
/// ```
/// use shardwheel::time::{self, error::ConfigureError};
/// use shardwheel::TimerService;
///
/// time::sleep(std::time::Duration::ZERO); // the first ambient call starts the default service
/// let again = time::configure(TimerService::builder().shards(1));
/// assert!(matches!(again, Err(ConfigureError::AlreadyStarted)));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ConfigureError {
    /// The default service has started already (an ambient call, or an earlier
    /// `configure`): its settings can no longer change, and it is never stopped under tasks
    /// that may hold its timers.
    AlreadyStarted,
    /// The builder's settings are refused, as [`Builder::build`](crate::Builder::build)
    /// refuses them; the default service has not started.
    Build(BuildError),
}

impl fmt::Display for ConfigureError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigureError::AlreadyStarted => {
                f.write_str("the default timer service has started already: configure it before its first use")
            }
            ConfigureError::Build(e) => write!(f, "the default timer service's settings: {e}"),
        }
    }
}

impl std::error::Error for ConfigureError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConfigureError::AlreadyStarted => None,
            ConfigureError::Build(e) => Some(e),
        }
    }
}
