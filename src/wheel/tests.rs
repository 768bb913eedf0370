//! The wheel against a model: a `BTreeMap` ordered by (effective deadline, insertion order).
//!
//! The model's rule: an entry fires at the first `poll(now)` with `now` at or after its
//! effective deadline, which is its deadline, or the wheel's tick at insertion if that is
//! later (a deadline already past fires on the next poll); entries with equal effective
//! deadlines fire in insertion order; `NEVER` never fires.

use super::*;
use proptest::prelude::*;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;

/// A value with a fixed deadline.
#[derive(Clone, Copy, Debug, PartialEq)]
struct At<V>(u64, V);

impl<V> Timed for At<V> {
    fn deadline(&self) -> u64 {
        self.0
    }
}

/// The values of what fired.
fn values<V: Copy>(out: &[At<V>]) -> Vec<V> {
    out.iter().map(|a| a.1).collect()
}

/// The reference: what must fire, in order.
#[derive(Default)]
struct Model {
    queue: BTreeMap<(u64, u64), u32>,
    where_is: HashMap<u32, (u64, u64)>,
    seq: u64,
}

impl Model {
    fn insert(&mut self, elapsed: u64, deadline: u64, id: u32) {
        let at = (deadline.min(NEVER).max(elapsed), self.seq);
        self.seq += 1;
        self.queue.insert(at, id);
        self.where_is.insert(id, at);
    }

    fn remove(&mut self, id: u32) {
        let at = self.where_is.remove(&id).unwrap();
        self.queue.remove(&at);
    }

    fn pop_due(&mut self, now: u64) -> Option<u32> {
        let (&(eff, seq), &id) = self.queue.iter().next()?;
        (eff <= now && eff != NEVER).then(|| {
            self.queue.remove(&(eff, seq));
            self.where_is.remove(&id);
            id
        })
    }
}

#[derive(Clone, Debug)]
enum Op {
    /// Insert at `elapsed + delta` (saturating).
    Insert(u64),
    /// Insert with the same deadline as an earlier insert (index into the history).
    InsertSame(usize),
    /// Insert before `elapsed` by this much (a late arrival).
    InsertPast(u64),
    /// Remove a live entry (index into the live set).
    Remove(usize),
    /// Advance by this many ticks and poll everything due.
    Advance(u64),
    /// Advance and poll with a step budget, as the shard does, until nothing is due.
    AdvanceBudget(u64, usize),
    /// Advance and take what is due one entry at a time, as `LocalWheel` does.
    AdvancePop(u64),
    /// Advance (often not at all) and poll once, with a small budget: what it leaves due
    /// stays mid-slot, for the ops that follow to insert, remove and refile into (as the
    /// shard's mail does between its turn's slices, and `LocalWheel`'s user between pops).
    Slice(u64, usize),
    /// Move a live entry's deadline to `elapsed + delta` and refile it.
    Refile(usize, u64),
}

fn delta() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..70,
        3 => 0u64..5000,
        2 => 0u64..(1 << 20),
        1 => (1u64 << 30)..(1 << 40),
        1 => (1u64 << 36)..(1 << 50),
        1 => (1u64 << 50)..NEVER,
        1 => Just(u64::MAX),
    ]
}

fn advance() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => Just(1u64),
        3 => 0u64..70,
        2 => 0u64..5000,
        1 => Just(64u64),
        1 => Just(4096u64),
        1 => 0u64..(1 << 24),
        1 => (1u64 << 36)..(1 << 40),
        1 => (1u64 << 40)..(NEVER / 4),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => delta().prop_map(Op::Insert),
        2 => any::<usize>().prop_map(Op::InsertSame),
        1 => (0u64..200).prop_map(Op::InsertPast),
        3 => any::<usize>().prop_map(Op::Remove),
        4 => advance().prop_map(Op::Advance),
        2 => (advance(), 1usize..8).prop_map(|(a, b)| Op::AdvanceBudget(a, b)),
        2 => advance().prop_map(Op::AdvancePop),
        2 => (any::<usize>(), delta()).prop_map(|(i, d)| Op::Refile(i, d)),
        3 => (prop_oneof![2 => Just(0u64), 1 => advance()], 1usize..4).prop_map(|(a, b)| Op::Slice(a, b)),
    ]
}

/// Runs `ops` on a wheel and the model side by side; every firing must match, in order.
fn check(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut wheel: Wheel<At<u32>> = Wheel::new();
    let mut model = Model::default();
    let mut live: Vec<(u32, Key)> = Vec::new();
    let mut history: Vec<u64> = Vec::new();
    let mut next_id = 0u32;
    let mut now = 0u64;
    let mut out = Vec::new();
    for op in ops {
        match op {
            Op::Insert(_) | Op::InsertSame(_) | Op::InsertPast(_) => {
                let deadline = match op {
                    Op::Insert(d) => wheel.elapsed().saturating_add(d),
                    Op::InsertSame(i) if !history.is_empty() => history[i % history.len()],
                    Op::InsertSame(_) => wheel.elapsed(),
                    Op::InsertPast(d) => wheel.elapsed().saturating_sub(d),
                    _ => unreachable!(),
                };
                let id = next_id;
                next_id += 1;
                model.insert(wheel.elapsed(), deadline, id);
                let key = wheel.insert(At(deadline, id));
                prop_assert_eq!(wheel.get(key).map(|a| a.1), Some(id));
                live.push((id, key));
                history.push(deadline);
            }
            Op::Remove(i) => {
                if live.is_empty() {
                    continue;
                }
                let (id, key) = live.swap_remove(i % live.len());
                prop_assert_eq!(wheel.remove(key).1, id);
                model.remove(id);
            }
            Op::Refile(i, delta) => {
                if live.is_empty() {
                    continue;
                }
                let (id, key) = live[i % live.len()];
                let deadline = wheel.elapsed().saturating_add(delta);
                wheel.get_mut(key).unwrap().0 = deadline;
                wheel.refile(key);
                model.remove(id);
                model.insert(wheel.elapsed(), deadline, id);
            }
            Op::AdvancePop(by) => {
                now = now.saturating_add(by).min(NEVER - 1);
                while let Some(key) = wheel.pop_due(now) {
                    let fired = wheel.take(key).1;
                    prop_assert_eq!(Some(fired), model.pop_due(now), "wrong entry popped at {}", now);
                    live.retain(|&(id, _)| id != fired);
                }
                prop_assert_eq!(model.pop_due(now), None, "an entry due at {} was not popped", now);
                prop_assert_eq!(wheel.elapsed(), now);
            }
            Op::Slice(by, budget) => {
                now = now.saturating_add(by).min(NEVER - 1);
                out.clear();
                wheel.poll(now, budget, &mut out);
                prop_assert!(out.len() <= budget);
                for fired in values(&out) {
                    prop_assert_eq!(Some(fired), model.pop_due(now), "wrong entry fired mid-slot at {}", now);
                    live.retain(|&(id, _)| id != fired);
                }
            }
            Op::Advance(by) | Op::AdvanceBudget(by, _) => {
                now = now.saturating_add(by).min(NEVER - 1);
                let budget = if let Op::AdvanceBudget(_, b) = op { b } else { usize::MAX };
                loop {
                    out.clear();
                    let more = wheel.poll(now, budget, &mut out);
                    prop_assert!(out.len() <= budget);
                    for fired in values(&out) {
                        prop_assert_eq!(Some(fired), model.pop_due(now), "wrong entry fired at {}", now);
                        live.retain(|&(id, _)| id != fired);
                    }
                    if !more {
                        break;
                    }
                }
                prop_assert_eq!(model.pop_due(now), None, "an entry due at {} did not fire", now);
                prop_assert_eq!(wheel.elapsed(), now);
                // The next wake-up is never later than the earliest model deadline.
                if let Some((&(eff, _), _)) = model.queue.iter().next().filter(|((e, _), _)| *e != NEVER) {
                    let next = wheel.next_deadline();
                    prop_assert!(next.is_some_and(|t| t <= eff && t > now), "next {:?}, due {}", next, eff);
                }
            }
        }
        prop_assert_eq!(wheel.len(), model.queue.len());
    }
    Ok(())
}

/// 512 cases unless `PROPTEST_CASES` says otherwise (CI's valgrind run asks for fewer).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(512)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn wheel_matches_model(ops in prop::collection::vec(op(), 1..200)) {
        check(ops)?;
    }
}

#[test]
fn fires_at_deadline_never_before() {
    let mut wheel = Wheel::new();
    wheel.insert(At(100, "a"));
    assert_eq!(wheel.next_deadline(), Some(64), "the level-1 slot holding 100 starts at 64");
    let mut out = Vec::new();
    assert!(!wheel.poll(99, usize::MAX, &mut out));
    assert!(out.is_empty());
    assert_eq!(wheel.next_deadline(), Some(100), "cascaded to level 0");
    wheel.poll(100, usize::MAX, &mut out);
    assert_eq!(values(&out), ["a"]);
    assert!(wheel.is_empty());
    assert_eq!(wheel.next_deadline(), None);
}

#[test]
fn same_tick_fires_in_insertion_order_across_levels() {
    let mut wheel = Wheel::new();
    let mut out = Vec::new();
    wheel.insert(At(5000, 1));
    wheel.poll(4000, usize::MAX, &mut out);
    wheel.insert(At(5000, 2));
    wheel.poll(4990, usize::MAX, &mut out);
    wheel.insert(At(5000, 3));
    wheel.poll(5000, usize::MAX, &mut out);
    assert_eq!(values(&out), [1, 2, 3]);
}

#[test]
fn never_is_held_and_does_not_wake() {
    let mut wheel = Wheel::new();
    let key = wheel.insert(At(NEVER, 7));
    wheel.insert(At(u64::MAX, 8));
    assert_eq!(wheel.next_deadline(), None);
    let mut out = Vec::new();
    wheel.poll(NEVER - 1, usize::MAX, &mut out);
    assert!(out.is_empty());
    assert_eq!(wheel.remove(key).1, 7);
    assert_eq!(wheel.drain().map(|a| a.1).collect::<Vec<_>>(), [8]);
}

#[test]
fn beyond_the_top_level_waits_on_the_horizon() {
    let mut wheel = Wheel::new();
    let far = (1u64 << HORIZON_BITS) * 3 + 17;
    wheel.insert(At(far, "far"));
    assert_eq!(wheel.next_deadline(), Some((1u64 << HORIZON_BITS) * 3));
    let mut out = Vec::new();
    wheel.poll(far - 1, usize::MAX, &mut out);
    assert!(out.is_empty(), "a far deadline must never be wrapped into a near slot");
    wheel.poll(far, usize::MAX, &mut out);
    assert_eq!(values(&out), ["far"]);
}

/// The horizon's list, the ready list and the `NEVER` list are lists of their own, apart from
/// every level's slots: an entry on each, beside two in the last slot of the top level (two
/// deadlines: the slot cascades entry by entry) and one in its first, each fires at its
/// deadline and no other. (The horizon's list as that last slot's fired everything on time:
/// only a debug build's check that a cascade never files an entry back onto its own slot saw
/// it, as the horizon's entry met that slot's turn.)
#[test]
fn the_lists_past_the_levels_are_apart_from_the_slots() {
    let top = SLOT_BITS * (LEVELS as u32 - 1);
    let first_top = (1u64 << top) + 3; // the top level's slot 1 (slot 0 holds now)
    let last_top = ((SLOTS_PER_LEVEL as u64 - 1) << top) + 5; // its last slot
    let past = (1u64 << HORIZON_BITS) + 9; // past the levels: the horizon
    let mut wheel = Wheel::new();
    let entries = [
        (past, "past"),
        (last_top + 1000, "last 2"),
        (last_top, "last"),
        (NEVER, "never"),
        (first_top, "first"),
        (0, "now"),
    ];
    for (deadline, id) in entries {
        wheel.insert(At(deadline, id));
    }
    let mut out = Vec::new();
    for (deadline, id) in
        [(0, "now"), (first_top, "first"), (last_top, "last"), (last_top + 1000, "last 2"), (past, "past")]
    {
        if deadline > 0 {
            wheel.poll(deadline - 1, usize::MAX, &mut out);
            assert!(out.is_empty(), "{:?} fired before {id}'s deadline", values(&out));
        }
        wheel.poll(deadline, usize::MAX, &mut out);
        assert_eq!(values(&out), [id]);
        out.clear();
    }
    assert_eq!(wheel.len(), 1, "never");
}

#[test]
fn a_slot_of_one_deadline_moves_whole_and_keeps_its_order() {
    let mut wheel = Wheel::new();
    for i in 0..1000u32 {
        wheel.insert(At(70_000, i));
    }
    wheel.insert(At(80_000, 1000));
    let mut out = Vec::new();
    // Two levels down, a splice each: the whole expiry is the firings and one cascade move
    // per level and per slot.
    let mut steps = 0;
    while wheel.poll(80_000, 1, &mut out) {
        steps += 1;
    }
    assert_eq!(values(&out), (0..=1000).collect::<Vec<_>>());
    assert!(steps < 1001 + 10, "{steps} steps");
}

#[test]
fn a_mass_expiry_is_served_in_budgeted_slices() {
    let mut wheel = Wheel::new();
    for i in 0..10_000u32 {
        wheel.insert(At(3000, i));
    }
    let mut out = Vec::new();
    let mut slices = 0;
    while wheel.poll(3000, 256, &mut out) {
        slices += 1;
        assert!(out.len() <= 256 * slices);
    }
    assert!(slices >= 10_000 / 256, "{slices} slices");
    assert_eq!(values(&out), (0..10_000).collect::<Vec<_>>());
}

/// A value whose deadline can move while it waits, as a timeout's does on `reset`.
#[derive(Debug)]
struct Moving(Rc<Cell<u64>>);

impl Timed for Moving {
    fn deadline(&self) -> u64 {
        self.0.get()
    }
}

#[test]
fn a_deadline_pushed_out_rides_down_to_its_old_deadline_then_is_refiled() {
    let mut wheel = Wheel::new();
    let at = Rc::new(Cell::new(5000));
    wheel.insert(Moving(at.clone()));
    // Pushed out before the level-2 slot holding 5000 (which starts at 4096) cascades.
    at.set(9000);
    let mut out = Vec::new();
    // The slot holds one deadline: it cascades whole, by the deadline its entry was filed
    // with, so the entry rides down to its old tick (lazy re-arm) ...
    wheel.poll(4999, usize::MAX, &mut out);
    assert!(out.is_empty());
    assert_eq!(wheel.next_deadline(), Some(5000), "rode down by its old deadline");
    // ... where, found not due, it is filed again by its new deadline.
    wheel.poll(5000, usize::MAX, &mut out);
    assert!(out.is_empty(), "it must not come out at its old deadline");
    assert_eq!(wheel.next_deadline(), Some(8192), "re-filed by its new deadline at its old one");
    wheel.poll(8999, usize::MAX, &mut out);
    assert!(out.is_empty());
    wheel.poll(9000, usize::MAX, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn a_deadline_moved_earlier_comes_out_at_the_next_cascade() {
    let mut wheel = Wheel::new();
    let at = Rc::new(Cell::new(5000));
    wheel.insert(Moving(at.clone()));
    at.set(10);
    let mut out = Vec::new();
    // The wheel only looks again when its slot is processed, and a slot whose entries were
    // all filed with one deadline moves whole by that deadline: it comes out late, by its
    // old deadline at the latest, but not lost (the service's refile notice is what makes
    // an earlier reset prompt).
    wheel.poll(4095, usize::MAX, &mut out);
    assert!(out.is_empty());
    wheel.poll(5000, usize::MAX, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn nodes_are_16_bytes() {
    assert_eq!(std::mem::size_of::<slab::Node<std::ptr::NonNull<u8>>>(), 16);
}

#[test]
fn pop_due_never_hands_out_a_ready_entry_whose_deadline_moved_later() {
    // The inline fast path of `pop_due` takes the ready list's front: it must check the
    // deadline the entry reports now, as `step` does, not trust the list it is on.
    let mut wheel = Wheel::new();
    assert_eq!(wheel.pop_due(100), None);
    let moving = Rc::new(Cell::new(50));
    let a = wheel.insert(Moving(moving.clone())); // at or before elapsed: the ready list
    let b = wheel.insert(Moving(Rc::new(Cell::new(100)))); // behind it, due
    moving.set(200); // a lazy reset to later, while on the ready list
    assert_eq!(wheel.pop_due(100), Some(b), "the moved front is re-filed, the next one fires");
    wheel.take(b);
    assert_eq!(wheel.pop_due(100), None, "never before its new deadline");
    assert_eq!(wheel.pop_due(199), None);
    assert_eq!(wheel.pop_due(200), Some(a));
}

#[test]
fn a_past_deadline_inserted_mid_slot_fires_behind_the_slot_s_older_entries() {
    // `place_at`'s guard: while a slot is under way, an entry already due joins that slot's
    // tail (not the ready list, which is served first), so insertion order holds.
    let mut wheel = Wheel::new();
    for (deadline, id) in [(64, 'a'), (64, 'b'), (100, 'c')] {
        wheel.insert(At(deadline, id)); // level 1, slot 1: mixed deadlines
    }
    let mut out = Vec::new();
    assert!(wheel.poll(64, 1, &mut out), "budget spent with the slot under way");
    assert_eq!(values(&out), ['a']);
    wheel.insert(At(10, 'd')); // already past
    out.clear();
    wheel.poll(64, usize::MAX, &mut out);
    assert_eq!(values(&out), ['b', 'd'], "d was inserted after b, at the same effective tick");
}

/// `place_at`'s other guard: while a slot above level 0 is under way (its entries cascading
/// down one step at a time), an entry inserted with a deadline in its span joins its tail,
/// behind its older entries of the same deadline, rather than go straight to the lower level
/// ahead of them.
#[test]
fn an_entry_inserted_in_the_span_of_a_cascading_slot_fires_behind_its_older_entries() {
    let mut wheel = Wheel::new();
    for (deadline, id) in [(100, 'a'), (70, 'b')] {
        wheel.insert(At(deadline, id)); // level 1, slot 1 (ticks 64 to 127): mixed deadlines
    }
    let mut out = Vec::new();
    assert!(wheel.poll(64, 1, &mut out), "budget spent with the slot under way");
    assert!(out.is_empty(), "the one step moved a down a level");
    wheel.insert(At(70, 'c')); // b's deadline, b still on the slot under way
    wheel.poll(200, usize::MAX, &mut out);
    assert_eq!(values(&out), ['b', 'c', 'a'], "c was inserted after b, for the same tick");
}

/// `detach`'s guard: removing (or refiling) the last entry of the slot under way ends that
/// slot's turn; the wheel then goes on to what else is due, and never pops the emptied slot.
#[test]
fn removing_the_last_entry_of_the_slot_under_way_ends_its_turn() {
    for refile in [false, true] {
        let mut wheel = Wheel::new();
        wheel.insert(At(100, 'a'));
        let b = wheel.insert(At(70, 'b')); // level 1, slot 1, with a
        let mut out = Vec::new();
        assert!(wheel.poll(64, 1, &mut out), "budget spent with the slot under way");
        if refile {
            wheel.get_mut(b).unwrap().0 = 300;
            wheel.refile(b);
        } else {
            assert_eq!(wheel.remove(b).1, 'b');
        }
        assert_eq!(wheel.next_deadline(), Some(100), "refile {refile}: nothing is due before a");
        wheel.poll(400, usize::MAX, &mut out);
        let want: &[char] = if refile { &['a', 'b'] } else { &['a'] };
        assert_eq!(values(&out), want, "refile {refile}");
        assert_eq!(wheel.len(), 0);
    }
}

/// `splice_to` moves a list to where `file` puts an entry of the same deadline, with the
/// same marks (the slot's bit and its one deadline, or the horizon's earliest): for a
/// deadline due (before `elapsed`, at it) and ahead, at one below and one above the first
/// deadline of each level, up to the first beyond the levels (the horizon), at two
/// `elapsed`. The wheel splices only a slot's own deadline, which never reaches the
/// horizon; the contract holds there too.
#[test]
fn a_spliced_list_goes_where_its_deadline_is_filed() {
    /// The scratch list the splice starts from: a level-0 slot none of the deadlines below
    /// is filed in.
    const SCRATCH: ListId = 40;
    let at = |elapsed: u64| {
        let mut wheel = Wheel::new();
        wheel.poll(elapsed, usize::MAX, &mut Vec::<At<()>>::new());
        assert_eq!(wheel.elapsed(), elapsed);
        wheel
    };
    for elapsed in [0u64, 5_000] {
        let mut deadlines = vec![elapsed.saturating_sub(1), elapsed, elapsed + 1];
        for level in 1..=LEVELS as u32 {
            let shift = SLOT_BITS * level;
            let first = ((elapsed >> shift) + 1) << shift;
            assert_eq!(level_for(elapsed, first), level as usize);
            deadlines.extend([first - 1, first, first + 1]);
        }
        for deadline in deadlines {
            let mut filed = at(elapsed);
            let key = filed.insert(At(deadline, ())).0;
            let list = filed.slab.unlink(key);
            assert_ne!(list, Some(SCRATCH));
            let mut spliced = at(elapsed);
            let moved = spliced.slab.alloc(At(deadline, ())).unwrap();
            spliced.slab.push_back(SCRATCH, moved);
            spliced.splice_to(SCRATCH, deadline);
            assert!(spliced.slab.is_empty(SCRATCH));
            for level in 0..LEVELS {
                let (a, b) = (&filed.levels[level], &spliced.levels[level]);
                assert_eq!(a.occupied, b.occupied, "{deadline} at {elapsed}: level {level}'s slots");
                assert_eq!(a.common, b.common, "{deadline} at {elapsed}: level {level}'s deadlines");
            }
            assert_eq!(filed.horizon_min, spliced.horizon_min, "{deadline} at {elapsed}: the horizon");
            assert_eq!(spliced.slab.unlink(moved), list, "{deadline} at {elapsed}: the list");
        }
    }
}
