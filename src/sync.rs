//! The one place that names the concurrency primitives.
//!
//! Every atomic, `Arc`, cell and thread the crate uses comes from here, so that the same code
//! runs on `std` in a normal build and on [loom]'s model-checked replacements under
//! `RUSTFLAGS="--cfg loom"` (tokio's `src/loom/`, crossbeam's `primitive` do the same).
//!
//! `UnsafeCell` is given loom's closure-based `with`/`with_mut` API in the std build too, so
//! both builds share one body of code and loom can see every access to the cell.
//!
//! [loom]: https://docs.rs/loom

#[cfg(not(loom))]
mod imp {
    pub(crate) use std::sync::Arc;
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    pub(crate) use std::sync::{Mutex, MutexGuard};
    pub(crate) use std::thread;

    /// Starts a shard thread with a name.
    pub(crate) fn spawn_named<T: Send + 'static>(
        name: String,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<thread::JoinHandle<T>> {
        thread::Builder::new().name(name).spawn(f)
    }

    /// `std::cell::UnsafeCell` with loom's access API.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(value: T) -> Self {
            Self(std::cell::UnsafeCell::new(value))
        }

        /// Runs `f` with a mutable raw pointer to the contents. Dereferencing it is the
        /// caller's promise that no other access overlaps.
        #[inline]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }

        /// Runs `f` with a raw pointer to the contents, to read through. Dereferencing it is
        /// the caller's promise that no write overlaps (other reads may).
        #[inline]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(loom)]
mod imp {
    pub(crate) use loom::cell::UnsafeCell;
    pub(crate) use loom::sync::atomic::{
        AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    pub(crate) use loom::sync::{Arc, Mutex, MutexGuard};
    pub(crate) use loom::thread;

    /// Starts a shard thread; loom's threads have no names.
    pub(crate) fn spawn_named<T: Send + 'static>(
        _name: String,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::io::Result<thread::JoinHandle<T>> {
        Ok(thread::spawn(f))
    }
}

pub(crate) use imp::*;

/// `std`'s in both builds: loom has no `OnceLock`. The one use (the mailbox's driver thread,
/// set once as the thread is spawned, read by producers that wake it) is a publication of
/// a value that never changes afterwards, which `OnceLock` itself orders.
pub(crate) use std::sync::OnceLock;

/// A thread-local with a `const` initializer: std's fast `const` form in a normal build,
/// loom's thread-local (which has no `const` form) under loom.
macro_rules! const_thread_local {
    ($(#[$attr:meta])* static $name:ident: $t:ty = $init:expr;) => {
        #[cfg(not(loom))]
        std::thread_local! { $(#[$attr])* static $name: $t = const { $init }; }
        #[cfg(loom)]
        loom::thread_local! { $(#[$attr])* static $name: $t = $init; }
    };
}
pub(crate) use const_thread_local;

/// Plain `std` primitives, never loom's:
/// - atomics for the few process-wide counters that hand out ids (services, threads, cores).
///   They take part in no protocol, so loom need not see them, and as `static`s they could
///   not be loom's anyway;
/// - the time of a paused clock (`TestClock`), which only tests move and loom never sees
///   (under loom the mocked clock stands in for every clock), and the TSC estimate's scale
///   (`clock/tsc/`, not built under loom);
/// - the `Arc`/`Weak` pair that holds the service's own record (`TimerService`,
///   `WeakTimerService`): its count decides only when the last user handle is gone, which
///   closes the mailboxes (a protocol loom does see); loom's `Arc` has no `Weak`;
/// - the ambient calls' paused scopes (`time/paused.rs`): a test's clock, its relay wakers
///   and its auto-advance thread, above the service, which the loom models never build;
/// - the overflow timer's thread and the condition variable that rings it
///   (`future/overflow.rs`): its map's lock is the facade's, and its model
///   (`loom-tests/overflow.rs`) runs the thread's turn as a step of its own.
pub(crate) mod plain {
    /// The overflow timer's ring; its thread is not run under loom, so neither is this.
    #[cfg(not(loom))]
    pub(crate) use std::sync::Condvar;
    pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    pub(crate) use std::sync::{Arc, Mutex, Weak};
    pub(crate) use std::thread;
}
