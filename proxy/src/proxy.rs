//! The proxying service: each request goes to the upstream on a pooled hyper client, its
//! response head under the upstream timeout (`504 Gateway Timeout` past it).

use crate::counts::Counts;
use crate::timer::TimerKind;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{self, HeaderMap, HeaderName};
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A response's body: the upstream's, streamed, or the proxy's own.
pub type ProxyBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// The proxy's service, shared by every connection of a process.
#[derive(Debug)]
pub struct Proxy {
    client: Client<HttpConnector, Incoming>,
    upstream: SocketAddr,
    timer: TimerKind,
    upstream_timeout: Duration,
    counts: Arc<Counts>,
}

/// The hop-by-hop headers (RFC 9110 §7.6.1), which a proxy does not forward.
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::TE,
    header::TRAILER,
    header::UPGRADE,
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The headers the `Connection` header names are hop-by-hop too.
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(name);
    }
}

impl Proxy {
    /// A proxy to `upstream`, whose pool keeps `pool_max_idle` idle upstream connections at
    /// most (`None`: no bound), each `pool_idle` at most.
    pub fn new(
        upstream: SocketAddr,
        timer: TimerKind,
        upstream_timeout: Duration,
        pool_idle: Duration,
        pool_max_idle: Option<usize>,
        counts: Arc<Counts>,
    ) -> Proxy {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(pool_idle)
            .pool_max_idle_per_host(pool_max_idle.unwrap_or(usize::MAX))
            .pool_timer(timer.hyper_timer())
            .build(connector);
        Proxy { client, upstream, timer, upstream_timeout, counts }
    }

    /// The timer the proxy's timeouts run on.
    pub fn timer(&self) -> TimerKind {
        self.timer
    }

    /// Proxies one request.
    pub async fn handle(&self, request: Request<Incoming>) -> Result<Response<ProxyBody>, Infallible> {
        self.counts.requests.fetch_add(1, Ordering::Relaxed);
        let (mut parts, body) = request.into_parts();
        let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
        parts.uri =
            match Uri::builder().scheme("http").authority(self.upstream.to_string()).path_and_query(target).build() {
                Ok(uri) => uri,
                Err(_) => return Ok(own(StatusCode::BAD_REQUEST, "bad request target\n")),
            };
        strip_hop_by_hop(&mut parts.headers);
        let upstream = self.client.request(Request::from_parts(parts, body));
        let answer = if self.upstream_timeout.is_zero() {
            Ok(upstream.await)
        } else {
            self.timer.timeout(self.upstream_timeout, upstream).await
        };
        match answer {
            Ok(Ok(response)) => {
                let (mut parts, body) = response.into_parts();
                strip_hop_by_hop(&mut parts.headers);
                Ok(Response::from_parts(parts, body.boxed_unsync()))
            }
            Ok(Err(_)) => {
                self.counts.upstream_errors.fetch_add(1, Ordering::Relaxed);
                Ok(own(StatusCode::BAD_GATEWAY, "upstream failed\n"))
            }
            Err(_elapsed) => {
                self.counts.gateway_timeouts.fetch_add(1, Ordering::Relaxed);
                Ok(own(StatusCode::GATEWAY_TIMEOUT, "upstream timed out\n"))
            }
        }
    }
}

/// A response of the proxy's own.
fn own(status: StatusCode, body: &'static str) -> Response<ProxyBody> {
    let mut response =
        Response::new(Full::new(Bytes::from_static(body.as_bytes())).map_err(|n| match n {}).boxed_unsync());
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_stay() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONNECTION, "keep-alive, x-private".parse().unwrap());
        headers.insert("x-private", "1".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert("x-kept", "1".parse().unwrap());
        strip_hop_by_hop(&mut headers);
        assert_eq!(headers.len(), 1);
        assert!(headers.contains_key("x-kept"));
    }
}
