#!/usr/bin/env python3
"""Proves the loom models can fail: breaks the code each one guards, one mutation at a time,
and checks that loom reports it. Prints a Markdown table (kept in loom-tests/README.md).

    python3 loom-tests/mutations.py            # every mutation (several minutes: one rebuild each)
    python3 loom-tests/mutations.py M3 M7      # some of them
    python3 loom-tests/mutations.py --check    # no build: every text and model is still there (CI)

Each mutation replaces one exact piece of source text; the file is restored afterwards,
whatever happens. A mutation whose text is not found fails the run, so the table cannot
silently go stale as the code changes.
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (id, what it breaks, file, exact old text, new text, test target, test name filter)
MUTATIONS = [
    ("M1", "cancel's CAS becomes a blind store", "src/state.rs",
     """            match self.word.compare_exchange_weak(cur, new, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if cur & LINKED != 0 => return Some(Cancelled::Linked),
                Ok(_) => return Some(Cancelled::Unlinked),
                Err(actual) => cur = actual,
            }""",
     """            self.word.store(new, Ordering::Release);
            let _ = &mut cur;
            return Some(if cur & LINKED != 0 { Cancelled::Linked } else { Cancelled::Unlinked });""",
     "loom_state", "cancel_races_expire"),
    ("M2", "expiry's CAS becomes a blind store (ignores cancel and reset)", "src/state.rs",
     """        self.word.compare_exchange(cur, pack(EXPIRED, deadline), Ordering::AcqRel, Ordering::Acquire).is_ok()""",
     """        let _ = cur;
        self.word.store(pack(EXPIRED, deadline), Ordering::Release);
        true""",
     "loom_state", "cancel_races_cancel"),
    ("M3", "reset moves a timeout out of a final state", "src/state.rs",
     """                return Reset::NotPending;""",
     """                let _ = Reset::NotPending;""",
     "loom_state", "reset_races_expire"),
    ("M4", "an earlier reset is reported as later (no refile notice)", "src/state.rs",
     """Ok(_) => return if new < old { Reset::Earlier } else { Reset::Later },""",
     """Ok(_) => return if new < old && false { Reset::Earlier } else { Reset::Later },""",
     "loom_mailbox", "earlier_reset_wakes_a_sleeping_shard"),
    ("M5", "producer's SeqCst fence removed", "src/mailbox.rs",
     """        fence(Ordering::SeqCst);
        if self.flags.load(Ordering::Relaxed) & CLOSED != 0 {
            return Sent::Closed;""",
     """        if self.flags.load(Ordering::Relaxed) & CLOSED != 0 {
            return Sent::Closed;""",
     "loom_mailbox", "earlier_deadline_wakes_a_sleeping_shard"),
    ("M6", "producer never wakes a shard for an earlier deadline", "src/mailbox.rs",
     """deadline.is_some_and(|d| d < until)""",
     """deadline.is_some_and(|d| d < until && false)""",
     "loom_mailbox", "earlier_deadline_wakes_a_sleeping_shard"),
    ("M7", "no backlog wake-up", "src/mailbox.rs",
     """self.len() >= HIGH_WATER)""",
     """self.len() >= HIGH_WATER && false)""",
     "loom_mailbox", "backlog_wakes_a_sleeping_shard"),
    ("M8", "driver sleeps without re-checking its mailbox", "src/mailbox.rs",
     """        if !self.queue.is_empty() || !self.stages.is_empty() || self.flags.load(Ordering::Relaxed) & CLOSED != 0 {""",
     """        if self.flags.load(Ordering::Relaxed) & CLOSED != 0 {""",
     "loom_mailbox", "earlier_deadline_wakes_a_sleeping_shard"),
    ("M9", "producer ignores a closed mailbox", "src/mailbox.rs",
     """            return Sent::Closed;""",
     """            return Sent::Delivered;""",
     "loom_shutdown", "schedule_through_mailbox_races_stop"),
    ("M10", "final drain skips the mailbox", "src/shard/driver.rs",
     """        while let Some(cmd) = self.shard.mailbox.pop() {""",
     """        while let Some(cmd) = None::<Command> {""",
     "loom_shutdown", "schedule_through_mailbox_races_stop"),
    ("M11", "shard leaks the entries it unlinks", "src/shard/driver.rs",
     """            drop(self.wheel.remove(key));""",
     """            std::mem::forget(self.wheel.remove(key));""",
     "loom_mailbox", "arm_in_mailbox_races_cancel"),
    ("M12", "a winning cancel forgets the task instead of dropping it", "src/timeout.rs",
     """        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.cancelled())) {""",
     """        if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| std::mem::forget(task))) {""",
     "loom_memory", "drop_races_expire_and_cancel"),
    ("M13", "a winning cancel by a thread other than the timeout's owner is not counted (pending stays up)", "src/timeout.rs",
     """        crate::staging::count_cancelled(self.shard.shard());""",
     """        let _ = crate::staging::count_cancelled;""",
     "loom_shutdown", "stop_races_cancel"),
    ("M15", "driver's SeqCst fence before its mailbox re-check removed", "src/mailbox.rs",
     """        self.sleep_until.store(until.max(AWAKE + 1), Ordering::SeqCst);
        fence(Ordering::SeqCst);""",
     """        self.sleep_until.store(until.max(AWAKE + 1), Ordering::SeqCst);""",
     "loom_mailbox", "earlier_deadline_wakes_a_sleeping_shard"),
    ("M16", "final drain without its SeqCst fence", "src/mailbox.rs",
     """    pub(crate) fn begin_final_drain(&self) {
        fence(Ordering::SeqCst);""",
     """    pub(crate) fn begin_final_drain(&self) {""",
     "loom_shutdown", "schedule_through_mailbox_races_stop"),
    ("M17", "a cancel after the shard filed the entry sends no unlink notice", "src/timeout.rs",
     """        if linked == Cancelled::Linked {""",
     """        if linked == Cancelled::Linked && false {""",
     "loom_mailbox", "arm_in_mailbox_races_cancel"),
    ("M18", "a push onto a stage ignores that the final drain closed it", "src/stage.rs",
     """        if self.closed.load(Ordering::Acquire) {
            return None;""",
     """        if self.closed.load(Ordering::Acquire) && false {
            return None;""",
     "loom_shutdown", "schedule_races_stop"),
    ("M19", "the final drain skips the stages", "src/shard/driver.rs",
     """        self.stages.close_all(&mut staged);""",
     """        let _ = &mut staged;""",
     "loom_shutdown", "schedule_races_stop"),
    ("M20", "a push that lowers its stage's due announces nothing", "src/staging.rs",
     """                Push::Staged(lowered) if !lowered || owned.announce(deadline) => {""",
     """                Push::Staged(lowered) if !lowered || true => {""",
     "loom_stage", "announcements_wake_the_shard_while_their_thread_lives"),
    ("M21", "a refile notice leaves a staged entry on its stage", "src/shard/driver.rs",
     """        } else if entry.state().try_link() {""",
     """        } else if false && entry.state().try_link() {""",
     "loom_mailbox", "earlier_reset_wakes_a_sleeping_shard"),
    ("M22", "a sweep drops the survivors too", "src/stage.rs",
     """        scratch.retain(|entry| entry.state().needs_filing());""",
     """        scratch.retain(|_| false);""",
     "loom_stage", "sweep_races_take"),
    ("M23", "the shard never takes a stage when its due comes (only when announced due)", "src/shard/driver.rs",
     """        let more = self.stages.poll(now, STAGE_BUDGET, &mut due);""",
     """        let more = false;""",
     "loom_stage", "a_staged_delay_fires_with_an_empty_wheel"),
    ("M24", "a take claims before it resets the promise", "src/stage.rs",
     """        self.due.swap(NONE, Ordering::AcqRel);
        self.claim(into);""",
     """        self.claim(into);
        self.due.swap(NONE, Ordering::AcqRel);""",
     "loom_stage", "staged_timeouts_outlive_their_thread"),
    ("M25", "a thread that exits does not announce its retired stage", "src/staging.rs",
     """                owned.announce(0);""",
     """                let _ = &owned;""",
     "loom_stage", "a_new_thread_after_one_exited"),
    ("M26", "a retired, empty stage is filed again instead of forgotten", "src/shard/driver.rs",
     """        if stage.is_retired() && stage.is_empty() {""",
     """        if stage.is_retired() && stage.is_empty() && false {""",
     "loom_stage", "a_new_thread_after_one_exited"),
    ("M27", "the final drain does not wait for a sweep in progress", "src/stage.rs",
     """        while self.sweeping.load(Ordering::Acquire) {""",
     """        while false && self.sweeping.load(Ordering::Acquire) {""",
     "loom_stage", "sweep_races_stop"),
    ("M28", "the sweep/close handshake without the sweep's SeqCst fence", "src/stage.rs",
     """        self.sweeping.store(true, Ordering::Relaxed);
        fence(Ordering::SeqCst);""",
     """        self.sweeping.store(true, Ordering::Relaxed);""",
     "loom_stage", "sweep_races_stop"),
    ("M29", "an earlier reset of a timeout already in the wheel leaves it in its old slot", "src/shard/driver.rs",
     """            let filed = self.wheel.remove(key);
            self.file(filed);""",
     """            entry.set_key(Some(key));
            let _ = &mut self.wheel;""",
     "loom_state", "reset_earlier_of_a_filed_timeout"),
    ("M30", "a poll with a new waker keeps the old one (no hand-over)", "src/future/sleep.rs",
     """        if same_waker {
            return Poll::Pending;""",
     """        if same_waker || !same_waker {
            return Poll::Pending;""",
     "loom_sleep", "poll_with_a_new_waker_races_expiry"),
    ("M31", "a cancelled sleep wakes its waker", "src/future/sleep.rs",
     """    fn cancelled_unboxed(self, _: Token) {
        self.silence();
    }""",
     """    fn cancelled_unboxed(self, _: Token) {
        drop(self);
    }""",
     "loom_sleep", "poll_with_a_new_waker_races_expiry"),
    ("M32", "a hand-over whose cancel lost to the expiry returns Pending", "src/future/sleep.rs",
     """        if !timeout.cancel() {
            return match timeout.state() {
                TimeoutState::Expired => Poll::Ready(Ok(())),
                _ => this.taken_back(tick, cx.waker(), on_stop),
            };
        }""",
     """        if !timeout.cancel() {
            return Poll::Pending;
        }""",
     "loom_sleep", "poll_with_a_new_waker_races_expiry"),
    ("M45", "a poll compares the waker with itself, not with the one in the cell (a hand-over keeps the first task's waker)", "src/future/sleep.rs",
     """        let same_waker = WakerId::of(cx.waker()) == timeout.waker_id(H::KEEPS_AT);""",
     """        let same_waker = WakerId::of(cx.waker()) == WakerId::of(cx.waker());""",
     "loom_sleep", "poll_with_a_new_waker_races_expiry"),
    ("M37", "a run publishes its successor with a blind store, not a CAS (ignores an ended series)", "src/periodic.rs",
     """        match self.state.compare_exchange(RUNNING, WAITING, Ordering::Release, Ordering::Relaxed) {""",
     """        match Ok::<u32, u32>(self.state.swap(WAITING, Ordering::Release)) {""",
     "loom_periodic", "cancel_races_a_run_firing"),
    ("M38", "the series' end reads the word, then stores ENDED (check, then act)", "src/periodic.rs",
     """        if self.state.swap(ENDED, Ordering::Acquire) == WAITING {""",
     """        let was = self.state.load(Ordering::Acquire);
        self.state.store(ENDED, Ordering::Relaxed);
        if was == WAITING {""",
     "loom_periodic", "cancel_races_a_run_firing"),
    # A series' run already in the shard's batch must not call the closure after `cancel()`
    # returned `true` (loom-tests/periodic.rs, `cancel_races_re_arm_and_the_next_run`).
    ("M60", "a run's start ignores an ended series (a blind swap to RUNNING)", "src/periodic.rs",
     """        match self.state.compare_exchange(WAITING, RUNNING, Ordering::Acquire, Ordering::Acquire) {""",
     """        match Ok::<u32, u32>(self.state.swap(RUNNING, Ordering::Acquire)) {""",
     "loom_periodic", "cancel_races_re_arm_and_the_next_run"),
    ("M61", "a run checks that the series lives, then starts (check, then act)", "src/periodic.rs",
     """        match self.state.compare_exchange(WAITING, RUNNING, Ordering::Acquire, Ordering::Acquire) {""",
     """        let seen = self.state.load(Ordering::Acquire);
        let decided = if seen == WAITING {
            self.state.store(RUNNING, Ordering::Relaxed);
            Ok(seen)
        } else {
            Err(seen)
        };
        match decided {""",
     "loom_periodic", "cancel_races_re_arm_and_the_next_run"),
    ("M62", "a run whose start failed (the series ended) calls the closure anyway", "src/periodic.rs",
     """            // The series ended before this run started: the closure is dropped unrun.
            return;""",
     """            task();
            return;""",
     "loom_periodic", "cancel_races_re_arm_and_the_next_run"),
    ("M63", "the series' end cancels the waiting run but leaves the word WAITING (a fired run still starts)", "src/periodic.rs",
     """        if self.state.swap(ENDED, Ordering::Acquire) == WAITING {""",
     """        if self.state.load(Ordering::Acquire) == WAITING {""",
     "loom_periodic", "cancel_races_re_arm_and_the_next_run"),
    ("M14", "expiry's CAS weakened from AcqRel to Relaxed", "src/state.rs",
     """compare_exchange(cur, pack(EXPIRED, deadline), Ordering::AcqRel, Ordering::Acquire)""",
     """compare_exchange(cur, pack(EXPIRED, deadline), Ordering::Relaxed, Ordering::Relaxed)""",
     "loom_state", "cancel_races_expire"),
    # The LocalWheel's remote handle (loom-tests/local.rs).
    ("M33", "a remote push without its SeqCst fence before reading the owner's sleep", "src/local/remote.rs",
     """        let Some(deadline) = deadline else { return };
        // SeqCst fence: the remote's half of the handshake in the module docs.
        fence(Ordering::SeqCst);""",
     """        let Some(deadline) = deadline else { return };""",
     "loom_local", "remote_arm_races_owner_going_idle"),
    ("M34", "the owner announces its sleep without the SeqCst fence before re-checking its queue", "src/local/remote.rs",
     """        fence(Ordering::SeqCst);
        if !self.queue.is_empty() {""",
     """        if !self.queue.is_empty() {""",
     "loom_local", "remote_arm_races_owner_going_idle"),
    ("M35", "the owner's expiry is a load and a store, not a CAS, with a remote handle out", "src/local/poll.rs",
     """        if self.remote_made.get() {
            return self.expire_shared(wheel_key);""",
     """        if false {
            return self.expire_shared(wheel_key);""",
     "loom_local", "remote_cancel_races_local_expiry"),
    ("M36", "the owner's expiry ignores a remote reset in flight", "src/state.rs",
     """            Err(w) if w & !Self::SEQ_MASK == pending => SlotExpiry::ResetInFlight,""",
     """            Err(w) if w & !Self::SEQ_MASK == pending => SlotExpiry::Fired,""",
     "loom_local", "remote_reset_races_local_expiry"),
    ("M39", "a remote arm does not look at `closed` again after its push", "src/local/remote.rs",
     """        if self.shared.is_closed() {
            self.shared.discard();
        }
        Ok(())""",
     """        Ok(())""",
     "loom_local", "remote_arm_races_wheel_drop"),
    ("M40", "the owner's cancel is a load and a store, not a CAS, with a remote handle out", "src/local/arm.rs",
     """        if self.remote_made.get() {
            return self.cancel_shared(key);""",
     """        if false {
            return self.cancel_shared(key);""",
     "loom_local", "remote_cancel_races_owner_cancel"),
    ("M50", "the owner applies a remote reset's message whatever its ticket (an older reset undoes a later one)",
     "src/local/poll.rs",
     """                        if SlotWord::is_newer(ticket, self.reset_in_effect(key)) {""",
     """                        if true || SlotWord::is_newer(ticket, self.reset_in_effect(key)) {""",
     "loom_local", "owner_reset_after_a_remote_reset_wins"),
    ("M51", "a remote reset never wakes the owner (sent with no deadline to compare with its sleep)",
     "src/local/remote.rs",
     """        self.shared.send(Command::Reset { key, deadline, ticket }, Some(deadline));""",
     """        self.shared.send(Command::Reset { key, deadline, ticket }, None);""",
     "loom_local", "remote_reset_races_owner_going_idle"),
    ("M52", "the owner's cancel loses to a remote reset in flight", "src/state.rs",
     """            if cur & !Self::SEQ_MASK != Self::pack(generation, Self::PENDING) {
                return false;
            }
            let new = Self::pack(generation.wrapping_add(1), Self::VACANT);""",
     """            if cur != Self::pack(generation, Self::PENDING) {
                return false;
            }
            let new = Self::pack(generation.wrapping_add(1), Self::VACANT);""",
     "loom_local", "owner_cancel_wins_over_remote_reset_in_flight"),
    ("M53", "a remote raises the mail flag without Release (the owner, told of a push, may not see it)",
     "src/local/remote.rs",
     """        self.mail.swap(true, Ordering::Release);""",
     """        self.mail.swap(true, Ordering::Relaxed);""",
     "loom_local", "remote_cancel_races_local_poll"),
    # The per-thread count slots (loom-tests/counts.rs): their hand-over, claim and give-back.
    ("M70", "a slot's give-back weakened from Release to Relaxed", "src/counts.rs",
     """        self.in_use.store(false, Ordering::Release);""",
     """        self.in_use.store(false, Ordering::Relaxed);""",
     "loom_counts", "a_slot_is_handed_over_with_its_counts"),
    ("M71", "a claim's CAS becomes a load and a store (check, then act)", "src/counts.rs",
     """            if !slot.in_use.load(Ordering::Relaxed)
                && slot.in_use.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_ok()
            {
                return slot;
            }""",
     """            if !slot.in_use.load(Ordering::Acquire) {
                slot.in_use.store(true, Ordering::Relaxed);
                return slot;
            }""",
     "loom_counts", "two_threads_race_for_one_free_slot"),
    ("M72", "a claim's CAS weakened from Acquire to Relaxed", "src/counts.rs",
     """compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)""",
     """compare_exchange(false, true, Ordering::Relaxed, Ordering::Relaxed)""",
     "loom_counts", "a_slot_is_handed_over_with_its_counts"),
    ("M73", "a thread's shard handle, let go as the thread exits, keeps its counts slot (a cancel-only thread's too)", "src/shard/handle.rs",
     """        if let Some(counts) = self.counts() {
            counts.give_back();
        }""",
     """        if let Some(counts) = self.counts() {
            let _ = counts;
        }""",
     "loom_counts", "a_cancel_only_thread_leaves_its_slot_to_the_next"),
    ("M74", "a new slot is published free, not held by the thread that pushed it", "src/counts.rs",
     """            in_use: AtomicBool::new(true),""",
     """            in_use: AtomicBool::new(false),""",
     "loom_counts", "a_slot_is_handed_over_with_its_counts"),
    ("M75", "a slot's give-back weakened from Release to Relaxed (through the service)", "src/counts.rs",
     """        self.in_use.store(false, Ordering::Release);""",
     """        self.in_use.store(false, Ordering::Relaxed);""",
     "loom_counts", "threads_that_only_cancel_give_their_slots_back"),
    ("M80", "a foreign free's push onto the page's remote stack weakened from Release to Relaxed", "src/entry/pool/page.rs",
     """compare_exchange_weak(head, free.as_ptr(), Ordering::Release, Ordering::Relaxed)""",
     """compare_exchange_weak(head, free.as_ptr(), Ordering::Relaxed, Ordering::Relaxed)""",
     "loom_pool", "foreign_free_races_the_owners_allocation"),
    ("M81", "the owner takes the remote stack without Acquire", "src/entry/pool/page.rs",
     """self.remote.swap(ptr::null_mut(), Ordering::Acquire)""",
     """self.remote.swap(ptr::null_mut(), Ordering::Relaxed)""",
     "loom_pool", "foreign_free_races_the_owners_allocation"),
    ("M82", "a foreign free pushes onto an abandoned page (the page is never released)", "src/entry/pool/page.rs",
     """            if head == abandoned_marker() {""",
     """            if head == abandoned_marker() && false {""",
     "loom_pool", "owner_exit_races_a_foreign_free"),
    ("M83", "a foreign free that overtakes the exiting owner's count releases the page (twice)", "src/entry/pool/page.rs",
     """                return this.abandoned.fetch_sub(1, Ordering::AcqRel) == 1;""",
     """                return this.abandoned.fetch_sub(1, Ordering::AcqRel) <= 1;""",
     "loom_pool", "owner_exit_races_a_foreign_free"),
    ("M84", "the exiting owner releases a page that still has live cells", "src/entry/pool/page.rs",
     """        this.abandoned.fetch_add(live, Ordering::AcqRel).wrapping_add(live) == 0""",
     """        this.abandoned.fetch_add(live, Ordering::AcqRel).wrapping_add(live) == 0 || live > 0""",
     "loom_pool", "last_foreign_frees_race"),
    ("M85", "the exiting owner forgets the slots on its remote stack (counts them live: never released)", "src/entry/pool/page.rs",
     """            gone += 1;""",
     """            gone += 0;""",
     "loom_pool", "owner_exit_races_a_foreign_free"),
    ("M86", "a foreign free that loses the CAS on a live page's remote stack is dropped (its slot lost)", "src/entry/pool/page.rs",
     """                Err(actual) => head = actual,
            }
        }
    }""",
     """                Err(_) => return false,
            }
        }
    }""",
     "loom_pool", "two_foreign_frees_race_onto_a_live_page"),
    # Not a loom model: the spare pages are not built under loom. A target without the
    # `loom_` prefix is a plain test file in tests/, built and run without `--cfg loom`.
    ("M87", "a page released while the process's spare pages are full is neither kept nor freed (leaked)", "src/entry/pool/page.rs",
     """            unsafe { blocks::dealloc(page) };""",
     """            let _ = page;""",
     "test:pool_pages", "pages_released_with_the_spare_full_go_back_to_the_allocator"),
    ("M90", "the owner's merge keeps the bias (its handle never reaches zero: leaked)", "src/shard/handle.rs",
     """        let delta = mine.wrapping_sub(1).wrapping_sub(BIAS);""",
     """        let delta = mine.wrapping_sub(1);""",
     "loom_memory", "a_handle_counted_on_its_thread_is_freed_once_whoever_lets_go_last"),
    ("M91", "the owner's plain drop forgets to count (its handle is never freed)", "src/shard/handle.rs",
     """        if self.handle().owner_path(|local| *local = local.wrapping_sub(1)).is_none() {""",
     """        if self.handle().owner_path(|local| *local = *local).is_none() {""",
     "loom_memory", "a_handle_counted_on_its_thread_is_freed_once_whoever_lets_go_last"),
    ("M92", "any thread takes the owner's plain path (a count another thread writes too)", "src/shard/handle.rs",
     """        if self.owner == NO_OWNER || !routing::is_this_thread(self.owner as usize) {""",
     """        if self.owner == NO_OWNER {""",
     "loom_memory", "a_handle_counted_on_its_thread_is_freed_once_whoever_lets_go_last"),
    ("M93", "the last reference's load (the free without a decrement) weakened from Acquire to Relaxed", "src/entry/mod.rs",
     """        if refs.load(Ordering::Acquire) != 1 {""",
     """        if refs.load(Ordering::Relaxed) != 1 {""",
     "loom_memory", "drop_races_expire_and_cancel"),
    ("M94", "a cell with two references left is freed by the first to drop (the other uses freed memory)", "src/entry/mod.rs",
     """        if refs.load(Ordering::Acquire) != 1 {""",
     """        if refs.load(Ordering::Acquire) > 2 {""",
     "loom_memory", "drop_races_expire_and_cancel"),
    ("M95", "any thread's cancel is counted in the timeout's owner's slot (two threads write one slot)", "src/shard/handle.rs",
     """        self.owner_path(|_| unsafe { counts.as_ref() }.cancelled()).is_some()""",
     """        unsafe { counts.as_ref() }.cancelled();
        true""",
     "loom_counts", "threads_that_only_cancel_give_their_slots_back"),
    ("M96", "the owner's own cancel is not counted (its handle's slot is left as it was)", "src/shard/handle.rs",
     """        self.owner_path(|_| unsafe { counts.as_ref() }.cancelled()).is_some()""",
     """        self.owner_path(|_| { let _ = counts; }).is_some()""",
     "loom_stage", "sweep_races_take"),
    ("M97", "a hand-over's cancel read backwards (a lost cancel arms again; a won one looks for a stop)", "src/future/sleep.rs",
     """        if !timeout.cancel() {
            return match timeout.state() {""",
     """        if timeout.cancel() {
            return match timeout.state() {""",
     "loom_sleep", "poll_with_a_new_waker_races_expiry"),
    ("M98", "the expiry ignores a reset to later that lands after the wheel handed the entry out", "src/shard/driver.rs",
     """                    State::Pending { deadline } if deadline > now => {""",
     """                    State::Pending { deadline } if false => {""",
     "loom_state", "reset_races_expire"),
    ("M99", "a hand-over whose cancel lost to the expiry takes the fired cell for a stop", "src/future/sleep.rs",
     """            return match timeout.state() {
                TimeoutState::Expired => Poll::Ready(Ok(())),
                _ => this.taken_back(tick, cx.waker(), on_stop),""",
     """            return match timeout.state() {
                _ => this.taken_back(tick, cx.waker(), on_stop),""",
     "loom_sleep", "poll_with_a_new_waker_races_expiry"),
    # The TSC estimate (src/clock/tsc/): not built under loom; its unit tests drive it from a
    # simulated kernel (sim.rs). Target "lib": the library's unit tests, by exact name.
    ("TSC1", "the skew does not count the kernel's fastest rate (a flat 2 µs for an early rdtsc)", "src/clock/tsc/mod.rs",
     """const SKEW_NANOS: u64 = EARLY_NANOS * (8 + MARGIN_EIGHTHS as u64) / 8;""",
     """const SKEW_NANOS: u64 = EARLY_NANOS;""",
     "lib", "clock::tsc::sim::an_early_read_at_the_fastest_rate_is_covered_by_the_skew"),
    ("TSC2", "a failed check drops its own thread's anchor only (the process's scale stays on)", "src/clock/tsc/estimate.rs",
     """        process.scale.store(OFF, Ordering::Relaxed);
        platform.set_anchor(Anchor::NONE);""",
     """        platform.set_anchor(Anchor::NONE);""",
     "lib", "clock::tsc::sim::a_failed_check_switches_the_estimate_off_for_every_thread"),
    ("TSC3", "the check on a new anchor never fails", "src/clock/tsc/estimate.rs",
     """    if old.window != 0 && old.at_any(after)""",
     """    if false && old.window != 0 && old.at_any(after)""",
     "lib", "clock::tsc::sim::a_failed_check_switches_the_estimate_off_for_every_thread"),
    ("TSC4", "the scale's margin covers the tick and the frequency only (12.5 %, not the PLL's phase)", "src/clock/tsc/mod.rs",
     """const MARGIN_EIGHTHS: u128 = 5;""",
     """const MARGIN_EIGHTHS: u128 = 1;""",
     "lib", "clock::tsc::sim::never_behind_a_kernel_that_slews_at_any_moment"),
    ("TSC5", "no floor: a new anchor steps one thread's estimate back", "src/clock/tsc/estimate.rs",
     """then(|| (self.nanos + ((cycles * self.mult) >> 32)).max(self.floor))""",
     """then(|| self.nanos + ((cycles * self.mult) >> 32))""",
     "lib", "clock::tsc::sim::never_behind_a_kernel_that_slews_at_any_moment"),
    # Issue 25 (the shard's items 3, 4, 5, 8). Targets that are not loom models: "lib" (the
    # library's unit tests) or "test:<file>" (tests/<file>.rs), run without `--cfg loom`.
    ("SH1", "a shard task's panic payload dropped outside the catch (a payload that panics on drop fails the shard)", "src/shard/driver.rs",
     """        shard.counters.panicked(catch_panics(|| task.run_on_shard()));
    }
}""",
     """        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| task.run_on_shard())).is_err() {
            shard.counters.panicked(1);
        }
    }
}""",
     "test:panic", "a_panic_whose_payload_panics_on_drop_does_not_fail_the_shard"),
    ("SH2", "cancel() drops a panic's payload outside the catch (the payload's panic escapes to the caller)", "src/timeout.rs",
     """            self.shard.counters.panicked(crate::task::drop_payload(payload));""",
     """            drop(payload);
            self.shard.counters.panicked(1);""",
     "test:panic", "a_cancel_whose_task_panics_with_a_payload_that_panics_on_drop_does_not_unwind"),
    ("SH3", "TestClock::advance from a shard's task waits instead of panicking (it hangs)", "src/test_clock.rs",
     """        if let Some(Ok(shard)) = service.as_ref().map(TimerService::route_or_home) {""",
     """        if let Some(Ok(shard)) = service.as_ref().map(TimerService::route_or_home).filter(|_| false) {""",
     "test:test_clock", "advance_from_a_task_on_a_shard_panics_at_once_and_never_hangs"),
    ("SH4", "TestClock::advance wraps past the end of the clock instead of saturating", "src/test_clock.rs",
     """|t| Some(t.saturating_add(by))""",
     """|t| Some(t.wrapping_add(by))""",
     "test:test_clock", "advance_saturates_at_the_end_of_the_clock_and_never_wraps"),
    ("SH5", "the slab ignores its limit (the shard's wheel grows past it: at 2^32 the key overflows)", "src/wheel/slab.rs",
     """            Ok(key) if key != NIL && self.len < self.limit => key,""",
     """            Ok(key) if key != NIL => key,""",
     "lib", "shard::driver::tests::a_wheel_at_its_limit_refuses_timeouts_and_the_shard_goes_on"),
    ("SH6", "a Sleep that stop() took back never reads elapsed, even past its deadline", "src/future/sleep.rs",
     """                TimeoutState::Cancelled => self.passed(timeout.entry.state().load().deadline()),""",
     """                TimeoutState::Cancelled => false,""",
     "test:sleep", "a_sleep_stop_took_back_is_elapsed_once_its_deadline_passes"),
    ("SH7", "the biased count's owner keeps its plain path after its merge (its later drops are lost: leaked)", "src/shard/handle.rs",
     """            if self.merged.with_mut(|m| *m) {""",
     """            if false && self.merged.with_mut(|m| *m) {""",
     "lib", "shard::handle::tests::an_owner_that_merged_drops_its_timeouts_through_the_shared_count"),
    ("SH8", "the Acquire fence before the last shared drop frees a shard handle removed", "src/shard/handle.rs",
     """            fence(Ordering::Acquire);
            // SAFETY: the count reached zero: no reference is left, none can be made.""",
     """            // SAFETY: the count reached zero: no reference is left, none can be made.""",
     "loom_memory", "a_handle_counted_on_its_thread_is_freed_once_whoever_lets_go_last"),
    ("SH9", "the owner's merge weakened from AcqRel to Release (a free by the merge not after the other drops)", "src/shard/handle.rs",
     """        let before = handle.shared.fetch_add(delta, Ordering::AcqRel);""",
     """        let before = handle.shared.fetch_add(delta, Ordering::Release);""",
     "loom_memory", "a_handle_counted_on_its_thread_is_freed_once_whoever_lets_go_last"),
    ("SH10", "a failing shard closes its mailbox before it is marked failed (a schedule reads Shutdown)", "src/shard/mod.rs",
     """        self.failed.store(true, Ordering::SeqCst);
        self.mailbox.close();""",
     """        self.mailbox.close();
        self.failed.store(true, Ordering::SeqCst);""",
     "loom_shutdown", "schedule_races_a_failing_shard"),
    ("SH11", "has_failed reads the mark without reading `closed` again (a Relaxed view of the close reads Shutdown)", "src/shard/mod.rs",
     """        let _ = self.mailbox.is_closed();
        self.failed.load(Ordering::SeqCst)""",
     """        self.failed.load(Ordering::SeqCst)""",
     "loom_shutdown", "schedule_races_a_failing_shard"),
    # The HTTP server's (httpd/): "test:httpd:<file>" is httpd/tests/<file>.rs, its test
    # named in full (the stack's module and the behaviour); "httpd:bin", the binary's unit
    # tests (httpd/src/).
    ("HD1", "the local stack's idle timer closes a connection whose answers wait for the peer", "httpd/src/conn.rs",
     """                if self.phase == Phase::Idle && self.output.is_empty() {""",
     """                if self.phase == Phase::Idle {""",
     "test:httpd:both_stacks", "local::a_response_waiting_for_the_peer_is_not_idle"),
    # hyper 1 reads nothing while its flush is pending (with `half_close`), so through the
    # server no test reaches this guard; the wrapper's unit test does.
    ("HD2", "the hyper stack's idle wrapper ends the stream of a connection whose response waits for the peer", "httpd/src/hyper_stack/idle.rs",
     """        if self.send_deadline.is_some() {
            return false; // a response waits for the peer: the send timer has it""",
     """        if false && self.send_deadline.is_some() {
            return false; // a response waits for the peer: the send timer has it""",
     "httpd:bin", "hyper_stack::idle::tests::a_response_waiting_for_the_peer_is_not_idle"),
    ("SL1", "a Sleep taken back by a shard that closed without failing registers again on a shard still open (stop() hands it back twice)", "src/future/sleep.rs",
     """        if stopping || self.service.service().is_stopped() {""",
     """        if (stopping && false) || self.service.service().is_stopped() {""",
     "lib", "future::sleep::tests::a_sleep_taken_back_by_a_closing_shard_ends_and_never_registers_again"),
    ("G1", "the driver never marks its shard FULL (only the backstop refuses, after `schedule` returned Ok)", "src/shard/gate.rs",
     """        mailbox.mark_full();""",
     """        let _ = mailbox;""",
     "loom_gate", "schedule_races_the_shard_crossing_its_mark"),
    ("G2", "a refusal at the mark does not wake a sleeping shard (room made by cancels stays unseen)", "src/shard/gate.rs",
     """        shard.mailbox.wake_for_room();""",
     """        let _ = &shard.mailbox;""",
     "loom_gate", "schedule_races_the_shard_crossing_its_mark"),
    ("G3", "clearing FULL stores the whole word (a close at the same moment is lost)", "src/mailbox.rs",
     """        self.flags.fetch_and(!FULL, Ordering::Relaxed);""",
     """        self.flags.store(OPEN, Ordering::Relaxed);""",
     "loom_gate", "stop_races_the_shard_clearing_full"),
    ("G4", "FULL cleared below the high mark (no hysteresis)", "src/shard/gate.rs",
     """        if self.mark_at == usize::MAX && len <= self.low {""",
     """        if self.mark_at == usize::MAX && len < self.high {""",
     "lib", "shard::gate::tests::schedule_past_the_mark_is_rejected_with_its_task_and_room_comes_back"),
    ("G5", "a Sleep the backstop refused ends as on a stopped service (the old behaviour)", "src/future/sleep.rs",
     """        if stopping || self.service.service().is_stopped() {
            return self.stopped_at(tick, waker, on_stop);""",
     """        if true {
            return self.stopped_at(tick, waker, on_stop);""",
     "lib", "shard::gate::tests::a_sleep_at_the_limit_overflows_and_completes_at_its_deadline"),
    ("G6", "the gate's cold path reads FULL as closed (Shutdown, not Rejected)", "src/shard/gate.rs",
     """        return Some(Refusal::Full);""",
     """        return Some(Refusal::Closed);""",
     "lib", "shard::gate::tests::a_series_at_the_mark_is_refused_and_a_running_one_ends"),
    ("G7", "the driver never marks FULL: the backstop alone (through the service)", "src/shard/gate.rs",
     """        if len >= self.mark_at {""",
     """        if len >= self.mark_at && false {""",
     "lib", "shard::gate::tests::the_backstop_refuses_what_was_in_flight_past_the_limit_and_the_shard_goes_on"),
    ("G8", "a draining shard takes new timeouts (the graceful stop refuses nothing)", "src/shard/gate.rs",
     """    if gate & DRAINING != 0 {
        return Some(Refusal::Closed);
    }""",
     """    if gate & DRAINING != 0 && false {
        return Some(Refusal::Closed);
    }""",
     "lib", "shard::gate::tests::the_cold_path_reads_draining_before_full_and_for_the_driver_too"),
    # The overflow timer (loom-tests/overflow.rs, src/future/overflow.rs).
    ("O1", "a poll on the overflow timer keeps the old waker (the task that polled last is never woken)",
     "src/future/overflow.rs",
     """        match waiting.timers.get_mut(&key) {
            None => Polled::Fired,
            Some(held) => {
                if !held.will_wake(waker) {
                    held.clone_from(waker);
                }""",
     """        match waiting.timers.get_mut(&key) {
            None => Polled::Fired,
            Some(held) => {
                if !held.will_wake(waker) {
                    let _ = waker;
                }""",
     "loom_overflow", "overflow_poll_with_a_new_waker_races_the_timers_turn"),
    ("O2", "a dropped sleep's overflow entry stays (its task is woken at the deadline for nothing)",
     "src/future/overflow.rs",
     """        let removed = self.waiting().timers.remove(&key);""",
     """        let removed = self.waiting().timers.get(&key).map(|_| ());""",
     "lib", "future::overflow::tests::a_new_waker_is_the_one_woken_and_a_cancel_wakes_none"),
    ("O4", "a paused clock's overflowed sleep waits on the real-time thread (early, or never woken)",
     "src/future/sleep.rs",
     """        let id = if service.clock().is_paused() {""",
     """        let id = if false {""",
     "test:full_shard", "an_overflowed_sleep_on_a_paused_clock_keeps_that_clocks_time"),
    ("O3", "the overflow timer fires an entry before its deadline", "src/future/overflow.rs",
     """            if entry.key().at > now {""",
     """            if entry.key().at > now + std::time::Duration::from_millis(1) {""",
     "lib", "future::overflow::tests::fires_in_deadline_order_and_never_before"),
]


def run(mutation):
    mid, what, path, old, new, target, name = mutation
    full = os.path.join(ROOT, path)
    with open(full) as f:
        original = f.read()
    if original.count(old) != 1:
        sys.exit(f"{mid}: the text to mutate occurs {original.count(old)} times in {path}; update the table")
    env = dict(os.environ, RUSTFLAGS="--cfg loom", CARGO_TARGET_DIR=os.path.join(ROOT, "target/loom"),
               LOOM_MAX_PREEMPTIONS=os.environ.get("LOOM_MAX_PREEMPTIONS", "3"))
    try:
        with open(full, "w") as f:
            f.write(original.replace(old, new))
        start = time.time()
        if target.startswith("loom_"):
            cmd = ["cargo", "test", "--release", "--no-default-features", "--test", target]
        else:  # "lib" or "test:<file>": an ordinary test, in the ordinary build
            env = dict(os.environ)
            if target == "httpd:bin":
                cmd = ["cargo", "test", "-p", "shardwheel-httpd", "--bin", "shardwheel-httpd"]
            elif target.startswith("test:httpd:"):
                cmd = ["cargo", "test", "-p", "shardwheel-httpd", "--test", target.removeprefix("test:httpd:")]
            else:
                cmd = ["cargo", "test", "-p", "shardwheel"] + (["--lib"] if target == "lib" else ["--test", target[5:]])
        proc = subprocess.run(cmd + ["--", name, "--exact", "--test-threads=1"], cwd=ROOT, env=env, capture_output=True,
                              text=True)
        out = proc.stdout + proc.stderr
    finally:
        with open(full, "w") as f:
            f.write(original)
    if "error[E" in out or "could not compile" in out:
        verdict, why = "build error", "mutation does not compile"
    elif proc.returncode != 0:
        verdict = "caught"
        lines = out.splitlines()
        why = next((l.strip() for l in lines
                    if any(k in l for k in ("Causality", "deadlock", "leaked", "maximum number of branches", "released twice",
                                            "assertion", "panicked at loom-tests", "panicked at tests", "panicked at src",
                                            "panicked at httpd"))), "test failed")
        if target in ("lib", "httpd:bin") or target.startswith("test:"):
            # A unit or integration test's panic message: the line after "panicked at".
            why = next((lines[i + 1].strip() for i, l in enumerate(lines[:-1]) if "panicked at" in l), why)
    else:
        verdict, why = "SURVIVED", "model passed"
    return mid, what, f"{target}::{name}", verdict, why[:110], time.time() - start


def check():
    """Without building anything: every mutation's text occurs exactly once in its file, and
    its model exists. CI runs this, so that the table cannot go stale unnoticed."""
    stale = []
    for mid, _, path, old, _, target, name in MUTATIONS:
        with open(os.path.join(ROOT, path)) as f:
            found = f.read().count(old)
        if found != 1:
            stale.append(f"{mid}: its text occurs {found} times in {path}")
        if target in ("lib", "httpd:bin"):
            src = os.path.join(ROOT, "src" if target == "lib" else "httpd/src")
            found = subprocess.run(["grep", "-rlq", f"fn {name.rsplit('::', 1)[-1]}(", src]).returncode == 0
            if not found:
                stale.append(f"{mid}: no unit test {name} in src/")
            continue
        model = os.path.join(ROOT, "loom-tests", target.removeprefix("loom_") + ".rs")
        if target.startswith("test:"):
            model = os.path.join(ROOT, "tests", target[5:] + ".rs")
        if target.startswith("test:httpd:"):
            model = os.path.join(ROOT, "httpd", "tests", target.removeprefix("test:httpd:") + ".rs")
        with open(model) as f:
            if f"fn {name.rsplit('::', 1)[-1]}(" not in f.read():
                stale.append(f"{mid}: no model {name} in {model}")
    if stale:
        sys.exit("the mutation table is stale:\n" + "\n".join(stale))
    print(f"{len(MUTATIONS)} mutations: each text found once, each model present")


def main():
    if sys.argv[1:] == ["--check"]:
        return check()
    wanted = set(sys.argv[1:])
    rows = [run(m) for m in MUTATIONS if not wanted or m[0] in wanted]
    print("| id | mutation | model | result | how loom reported it |")
    print("|---|---|---|---|---|")
    for mid, what, model, verdict, why, _ in rows:
        why = why.replace("|", "\\|")
        print(f"| {mid} | {what} | `{model}` | {verdict} | {why} |")


if __name__ == "__main__":
    main()
