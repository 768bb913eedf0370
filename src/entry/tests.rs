//! The cell's life cycle: counts, task ownership, type erasure.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// Counts runs, cancels and drops of one task.
#[derive(Default)]
struct Counts {
    runs: AtomicUsize,
    cancels: AtomicUsize,
    drops: AtomicUsize,
}

/// A task that implements the trait by hand (boxed paths), with a payload to move.
struct Probe(Arc<Counts>, [u64; 4]);

impl TimerTask for Probe {
    fn run(self: Box<Self>) {
        self.0.runs.fetch_add(1, SeqCst);
    }
    fn cancelled(self: Box<Self>) {
        self.0.cancels.fetch_add(1, SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.0.drops.fetch_add(1, SeqCst);
    }
}

fn probe() -> (Probe, Arc<Counts>) {
    let counts = Arc::new(Counts::default());
    (Probe(counts.clone(), [7; 4]), counts)
}

fn seen(c: &Counts) -> (usize, usize, usize) {
    (c.runs.load(SeqCst), c.cancels.load(SeqCst), c.drops.load(SeqCst))
}

#[test]
fn each_way_out_moves_the_task_exactly_once() {
    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    assert!(e.state().try_link());
    e.expire(5).unwrap().run();
    assert_eq!(seen(&c), (1, 0, 1));

    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    e.cancel().unwrap().0.cancelled();
    assert_eq!(seen(&c), (0, 1, 1));

    // Borrowed, as `Timeout::cancel` takes it: told, or dropped unused.
    let (task, c) = probe();
    let (e, handle) = EntryRef::new_pair(5, task);
    drop(e);
    let (borrowed, linked) = handle.cancel_borrowed().unwrap();
    assert_eq!(linked, Cancelled::Unlinked);
    borrowed.cancelled();
    assert_eq!(seen(&c), (0, 1, 1));
    assert!(handle.cancel_borrowed().is_none(), "final");
    let (task, c) = probe();
    let (e, handle) = EntryRef::new_pair(5, task);
    drop(handle.cancel_borrowed().unwrap());
    assert_eq!(seen(&c), (0, 0, 1));
    drop((e, handle));

    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    let boxed = e.cancel().unwrap().0.boxed();
    assert_eq!(seen(&c), (0, 0, 0));
    boxed.run();
    assert_eq!(seen(&c), (1, 0, 1));

    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    let back: Probe = e.cancel().unwrap().0.downcast();
    assert_eq!(back.1, [7; 4]);
    drop(back);
    assert_eq!(seen(&c), (0, 0, 1));

    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    drop(e.cancel().unwrap());
    assert_eq!(seen(&c), (0, 0, 1), "an unused right drops the task");
}

#[test]
fn the_last_reference_drops_a_pending_task_and_only_a_pending_one() {
    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    let e2 = e.clone();
    drop(e);
    assert_eq!(seen(&c), (0, 0, 0));
    drop(e2);
    assert_eq!(seen(&c), (0, 0, 1));

    let (task, c) = probe();
    let e = EntryRef::new(5, task);
    assert!(e.state().try_link());
    let owned = e.expire(5).unwrap();
    drop(e);
    assert_eq!(seen(&c), (0, 0, 0), "the winner's right keeps the cell alive");
    owned.run();
    assert_eq!(seen(&c), (1, 0, 1));
}

#[test]
fn closures_run_in_place_and_only_once() {
    let ran = Arc::new(AtomicUsize::new(0));
    let r = ran.clone();
    let e = EntryRef::new(0, move || {
        r.fetch_add(1, SeqCst);
    });
    assert!(e.cancel().is_some());
    assert!(!e.state().try_link());
    assert!(e.expire(0).is_none(), "final");
    assert_eq!(ran.load(SeqCst), 0);
    let r = ran.clone();
    let e = EntryRef::new(0, move || {
        r.fetch_add(1, SeqCst);
    });
    assert!(e.state().try_link());
    e.expire(0).unwrap().run();
    assert_eq!(ran.load(SeqCst), 1);
    // A zero-sized closure needs no storage at all.
    let e = EntryRef::new(0, || {});
    assert!(e.state().try_link());
    e.expire(0).unwrap().run();
}

#[test]
#[should_panic(expected = "task type mismatch")]
fn downcast_checks_the_type() {
    let e = EntryRef::new(0, || {});
    let _: Probe = e.cancel().unwrap().0.downcast();
}

#[test]
fn the_header_is_24_bytes() {
    assert_eq!(std::mem::size_of::<Header>(), 24);
    assert_eq!(std::mem::size_of::<Cell<fn()>>(), 32);
}

/// `clone` with `old` references already counted, in a child process (the test binary
/// again, this test alone, `CLONE_AT` naming `old`): prints a marker once the clone is
/// made, and leaves the cell's count as it found it.
#[cfg(all(unix, not(miri)))]
fn clone_at_in_child(old: u32) {
    let e = EntryRef::new(0, || {});
    e.header().refs.store(old, SeqCst);
    let e2 = e.clone();
    println!("{CLONED}{old}");
    e.header().refs.store(2, SeqCst);
    drop(e2);
    drop(e);
}

#[cfg(all(unix, not(miri)))]
const CLONED: &str = "cloned with refs at ";

/// The clone guard, as a class: a clone with `MAX_REFS` references or fewer counted goes
/// on (one below the threshold and at it), one with more aborts the process (one above,
/// and the most a `u32` holds), as `Arc::clone` does. Each case in a child process, since
/// an abort cannot be caught (and so not under Miri, which spawns no process).
#[cfg(all(unix, not(miri)))]
#[test]
fn clone_aborts_past_max_refs_and_only_past() {
    const CHILD: &str = "SHARDWHEEL_CLONE_AT";
    if let Ok(old) = std::env::var(CHILD) {
        clone_at_in_child(old.parse().unwrap());
        return;
    }
    let name = concat!(module_path!(), "::clone_aborts_past_max_refs_and_only_past");
    let name = name.split_once("::").unwrap().1;
    for (old, aborts) in [(MAX_REFS - 1, false), (MAX_REFS, false), (MAX_REFS + 1, true), (u32::MAX, true)] {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--test-threads=1", "--nocapture"])
            .env(CHILD, old.to_string())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        if aborts {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.status.signal(),
                Some(6),
                "a clone at {old} references must abort (SIGABRT): {}\n{text}",
                out.status
            );
            assert!(!text.contains(CLONED), "the clone at {old} was made:\n{text}");
        } else {
            assert!(
                out.status.success() && text.contains(&format!("{CLONED}{old}\n")),
                "a clone at {old} references must go on: {}\n{text}",
                out.status
            );
        }
    }
}

/// An entry's `Debug` shows where it stands; a task taken out of it shows no more than
/// that it is one (its type is erased).
#[test]
fn debug_shows_the_entrys_state() {
    let e = EntryRef::new(7, || {});
    assert_eq!(format!("{e:?}"), "EntryRef { state: Pending { deadline: 7 }, .. }");
    assert!(e.state().try_link(), "filed by its shard");
    let task = e.expire(7).expect("pending");
    assert_eq!(format!("{e:?}"), "EntryRef { state: Expired { deadline: 7 }, .. }");
    assert_eq!(format!("{task:?}"), "OwnedTask { .. }");
    drop(task);
}

/// `ptr_eq`: the same cell through any reference to it, never another's (what
/// `Timeout::ptr_eq` answers, and how a paused scope finds a registered timeout).
#[test]
fn ptr_eq_is_the_same_cell() {
    let a = EntryRef::new(1, || {});
    let b = EntryRef::new(1, || {});
    assert!(a.ptr_eq(&a.clone()));
    assert!(!a.ptr_eq(&b) && !b.ptr_eq(&a));
}
