//! Progress on stderr: an `indicatif` bar when stderr is a terminal, else one plain line per
//! second (readable in CI logs).

use crate::units::{count, ms_from_us, per_sec};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::{IsTerminal, Write as _};
use std::time::Duration;

/// One second's figures (rates per second over the last one), for the progress line or bar.
#[derive(Clone, Copy, Debug)]
pub struct Second {
    pub elapsed: Duration,
    pub arms: f64,
    pub resets: f64,
    pub cancels: f64,
    pub expiries: f64,
    /// The largest lateness of the second.
    pub max_late_us: u64,
    pub pending: Option<usize>,
}

impl Second {
    /// The line printed once a second when no bar is shown.
    fn line(&self) -> String {
        format!(
            "[{:>5.1} s]  arms {:>9}  resets {:>9}  cancels {:>9}  expiries {:>8} (max late {:>10})  pending {:>9}",
            self.elapsed.as_secs_f64(),
            per_sec(self.arms),
            per_sec(self.resets),
            per_sec(self.cancels),
            per_sec(self.expiries),
            ms_from_us(self.max_late_us),
            count(self.pending),
        )
    }

    /// The bar's message: the figures that change most first, as the terminal may cut it.
    fn short(&self) -> String {
        let (expiries, late, pending) = (per_sec(self.expiries), ms_from_us(self.max_late_us), count(self.pending));
        let (arms, cancels) = (per_sec(self.arms), per_sec(self.cancels));
        format!("expiries {expiries} (max late {late})  pending {pending}  arms {arms}  cancels {cancels}")
    }
}

/// Writes a line to stderr. Unlike `eprintln!`, never panics: a closed stderr (the reader
/// went away) must not abort a run halfway.
pub fn note(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

/// Where a run's progress goes.
#[derive(Debug)]
pub struct Progress {
    /// `Some` while a bar is shown.
    bar: Option<ProgressBar>,
    /// Draw bars at all (stderr is a terminal).
    fancy: bool,
    /// Put before every line: the timer's name when several run.
    label: String,
}

impl Progress {
    /// Bars if stderr is a terminal, lines otherwise; `label` (if any) prefixes every line.
    pub fn new(label: &str) -> Progress {
        Progress { bar: None, fancy: std::io::stderr().is_terminal(), label: label.to_owned() }
    }

    fn prefixed(&self, msg: &str) -> String {
        if self.label.is_empty() { msg.to_owned() } else { format!("[{}] {msg}", self.label) }
    }

    /// A line of its own (above the bar, if one is shown).
    pub fn line(&self, msg: &str) {
        let msg = self.prefixed(msg);
        match &self.bar {
            Some(bar) => bar.println(msg),
            None => note(&msg),
        }
    }

    fn start_bar(&mut self, len: u64, template: &str) {
        self.finish();
        if !self.fancy {
            return;
        }
        let style = ProgressStyle::with_template(template).expect("a valid template").progress_chars("█▉▊▋▌▍▎▏ ");
        let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr_with_hz(10))
            .with_style(style)
            .with_prefix(if self.label.is_empty() { "sim".to_owned() } else { self.label.clone() });
        self.bar = Some(bar);
    }

    /// Arming `total` idle timeouts.
    pub fn arming(&mut self, total: u64) {
        self.start_bar(total, "{prefix:>10} arming  [{bar:30}] {human_pos}/{human_len} idle timeouts");
    }

    /// Moves the bar: idle timeouts armed so far, or ms into the steady state.
    pub fn position(&self, at: u64) {
        if let Some(bar) = &self.bar {
            bar.set_position(at);
        }
    }

    /// The steady state, `duration` long.
    pub fn steady(&mut self, duration: Duration) {
        let template = "{prefix:>10} running [{bar:30}] {elapsed:>3}/{duration:3} {wide_msg}";
        self.start_bar(duration.as_millis() as u64, template);
    }

    /// One second's figures: the bar's message, or a line of its own.
    pub fn second(&self, figures: &Second) {
        match &self.bar {
            Some(bar) => bar.set_message(figures.short()),
            None => note(&self.prefixed(&figures.line())),
        }
    }

    /// Removes the bar, if one is shown.
    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}
