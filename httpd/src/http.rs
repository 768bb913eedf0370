//! HTTP/1.1: a request's head parsed by `httparse`, routed, and the responses written.
//!
//! The server's routes take no body: `GET /`, `GET /stats`, `GET /delay/<ms>`. Anything
//! the parser rejects, or framing RFC 9112 says a server must not trust (`framing`), is a
//! `400` and the connection closes; a head over
//! [`MAX_HEADER_BYTES`] (or with more than [`MAX_HEADERS`] headers) a `431` and close; a
//! request with a body a `413` and close (the bytes that follow could not be told from the
//! next request otherwise); any method but `GET` (`HEAD` included) a `405` with
//! `Allow: GET`, and the connection goes on (to `HEAD`, the head alone, as RFC 9110 says).
//! An absolute-form target (`GET http://host/ HTTP/1.1`) is routed by its path. The hyper
//! stack gives the same answers (`hyper_stack/`).

/// The most bytes a request's head (request line and headers) may take.
pub const MAX_HEADER_BYTES: usize = 8 * 1024;
/// The most headers a request may carry.
pub const MAX_HEADERS: usize = 64;
/// The longest `/delay/<ms>` served.
pub const MAX_DELAY_MS: u64 = 60_000;

/// What the bytes at the front of a connection's input hold.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed {
    /// Not a whole head yet.
    Partial,
    /// A whole request, `len` bytes long.
    Request(Request),
    /// A request that is answered with this status, after which the connection closes.
    Reject(Status),
}

/// A request whose head is complete.
#[derive(Debug, PartialEq, Eq)]
pub struct Request {
    /// Its length in bytes (the head: it has no body).
    pub len: usize,
    /// What it asks for.
    pub route: Route,
    /// Whether the connection stays open after the response.
    pub keep_alive: bool,
    /// A `HEAD` request: its response is the head alone, no body.
    pub head_only: bool,
}

/// What a request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `GET /`: a small body.
    Root,
    /// `GET /stats`: the counters as JSON.
    Stats,
    /// `GET /delay/<ms>`: answered by a timer `<ms>` later.
    Delay(u64),
    /// `/delay/` with a number out of `0..=MAX_DELAY_MS`, or none.
    BadDelay,
    /// A method other than `GET`.
    MethodNotAllowed,
    /// Any other path.
    NotFound,
}

/// The statuses the server answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    ContentTooLarge,
    HeadersTooLarge,
}

impl Status {
    /// The code and reason phrase.
    fn line(self) -> (u16, &'static str) {
        match self {
            Status::Ok => (200, "OK"),
            Status::BadRequest => (400, "Bad Request"),
            Status::NotFound => (404, "Not Found"),
            Status::MethodNotAllowed => (405, "Method Not Allowed"),
            Status::ContentTooLarge => (413, "Content Too Large"),
            Status::HeadersTooLarge => (431, "Request Header Fields Too Large"),
        }
    }
}

/// Parses the request at the front of `buf`.
pub fn parse(buf: &[u8]) -> Parsed {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len > MAX_HEADER_BYTES => Parsed::Reject(Status::HeadersTooLarge),
        Ok(httparse::Status::Complete(len)) => request(&req, len),
        // The whole of `buf` is this request's head so far.
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEADER_BYTES => Parsed::Reject(Status::HeadersTooLarge),
        Ok(httparse::Status::Partial) => Parsed::Partial,
        Err(httparse::Error::TooManyHeaders) => Parsed::Reject(Status::HeadersTooLarge),
        Err(_) => Parsed::Reject(Status::BadRequest),
    }
}

/// A complete head: checked for a body, its keep-alive read, routed.
fn request(req: &httparse::Request<'_, '_>, len: usize) -> Parsed {
    if let Some(status) = framing(req) {
        return Parsed::Reject(status);
    }
    let mut keep_alive = req.version == Some(1);
    for header in req.headers.iter().filter(|h| h.name.eq_ignore_ascii_case("connection")) {
        for token in header.value.split(|&b| b == b',').map(|t| t.trim_ascii()) {
            if token.eq_ignore_ascii_case(b"close") {
                keep_alive = false;
            } else if token.eq_ignore_ascii_case(b"keep-alive") {
                keep_alive = true;
            }
        }
    }
    // `Complete` means the method and path were parsed.
    let (method, target) = (req.method.unwrap_or(""), req.path.unwrap_or(""));
    let Some(path) = target_path(target) else { return Parsed::Reject(Status::BadRequest) };
    Parsed::Request(Request { len, route: route(method, path), keep_alive, head_only: method == "HEAD" })
}

/// What a request's framing headers say of its body (RFC 9112 §6), as hyper reads them, so
/// that both stacks answer alike: `None` for no body; else the answer, after which the
/// connection closes. A body is a `413` (the routes take none); framing that cannot be
/// trusted is a `400`, as RFC 9112 §6.3 says a server MUST answer it:
///
/// - `Transfer-Encoding` on HTTP/1.0: "MUST treat the message as if the framing is faulty"
///   (§6.1);
/// - `Transfer-Encoding` whose final coding is not `chunked` (`gzip`, say): the body's
///   length "cannot be determined reliably" (§6.3). (§6.1's "SHOULD respond with 501" to a
///   coding the server does not understand is for a coding followed by `chunked`, whose
///   length is known: that body is a `413`, as any body, on both stacks.)
/// - a `Content-Length` that is not digits alone (`+0`, `0, 0`), or two that differ: an
///   invalid one (§6.3; identical repeats are one length, as §6.3 allows).
///
/// `Transfer-Encoding` overrides `Content-Length` (§6.3).
fn framing(req: &httparse::Request<'_, '_>) -> Option<Status> {
    let named = |name: &'static str| req.headers.iter().filter(move |h| h.name.eq_ignore_ascii_case(name));
    if let Some(last) = named("transfer-encoding").next_back() {
        let chunked =
            last.value.rsplit(|&b| b == b',').next().is_some_and(|c| c.trim_ascii().eq_ignore_ascii_case(b"chunked"));
        return Some(if req.version == Some(1) && chunked { Status::ContentTooLarge } else { Status::BadRequest });
    }
    let mut length = None;
    for header in named("content-length") {
        match (content_length(header.value), length) {
            (None, _) => return Some(Status::BadRequest),
            (Some(n), Some(m)) if n != m => return Some(Status::BadRequest),
            (n, _) => length = n,
        }
    }
    match length {
        Some(n) if n > 0 => Some(Status::ContentTooLarge),
        _ => None,
    }
}

/// A `Content-Length` value: digits alone (RFC 9110 §8.6), within OWS; `None` if not, or
/// past `u64` (Rust's `parse` would take a leading `+`).
fn content_length(value: &[u8]) -> Option<u64> {
    let digits = value.trim_ascii();
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The path a request target names (RFC 9112 §3.2): origin-form (`/path?query`) as it is;
/// absolute-form (`http://host/path`), which "a server MUST accept" (§3.2.2), by what follows
/// its authority (`/` if nothing does). `None`: an absolute-form target with no host, a
/// `400` (as hyper answers it). Anything else (`*`, `host:port`) is routed as it is: no
/// route takes it.
fn target_path(target: &str) -> Option<&str> {
    let Some((scheme, rest)) = target.split_once("://") else { return Some(target) };
    let is_scheme = !scheme.is_empty() && scheme.bytes().all(|b| b.is_ascii_alphanumeric() || b"+-.".contains(&b));
    if !is_scheme {
        return Some(target);
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    // The host follows any `user@`.
    let host = authority.rsplit_once('@').map_or(authority, |(_, host)| host);
    if host.is_empty() {
        return None;
    }
    Some(if path.starts_with('/') { path } else { "/" })
}

/// The route of a `method` and `path` (its query and fragment, if any, ignored).
pub fn route(method: &str, path: &str) -> Route {
    let path = path.split_once(['?', '#']).map_or(path, |(p, _)| p);
    if method != "GET" {
        return Route::MethodNotAllowed;
    }
    match path {
        "/" => Route::Root,
        "/stats" => Route::Stats,
        _ => match path.strip_prefix("/delay/") {
            Some(ms) => match ms.parse::<u64>() {
                Ok(ms) if ms <= MAX_DELAY_MS => Route::Delay(ms),
                _ => Route::BadDelay,
            },
            None => Route::NotFound,
        },
    }
}

/// Appends a response to `out`: `status`, a `Content-Length` body, and `Connection: close`
/// unless `keep_alive`.
pub fn respond(out: &mut Vec<u8>, status: Status, content_type: &str, body: &[u8], keep_alive: bool) {
    respond_with(out, status, content_type, body, keep_alive, true);
}

/// As [`respond`]; without the body's bytes unless `send_body` (the answer to a `HEAD`: its
/// `Content-Length` is the body's all the same).
fn respond_with(out: &mut Vec<u8>, status: Status, content_type: &str, body: &[u8], keep_alive: bool, send_body: bool) {
    use std::io::Write;
    let (code, reason) = status.line();
    let connection = if keep_alive { "keep-alive" } else { "close" };
    // RFC 9110: a 405 names the methods the resource takes.
    let allow = if status == Status::MethodNotAllowed { "Allow: GET\r\n" } else { "" };
    // Writing to a `Vec` cannot fail.
    let _ = write!(
        out,
        "HTTP/1.1 {code} {reason}\r\nServer: shardwheel-httpd\r\nContent-Type: {content_type}\r\n\
         Content-Length: {}\r\n{allow}Connection: {connection}\r\n\r\n",
        body.len()
    );
    if send_body {
        out.extend_from_slice(body);
    }
}

/// Appends a plain-text response whose body is the status's reason phrase (the head alone
/// if `head_only`).
pub fn respond_plain(out: &mut Vec<u8>, status: Status, keep_alive: bool, head_only: bool) {
    let (_, reason) = status.line();
    respond_with(out, status, "text/plain", format!("{reason}\n").as_bytes(), keep_alive, !head_only);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Parsed {
        parse(text.as_bytes())
    }

    #[test]
    fn routes() {
        assert_eq!(route("GET", "/"), Route::Root);
        assert_eq!(route("GET", "/stats?x=1"), Route::Stats);
        assert_eq!(route("GET", "/delay/0"), Route::Delay(0));
        assert_eq!(route("GET", "/delay/60000"), Route::Delay(60_000));
        assert_eq!(route("GET", "/delay/60001"), Route::BadDelay);
        assert_eq!(route("GET", "/delay/-1"), Route::BadDelay);
        assert_eq!(route("GET", "/delay/"), Route::BadDelay);
        assert_eq!(route("GET", "/nope"), Route::NotFound);
        assert_eq!(route("POST", "/"), Route::MethodNotAllowed);
        assert_eq!(route("HEAD", "/"), Route::MethodNotAllowed);
        // A fragment is no part of the path, as hyper's URI parser has it.
        assert_eq!(route("GET", "/stats#x"), Route::Stats);
    }

    /// Absolute-form targets are routed by their path (RFC 9112 §3.2.2), as hyper routes them.
    #[test]
    fn an_absolute_form_target_is_routed_by_its_path() {
        let route_of = |target: &str| match parsed(&format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n")) {
            Parsed::Request(req) => Ok(req.route),
            Parsed::Reject(status) => Err(status),
            Parsed::Partial => panic!("{target}: partial"),
        };
        assert_eq!(route_of("http://127.0.0.1:8080/"), Ok(Route::Root));
        assert_eq!(route_of("HTTP://h/stats?x=1"), Ok(Route::Stats));
        assert_eq!(route_of("https://u@h:1/delay/5"), Ok(Route::Delay(5)));
        assert_eq!(route_of("http://h"), Ok(Route::Root));
        assert_eq!(route_of("http://h?x"), Ok(Route::Root));
        assert_eq!(route_of("http://h/nope"), Ok(Route::NotFound));
        assert_eq!(route_of("http://h//"), Ok(Route::NotFound));
        assert_eq!(route_of("http:///"), Err(Status::BadRequest));
        assert_eq!(route_of("http://@/"), Err(Status::BadRequest));
        // Not absolute-form: routed as they are.
        assert_eq!(route_of("*"), Ok(Route::NotFound));
        assert_eq!(route_of("h:80"), Ok(Route::NotFound));
        assert_eq!(route_of("/a://b"), Ok(Route::NotFound));
    }

    /// Framing that cannot be trusted is a `400` (RFC 9112 §6.1, §6.3), a body a `413`, as
    /// hyper answers each.
    #[test]
    fn framing_is_checked_as_rfc_9112_says() {
        let status = |headers: &str, version: &str| match parsed(&format!("GET / {version}\r\n{headers}\r\n")) {
            Parsed::Request(_) => 200,
            Parsed::Reject(Status::BadRequest) => 400,
            Parsed::Reject(Status::ContentTooLarge) => 413,
            other => panic!("{headers:?}: {other:?}"),
        };
        for (headers, want) in [
            ("Content-Length: 0\r\n", 200),
            ("Content-Length: 00\r\n", 200),
            ("Content-Length:  0 \r\n", 200),
            ("Content-Length: 0\r\nContent-Length: 0\r\n", 200),
            ("Content-Length: 3\r\n", 413),
            ("Content-Length: 3\r\nContent-Length: 3\r\n", 413),
            ("Content-Length: +0\r\n", 400),
            ("Content-Length: -0\r\n", 400),
            ("Content-Length: 0, 0\r\n", 400),
            ("Content-Length: \r\n", 400),
            ("Content-Length: 99999999999999999999999\r\n", 400),
            ("Content-Length: 0\r\nContent-Length: 5\r\n", 400),
            ("Content-Length: 5\r\nContent-Length: 0\r\n", 400),
            ("Transfer-Encoding: chunked\r\n", 413),
            ("Transfer-Encoding: Chunked\r\n", 413),
            ("Transfer-Encoding: gzip, chunked\r\n", 413),
            ("Transfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n", 413),
            ("Transfer-Encoding: chunked\r\nContent-Length: 0\r\n", 413),
            ("Transfer-Encoding: gzip\r\n", 400),
            ("Transfer-Encoding: identity\r\n", 400),
            ("Transfer-Encoding: chunked, gzip\r\n", 400),
            ("Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n", 400),
            ("Transfer-Encoding: chunked,\r\n", 400),
            ("Transfer-Encoding: \r\n", 400),
        ] {
            assert_eq!(status(headers, "HTTP/1.1"), want, "{headers:?}");
        }
        assert_eq!(status("Transfer-Encoding: chunked\r\n", "HTTP/1.0"), 400, "chunked on HTTP/1.0");
        assert_eq!(status("Content-Length: 3\r\n", "HTTP/1.0"), 413);
    }

    #[test]
    fn a_head_request_gets_a_405_head_without_its_body() {
        let Parsed::Request(req) = parsed("HEAD / HTTP/1.1\r\n\r\n") else { panic!("not a request") };
        assert!(req.head_only && req.route == Route::MethodNotAllowed);
        let mut out = Vec::new();
        respond_plain(&mut out, Status::MethodNotAllowed, true, true);
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 405 ") && text.contains("\r\nAllow: GET\r\n"), "{text}");
        assert!(text.ends_with("Content-Length: 19\r\nAllow: GET\r\nConnection: keep-alive\r\n\r\n"), "{text}");
    }

    #[test]
    fn keep_alive_by_version_and_header() {
        let req = |text| match parsed(text) {
            Parsed::Request(r) => r,
            other => panic!("{other:?}"),
        };
        assert!(req("GET / HTTP/1.1\r\n\r\n").keep_alive);
        assert!(!req("GET / HTTP/1.1\r\nConnection: Close\r\n\r\n").keep_alive);
        assert!(!req("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(req("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n").keep_alive);
        assert_eq!(req("GET / HTTP/1.1\r\n\r\nGET").len, 18);
    }

    #[test]
    fn rejects() {
        assert_eq!(parsed("GET / HTTP/1.1\r\nHost"), Parsed::Partial);
        assert_eq!(parsed("NOT HTTP\r\n\r\n"), Parsed::Reject(Status::BadRequest));
        assert_eq!(parsed("GET / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"), Parsed::Reject(Status::ContentTooLarge));
        assert_eq!(parsed("GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n"), Parsed::Reject(Status::BadRequest));
        let long = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEADER_BYTES));
        assert_eq!(parsed(&long), Parsed::Reject(Status::HeadersTooLarge));
        assert_eq!(parsed(&format!("{long}\r\n\r\n")), Parsed::Reject(Status::HeadersTooLarge));
    }

    /// A `GET /` head of exactly `len` bytes, whole (ending in `\r\n\r\n`) or, unless
    /// `whole`, cut short of its end (`len` bytes of a longer head, no blank line in them).
    fn head_of(len: usize, whole: bool) -> String {
        let start = "GET / HTTP/1.1\r\nX-Pad: ";
        let end = if whole { "\r\n\r\n" } else { "" };
        let head = format!("{start}{}{end}", "a".repeat(len - start.len() - end.len()));
        assert_eq!(head.len(), len);
        head
    }

    /// A whole head of `MAX_HEADER_BYTES` is served, one byte more is a `431`: at the limit,
    /// one below and one above, alone and with the next request pipelined behind it (the
    /// limit is the head's length, not the input's).
    #[test]
    fn a_whole_head_of_exactly_the_limit_is_served() {
        for len in [MAX_HEADER_BYTES - 1, MAX_HEADER_BYTES] {
            for behind in ["", "GET / HTTP/1.1\r\n\r\n"] {
                let text = format!("{}{behind}", head_of(len, true));
                match parsed(&text) {
                    Parsed::Request(req) => assert_eq!((req.len, req.route), (len, Route::Root), "{len} bytes"),
                    other => panic!("a head of {len} bytes (of the limit's {MAX_HEADER_BYTES}): {other:?}"),
                }
            }
        }
        for behind in ["", "GET / HTTP/1.1\r\n\r\n"] {
            let text = format!("{}{behind}", head_of(MAX_HEADER_BYTES + 1, true));
            assert_eq!(parsed(&text), Parsed::Reject(Status::HeadersTooLarge), "a head of the limit and a byte");
        }
    }

    /// A head not yet whole waits for more while its bytes are within the limit, and is a
    /// `431` once they are past it: below the limit, at it, and one byte over. (At exactly the
    /// limit it could only end past it, yet the local stack waits for the byte that proves it;
    /// hyper's `max_header_size` rejects a partial head at the limit at once: both answer
    /// `431`, hyper a byte sooner. `both_stacks.rs` checks each.)
    #[test]
    fn a_partial_head_waits_up_to_the_limit() {
        for len in [MAX_HEADER_BYTES - 1, MAX_HEADER_BYTES] {
            assert_eq!(parsed(&head_of(len, false)), Parsed::Partial, "{len} bytes of a head, no end yet");
        }
        let over = head_of(MAX_HEADER_BYTES + 1, false);
        assert_eq!(parsed(&over), Parsed::Reject(Status::HeadersTooLarge), "the limit and a byte of a head");
    }

    /// `MAX_HEADERS` headers are served, one more is a `431`: below the limit, at it, and one
    /// over; with the head whole, and with it cut short after its last header.
    #[test]
    fn exactly_max_headers_are_served() {
        let head = |n: usize| format!("GET / HTTP/1.1\r\n{}", "X: y\r\n".repeat(n));
        for n in [MAX_HEADERS - 1, MAX_HEADERS] {
            match parsed(&format!("{}\r\n", head(n))) {
                Parsed::Request(req) => assert_eq!(req.route, Route::Root, "{n} headers"),
                other => panic!("{n} headers (of the limit's {MAX_HEADERS}): {other:?}"),
            }
            assert_eq!(parsed(&head(n)), Parsed::Partial, "{n} headers, no end yet");
        }
        let over = head(MAX_HEADERS + 1);
        assert_eq!(parsed(&format!("{over}\r\n")), Parsed::Reject(Status::HeadersTooLarge), "one header too many");
        assert_eq!(parsed(&over), Parsed::Reject(Status::HeadersTooLarge), "one header too many, no end yet");
    }
}
