//! Progress on stderr: an `indicatif` bar when stderr is a terminal, else one plain line per
//! second (readable in CI logs).

use crate::units::{group, ms_from_us, per_sec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::Write as _;
use std::time::Duration;

/// Writes a line to stderr. Unlike `eprintln!`, never panics: a closed stderr (the reader
/// went away) must not abort a run halfway.
pub fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// Where a run's progress goes: a bar while one is shown (indicatif hides it when stderr is
/// not a terminal), else lines; `label` (the timer's name when several run) before each line.
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    label: String,
}

impl Progress {
    pub fn new(label: &str) -> Progress {
        Progress { bar: ProgressBar::hidden(), label: label.to_owned() }
    }

    /// A line of its own (above the bar, if one is shown).
    pub fn line(&self, msg: &str) {
        let msg = if self.label.is_empty() { msg.to_owned() } else { format!("[{}] {msg}", self.label) };
        if self.bar.is_hidden() { note(&msg) } else { self.bar.println(msg) }
    }

    /// Shows a bar of `len` steps: idle timeouts to arm, or the steady state's ms.
    pub fn start_bar(&mut self, len: u64, steady: bool) {
        self.finish();
        let template = if steady {
            "{prefix:>10} running [{bar:30}] {elapsed:>3}/{duration:3} {wide_msg}"
        } else {
            "{prefix:>10} arming  [{bar:30}] {human_pos}/{human_len} idle timeouts"
        };
        let style = ProgressStyle::with_template(template).expect("a valid template").progress_chars("█▉▊▋▌▍▎▏ ");
        let prefix = if self.label.is_empty() { "sim" } else { &self.label };
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(10));
        self.bar = bar.with_style(style).with_prefix(prefix.to_owned());
    }

    /// Moves the bar: idle timeouts armed so far, or ms into the steady state.
    pub fn position(&self, at: u64) {
        self.bar.set_position(at);
    }

    /// One second's figures (the rates of arms, resets, cancels and expiries over it, its
    /// largest lateness): the bar's message (what changes most first, as the terminal may cut
    /// it), or a line of its own.
    pub fn second(&self, elapsed: Duration, rates: [f64; 4], max_late_us: u64, pending: usize) {
        let ([arms, resets, cancels, expiries], late, pending) =
            (rates.map(per_sec), ms_from_us(max_late_us), group(pending as u64));
        if self.bar.is_hidden() {
            self.line(&format!(
                "[{:>5.1} s]  arms {arms:>9}  resets {resets:>9}  cancels {cancels:>9}  expiries {expiries:>8} (max \
                 late {late:>10})  pending {pending:>9}",
                elapsed.as_secs_f64()
            ));
        } else {
            let msg =
                format!("expiries {expiries} (max late {late})  pending {pending}  arms {arms}  cancels {cancels}");
            self.bar.set_message(msg);
        }
    }

    /// Removes the bar, if one is shown.
    pub fn finish(&mut self) {
        std::mem::replace(&mut self.bar, ProgressBar::hidden()).finish_and_clear();
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
