//! Where an HTTP/1.1 response ends in a buffer: its head parsed by `httparse`, its body by
//! `Content-Length`, or `Transfer-Encoding: chunked` (chunk sizes by `httparse`), or none.
//! Enough for a client that pipelines requests and must split the responses in order.

/// One whole response at the buffer's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Framed {
    /// Its status code.
    pub status: u16,
    /// Its length in bytes, head and body.
    pub len: usize,
}

/// The response at `buf`'s start, if it is whole; an error if it cannot be framed.
pub fn frame(buf: &[u8]) -> Result<Option<Framed>, String> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head = match response.parse(buf) {
        Ok(httparse::Status::Complete(head)) => head,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(format!("a malformed response: {e}")),
    };
    let status = response.code.unwrap_or(0);
    let header = |name: &str| response.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
    let chunked = header("transfer-encoding")
        .is_some_and(|v| String::from_utf8_lossy(v).to_ascii_lowercase().trim_end().ends_with("chunked"));
    let body = if chunked {
        chunked_len(&buf[head..])?
    } else if let Some(value) = header("content-length") {
        let length = std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .ok_or_else(|| "a bad Content-Length".to_string())?;
        (buf.len() >= head + length).then_some(length)
    } else {
        // No length: a response to GET that ends with the connection is not framed here;
        // 1xx, 204 and 304 have no body, and the servers measured always send a length.
        Some(0)
    };
    Ok(body.map(|body| Framed { status, len: head + body }))
}

/// The length of a chunked body (its last chunk and trailers included) at `buf`'s start, if
/// it is whole.
fn chunked_len(buf: &[u8]) -> Result<Option<usize>, String> {
    let mut at = 0;
    loop {
        let (size_len, size) = match httparse::parse_chunk_size(&buf[at..]) {
            Ok(httparse::Status::Complete(found)) => found,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(_) => return Err("a bad chunk size".to_string()),
        };
        at += size_len;
        if size == 0 {
            break;
        }
        let size = usize::try_from(size).map_err(|_| "a chunk too big".to_string())?;
        // The chunk, then its CRLF.
        if buf.len() < at + size + 2 {
            return Ok(None);
        }
        at += size + 2;
    }
    // Trailer lines, up to the empty line.
    loop {
        let rest = &buf[at..];
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else { return Ok(None) };
        at += end + 2;
        if end == 0 {
            return Ok(Some(at));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_length_response_is_framed_once_whole() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1";
        assert_eq!(frame(&r[..38]).unwrap(), None);
        assert_eq!(frame(r).unwrap(), Some(Framed { status: 200, len: 40 }));
    }

    #[test]
    fn a_chunked_response_ends_after_its_last_chunk_and_trailers() {
        let r = b"HTTP/1.1 503 X\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n";
        assert_eq!(frame(r).unwrap(), Some(Framed { status: 503, len: r.len() }));
        for cut in 1..r.len() {
            assert_eq!(frame(&r[..cut]).unwrap(), None, "{cut}");
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(frame(b"NOPE\r\n\r\n").is_err());
        assert!(frame(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n").is_err());
    }
}
