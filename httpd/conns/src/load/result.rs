//! One process's result, as a child sends it to its parent (one JSON line on stdout), and
//! the merge of several: histograms added, counts summed, every close's lateness kept (the
//! quantiles of the merged closes are exact, not an average of each process's).

use super::counts::Counts;
use crate::report::{Class, ClassReport};
use serde_json::{Value, json};
use std::time::Duration;

/// What one process (or, merged, the whole run) found.
#[derive(Debug, Clone)]
pub struct ProcessResult {
    pub counts: Counts,
    /// The held classes (silent, idle, slowloris, unread).
    pub held: Vec<ClassReport>,
    /// The active connections gone quiet (`--quiet-at`).
    pub quiet: Option<ClassReport>,
    /// From the epoch to the last connect that ended (the longest of the processes').
    pub ramp: Duration,
    /// From the epoch to the loop's end (the longest).
    pub ran: Duration,
    /// The held connections' first distinct failures, in words.
    pub notes: Vec<String>,
}

impl ProcessResult {
    /// As a child's line.
    pub fn to_json(&self) -> Result<Value, String> {
        Ok(json!({
            "counts": self.counts.to_json()?,
            "held": self.held.iter().map(class_to_json).collect::<Vec<_>>(),
            "quiet": self.quiet.as_ref().map(class_to_json),
            "ramp_secs": self.ramp.as_secs_f64(),
            "ran_secs": self.ran.as_secs_f64(),
            "notes": self.notes,
        }))
    }

    /// A child's line, read back.
    pub fn from_json(value: &Value) -> Result<ProcessResult, String> {
        let held = value["held"].as_array().ok_or("a child's report has no held classes")?;
        let secs = |key: &str| {
            value[key].as_f64().map(Duration::from_secs_f64).ok_or_else(|| format!("a child's report has no {key}"))
        };
        Ok(ProcessResult {
            counts: Counts::from_json(&value["counts"])?,
            held: held.iter().map(class_from_json).collect::<Result<_, _>>()?,
            quiet: if value["quiet"].is_null() { None } else { Some(class_from_json(&value["quiet"])?) },
            ramp: secs("ramp_secs")?,
            ran: secs("ran_secs")?,
            notes: value["notes"]
                .as_array()
                .map_or_else(Vec::new, |notes| notes.iter().filter_map(|n| n.as_str().map(str::to_string)).collect()),
        })
    }

    /// Adds `other` (another process's) to this one.
    pub fn merge(&mut self, other: ProcessResult) -> Result<(), String> {
        self.counts.merge(&other.counts)?;
        for theirs in other.held {
            match self.held.iter_mut().find(|c| c.class == theirs.class) {
                Some(ours) => merge_class(ours, theirs),
                None => self.held.push(theirs),
            }
        }
        self.quiet = match (self.quiet.take(), other.quiet) {
            (Some(mut ours), Some(theirs)) => {
                merge_class(&mut ours, theirs);
                Some(ours)
            }
            (ours, theirs) => ours.or(theirs),
        };
        self.ramp = self.ramp.max(other.ramp);
        self.ran = self.ran.max(other.ran);
        for note in other.notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        Ok(())
    }
}

/// Sums `theirs` into `ours`, the lateness kept sorted.
fn merge_class(ours: &mut ClassReport, theirs: ClassReport) {
    ours.count += theirs.count;
    ours.closed += theirs.closed;
    ours.early += theirs.early;
    ours.open += theirs.open;
    ours.failed += theirs.failed;
    ours.late_us.extend(theirs.late_us);
    ours.late_us.sort_unstable();
}

/// A class with every close's lateness, for the parent to merge.
fn class_to_json(c: &ClassReport) -> Value {
    json!({
        "class": c.class.name(),
        "count": c.count,
        "closed": c.closed,
        "early": c.early,
        "open": c.open,
        "failed": c.failed,
        "late_us": c.late_us,
    })
}

fn class_from_json(value: &Value) -> Result<ClassReport, String> {
    let name = value["class"].as_str().ok_or("a class without a name")?;
    let class = Class::ALL
        .into_iter()
        .chain([Class::Quiet])
        .find(|c| c.name() == name)
        .ok_or_else(|| format!("an unknown class {name:?}"))?;
    let number = |key: &str| {
        value[key].as_u64().and_then(|n| usize::try_from(n).ok()).ok_or_else(|| format!("{name}: no {key}"))
    };
    let late = value["late_us"].as_array().ok_or_else(|| format!("{name}: no late_us"))?;
    Ok(ClassReport {
        class,
        count: number("count")?,
        closed: number("closed")?,
        early: number("early")?,
        open: number("open")?,
        failed: number("failed")?,
        late_us: late
            .iter()
            .map(|v| v.as_i64().ok_or_else(|| format!("{name}: a bad late_us")))
            .collect::<Result<_, _>>()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Outcome;

    fn one(late_us: &[i64]) -> ProcessResult {
        let outcomes = late_us.iter().map(|&late_us| Outcome::Closed { late_us, early: false });
        ProcessResult {
            counts: Counts::new(),
            held: vec![ClassReport::of(Class::Silent, outcomes.clone())],
            quiet: Some(ClassReport::of(Class::Quiet, outcomes.chain([Outcome::Open]))),
            ramp: Duration::from_millis(5),
            ran: Duration::from_secs(1),
            notes: vec!["x".to_string()],
        }
    }

    #[test]
    fn two_processes_merge_into_every_close_and_the_longest_ramp() {
        let mut a = one(&[1, 5]);
        let b = ProcessResult::from_json(&one(&[3]).to_json().unwrap()).unwrap();
        a.merge(b).unwrap();
        assert_eq!(a.held[0].late_us, [1, 3, 5]);
        let quiet = a.quiet.unwrap();
        assert_eq!((quiet.count, quiet.closed, quiet.open), (5, 3, 2));
        assert_eq!(a.notes, ["x"]);
    }
}
