//! `shardwheel-proxy-upstream`: the upstream the proxy is tried against. `/` answers a small
//! body, `/delay/<ms>` the same after that long (on `tokio::time`: the upstream's timer is
//! not what is measured), `/echo` the request's body; anything else is `404`.

use clap::Parser;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::time::Duration;

/// The proxy's test upstream.
#[derive(Debug, Parser)]
#[command(name = "shardwheel-proxy-upstream", version)]
struct Flags {
    /// The address to listen on (port 0: any free port, printed at the start).
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: SocketAddr,
    /// tokio worker threads.
    #[arg(long, default_value_t = 1)]
    threads: usize,
}

/// `/`'s body.
const HELLO: &str = "hello from upstream\n";

async fn answer(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path();
    let (status, body) = if path == "/" {
        (StatusCode::OK, Bytes::from_static(HELLO.as_bytes()))
    } else if let Some(ms) = path.strip_prefix("/delay/").and_then(|ms| ms.parse::<u64>().ok()) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        (StatusCode::OK, Bytes::from(format!("delayed {ms} ms\n")))
    } else if path == "/echo" {
        match Limited::new(request.into_body(), 1 << 20).collect().await {
            Ok(body) => (StatusCode::OK, body.to_bytes()),
            Err(_) => (StatusCode::PAYLOAD_TOO_LARGE, Bytes::new()),
        }
    } else {
        (StatusCode::NOT_FOUND, Bytes::from_static(b"not found\n"))
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    Ok(response)
}

fn main() -> io::Result<()> {
    let flags = Flags::parse();
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(flags.threads.max(1)).enable_all().build()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(flags.listen).await?;
        println!("shardwheel-proxy-upstream: listening on {}", listener.local_addr()?);
        io::stdout().flush()?;
        loop {
            let (tcp, _) = match listener.accept().await {
                Ok(accepted) => accepted,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = tcp.set_nodelay(true);
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(tcp), service_fn(answer)));
        }
    })
}
