//! Opening a connection: a nonblocking socket, bound to a source address first when there
//! are several, and a connect that returns at once (its end is the first readiness event).
//!
//! Why bind a source: one source address has about 28 000 ephemeral ports
//! (`net.ipv4.ip_local_port_range`), and a client holding more connections than that to one
//! server runs out (`EADDRNOTAVAIL`). Every 127.x.y.z is loopback on Linux, so connections
//! spread over several of them each get a port range of their own.
//!
//! Why `IP_BIND_ADDRESS_NO_PORT`: a `bind` to port 0 picks the port at once, and must pick
//! one free for *every* destination (the kernel cannot know the 4-tuple yet), so the binds
//! would share the ~28 000 ports between all sources again. With the option set, the port is
//! chosen at `connect`, by the whole 4-tuple, and each source address gets its own ports.

use mio::net::TcpStream;
use nix::sys::socket::{setsockopt, sockopt};
use socket2::{Domain, Socket, Type};
use std::io;
use std::net::{Ipv4Addr, SocketAddr};

/// What a socket gets before its connect.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup {
    /// The source address to bind (port chosen at connect); `None`: the kernel's choice.
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
        setsockopt(&socket, sockopt::IpBindAddressNoPort, &true).map_err(io::Error::from)?;
        socket.bind(&SocketAddr::from((source, 0)).into())?;
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
    fn a_reason_is_the_errno_name() {
        assert_eq!(reason(&io::Error::from_raw_os_error(nix::libc::ECONNREFUSED)), "ECONNREFUSED");
        assert_eq!(reason(&io::Error::other("x")), "Other");
    }
}
