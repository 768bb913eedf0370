//! The classification and the quantiles, on instants made by hand.

use super::*;

const MS: Duration = Duration::from_millis(1);

#[test]
fn a_close_after_its_due_instant_is_late_by_the_difference_and_not_early() {
    let t0 = Instant::now();
    let outcome = Outcome::closed(t0 + 203 * MS, t0 + 200 * MS, t0, 200 * MS);
    assert_eq!(outcome, Outcome::Closed { late_us: 3000, early: false });
}

#[test]
fn a_close_before_the_timeout_could_fire_is_early_with_negative_lateness() {
    let t0 = Instant::now();
    let outcome = Outcome::closed(t0 + 150 * MS, t0 + 200 * MS, t0, 200 * MS);
    assert_eq!(outcome, Outcome::Closed { late_us: -50_000, early: true });
}

#[test]
fn a_close_a_little_before_the_response_read_plus_the_timeout_is_not_early_if_after_the_request_plus_it() {
    // The server armed its idle timer between the request (t0) and the response's read (t0 +
    // 2 ms): a close at t0 + 201 ms is 1 ms before `due` but could be on time.
    let t0 = Instant::now();
    let outcome = Outcome::closed(t0 + 201 * MS, t0 + 202 * MS, t0, 200 * MS);
    assert_eq!(outcome, Outcome::Closed { late_us: -1000, early: false });
}

#[test]
fn a_report_counts_each_outcome_and_takes_nearest_rank_quantiles() {
    let mut outcomes: Vec<Outcome> = (1..=100).map(|ms| Outcome::Closed { late_us: ms * 1000, early: false }).collect();
    outcomes.push(Outcome::Closed { late_us: -5, early: true });
    outcomes.extend([Outcome::Open, Outcome::Failed, Outcome::Failed]);
    let report = ClassReport::of(Class::Silent, outcomes);
    assert_eq!((report.count, report.closed, report.early, report.open, report.failed), (104, 101, 1, 1, 2));
    assert_eq!(report.late_at(0.0), Some(-5));
    assert_eq!(report.late_at(0.5), Some(50_000));
    assert_eq!(report.late_at(0.99), Some(99_000));
    assert_eq!(report.late_at(1.0), Some(100_000));
    let json = report.to_json();
    assert_eq!(json["late_ms"]["p99"], 99.0);
    assert_eq!(json["early"], 1);
}

#[test]
fn a_class_with_no_close_has_no_quantiles() {
    let report = ClassReport::of(Class::Idle, [Outcome::Open]);
    assert_eq!(report.late_at(0.99), None);
    assert_eq!(report.to_json()["late_ms"]["p99"], serde_json::Value::Null);
}
