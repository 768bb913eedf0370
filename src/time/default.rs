//! The process-wide default service that the ambient calls use: started on first use (a
//! shard per core, as [`TimerService::new`]), configurable once before that, never stopped.
//! A thread that paused its clock (`paused.rs`) uses its scope's service instead.
//!
//! It lives in a `static` and is never dropped, so a future can hold it as a
//! `&'static TimerService` (`future/holder.rs`): reading it is one `Acquire` load of the
//! `OnceLock`'s state once it has started, and no reference count moves.

use crate::builder::Builder;
use crate::service::TimerService;
use crate::time::error::ConfigureError;
use std::sync::OnceLock;

static DEFAULT: OnceLock<TimerService> = OnceLock::new();

/// The default service, started here if this is its first use.
///
/// # Panics
///
/// If it must start and cannot (the system refused a shard thread): with no service there is
/// no timer to wait on, and the ambient calls have no error to return (tokio's panic when
/// there is no runtime is the same kind).
#[inline]
pub(crate) fn service() -> &'static TimerService {
    if let Some(scope) = super::paused::current() {
        scope.touch();
        return scope.service();
    }
    match DEFAULT.get() {
        Some(service) => service,
        None => start(),
    }
}

#[cold]
#[inline(never)]
fn start() -> &'static TimerService {
    DEFAULT.get_or_init(|| {
        TimerService::new()
            .unwrap_or_else(|e| panic!("shardwheel::time: the default timer service could not start: {e}"))
    })
}

/// The default service if it has started, without starting it.
pub(crate) fn started() -> Option<&'static TimerService> {
    DEFAULT.get()
}

/// Builds the default service from `builder`, before its first use; see
/// [`time::configure`](crate::time::configure).
pub(crate) fn configure(builder: Builder) -> Result<(), ConfigureError> {
    if DEFAULT.get().is_some() {
        return Err(ConfigureError::AlreadyStarted);
    }
    let service = builder.build().map_err(ConfigureError::Build)?;
    // Another thread may have started it meanwhile: then this one is dropped (its shards
    // stop on their own) and the caller told.
    DEFAULT.set(service).map_err(|_| ConfigureError::AlreadyStarted)
}
