//! The shard's side of stages (`stage.rs`): every stage that has announced itself, filed in
//! a timing wheel of its own at the tick it is due, so that the shard's next wake-up is the
//! earlier of its two wheels' and a turn looks only at the stages that are due.
//!
//! Ground rules (the driver's thread alone touches this):
//! - A stage is filed at its `due` when announced (moved if it was filed at another tick),
//!   and again, at whatever it promises then (`NEVER` if nothing), after every take. So the
//!   shard always knows every stage that may hold entries for it, which its final drain
//!   needs, and no turn ever scans the stages.
//! - A stage is forgotten once it is retired and empty: nothing can reach it any more.

use crate::entry::EntryRef;
use crate::stage::Stage;
use crate::state::NEVER;
use crate::sync::Arc;
use crate::wheel::Wheel;

pub(crate) struct StageWheel {
    wheel: Wheel<Arc<Stage>>,
}

impl StageWheel {
    pub(crate) fn new() -> StageWheel {
        StageWheel { wheel: Wheel::new() }
    }

    /// Files `stage` at the tick it promises now (`NEVER` if nothing), moving it if it is
    /// filed at another.
    pub(crate) fn file(&mut self, stage: &Arc<Stage>) {
        let at = stage.due().min(NEVER);
        if let Some(key) = stage.key() {
            if stage.filed_at() == at {
                return;
            }
            drop(self.wheel.remove(key));
        }
        // `filed_at` first: the wheel asks the stage for it as it files it.
        stage.set_key(None, at);
        let key = self.wheel.insert(stage.clone());
        stage.set_key(Some(key), at);
    }

    /// Forgets `stage` (retired and empty).
    pub(crate) fn forget(&mut self, stage: &Arc<Stage>) {
        if let Some(key) = stage.key() {
            stage.set_key(None, NEVER);
            drop(self.wheel.remove(key));
        }
    }

    /// Takes the stages due by `now` out of the wheel, at most `budget`, into `out`, in the
    /// order they are due; `true` if more are due.
    pub(crate) fn poll(&mut self, now: u64, budget: usize, out: &mut Vec<Arc<Stage>>) -> bool {
        let more = self.wheel.poll(now, budget, out);
        for stage in out.iter() {
            stage.set_key(None, NEVER);
        }
        more
    }

    /// When a stage is next due, if any is.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.wheel.next_deadline()
    }

    /// Shutdown: closes every stage and moves out what they hold.
    pub(crate) fn close_all(&mut self, into: &mut Vec<EntryRef>) {
        for stage in self.wheel.drain() {
            stage.set_key(None, NEVER);
            stage.close(into);
        }
    }
}

impl std::fmt::Debug for StageWheel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageWheel").finish_non_exhaustive()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_wheel_and_keeps_the_stages_to_itself() {
        assert_eq!(format!("{:?}", StageWheel::new()), "StageWheel { .. }");
    }

    #[test]
    fn a_filed_stage_keeps_its_key_until_polled() {
        let mut wheel = StageWheel::new();
        let stage = Arc::new(Stage::new());
        assert!(matches!(stage.push(EntryRef::new(100, || {}), 100), crate::stage::Push::Staged(true)));
        wheel.file(&stage);
        assert!(stage.key().is_some());
        assert_eq!(Arc::strong_count(&stage), 2);
        let mut out = Vec::new();
        assert!(!wheel.poll(50, 64, &mut out));
        assert!(out.is_empty());
        assert!(stage.key().is_some());
        assert!(wheel.next_deadline().is_some_and(|t| t <= 100));
        wheel.forget(&stage);
        assert_eq!(Arc::strong_count(&stage), 1);
    }
}
