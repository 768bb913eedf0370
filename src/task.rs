//! What a timeout runs.

use std::panic::{AssertUnwindSafe, catch_unwind};

/// The work a timeout does when it fires, or is told when it is cancelled.
///
/// Any `FnOnce() + Send + 'static` closure is a `TimerTask` whose `run` calls it. Implement
/// the trait yourself to also hear about cancellation:
///
/// ```
/// use shardwheel::TimerTask;
///
/// struct CloseIdle { conn: u64 }
///
/// impl TimerTask for CloseIdle {
///     fn run(self: Box<Self>) {
///         println!("connection {} idle: closing", self.conn);
///     }
///     fn cancelled(self: Box<Self>) {
///         println!("connection {} was active again", self.conn);
///     }
/// }
/// ```
///
/// `run` is called on the shard thread that owns the timeout, so it should be short: a task
/// that blocks holds up every other timeout of that shard. A task that panics is caught and
/// counted in [`Stats::panicked`](crate::Stats::panicked); the shard goes on.
pub trait TimerTask: Send + 'static {
    /// Called once, on the shard's thread, when the timeout fires.
    fn run(self: Box<Self>);

    /// Called once, on the thread whose [`Timeout::cancel`](crate::Timeout::cancel) won,
    /// before that call returns. Not called for timeouts handed back by
    /// [`TimerService::stop`](crate::TimerService::stop): the caller decides there.
    fn cancelled(self: Box<Self>) {}

    /// Runs the task from where the service stores it, without boxing it first. The default
    /// boxes it and calls [`run`](TimerTask::run); closures run in place.
    ///
    /// Sealed, as are the other hidden methods: their signatures name `sealed::Token`,
    /// which no code outside the crate can name, so none can override or call them (the
    /// service's promises, such as `stop()` handing back every timeout, rest on them):
    ///
    /// ```compile_fail,E0050
    /// struct Sneaky;
    /// impl shardwheel::TimerTask for Sneaky {
    ///     fn run(self: Box<Self>) {}
    ///     // Would make `stop()` leave the timeout pending instead of handing it back.
    ///     fn left_pending_by_stop() -> bool {
    ///         true
    ///     }
    /// }
    /// ```
    ///
    /// ```compile_fail,E0050
    /// struct Sneaky;
    /// impl shardwheel::TimerTask for Sneaky {
    ///     fn run(self: Box<Self>) {}
    ///     // Would keep the task on the shard thread under `Builder::offload`.
    ///     fn runs_on_shard() -> bool {
    ///         true
    ///     }
    /// }
    /// ```
    #[doc(hidden)]
    fn run_unboxed(self, _: sealed::Token)
    where
        Self: Sized,
    {
        Box::new(self).run()
    }

    /// As [`run_unboxed`](TimerTask::run_unboxed), for [`cancelled`](TimerTask::cancelled).
    #[doc(hidden)]
    fn cancelled_unboxed(self, _: sealed::Token)
    where
        Self: Sized,
    {
        Box::new(self).cancelled()
    }

    /// Whether the task runs on its shard thread even with
    /// [`Builder::offload`](crate::Builder::offload): `true` for the crate's own short tasks
    /// (a `Sleep`'s wake-up, a series' control), so that a busy pool delays no sleep and a
    /// task on the pool can wait for one. User tasks go to the pool. Sealed.
    #[doc(hidden)]
    fn runs_on_shard(_: sealed::Token) -> bool
    where
        Self: Sized,
    {
        false
    }

    /// Whether [`TimerService::stop`](crate::TimerService::stop) leaves a timeout with this
    /// task pending instead of handing it back: `true` only for a repeating timer's handle
    /// (filed if the user reset it), whose series `stop()` hands back as its waiting run.
    /// Sealed.
    #[doc(hidden)]
    fn left_pending_by_stop(_: sealed::Token) -> bool
    where
        Self: Sized,
    {
        false
    }

    /// Moves the task out of its cell, where `at` points to it, for the winner of the
    /// terminal CAS: a plain read of the whole task, but for a `Sleep`'s wake-up, which
    /// reads its waker alone and leaves the rest (a field the sleep itself still keeps in
    /// the cell) untouched. Sealed.
    ///
    /// # Safety
    /// `at` points to a live, initialized task that the caller has the right to move out,
    /// and the task is not used again (as for `ptr::read`).
    #[doc(hidden)]
    unsafe fn move_out(at: *const Self, _: sealed::Token) -> Self
    where
        Self: Sized,
    {
        // SAFETY: passed on from the caller.
        unsafe { at.read() }
    }

    /// Whether the task is a `Sleep`'s wake-up, which wakes its sleep when dropped: a shard
    /// whose thread failed drops these at once, so that each sleep registers again on a
    /// shard that runs. Sealed.
    #[doc(hidden)]
    fn is_wake_up(_: sealed::Token) -> bool
    where
        Self: Sized,
    {
        false
    }
}

/// Runs `f`, catching its panic, and drops what the panic carried inside a catch too: a
/// payload whose own `Drop` panics (`std::panic::panic_any(PanicsOnDrop)`) would otherwise
/// panic again wherever the caller let go of it, outside any catch (on a shard, that failed
/// the shard: "`ShardFailed` is never a task's panic" rests on this). Returns how many panics
/// were caught: 0 if `f` returned, else 1 for `f`'s and one more for each payload's. Every
/// place that runs or drops a user's task goes through this. Inline, with the payload's
/// drop out of line: `Timeout::cancel` runs this on every cancel, and the common case must
/// cost what a bare `catch_unwind` does.
#[inline]
pub(crate) fn catch_panics(f: impl FnOnce()) -> u64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(()) => 0,
        Err(payload) => drop_payload(payload),
    }
}

/// Drops a caught panic's payload inside a catch; each payload that panics as it is dropped
/// hands over another, dropped the same way, until one drops cleanly. Returns the panics:
/// the one that carried `payload`, and one for each payload's.
#[cold]
#[inline(never)]
pub(crate) fn drop_payload(mut payload: Box<dyn std::any::Any + Send>) -> u64 {
    let mut panics = 1;
    loop {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return panics,
            Err(next) => {
                panics += 1;
                payload = next;
            }
        }
    }
}

/// The seal on [`TimerTask`]'s hidden methods.
pub(crate) mod sealed {
    /// A value only the crate can make and a type only the crate can name (it is public,
    /// in a module that is not): a method that takes one can be neither overridden nor
    /// called from outside.
    #[derive(Clone, Copy, Debug)]
    pub struct Token(());

    /// The one value.
    pub(crate) const TOKEN: Token = Token(());
}

impl<F: FnOnce() + Send + 'static> TimerTask for F {
    fn run(self: Box<Self>) {
        (*self)()
    }

    fn run_unboxed(self, _: sealed::Token) {
        self()
    }

    fn cancelled_unboxed(self, _: sealed::Token) {}
}
