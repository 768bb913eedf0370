//! The descriptor table, grown once at the start.
//!
//! Linux grows a process's descriptor table by doubling (64, 128, …, 16 384 entries), and
//! in a process with more than one thread each growth waits for an RCU grace period
//! (`expand_fdtable` calls `synchronize_rcu`): on the project's 2-core machine the `accept`
//! that crossed a power of two blocked 8–15 ms, and every thread's `accept` with it
//! (`shardwheel-httpd --trace` measured one `accept4` call taking 13 ms; `nginx`'s workers
//! are single-threaded processes and never wait so). Each connection queued meanwhile had
//! its header timer armed that much late, which was most of the client-seen p99 of 10 000
//! silent connections. The table never shrinks, so growing it once, before the threads
//! start, removes every later wait: a descriptor duplicated to the highest number the
//! server will use, then closed.

use nix::fcntl::{FcntlArg, fcntl};
use nix::sys::resource::{Resource, getrlimit, setrlimit};
use std::io;
use std::os::fd::AsFd;

/// Raises the soft `RLIMIT_NOFILE` to `wanted`, at most to the hard limit (which only a
/// privileged process may raise), and returns the soft limit now in force: how many
/// descriptors the process may hold.
pub fn raise_limit(wanted: u64) -> io::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    if soft >= wanted {
        return Ok(soft);
    }
    let raised = wanted.min(hard);
    setrlimit(Resource::RLIMIT_NOFILE, raised, hard).map_err(io::Error::from)?;
    Ok(raised)
}

/// Grows the descriptor table to hold `wanted` descriptors (or as many as the limit
/// allows), through a duplicate of `/dev/null`'s. Call it while the process has one
/// thread. Returns the table's size reached (at least).
pub fn grow_table(wanted: u64) -> io::Result<u64> {
    let null = std::fs::File::open("/dev/null")?;
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).map_err(io::Error::from)?;
    // The highest descriptor the limit allows, or the one `wanted` needs.
    let top = i32::try_from(wanted.min(soft).saturating_sub(1)).unwrap_or(i32::MAX);
    let dup = fcntl(null.as_fd(), FcntlArg::F_DUPFD_CLOEXEC(top)).map_err(io::Error::from)?;
    nix::unistd::close(dup).map_err(io::Error::from)?;
    Ok(u64::try_from(dup).unwrap_or(0) + 1)
}
