//! The one HTTP server scaffold under rlx's servers (`rlx sandbox serve`, both protocols, and
//! `rlx serve`): the accept loop, one task per connection, a shutdown that drains them, and the
//! rules every server applies to a network client: at most `max_connections` connections at
//! once, the API key ([`ApiKey`], [`authorized`], [`check_bind`]) checked before the body is
//! read, and bodies whose size is checked before they are buffered ([`read_body`]).
//!
//! The connection tasks live in a [`JoinSet`] that this loop owns, so none outlives the server:
//! on shutdown each connection is told to finish the request it is answering and close
//! (`graceful_shutdown`), and the loop waits up to `drain` for them before aborting the rest.
//! Spawning them detached (what both servers did before) left requests running against a
//! trainer or sandbox that the caller believed stopped.
//!
//! The connection limit is a semaphore taken before `accept`: connection N+1 waits in the
//! kernel's backlog instead of being accepted and refused (a refusal would cost the same memory
//! the limit is there to bound, and clients retry a refused connection anyway).

use std::error::Error as StdError;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::body::{Body, Incoming};
use hyper::{HeaderMap, Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use sha2::{Digest as _, Sha256};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;

/// What a server answers with.
pub(crate) type Reply = Response<Full<Bytes>>;

/// Connections open at once unless a server says otherwise: far above what one trainer or a
/// grading client opens (tens), far below what exhausts memory or file descriptors.
pub(crate) const DEFAULT_MAX_CONNECTIONS: usize = 256;

/// The HTTP version a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Http {
    /// HTTP/1.1 (Sandbox Fusion's API, Tinker's REST protocol).
    One,
    /// HTTP/2 over plaintext (h2c: the CoreWeave Sandbox gRPC service).
    Two,
}

/// How [`serve_with`] serves.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ServeOptions {
    /// How long shutdown waits for open connections before aborting them.
    pub(crate) drain: Duration,
    /// Connections open at once; more wait in the kernel's accept backlog.
    pub(crate) max_connections: usize,
    /// The protocol.
    pub(crate) http: Http,
}

impl ServeOptions {
    /// HTTP/1.1, [`DEFAULT_MAX_CONNECTIONS`], this drain period.
    pub(crate) fn new(drain: Duration) -> ServeOptions {
        ServeOptions { drain, max_connections: DEFAULT_MAX_CONNECTIONS, http: Http::One }
    }
}

/// Serves `handle` on `listener` until `shutdown` resolves, then drains open connections for up
/// to `drain` (HTTP/1.1, [`DEFAULT_MAX_CONNECTIONS`]).
///
/// `handle` answering `Err` makes hyper close that connection without an answer (how `rlx
/// serve` injects dropped connections).
///
/// # Errors
/// Only a failing `accept` that is not transient (out of file descriptors, an aborted handshake
/// and the like are waited out).
pub(crate) async fn serve<H, F, E>(listener: TcpListener, handle: H, shutdown: impl Future<Output = ()>, drain: Duration) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Reply, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
{
    serve_with(listener, handle, shutdown, ServeOptions::new(drain)).await
}

/// [`serve`] with its options spelled out, for any response body (a streaming one included).
///
/// # Errors
/// Only a failing `accept` that is not transient.
pub(crate) async fn serve_with<H, F, E, B>(listener: TcpListener, handle: H, shutdown: impl Future<Output = ()>, options: ServeOptions) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let result = accept_until(&listener, &handle, shutdown, &stopped, &mut connections, options).await;
    let _ = stop.send(true);
    if tokio::time::timeout(options.drain, async { while connections.join_next().await.is_some() {} }).await.is_err() {
        tracing::debug!(left = connections.len(), "connections still open after the drain period; aborted");
        connections.shutdown().await;
    }
    result
}

async fn accept_until<H, F, E, B>(
    listener: &TcpListener,
    handle: &H,
    shutdown: impl Future<Output = ()>,
    stopped: &watch::Receiver<bool>,
    connections: &mut JoinSet<()>,
    options: ServeOptions,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    tokio::pin!(shutdown);
    loop {
        // Reap finished connections so the set stays the size of the open ones.
        while connections.try_join_next().is_some() {}
        // A free slot first, then the connection: past the limit, clients wait in the backlog.
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => p.expect("the semaphore is never closed"),
            () = &mut shutdown => return Ok(()),
        };
        // `accept` is cancel-safe; the shutdown branch ends the loop.
        let stream = tokio::select! {
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) if is_transient(&e) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                Err(e) => return Err(e),
            },
            () = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let (handle, stopped) = (handle.clone(), stopped.clone());
        connections.spawn(async move {
            connection(stream, handle, stopped, options.http).await;
            drop(permit);
        });
    }
}

/// One connection: requests in order (HTTP/1.1) or multiplexed (HTTP/2) until the peer closes
/// it or the server stops.
async fn connection<H, F, E, B>(stream: tokio::net::TcpStream, handle: H, mut stopped: watch::Receiver<bool>, http: Http)
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Response<B>, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    let service = hyper::service::service_fn(handle);
    let io = TokioIo::new(stream);
    // The two builders' connections are different types with the same two methods: one macro
    // body instead of a trait of our own over both.
    macro_rules! drive {
        ($conn:expr) => {{
            let conn = $conn;
            tokio::pin!(conn);
            // The watch's `Ref` must not live across the await below (it is not `Send`): map it
            // away. An error means the server is gone: stop as well.
            let stop = tokio::select! {
                _ = conn.as_mut() => false,
                _ = stopped.wait_for(|s| *s) => true,
            };
            if stop {
                conn.as_mut().graceful_shutdown();
                let _ = conn.await;
            }
        }};
    }
    match http {
        Http::One => drive!(hyper::server::conn::http1::Builder::new().serve_connection(io, service)),
        Http::Two => drive!(hyper::server::conn::http2::Builder::new(TokioExecutor::new()).serve_connection(io, service)),
    }
}

/// Accept errors that say nothing about the listener itself: back off instead of spinning or
/// giving up.
fn is_transient(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::Interrupted)
        || e.raw_os_error() == Some(libc::EMFILE)
        || e.raw_os_error() == Some(libc::ENFILE)
}

/// An API key that a server requires: never empty (an empty `--api-key ""` would otherwise pass
/// the public-bind rule while every request with an empty header matched it).
#[derive(Clone)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(***)")
    }
}

/// An API key that is empty or only whitespace.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the API key is empty: an empty key is no key")]
pub struct EmptyKey;

impl ApiKey {
    /// The key, refused when empty or only whitespace.
    ///
    /// # Errors
    /// [`EmptyKey`].
    pub fn new(key: impl Into<String>) -> Result<ApiKey, EmptyKey> {
        let key = key.into();
        if key.trim().is_empty() { Err(EmptyKey) } else { Ok(ApiKey(key)) }
    }

    /// Whether `given` (a header's bytes) is this key, in time that depends on neither: both
    /// sides are hashed and the digests compared without an early exit, so a client cannot find
    /// the key's length or a correct prefix by timing answers (`==` on strings stops at the
    /// first differing byte).
    pub fn matches(&self, given: &[u8]) -> bool {
        same_secret(self.0.as_bytes(), given) && !given.is_empty()
    }
}

/// Whether two secrets (a key, a credential that owns something) are equal, in time that tells
/// nothing of either: both are hashed (SHA-256) and the digests compared without an early exit
/// (`==` on bytes stops at the first difference, and at a length mismatch).
pub(crate) fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(a), Sha256::digest(b));
    let diff = a.iter().zip(b.iter()).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // `black_box` keeps the compiler from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0
}

/// Whether `headers` carry `key` as `X-API-Key: KEY` or `Authorization: Bearer KEY`; with no
/// key (a loopback server started without one) every request is.
pub(crate) fn authorized(key: Option<&ApiKey>, headers: &HeaderMap) -> bool {
    let Some(key) = key else { return true };
    let header = headers.get("x-api-key").map(|v| v.as_bytes());
    let bearer = headers.get(hyper::header::AUTHORIZATION).and_then(|v| v.as_bytes().strip_prefix(b"Bearer "));
    // Both are compared, so which one a client used does not show in the time either.
    let (h, b) = (header.is_some_and(|h| key.matches(h)), bearer.is_some_and(|b| key.matches(b)));
    h | b
}

/// A server asked to listen beyond this machine without a key.
#[derive(Debug, Clone, thiserror::Error)]
#[error("binding `{0}` exposes this server beyond this machine without authentication")]
pub(crate) struct BindRefused(pub(crate) SocketAddr);

impl BindRefused {
    /// What to do instead (a `help:` line).
    pub(crate) fn hint(&self) -> String {
        "pass `--api-key KEY` (clients send it as `X-API-Key` or `Authorization: Bearer`), or bind 127.0.0.1".to_owned()
    }
}

/// The rule every rlx server applies before it listens: an address other than loopback needs a
/// key.
///
/// # Errors
/// [`BindRefused`].
pub(crate) fn check_bind(addr: SocketAddr, key: Option<&ApiKey>) -> Result<(), BindRefused> {
    if addr.ip().is_loopback() || key.is_some() { Ok(()) } else { Err(BindRefused(addr)) }
}

/// Why a body was not read.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum BodyError {
    /// Larger than the server takes (by its `Content-Length`, or as it streamed in).
    #[error("the request body is larger than this server takes ({limit} bytes)")]
    TooLarge {
        /// The limit, bytes.
        limit: usize,
    },
    /// The connection failed while the body was read.
    #[error("cannot read the request body: {0}")]
    Read(String),
}

/// Reads a request body of at most `limit` bytes: a `Content-Length` above it is refused before
/// a byte is read, and a body without one (chunked) is cut off as soon as it passes the limit,
/// so a client cannot make the server buffer more than `limit`.
///
/// # Errors
/// [`BodyError`].
pub(crate) async fn read_body(body: Incoming, headers: &HeaderMap, limit: usize) -> Result<Bytes, BodyError> {
    let declared = headers.get(hyper::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) || body.size_hint().lower() > limit as u64 {
        return Err(BodyError::TooLarge { limit });
    }
    match Limited::new(body, limit).collect().await {
        Ok(b) => Ok(b.to_bytes()),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(BodyError::TooLarge { limit }),
        Err(e) => Err(BodyError::Read(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// A request that is being answered when shutdown comes is answered before `serve` returns;
    /// the server's tasks are gone once it has.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_drains_the_request_in_flight() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let started_tx = Arc::new(std::sync::Mutex::new(Some(started_tx)));
        let finished = Arc::new(AtomicBool::new(false));
        let (done, finished2) = (finished.clone(), finished.clone());
        let handle = move |_req: Request<Incoming>| {
            let started = started_tx.lock().unwrap().take();
            let done = done.clone();
            async move {
                if let Some(s) = started {
                    let _ = s.send(());
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
                done.store(true, Ordering::SeqCst);
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"slow"))))
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, handle, async { stop_rx.await.unwrap() }, Duration::from_secs(10)));
        let client = tokio::spawn(async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).await.unwrap();
            out
        });
        started_rx.await.unwrap();
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
        // `serve` returned only after the handler had finished...
        assert!(finished2.load(Ordering::SeqCst));
        // ...and the client got its answer, then the connection closed (graceful shutdown).
        let out = client.await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.ends_with("slow"), "{out}");
    }

    /// No more than `max_connections` connections are served at once: the others wait in the
    /// backlog and are answered as slots free up (issue 51: six 60 MiB requests at once took the
    /// Sandbox Fusion server to 1.5 GB).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connections_past_the_limit_wait_their_turn() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let now = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let most = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (n, m) = (now.clone(), most.clone());
        let handle = move |_req: Request<Incoming>| {
            let (n, m) = (n.clone(), m.clone());
            async move {
                let in_flight = n.fetch_add(1, Ordering::SeqCst) + 1;
                m.fetch_max(in_flight, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(150)).await;
                n.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let options = ServeOptions { max_connections: 2, ..ServeOptions::new(Duration::from_secs(10)) };
        let server = tokio::spawn(serve_with(listener, handle, async { stop_rx.await.unwrap() }, options));
        let clients: Vec<_> = (0..6)
            .map(|_| {
                tokio::spawn(async move {
                    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
                    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n").await.unwrap();
                    let mut out = String::new();
                    s.read_to_string(&mut out).await.unwrap();
                    out
                })
            })
            .collect();
        for c in clients {
            let out = tokio::time::timeout(Duration::from_secs(60), c).await.expect("every client is answered in turn").unwrap();
            assert!(out.starts_with("HTTP/1.1 200") && out.ends_with("ok"), "{out}");
        }
        assert_eq!(most.load(Ordering::SeqCst), 2, "two connections at a time, never more (and the limit is reached)");
        stop_tx.send(()).unwrap();
        server.await.unwrap().unwrap();
    }

    /// The key rules: an empty key is no key, an empty or wrong header never matches, and both
    /// header forms are accepted.
    #[test]
    fn api_keys() {
        assert!(ApiKey::new("").is_err() && ApiKey::new("  ").is_err());
        let key = ApiKey::new("s3cret").unwrap();
        assert!(key.matches(b"s3cret") && !key.matches(b"") && !key.matches(b"s3cre") && !key.matches(b"s3cret "));
        let headers = |pairs: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (k, v) in pairs {
                h.insert(*k, hyper::header::HeaderValue::from_static(v));
            }
            h
        };
        assert!(authorized(None, &headers(&[])));
        assert!(!authorized(Some(&key), &headers(&[])));
        assert!(!authorized(Some(&key), &headers(&[("x-api-key", "")])));
        assert!(!authorized(Some(&key), &headers(&[("authorization", "Bearer ")])));
        assert!(authorized(Some(&key), &headers(&[("x-api-key", "s3cret")])));
        assert!(authorized(Some(&key), &headers(&[("authorization", "Bearer s3cret")])));
        assert!(!authorized(Some(&key), &headers(&[("authorization", "s3cret")])));
        assert!(format!("{key:?}").contains("***") && !format!("{key:?}").contains("s3cret"));
        let public: SocketAddr = "0.0.0.0:80".parse().unwrap();
        assert!(check_bind("127.0.0.1:80".parse().unwrap(), None).is_ok() && check_bind("[::1]:80".parse().unwrap(), None).is_ok());
        assert!(check_bind(public, None).is_err() && check_bind(public, Some(&key)).is_ok());
    }

    /// A body larger than the limit is refused from its `Content-Length` before a byte of it
    /// arrives, and a chunked one as soon as it passes the limit.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bodies_past_the_limit_are_refused_before_they_are_buffered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = |req: Request<Incoming>| async move {
            let (parts, body) = req.into_parts();
            let text = match read_body(body, &parts.headers, 1000).await {
                Ok(b) => format!("read {}", b.len()),
                Err(BodyError::TooLarge { limit }) => format!("too large {limit}"),
                Err(e) => format!("error {e}"),
            };
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from(text))))
        };
        let (_stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(serve(listener, handle, async { let _ = stop_rx.await; }, Duration::from_secs(1)));
        let ask = |head: String, body: Vec<u8>| async move {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(head.as_bytes()).await.unwrap();
            s.write_all(&body).await.unwrap();
            let mut out = vec![0u8; 4096];
            // No body is sent past the headers for the declared-too-large case: an answer at all
            // shows the server did not wait for it.
            let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut out)).await.expect("answered without the body").unwrap();
            String::from_utf8_lossy(&out[..n]).into_owned()
        };
        let out = ask("POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 1000000000\r\n\r\n".into(), vec![]).await;
        assert!(out.ends_with("too large 1000"), "{out}");
        let chunk = format!("{:x}\r\n{}\r\n", 1500, "a".repeat(1500));
        let out = ask("POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n".into(), chunk.into_bytes()).await;
        assert!(out.ends_with("too large 1000"), "{out}");
        let out = ask("POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\n".into(), b"hello".to_vec()).await;
        assert!(out.ends_with("read 5"), "{out}");
    }

    /// A connection that never finishes is cut after the drain period instead of holding `serve`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stuck_connection_is_aborted_after_the_drain_period() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let handle = |_req: Request<Incoming>| async {
            std::future::pending::<()>().await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::new())))
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(listener, handle, async { stop_rx.await.unwrap() }, Duration::from_millis(200)));
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        stop_tx.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(10), server).await.expect("serve returns after the drain period").unwrap().unwrap();
        let mut out = Vec::new();
        // The aborted connection is closed without an answer.
        let n = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await.expect("closed").unwrap_or(0);
        assert_eq!(n, 0);
    }
}
