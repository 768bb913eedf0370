//! `--processes N` (the local stack): N server processes on one port, as nginx's
//! `worker_processes`. A process may hold at most as many descriptors as its hard limit
//! allows (20,000 on the machine this was written on, not to be raised), so a million
//! connections need some fifty processes; `SO_REUSEPORT` spreads the connections over every
//! listener of every process, and each process has its own threads, wheels and connections,
//! holding its share of `--max-conns`.
//!
//! The parent binds the address (port 0 becomes a port here), starts N-1 copies of itself
//! with the same flags, that port and a hidden `--child INDEX`, and prints its start line
//! once every child listens. A child stops with its parent (`PR_SET_PDEATHSIG`) and at its
//! SIGTERM; its output comes out through the parent, each line marked with its index.

use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a child may take to listen.
const START_BOUND: Duration = Duration::from_secs(30);

/// The child processes, started and listening.
#[derive(Debug)]
pub struct Children {
    children: Vec<(Child, JoinHandle<()>)>,
}

impl Children {
    /// Starts processes 1..`processes` on `addr` (the port already bound by this one), with
    /// this process's own arguments; returns once each has printed its start line, which is
    /// kept back (this process's is the one a reader sees first). An error, with the others
    /// killed, if one cannot start or does not listen within 30 s.
    pub fn start(processes: usize, addr: SocketAddr) -> io::Result<Children> {
        let exe = std::env::current_exe()?;
        let (listening, up) = mpsc::channel();
        let mut started = Children { children: Vec::with_capacity(processes.saturating_sub(1)) };
        for index in 1..processes {
            let spawned = Command::new(&exe)
                .args(std::env::args_os().skip(1))
                // Later flags win (`args_override_self`): the bound port, and the index.
                .args(["--addr", &addr.to_string(), "--child", &index.to_string()])
                .env(PARENT_ENV, std::process::id().to_string())
                .stdout(Stdio::piped())
                .spawn();
            let mut child = match spawned {
                Ok(child) => child,
                Err(e) => {
                    started.kill();
                    return Err(io::Error::new(e.kind(), format!("process {index} did not start: {e}")));
                }
            };
            let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no child stdout"))?;
            let listening = listening.clone();
            let forward = std::thread::spawn(move || forward(index, stdout, &listening));
            started.children.push((child, forward));
        }
        drop(listening);
        let deadline = Instant::now() + START_BOUND;
        for _ in 1..processes {
            match up.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Started::Listening) => {}
                Ok(Started::Ended(index)) => {
                    started.kill();
                    return Err(io::Error::other(format!(
                        "process {index} ended before it listened (its error is above)"
                    )));
                }
                Err(_) => {
                    started.kill();
                    return Err(io::Error::other(format!("a child process did not listen within {START_BOUND:?}")));
                }
            }
        }
        Ok(started)
    }

    /// Asks each child to stop (SIGTERM: its graceful stop), then waits for them until
    /// `bound` has passed, killing those still running; their output is through by then.
    /// Says on stderr which did not end well.
    pub fn stop(mut self, bound: Duration) {
        for (child, _) in &self.children {
            terminate(child);
        }
        let deadline = Instant::now() + bound;
        for (index, (mut child, forward)) in self.children.drain(..).enumerate() {
            let status = wait_until(&mut child, deadline);
            let _ = forward.join();
            match status {
                Some(status) if status.success() => {}
                Some(status) => eprintln!("shardwheel-httpd: process {} ended with {status}", index + 1),
                None => eprintln!("shardwheel-httpd: process {} did not stop within {bound:?}: killed", index + 1),
            }
        }
    }

    fn kill(&mut self) {
        for (child, _) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Children {
    /// Children left (an error before `stop`) are killed: none outlives the parent's run.
    fn drop(&mut self) {
        self.kill();
    }
}

/// What a child's output says of its start.
#[derive(Debug)]
enum Started {
    Listening,
    /// Its output ended before its start line: it exited (process `.0`).
    Ended(usize),
}

/// Forwards child `index`'s output, each line marked; its start line is kept back and
/// announced on `listening` instead, as is an end of output before it.
fn forward(index: usize, stdout: std::process::ChildStdout, listening: &mpsc::Sender<Started>) {
    let mut announced = false;
    for line in BufReader::new(stdout).lines() {
        let Ok(line) = line else { break };
        if !announced && line.starts_with("shardwheel-httpd: listening on") {
            announced = true;
            let _ = listening.send(Started::Listening);
            continue;
        }
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "[process {index}] {line}");
        let _ = out.flush();
    }
    if !announced {
        let _ = listening.send(Started::Ended(index));
    }
}

fn terminate(child: &Child) {
    if let Ok(pid) = i32::try_from(child.id()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
    }
}

/// Waits for `child` until `deadline`; kills it then. Its status, or `None` if killed.
fn wait_until(child: &mut Child, deadline: Instant) -> Option<ExitStatus> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Err(_) => return None,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The parent's pid, in each child's environment.
const PARENT_ENV: &str = "SHARDWHEEL_HTTPD_PARENT";

/// In a child: stop when the parent ends, however it ends. A parent that died before the
/// death signal was asked for (between the spawn and here) is seen by the parent pid having
/// changed: then an error, and the child does not start.
pub fn die_with_parent() -> io::Result<()> {
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM).map_err(io::Error::from)?;
    let parent = std::env::var(PARENT_ENV).ok().and_then(|p| p.parse::<i32>().ok());
    if parent.is_some_and(|p| nix::unistd::getppid().as_raw() != p) {
        return Err(io::Error::other("the parent process ended before this one started"));
    }
    Ok(())
}

/// This process's share of `total` connections over `processes` (the first ones take
/// the remainder, one each).
pub fn share(total: u64, processes: u64, index: u64) -> u64 {
    let processes = processes.max(1);
    total / processes + u64::from(index < total % processes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_total_and_differ_by_one_at_most() {
        for (total, processes) in [(1_000_000, 52), (19_000, 1), (7, 3), (2, 5), (0, 4)] {
            let shares: Vec<u64> = (0..processes).map(|i| share(total, processes, i)).collect();
            assert_eq!(shares.iter().sum::<u64>(), total, "{total} over {processes}");
            let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
            assert!(max - min <= 1, "{shares:?}");
        }
    }
}
