//! One process's loop: one `mio` poll holds its active connections (`active.rs`) and its
//! held ones (`client.rs`'s `Client`), on one thread.
//!
//! From the shared epoch it opens connections at its pace, the active ones first (they must
//! be connected before the warm-up) and the silent ones last (their header timeout starts at
//! the connect), then sends each request when due and trickles the slowloris bytes. After
//! the window (or the quiet point) no request is due; the loop ends once every request in
//! flight is answered, every connection gone quiet is closed (with `--quiet-at`) and every
//! held one is closed, or at the hard end, whichever comes first.

use super::active::{Actives, TOKEN_BASE};
use super::plan::{Options, Schedule, Share};
use super::result::ProcessResult;
use crate::client::Client;
use crate::report::{Class, ClassReport};
use mio::{Events, Poll};
use std::io::{self, ErrorKind};
use std::time::{Duration, Instant};

/// Runs process `share.index`'s part of `options` on `schedule`.
pub fn run(options: &Options, share: &Share, schedule: &Schedule) -> io::Result<ProcessResult> {
    let mut poll = Poll::new()?;
    let plan = options.held_plan(share);
    let classes = plan.classes();
    let mut held = Client::new(plan, poll.registry().try_clone()?);
    // Connection i of process p sits at (i·P + p)/(active·P) of the interval: the processes'
    // requests interleave evenly.
    let spread = (share.active * options.processes).max(1) as f64;
    let phase = |i: usize| (i * options.processes + share.index) as f64 / spread;
    let mut actives = Actives::new(
        options.addr,
        &options.path,
        share.active,
        share.rate,
        schedule,
        options.idle_timeout,
        share.sources.clone(),
        phase,
    );
    let total = share.active + classes.len();
    let mut events = Events::with_capacity(1024);
    std::thread::sleep(schedule.epoch.saturating_duration_since(Instant::now()));
    loop {
        let now = Instant::now();
        // Open as many as the pace allows by now: the active ones, then the held ones.
        let opened = actives.opened() + held.opened();
        if opened < total {
            let elapsed_ms =
                usize::try_from(now.saturating_duration_since(schedule.epoch).as_millis()).unwrap_or(usize::MAX);
            let target = ((elapsed_ms.saturating_add(1) as f64 * share.open_per_ms) as usize).min(total);
            while actives.opened() + held.opened() < target {
                if actives.opened() < share.active {
                    actives.open(poll.registry());
                } else {
                    held.open(classes[held.opened()]);
                }
            }
        }
        actives.send_due(now);
        held.trickle_due();
        let now = Instant::now();
        let all_opened = actives.opened() + held.opened() == total;
        // Looked at only once the window is over: `outstanding` and `all_closed` walk every
        // active connection, and a turn comes with every request due and every batch of
        // events (walked on every turn, 8,000 connections a process took more CPU than the
        // server they loaded).
        // (The held connections' count first: it is kept, not walked.)
        let settled = || held.live() == 0 && actives.outstanding() == 0 && (!schedule.quiet || actives.all_closed());
        if now >= schedule.end || (now >= schedule.window_end && all_opened && settled()) {
            break;
        }
        // Sleep until the next request, the next slowloris byte, the next millisecond's opens,
        // the window's end, or the hard end.
        let mut wake = schedule.end;
        for due in [actives.next_due(), held.next_trickle()].into_iter().flatten() {
            wake = wake.min(due);
        }
        if !all_opened {
            wake = wake.min(now + Duration::from_millis(1));
        }
        if now < schedule.window_end {
            wake = wake.min(schedule.window_end);
        }
        // Rounded up to a whole millisecond by epoll: never a busy wait.
        match poll.poll(&mut events, Some(wake.saturating_duration_since(now))) {
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            result => result?,
        }
        // One instant for the whole batch (`client.rs` says why).
        let polled = Instant::now();
        for event in events.iter() {
            let token = event.token().0;
            let hung_up = event.is_error() || event.is_read_closed();
            if token >= TOKEN_BASE {
                actives.on_event(token - TOKEN_BASE, hung_up, polled);
            } else {
                held.on_event(token, hung_up, polled);
            }
        }
    }
    let ran = schedule.epoch.elapsed();
    let last_connected = [actives.counts.last_connected, held.last_connected()].into_iter().flatten().max();
    let mut counts = actives.counts.clone();
    for (reason, n) in held.connect_failures() {
        *counts.connect_failures.entry(reason.clone()).or_default() += *n as u64;
    }
    let held_report = held.report(Duration::ZERO, ran);
    let quiet = ClassReport::of(Class::Quiet, actives.quiet_outcomes());
    Ok(ProcessResult {
        counts,
        held: held_report.classes,
        quiet: schedule.quiet.then_some(quiet),
        ramp: last_connected.map_or(Duration::ZERO, |at| at.saturating_duration_since(schedule.epoch)),
        ran,
        notes: held_report.errors,
    })
}
