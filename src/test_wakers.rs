//! A waker for the unit tests: one that counts its wake-ups (the integration tests' twin is
//! `tests/common`'s `WakeCount`: the two kinds of test share no module).

use crate::sync::plain::{Arc, AtomicUsize, Ordering};
use std::task::{Wake, Waker};

/// Counts its wake-ups: `Waker::from(Arc<WakeCount>)`, or [`WakeCount::waker`].
#[derive(Debug, Default)]
pub(crate) struct WakeCount(AtomicUsize);

impl Wake for WakeCount {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

impl WakeCount {
    /// A new count at zero and a waker that adds to it.
    pub(crate) fn waker() -> (Arc<WakeCount>, Waker) {
        let count = Arc::new(WakeCount::default());
        (count.clone(), Waker::from(count))
    }

    /// Wake-ups so far.
    pub(crate) fn woken(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}
