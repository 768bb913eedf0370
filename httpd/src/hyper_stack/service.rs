//! The hyper stack's routes, the same as the local stack's (`http::route`): `GET /`,
//! `GET /stats`, `GET /delay/<ms>` answered after a sleep on the server's timer, and a
//! plain-text 4xx for the rest, with the local stack's answers to bad input: a request
//! with a body is a `413` and the connection closes, any method but `GET` a `405` with
//! `Allow: GET` (to `HEAD`, hyper sends the head alone). hyper parses the requests and
//! answers what it cannot parse (`400`) or what is too large (`431`) itself, before any of
//! this runs.

use super::Shared;
use super::idle::{CLOSES_ASKED, CLOSES_BAD, Track};
use crate::http::{self, Route};
use crate::stats::bump_shared;
use http_body_util::Full;
use hyper::body::Body;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONNECTION, CONTENT_TYPE, HeaderValue, SERVER};
use hyper::{Request, Response, StatusCode, Version};
use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Whether hyper closes the connection after answering `req`: `Connection: close`, or
/// HTTP/1.0 without `Connection: keep-alive` (hyper's own rule).
fn asks_close(req: &Request<Incoming>) -> bool {
    let token = |name: &str| {
        req.headers()
            .get_all(CONNECTION)
            .iter()
            .any(|v| v.to_str().is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(name))))
    };
    if req.version() == Version::HTTP_10 { !token("keep-alive") } else { token("close") }
}

/// Answers one request; notes in `track` whether the connection closes after it.
pub async fn handle(
    req: Request<Incoming>,
    shared: Arc<Shared>,
    track: Arc<Track>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    bump_shared(&shared.slot().counters.requests);
    // Relaxed: read by the connection's own task once hyper is done.
    if asks_close(&req) {
        track.closes_after.store(CLOSES_ASKED, Ordering::Relaxed);
    }
    // A body (a `Content-Length` above 0, or chunked): answered `413`, and the connection
    // closes (hyper would otherwise read the body past the service, as the local stack
    // cannot tell its bytes from the next request's).
    let has_body = !req.body().is_end_stream();
    let route = http::route(req.method().as_str(), req.uri().path());
    drop(req);
    if has_body {
        bump_shared(&shared.slot().counters.bad_requests);
        track.closes_after.store(CLOSES_BAD, Ordering::Relaxed);
        let mut response = plain(StatusCode::PAYLOAD_TOO_LARGE);
        response.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        return Ok(response);
    }
    let (status, content_type, body) = match route {
        Route::Root => (StatusCode::OK, "text/plain", Bytes::from_static(b"hello from shardwheel-httpd\n")),
        Route::Stats => (StatusCode::OK, "application/json", Bytes::from(shared.json().to_string())),
        Route::Delay(ms) => {
            // On the selected timer: shardwheel's `TimerService::sleep` or tokio's.
            shared.timer.sleep(Duration::from_millis(ms)).await;
            (StatusCode::OK, "text/plain", Bytes::from(format!("delayed {ms} ms\n")))
        }
        Route::BadDelay | Route::MethodNotAllowed | Route::NotFound => {
            bump_shared(&shared.slot().counters.bad_requests);
            let status = match route {
                Route::BadDelay => StatusCode::BAD_REQUEST,
                Route::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
                _ => StatusCode::NOT_FOUND,
            };
            return Ok(plain(status));
        }
    };
    Ok(response(status, content_type, body))
}

/// A response with `body`.
fn response(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(SERVER, HeaderValue::from_static("shardwheel-httpd"));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    response
}

/// A plain-text response whose body is the status's reason phrase.
fn plain(status: StatusCode) -> Response<Full<Bytes>> {
    let reason = status.canonical_reason().unwrap_or("");
    response(status, "text/plain", Bytes::from(format!("{reason}\n")))
}
