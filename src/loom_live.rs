//! Under loom, the number of cells alive, so a model can tell that the shard let go of an
//! entry without waiting for a stop. A plain thread-local: loom runs a model's threads on one
//! OS thread.

use std::cell::Cell;

std::thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static STAGES: Cell<isize> = const { Cell::new(0) };
    static PAGES: Cell<isize> = const { Cell::new(0) };
    static HANDLES: Cell<isize> = const { Cell::new(0) };
}

/// Shard handles (`shard/handle.rs`) made and not yet freed.
pub(crate) fn add_handle(n: isize) {
    HANDLES.with(|l| l.set(l.get() + n));
}

pub(crate) fn handles() -> isize {
    HANDLES.with(Cell::get)
}

/// Pool pages (`entry/pool/page.rs`) made and not yet released.
pub(crate) fn add_page(n: isize) {
    PAGES.with(|l| l.set(l.get() + n));
}

pub(crate) fn pages() -> isize {
    PAGES.with(Cell::get)
}

/// Stages (`stage.rs`) made and not yet freed.
pub(crate) fn add_stage(n: isize) {
    STAGES.with(|l| l.set(l.get() + n));
}

pub(crate) fn stages() -> isize {
    STAGES.with(Cell::get)
}

pub(crate) fn add(n: isize) {
    LIVE.with(|l| l.set(l.get() + n));
}

pub(crate) fn get() -> isize {
    LIVE.with(Cell::get)
}

pub(crate) fn reset() {
    LIVE.with(|l| l.set(0));
    STAGES.with(|l| l.set(0));
    PAGES.with(|l| l.set(0));
    HANDLES.with(|l| l.set(0));
}
