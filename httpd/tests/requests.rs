//! Requests and bad input, from a plain-socket client: routes, keep-alive, pipelining in
//! order, `Connection: close`, and a clear answer to every bad input with nothing else
//! broken.

mod common;

use common::{Client, Server};
use std::time::{Duration, Instant};

/// A server whose timeouts no test here waits for.
fn server() -> Server {
    Server::start(&["--threads", "2", "--header-timeout-ms", "5000", "--idle-timeout-ms", "5000"])
}

#[test]
fn root_stats_and_keep_alive() {
    let server = server();
    let mut client = server.connect();
    for _ in 0..3 {
        let response = client.get("/");
        assert_eq!((response.status, response.body.as_str()), (200, "hello from shardwheel-httpd\n"));
        assert!(!response.closes(), "{}", response.head);
    }
    let stats = client.get("/stats");
    assert!(stats.head.contains("application/json"), "{}", stats.head);
    let stats: serde_json::Value = serde_json::from_str(&stats.body).expect("JSON");
    for key in [
        "connections",
        "requests",
        "closed_by_header_timeout",
        "closed_by_idle_timeout",
        "timers_armed",
        "timers_cancelled",
        "timers_fired",
    ] {
        assert!(stats[key].is_u64(), "{key} in {stats}");
    }
    assert_eq!(stats["requests"], 4, "{stats}");
    assert!(stats["timeout_close_late_us"]["p99"].is_u64(), "{stats}");
    // An arm and a cancel of the header timer per request.
    assert!(stats["timers_cancelled"].as_u64().unwrap() >= 4, "{stats}");
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let server = server();
    let mut client = server.connect();
    let sent = Instant::now();
    // One write: a slow request first, then two quick ones that must wait behind it.
    client.send(
        "GET /delay/150 HTTP/1.1\r\nHost: t\r\n\r\nGET / HTTP/1.1\r\nHost: t\r\n\r\nGET /nope HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let first = client.response();
    assert!(sent.elapsed() >= Duration::from_millis(150));
    assert_eq!((first.status, first.body.as_str()), (200, "delayed 150 ms\n"));
    assert_eq!(client.response().status, 200);
    assert_eq!(client.response().status, 404);
    assert_eq!(client.get("/").status, 200, "the connection goes on");
}

#[test]
fn responses_the_socket_cannot_take_at_once_are_sent_as_the_peer_reads() {
    let server = server();
    // A small receive buffer, and nothing read until every request is sent: the server's
    // writes block, and only its writable events (no request comes with them) send the rest.
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&server.addr.into()).unwrap();
    let stream: std::net::TcpStream = socket.into();
    stream.set_read_timeout(Some(common::READ_TIMEOUT)).unwrap();
    let mut client = Client::from(stream);
    // 76 KiB of requests: past the server's 64 KiB input cap too, so it must read the rest
    // of them from the socket once answering made room (no event comes for bytes that were
    // already there).
    const N: usize = 2000;
    client.send("GET /stats HTTP/1.1\r\nHost: t\r\n\r\n".repeat(N));
    // Past the loopback's buffers: the server waits on the socket for most of them.
    std::thread::sleep(Duration::from_millis(200));
    let mut bytes = 0;
    for i in 0..N {
        let response = client.try_response().unwrap_or_else(|| panic!("closed before response {i}"));
        assert_eq!(response.status, 200, "response {i}");
        bytes += response.head.len() + response.body.len();
    }
    assert!(bytes > 256 * 1024, "only {bytes} bytes: the test did not fill the socket");
    assert_eq!(client.get("/").status, 200, "the connection goes on");
}

#[test]
fn a_client_that_half_closes_after_its_request_is_answered_then_closed() {
    let server = server();
    for _ in 0..10 {
        let mut client = server.connect();
        // The request and the end of the client's side, back to back: the server's one read
        // may see both, and must still see the end (not wait for the idle timeout).
        client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        client.stream.shutdown(std::net::Shutdown::Write).unwrap();
        assert_eq!(client.response().status, 200);
        client.assert_closed_now("a half-closed client");
    }
}

#[test]
fn connection_close_is_honoured() {
    let server = server();
    let mut client = server.connect();
    client.send("GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    let response = client.response();
    assert_eq!(response.status, 200);
    assert!(response.closes(), "{}", response.head);
    client.assert_closed_now("Connection: close");
    // HTTP/1.0 closes by default.
    let mut client = server.connect();
    client.send("GET / HTTP/1.0\r\n\r\n");
    assert_eq!(client.response().status, 200);
    client.assert_closed_now("HTTP/1.0");
}

#[test]
fn a_malformed_request_gets_400_and_a_close() {
    let server = server();
    for garbage in ["NOT HTTP AT ALL\r\n\r\n", "GET / HTTP/1.1\r\nBad Header\r\n\r\n", "GET / HTTP/9.9\r\n\r\n"] {
        let mut client = server.connect();
        client.send(garbage);
        let response = client.response();
        assert_eq!(response.status, 400, "{garbage:?}");
        assert!(response.closes());
        client.assert_closed_now(garbage);
    }
}

#[test]
fn headers_over_8_kib_get_431_and_a_close() {
    let server = server();
    let mut client = server.connect();
    client.send(format!("GET / HTTP/1.1\r\nHost: t\r\nX-Big: {}\r\n\r\n", "a".repeat(9 * 1024)));
    let response = client.response();
    assert_eq!(response.status, 431);
    assert!(response.closes());
    client.assert_closed_now("431");
    // Too many headers is the same.
    let mut client = server.connect();
    client.send(format!("GET / HTTP/1.1\r\n{}\r\n", "X: y\r\n".repeat(100)));
    assert_eq!(client.response().status, 431);
    // Just under the limit is served.
    let mut client = server.connect();
    client.send(format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(7 * 1024)));
    assert_eq!(client.response().status, 200);
}

#[test]
fn unknown_paths_bad_delays_and_methods_get_a_clear_answer_and_the_connection_goes_on() {
    let server = server();
    let mut client = server.connect();
    for (path, status) in [("/nope", 404), ("/delay/60001", 400), ("/delay/abc", 400), ("/delay/", 400)] {
        let response = client.get(path);
        assert_eq!(response.status, status, "{path}");
        assert!(!response.closes(), "{path}");
    }
    client.send("POST / HTTP/1.1\r\nHost: t\r\n\r\n");
    assert_eq!(client.response().status, 405);
    assert_eq!(client.get("/").status, 200);
    // A body: 413, and a close (its bytes would pass for the next request).
    client.send("POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc");
    let response = client.response();
    assert_eq!(response.status, 413);
    assert!(response.closes());
}

#[test]
fn connections_past_max_conns_are_closed_at_once() {
    let server = Server::start(&[
        "--threads",
        "1",
        "--max-conns",
        "2",
        "--header-timeout-ms",
        "5000",
        "--idle-timeout-ms",
        "5000",
    ]);
    let mut held: Vec<Client> = (0..2).map(|_| server.connect()).collect();
    for client in &mut held {
        assert_eq!(client.get("/").status, 200);
    }
    let mut third = server.connect();
    third.assert_closed_now("a connection past --max-conns");
    for client in &mut held {
        assert_eq!(client.get("/").status, 200, "the others go on");
    }
    let stats: serde_json::Value = serde_json::from_str(&held[0].get("/stats").body).unwrap();
    assert_eq!(stats["rejected_over_max_conns"], 1, "{stats}");
    drop(held);
    // With room again (once the server has seen the two closes), a new connection is served.
    let until = Instant::now() + Duration::from_secs(3);
    loop {
        let mut client = server.connect();
        client.send("GET / HTTP/1.1\r\nHost: t\r\n\r\n");
        match client.try_response() {
            Some(response) => break assert_eq!(response.status, 200),
            None => assert!(Instant::now() < until, "no room after 3 s"),
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_client_that_resets_mid_request_costs_nothing_else() {
    let server = server();
    let mut other = server.connect();
    assert_eq!(other.get("/").status, 200);
    for _ in 0..5 {
        let mut client = server.connect();
        client.send("GET /delay/50 HTTP/1.1\r\nHost: t\r\n\r\nGET / HT");
        // SO_LINGER 0: the close sends a reset.
        let socket = socket2::Socket::from(client.stream);
        socket.set_linger(Some(Duration::ZERO)).unwrap();
        drop(socket);
    }
    assert_eq!(other.get("/").status, 200);
    // (Each `/stats` connection of the harness is a peer close too: hence at least 5.)
    let stats = server.stats_when(|s| s["closed_by_peer"].as_u64() >= Some(5));
    assert!(stats["closed_by_peer"].as_u64() >= Some(5), "{stats}");
    assert_eq!(other.get("/").status, 200);
}
