//! Progress on stderr: a line per phase, and a bar on a terminal.

use crate::units::{group, ms_from_us, per_sec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal as _, Write as _};

/// Writes a line to stderr (not under `cargo test`, which runs the scenario a dozen times);
/// unlike `eprintln!`, never panics: a closed stderr must not abort a run halfway.
pub fn note(msg: &str) {
    if !cfg!(test) {
        let _ = writeln!(std::io::stderr(), "{msg}");
    }
}

/// A run's progress: a line per phase (led by `label`, the timer's name when several run), and
/// on a terminal a bar with each second's figures (a log or a file wants the report instead).
#[derive(Debug)]
pub struct Progress {
    bar: ProgressBar,
    label: String,
    bars: bool,
}

impl Progress {
    pub fn new(label: &str) -> Progress {
        let bars = !cfg!(test) && std::io::stderr().is_terminal();
        Progress { bar: ProgressBar::hidden(), label: label.to_owned(), bars }
    }

    /// A phase's line (above the bar, if one is shown).
    pub fn line(&self, msg: &str) {
        let msg = if self.label.is_empty() { msg.to_owned() } else { format!("[{}] {msg}", self.label) };
        if self.bar.is_hidden() { note(&msg) } else { self.bar.println(msg) }
    }

    /// Shows a bar of `len` steps on a terminal: idle timeouts to arm, or the steady state's ms.
    pub fn start_bar(&mut self, len: u64, steady: bool) {
        self.finish();
        if !self.bars {
            return;
        }
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

    /// One second's rates of arms, cancels and expiries, and its largest lateness, on the
    /// bar (what changes most first, as the terminal may cut it).
    pub fn second(&self, rates: [f64; 3], max_late_us: u64, pending: usize) {
        let ([arms, cancels, expiries], late, pending) =
            (rates.map(per_sec), ms_from_us(max_late_us), group(pending as u64));
        let msg = format!("expiries {expiries} (max late {late})  pending {pending}  arms {arms}  cancels {cancels}");
        self.bar.set_message(msg);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The tests print nothing, and only a terminal gets a bar: piped, a run prints its phase
    /// lines alone.
    #[test]
    fn a_bar_only_on_a_terminal_and_nothing_in_tests() {
        assert!(!Progress::new("").bars, "a bar under cargo test");
        for bars in [true, false] {
            let mut progress = Progress::new("");
            progress.bars = bars;
            progress.start_bar(10, true);
            assert_eq!(progress.bar.length().is_some(), bars);
        }
    }
}
