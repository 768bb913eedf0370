//! Opening a connection: a nonblocking socket, bound to a source address first when there
//! are several, and a connect that returns at once (its end is the first readiness event).
//!
//! Why bind a source: one source address has about 28 000 ephemeral ports
//! (`net.ipv4.ip_local_port_range`), and a client holding more connections than that to one
//! server runs out (`EADDRNOTAVAIL`). Every 127.x.y.z is loopback on Linux, so connections
//! spread over several of them each get ports of their own (55,001 here: `PORTS`).
//!
//! Why the client picks the port too: left to the kernel (a `bind` to port 0 with
//! `IP_BIND_ADDRESS_NO_PORT`, the port chosen at `connect` by the 4-tuple), each connect
//! searches the ephemeral range for a port whose 4-tuple is free, and that search grows with
//! the connections already open: 100,000 connects from 6 sources took 35 s of system time
//! (350 µs each) here, and the ramp ran 21 s instead of 5. Bound to a port of the client's
//! choosing, a connect checks its one 4-tuple. Each source address hands out its ports in
//! turn, from `PORTS`. A port a listener holds there is skipped (its `bind` fails); another
//! connection's is not (`SO_REUSEADDR` lets both bind, and the two would collide at
//! `connect`), so a source must not hand out a port twice in a run: a process holds fewer
//! connections than a source has ports, and a process's sources are its own (`--processes`
//! splits them, and refuses fewer sources than processes).
//! `SO_REUSEADDR` lets a port be bound again while a connection of an earlier run on it
//! waits out `TIME_WAIT` (to another server port: a distinct 4-tuple).

use mio::net::TcpStream;
use socket2::{Domain, Socket, Type};
use std::collections::HashMap;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Mutex, PoisonError};

/// The ports a source address hands out (a server listening on every address, 0.0.0.0, at
/// one of them makes its bind fail: that port is skipped).
const PORTS: std::ops::RangeInclusive<u16> = 10_000..=65_000;
/// How many ports a connect tries at one source before it gives up (`EADDRINUSE`).
const TRIES: usize = 64;

/// The next port each source address hands out.
static NEXT_PORT: Mutex<Option<HashMap<Ipv4Addr, u16>>> = Mutex::new(None);

/// Binds `socket` to `source` at the next port it hands out, skipping the ones in use.
fn bind_next(socket: &Socket, source: Ipv4Addr) -> io::Result<()> {
    let mut last = None;
    for _ in 0..TRIES {
        let port = {
            let mut next = NEXT_PORT.lock().unwrap_or_else(PoisonError::into_inner);
            let next = next.get_or_insert_with(HashMap::new).entry(source).or_insert(*PORTS.start());
            let port = *next;
            *next = if port >= *PORTS.end() { *PORTS.start() } else { port + 1 };
            port
        };
        match socket.bind(&SocketAddr::from((source, port)).into()) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AddrInUse)))
}

/// What a socket gets before its connect.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    /// The source address to bind (at a port the client picks, see the module docs); `None`:
    /// the kernel's choice of both.
    pub source: Option<Ipv4Addr>,
    /// A receive buffer size set before the handshake (so the window it advertises is small
    /// from the start); `None`: the default.
    pub recv_buffer: Option<usize>,
}

/// A nonblocking connect to `addr` with `setup`; the connect completes (or fails) later.
pub fn connect(addr: SocketAddr, setup: Setup) -> io::Result<TcpStream> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    if let Some(size) = setup.recv_buffer {
        socket.set_recv_buffer_size(size)?;
    }
    if let Some(source) = setup.source {
        socket.set_reuse_address(true)?;
        bind_next(&socket, source)?;
    }
    socket.set_nonblocking(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(nix::libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    Ok(TcpStream::from_std(socket.into()))
}

/// Why a connect failed, as a short name to count by: the errno's (`ECONNREFUSED`,
/// `EADDRNOTAVAIL`, `EMFILE`, …), or the error's kind when it has none.
pub fn reason(error: &io::Error) -> String {
    match error.raw_os_error() {
        Some(raw) => format!("{:?}", nix::errno::Errno::from_raw(raw)),
        None => format!("{:?}", error.kind()),
    }
}

/// The `count` loopback source addresses from 127.0.0.2 on, skipping every x.y.z.0 and
/// x.y.z.255 (a network's and a broadcast address on a /24, which some tools refuse); an
/// error if 127/8 has not that many.
pub fn sources(count: usize) -> Result<Vec<Ipv4Addr>, String> {
    // 254 hosts in each of the 65 536 /24s, less 127.0.0.1.
    const AVAILABLE: usize = 65_536 * 254 - 1;
    if count > AVAILABLE {
        return Err(format!("--sources {count}: 127.0.0.0/8 has only {AVAILABLE} source addresses"));
    }
    let first = u32::from(Ipv4Addr::new(127, 0, 0, 2));
    let all = (first..).filter(|a| !matches!(a & 0xff, 0 | 255)).map(Ipv4Addr::from);
    Ok(all.take(count).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_start_at_127_0_0_2_and_skip_0_and_255() {
        let s = sources(256).unwrap();
        assert_eq!(s[0], Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(s[252], Ipv4Addr::new(127, 0, 0, 254));
        assert_eq!(s[253], Ipv4Addr::new(127, 0, 1, 1));
        assert!(s.iter().all(|a| a.octets()[0] == 127 && !matches!(a.octets()[3], 0 | 255)));
        assert!(sources(17_000_000).is_err());
    }

    #[test]
    fn a_source_hands_out_its_ports_in_turn_and_skips_one_in_use() {
        let source = Ipv4Addr::new(127, 0, 9, 9);
        // A listener there at the first port: the first connect's bind skips it.
        let held = std::net::TcpListener::bind((source, *PORTS.start())).expect("the first port free here");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let setup = Setup { source: Some(source), recv_buffer: None };
        let ports: Vec<u16> = (0..3)
            .map(|_| {
                let stream = connect(addr, setup).expect("connect");
                stream.local_addr().unwrap().port()
            })
            .collect();
        let first = *PORTS.start();
        assert_eq!(ports, [first + 1, first + 2, first + 3]);
        drop(held);
    }

    #[test]
    fn a_reason_is_the_errno_name() {
        assert_eq!(reason(&io::Error::from_raw_os_error(nix::libc::ECONNREFUSED)), "ECONNREFUSED");
        assert_eq!(reason(&io::Error::other("x")), "Other");
    }
}
