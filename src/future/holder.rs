//! How a future holds the service it waits on.
//!
//! A [`Sleep`](crate::Sleep) made by [`TimerService::sleep`] holds a clone of the handle, so
//! the shards run for as long as the sleep lives; making that clone and dropping it are two
//! read-modify-writes on the service's reference count, a cache line every thread that
//! makes a future writes. The ambient calls of [`time`](crate::time) wait on a service that
//! lives for the rest of the process (the default one, never dropped): they hold a
//! `&'static` reference, and a future made and dropped, or completed, before it registers
//! touches nothing another thread writes.

use crate::service::TimerService;

/// What a future holds its service by: a [`TimerService`] handle of its own, or a
/// `&'static TimerService` (a service that is never dropped). Sealed: the trait is public
/// only so that it may bound the futures' type parameter, in a module nobody outside the
/// crate can name.
pub trait Holder: Send + Sync + Unpin + 'static {
    /// Whether the sleep keeps its deadline as asked (the ambient `Sleep::deadline` returns
    /// it; the explicit sleep's deadline is its tick): its cell is then 8 bytes bigger
    /// (`future/sleep/slot.rs`).
    #[doc(hidden)]
    const KEEPS_AT: bool;

    /// The service.
    #[doc(hidden)]
    fn service(&self) -> &TimerService;
}

impl Holder for TimerService {
    const KEEPS_AT: bool = false;

    #[inline]
    fn service(&self) -> &TimerService {
        self
    }
}

impl Holder for &'static TimerService {
    const KEEPS_AT: bool = true;

    #[inline]
    fn service(&self) -> &TimerService {
        self
    }
}
