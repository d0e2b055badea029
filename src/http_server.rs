//! The one HTTP/1.1 server scaffold under both of rlx's servers (`rlx sandbox serve` and
//! `rlx serve`): the accept loop, one task per connection, and a shutdown that drains them.
//!
//! The connection tasks live in a [`JoinSet`] that this loop owns, so none outlives the server:
//! on shutdown each connection is told to finish the request it is answering and close
//! (`graceful_shutdown`), and the loop waits up to `drain` for them before aborting the rest.
//! Spawning them detached (what both servers did before) left requests running against a
//! trainer or sandbox that the caller believed stopped.

use std::error::Error as StdError;
use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// What a server answers with.
pub(crate) type Reply = Response<Full<Bytes>>;

/// Serves `handle` on `listener` until `shutdown` resolves, then drains open connections for up
/// to `drain`.
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
    let (stop, stopped) = watch::channel(false);
    let mut connections = JoinSet::new();
    let result = accept_until(&listener, &handle, shutdown, &stopped, &mut connections).await;
    let _ = stop.send(true);
    if tokio::time::timeout(drain, async { while connections.join_next().await.is_some() {} }).await.is_err() {
        tracing::debug!(left = connections.len(), "connections still open after the drain period; aborted");
        connections.shutdown().await;
    }
    result
}

async fn accept_until<H, F, E>(
    listener: &TcpListener,
    handle: &H,
    shutdown: impl Future<Output = ()>,
    stopped: &watch::Receiver<bool>,
    connections: &mut JoinSet<()>,
) -> std::io::Result<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Result<Reply, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
{
    tokio::pin!(shutdown);
    loop {
        // Reap finished connections so the set stays the size of the open ones.
        while connections.try_join_next().is_some() {}
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
        connections.spawn(connection(stream, handle.clone(), stopped.clone()));
    }
}

/// One connection: requests in order until the peer closes it or the server stops.
async fn connection<H, F, E>(stream: tokio::net::TcpStream, handle: H, mut stopped: watch::Receiver<bool>)
where
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Result<Reply, E>> + Send + 'static,
    E: Into<Box<dyn StdError + Send + Sync>> + 'static,
{
    let service = hyper::service::service_fn(handle);
    let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    // The watch's `Ref` must not live across the await below (it is not `Send`): map it away.
    // An error means the server is gone: stop as well.
    let stop = tokio::select! {
        _ = conn.as_mut() => false,
        _ = stopped.wait_for(|s| *s) => true,
    };
    if stop {
        conn.as_mut().graceful_shutdown();
        let _ = conn.await;
    }
}

/// Accept errors that say nothing about the listener itself: back off instead of spinning or
/// giving up.
fn is_transient(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::ConnectionAborted | std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::Interrupted)
        || e.raw_os_error() == Some(libc::EMFILE)
        || e.raw_os_error() == Some(libc::ENFILE)
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
