//! `--processes N`: N processes on one port, each holding its share of `--max-conns`, all
//! stopped by the parent's signal, and each stopped if the parent dies.

mod common;

use common::{BIN, Server};
use nix::sys::signal::Signal;
use std::collections::BTreeSet;
use std::process::Command;
use std::time::{Duration, Instant};

/// The parent of process `pid`, from `/proc/PID/stat` (None once it is gone).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold spaces: the fields after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?;
    if state == "Z" {
        return None;
    }
    fields.next()?.parse().ok()
}

/// Whether every process in `pids` has ended within `bound`.
fn all_gone(pids: &BTreeSet<u32>, bound: Duration) -> bool {
    let until = Instant::now() + bound;
    while Instant::now() < until {
        if pids.iter().all(|&pid| parent_of(pid).is_none()) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The processes answering: connections are held open until each of the three has answered
/// one (`/stats` says which), at most 300 of them.
fn the_processes(server: &Server) -> (BTreeSet<u32>, Vec<common::Client>) {
    let mut pids = BTreeSet::new();
    let mut held = Vec::new();
    for _ in 0..300 {
        let mut client = server.connect();
        client.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n");
        let response = client.response();
        assert_eq!(response.status, 200);
        let stats: serde_json::Value = serde_json::from_str(&response.body).expect("/stats is JSON");
        pids.insert(u32::try_from(stats["pid"].as_u64().expect("a pid")).unwrap());
        held.push(client);
        if pids.len() == 3 {
            break;
        }
    }
    (pids, held)
}

#[test]
fn three_processes_share_the_port_and_stop_with_the_parent_s_signal() {
    let server = Server::start(&["--processes", "3", "--threads", "1", "--max-conns", "600"]);
    assert!(server.start_line.contains("3 processes, 1 threads each"), "{}", server.start_line);
    assert!(server.start_line.contains("max 200 connections each"), "{}", server.start_line);
    let (pids, held) = the_processes(&server);
    assert_eq!(pids.len(), 3, "300 connections reached {pids:?}");
    assert!(pids.contains(&server.pid()), "{pids:?}");
    for &pid in pids.iter().filter(|&&pid| pid != server.pid()) {
        assert_eq!(parent_of(pid), Some(server.pid()), "process {pid} is the server's child");
    }
    drop(held);
    let (status, output) = server.stop_with(Signal::SIGTERM);
    assert!(status.success(), "{status}\n{output}");
    // Each process's summary: the parent's own, then each child's, marked.
    assert!(output.contains("\nsummary: ") || output.starts_with("summary: "), "{output}");
    for index in [1, 2] {
        assert!(output.contains(&format!("[process {index}] summary: ")), "{output}");
        assert!(output.contains(&format!("[process {index}] shardwheel-httpd: stopped by SIGTERM")), "{output}");
    }
    assert!(all_gone(&pids, Duration::from_secs(5)), "a process outlived the stop: {pids:?}");
}

#[test]
fn each_process_holds_its_share_of_max_conns() {
    // Two processes, one thread each, 3 connections in all: 2 in the first, 1 in the second.
    let server = Server::start(&["--processes", "2", "--threads", "1", "--max-conns", "3"]);
    assert!(server.start_line.contains("max 2 connections each"), "{}", server.start_line);
    // Many connections, spread by the kernel: whichever way, no more than 2 + 1 are served.
    let mut served = Vec::new();
    for _ in 0..40 {
        let mut client = server.connect();
        // A connection over the share is closed at once: the write may meet its reset.
        client.send_lossy("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        if client.try_response().is_some() {
            served.push(client);
        }
    }
    assert!(!served.is_empty() && served.len() <= 3, "{} served with --max-conns 3", served.len());
    drop(served);
    let (status, output) = server.stop_with(Signal::SIGTERM);
    assert!(status.success(), "{status}\n{output}");
}

#[test]
fn the_children_stop_when_the_parent_dies() {
    let server = Server::start(&["--processes", "3", "--threads", "1"]);
    let (pids, held) = the_processes(&server);
    assert_eq!(pids.len(), 3, "{pids:?}");
    drop(held);
    // SIGKILL: the parent cannot pass anything on; the children's death signal stops them.
    server.signal(Signal::SIGKILL);
    assert!(all_gone(&pids, Duration::from_secs(10)), "a child outlived its parent: {pids:?}");
}

#[test]
fn processes_need_the_local_stack_and_one_trace() {
    for (args, says) in [
        (&["--processes", "2", "--stack", "hyper"][..], "--processes needs --stack local"),
        (&["--processes", "2", "--trace", "/tmp/t"][..], "--trace needs one process"),
        (&["--processes", "0"][..], "0 is not in 1..=1024"),
    ] {
        let output = Command::new(BIN).args(["--addr", "127.0.0.1:0"]).args(args).output().expect("run");
        assert!(!output.status.success(), "{args:?}");
        assert!(output.stdout.is_empty(), "{args:?} started a server");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}
