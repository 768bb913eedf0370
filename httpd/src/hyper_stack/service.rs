//! The hyper stack's routes, the same as the local stack's (`http::route`): `GET /`,
//! `GET /stats`, `GET /delay/<ms>` answered after a sleep on the server's timer, and a
//! plain-text 4xx for the rest. hyper parses the requests and answers what it cannot parse
//! (`400`, `431`) itself, before any of this runs.

use super::Shared;
use crate::http::{self, Route};
use crate::stats::bump_shared;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{CONTENT_TYPE, HeaderValue, SERVER};
use hyper::{Request, Response, StatusCode};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

/// Answers one request.
pub async fn handle(req: Request<Incoming>, shared: Arc<Shared>) -> Result<Response<Full<Bytes>>, Infallible> {
    bump_shared(&shared.slot().counters.requests);
    let route = http::route(req.method().as_str(), req.uri().path());
    drop(req);
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
            let reason = status.canonical_reason().unwrap_or("");
            (status, "text/plain", Bytes::from(format!("{reason}\n")))
        }
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(SERVER, HeaderValue::from_static("shardwheel-httpd"));
    Ok(response)
}
