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
    /// The service.
    #[doc(hidden)]
    fn service(&self) -> &TimerService;
}

impl Holder for TimerService {
    #[inline]
    fn service(&self) -> &TimerService {
        self
    }
}

impl Holder for &'static TimerService {
    #[inline]
    fn service(&self) -> &TimerService {
        self
    }
}
