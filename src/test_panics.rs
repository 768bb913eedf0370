//! Panics for the unit tests of the paths that catch them: a payload whose own drop panics,
//! and a hook that keeps these deliberate panics (and only these) out of the test output.

use std::sync::Once;

/// The message of the last panic in a chain of [`PanicsOnDrop`]s.
pub(crate) const MARKER: &str = "deliberate test panic";

/// A panic payload whose own `Drop` panics: `PanicsOnDrop(n)` sets off `n` more panics as
/// it is dropped, each payload's drop panicking with the next (the last with [`MARKER`]).
/// Caught with a plain `catch_unwind(..).is_err()`, its drop panics outside the catch.
#[derive(Debug)]
pub(crate) struct PanicsOnDrop(pub(crate) u32);

impl Drop for PanicsOnDrop {
    fn drop(&mut self) {
        match self.0 {
            0 => {}
            1 => std::panic::panic_any(MARKER),
            n => std::panic::panic_any(PanicsOnDrop(n - 1)),
        }
    }
}

/// Panics with a payload that sets off `n` more panics as it is dropped: `n + 1` in all.
pub(crate) fn panic_with_payload_that_panics(n: u32) -> ! {
    quiet_deliberate_panics();
    std::panic::panic_any(PanicsOnDrop(n))
}

/// Installs, once per process, a hook that prints every panic but these deliberate ones.
pub(crate) fn quiet_deliberate_panics() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            if payload.downcast_ref::<&str>() != Some(&MARKER) && !payload.is::<PanicsOnDrop>() {
                default(info);
            }
        }));
    });
}
