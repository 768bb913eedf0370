//! The pool's slot life cycle: size classes, local reuse, foreign frees, abandoned pages.

use super::page::{PAGE_BYTES, Page};
use super::*;
use std::collections::HashSet;

/// A slot sent to another thread to be freed there. A pointer, not its address as an
/// integer: a pointer made back from an integer has no provenance under Miri's strict
/// provenance (`.ci/miri.sh`), and its writes to the slot would be undefined behaviour.
struct Sent(NonNull<u8>);

// SAFETY: a slot not in use is plain memory, which any thread may free.
unsafe impl Send for Sent {}

#[test]
fn size_classes_step_by_16_bytes_up_to_the_limit() {
    // Every size up to the smallest class is in it, however small.
    for size in 0..=MIN_POOLED {
        assert_eq!(class_of(size, 1), Some(0), "{size} bytes");
    }
    assert_eq!(class_of(24, 8), Some(0));
    assert_eq!(class_of(32, 8), Some(0));
    assert_eq!(class_of(40, 8), Some(1));
    assert_eq!(class_of(48, 16), Some(1));
    assert_eq!(class_of(MAX_POOLED, 8), Some(CLASSES - 1));
    assert_eq!(class_of(MAX_POOLED + 8, 8), None, "larger cells are boxed");
    assert_eq!(class_of(32, 32), None, "more aligned cells are boxed");
    for class in 0..CLASSES {
        assert_eq!(class_of(slot_bytes(class), 8), Some(class));
    }
}

#[test]
fn a_slot_freed_on_its_thread_is_the_next_one_handed_out() {
    let a = alloc(0).unwrap();
    let b = alloc(0).unwrap();
    assert_ne!(a, b);
    assert_eq!(a.as_ptr().addr() % 16, 0);
    assert_eq!(Page::of(a), Page::of(b), "one page holds both");
    // SAFETY: `a` came from `alloc` and is not used.
    unsafe { free(a) };
    assert_eq!(alloc(0).unwrap(), a);
    // SAFETY: both came from `alloc` and are not used.
    unsafe {
        free(a);
        free(b);
    }
}

/// Allocates slots of `class` until one lands on a new page; returns the slots of the
/// first page, and the first slot of the next.
fn fill_a_page(class: usize) -> (Vec<NonNull<u8>>, NonNull<u8>) {
    let mut slots = vec![alloc(class).unwrap()];
    let page = Page::of(slots[0]);
    loop {
        let slot = alloc(class).unwrap();
        if Page::of(slot) != page {
            return (slots, slot);
        }
        slots.push(slot);
    }
}

#[test]
fn a_slot_freed_on_another_thread_comes_back_to_its_owner() {
    let (slots, next) = fill_a_page(2);
    assert!(slots.len() * 64 > PAGE_BYTES * 9 / 10, "a page holds {} slots of 64 B", slots.len());
    assert!(slots.len() * 64 <= PAGE_BYTES);
    let distinct: HashSet<_> = slots.iter().collect();
    assert_eq!(distinct.len(), slots.len(), "each slot handed out once");
    // Free every slot of the full first page on another thread: they go to its remote stack.
    let sent: Vec<Sent> = slots.iter().map(|&s| Sent(s)).collect();
    std::thread::spawn(move || {
        for Sent(slot) in sent {
            // SAFETY: each came from `alloc` on the parent thread and is not used.
            unsafe { free(slot) };
        }
    })
    .join()
    .unwrap();
    // Fill the second page; the heap then sweeps and finds the first one's slots again.
    let (second, third) = fill_a_page(2);
    assert_eq!(Page::of(second[0]), Page::of(next));
    assert_eq!(Page::of(third), Page::of(slots[0]), "the first page is used again, not a third one");
    assert!(distinct.contains(&third));
    for slot in second.into_iter().chain([next, third]) {
        // SAFETY: each came from `alloc` and is not used.
        unsafe { free(slot) };
    }
}

#[test]
fn a_page_outlives_its_thread_until_its_last_cell_is_freed() {
    // Cells made on a thread that exits, freed afterwards here: the page is abandoned, and
    // the last free releases it (valgrind, `.ci/valgrind.sh`, checks it is released once).
    let sent: Vec<Sent> = std::thread::spawn(|| {
        let mut slots: Vec<Sent> = (0..100).map(|_| Sent(alloc(1).unwrap())).collect();
        // One freed on its own thread before the exit.
        // SAFETY: from `alloc`, not used.
        unsafe { free(slots.remove(0).0) };
        slots
    })
    .join()
    .unwrap();
    for Sent(slot) in sent {
        // SAFETY: from `alloc` on the exited thread, not used.
        unsafe { free(slot) };
    }
}

#[test]
fn a_thread_whose_heap_is_gone_gets_no_slot_and_frees_remotely() {
    struct OnExit(Option<NonNull<u8>>);
    impl Drop for OnExit {
        fn drop(&mut self) {
            // Runs among the thread's thread-local destructors, maybe after the heap's.
            if let Some(slot) = self.0.take() {
                // SAFETY: from `alloc` on this thread, not used.
                unsafe { free(slot) };
            }
            let _ = alloc(0).map(|s| {
                // SAFETY: just handed out.
                unsafe { free(s) }
            });
        }
    }
    std::thread_local! { static EXIT: std::cell::RefCell<OnExit> = const { std::cell::RefCell::new(OnExit(None)) }; }
    std::thread::spawn(|| {
        let a = alloc(0).unwrap();
        EXIT.with(|e| e.borrow_mut().0 = Some(a));
    })
    .join()
    .unwrap();
}

/// The pages of `class` the calling thread's heap holds.
fn pages(class: usize) -> usize {
    HEAP.with(|heap| heap.pages(class))
}

/// Frees `slots` on another thread: onto their pages' remote stacks.
fn free_elsewhere(slots: Vec<NonNull<u8>>) {
    let sent: Vec<Sent> = slots.into_iter().map(Sent).collect();
    std::thread::spawn(move || {
        for Sent(slot) in sent {
            // SAFETY: each came from `alloc` on the parent thread and is not used.
            unsafe { free(slot) };
        }
    })
    .join()
    .unwrap();
}

#[test]
fn a_page_emptied_elsewhere_goes_back_at_the_current_pages_refill() {
    // Page A full, then emptied on another thread; page B current.
    let (a, first_b) = fill_a_page(3);
    let a_len = a.len();
    free_elsewhere(a);
    assert_eq!(pages(3), 2);
    // B handed out whole (A held as many slots), half of it freed elsewhere: its next
    // allocation takes those back (a refill that keeps B), and sweeps A away.
    let mut b: Vec<_> = (1..a_len).map(|_| alloc(3).unwrap()).collect();
    b.push(first_b);
    assert!(b.iter().all(|&s| Page::of(s) == Page::of(first_b)), "B is full");
    let half = b.split_off(b.len() / 2);
    free_elsewhere(half);
    let c = alloc(3).unwrap();
    assert_eq!(Page::of(c), Page::of(first_b), "B kept: half of it is free");
    assert_eq!(pages(3), 1, "the page emptied elsewhere is given back");
    for slot in b.into_iter().chain([c]) {
        // SAFETY: each came from `alloc` and is not used.
        unsafe { free(slot) };
    }
}

/// Every sweep comes round, not only the first: three times, a page is emptied on another
/// thread while the current page cycles one slot through its local list (never running dry,
/// so never refilling); within `SWEEP_EVERY` frees the count reaches a sweep, which gives the
/// page back, and the count starts again (a countdown not restarted swept once, then never).
#[test]
fn a_page_emptied_elsewhere_goes_back_while_every_free_is_local() {
    let mut leftover: Option<NonNull<u8>> = None;
    for round in 1..=3 {
        if let Some(slot) = leftover.take() {
            // SAFETY: from `alloc`, not used.
            unsafe { free(slot) };
        }
        // A full page, then emptied on another thread; the next page is current.
        let (a, b) = fill_a_page(4);
        free_elsewhere(a);
        assert_eq!(pages(4), 2, "round {round}: the emptied page waits for a sweep");
        // One more than the count: whatever it stands at, a sweep falls inside.
        for _ in 0..=heap::SWEEP_EVERY {
            let slot = alloc(4).unwrap();
            // SAFETY: just handed out, not used.
            unsafe { free(slot) };
        }
        assert_eq!(pages(4), 1, "round {round}: the page emptied elsewhere is given back");
        leftover = Some(b);
    }
    // SAFETY: from `alloc`, not used.
    unsafe { free(leftover.unwrap()) };
}

/// A page emptied by its own thread's frees, not the current page, is given back at its last
/// free wherever it is listed: the middle, the last, then the first of four pages (the last
/// mapped is current), and the pages left each keep their place. Twice.
#[test]
fn a_page_emptied_on_its_thread_goes_back_from_any_place_in_the_list() {
    std::thread::spawn(|| {
        let class = 2;
        let listed = || HEAP.with(|heap| heap.listed(class));
        let free_all = |slots: Vec<NonNull<u8>>| {
            for slot in slots {
                // SAFETY: each came from `alloc` and is not used.
                unsafe { free(slot) };
            }
        };
        for round in 0..2 {
            // Pages A, B, C full, D current (one cell).
            let (a, first_b) = fill_a_page(class);
            let (mut b, first_c) = fill_a_page(class);
            let (mut c, d) = fill_a_page(class);
            assert_eq!(Page::of(b[0]), Page::of(first_b), "round {round}");
            b.push(first_b);
            c.push(first_c);
            let page = |slots: &[NonNull<u8>]| Page::of(slots[0]);
            let (pa, pb, pc, pd) = (page(&a), page(&b), page(&c), Page::of(d));
            let mut expected = vec![pa, pb, pc, pd];
            assert_eq!(listed(), expected, "round {round}");
            // The middle one: the last takes its place.
            free_all(b);
            expected = vec![pa, pd, pc];
            assert_eq!(listed(), expected, "round {round}: B, the second of four, given back");
            // The last one.
            free_all(c);
            expected = vec![pa, pd];
            assert_eq!(listed(), expected, "round {round}: C, the last of three, given back");
            // The first one.
            free_all(a);
            assert_eq!(listed(), vec![pd], "round {round}: A, the first of two, given back");
            free_all(vec![d]);
            assert_eq!(listed(), vec![pd], "round {round}: the current page is kept though empty");
            HEAP.with(Heap::trim);
            assert!(listed().is_empty(), "round {round}");
        }
    })
    .join()
    .unwrap();
}

/// `Heap::trim` gives back every empty page, the current one too, and forgets it as
/// current: the next cell comes from a page mapped anew (one still current after it was
/// unmapped would be written to there). Twice, each with a full page kept beside it.
#[test]
fn trim_gives_back_the_current_page_and_the_next_cell_gets_a_new_one() {
    std::thread::spawn(|| {
        for round in 0..2 {
            let (full, spill) = fill_a_page(1);
            assert_eq!(pages(1), 2, "round {round}");
            // SAFETY: `spill` came from `alloc` and is not used. Its page, the current one,
            // is empty now and kept as current.
            unsafe { free(spill) };
            assert_eq!(pages(1), 2, "round {round}: the current page is kept though empty");
            HEAP.with(Heap::trim);
            assert_eq!(pages(1), 1, "round {round}: the empty current page is given back, the full one kept");
            let next = alloc(1).unwrap();
            assert_ne!(Page::of(next), Page::of(full[0]), "round {round}: the full page has no room");
            assert_eq!(pages(1), 2, "round {round}: a page mapped for the next cell");
            // SAFETY: `next` is a fresh slot of `slot_bytes(1)` bytes, ours.
            unsafe { next.as_ptr().write_bytes(0xA5, slot_bytes(1)) };
            // SAFETY: each came from `alloc` and is not used.
            unsafe {
                for slot in full {
                    free(slot);
                }
                free(next);
            }
            HEAP.with(Heap::trim);
            assert_eq!(pages(1), 0, "round {round}: every page given back");
        }
    })
    .join()
    .unwrap();
}

/// A heap prints its thread's id and the pages it holds, on a fresh thread: none, then one
/// once a cell is taken; that page prints its owner and class.
#[test]
fn a_heap_prints_its_id_and_its_pages() {
    std::thread::spawn(|| {
        let before = HEAP.with(|heap| format!("{heap:?}"));
        assert!(before.starts_with("Heap { id: ") && before.ends_with(", pages: Some(0) }"), "{before}");
        let slot = alloc(0).unwrap();
        let after = HEAP.with(|heap| format!("{heap:?}"));
        assert!(after.ends_with(", pages: Some(1) }"), "{after}");
        // Its page prints its owner, the heap's id, and its size class.
        let page = HEAP.with(|heap| heap.listed(0))[0];
        // SAFETY: the heap's pages live until it releases or abandons them.
        let page = unsafe { page.as_ref() };
        assert!(after.starts_with(&format!("Heap {{ id: {}, ", page.owner())), "{after}");
        assert_eq!(format!("{page:?}"), format!("Page {{ owner: {}, class: 0, .. }}", page.owner()));
        // SAFETY: from `alloc` on this thread, unused.
        unsafe { free(slot) };
    })
    .join()
    .unwrap();
}
