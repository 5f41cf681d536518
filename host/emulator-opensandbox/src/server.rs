//! Serving a router on a listener over HTTP/1.1 with keep-alive, and the
//! `keepalive` fault: a connection that has had no request in flight and no
//! byte in either direction for that long is dead to the server, the way
//! uvicorn's `timeout_keep_alive` kills it. In production the server's FIN
//! and the client's next request cross on the wire; here the race is always
//! lost: the socket stays open, and the first request written to it is
//! dropped unanswered (the connection is reset), which a client sees as
//! "disconnected without sending a response". A client that expires idle
//! sockets sooner never writes to a dead one.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::Frame;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// Accepts connections on `listener` and serves `app` on each until
/// `shutdown` is cancelled; then every connection finishes its request in
/// flight and closes.
pub(crate) async fn serve(
    listener: TcpListener,
    app: Router,
    keepalive: Option<Duration>,
    shutdown: CancellationToken,
) {
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((stream, _peer)) => {
                let _ = stream.set_nodelay(true);
                tokio::spawn(connection(stream, app.clone(), keepalive, shutdown.clone()));
            }
            Err(error) => {
                // Out of descriptors, most likely: give the process a moment
                // to close some rather than spin.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// What a connection has been doing, for the idle timer.
struct Activity {
    epoch: Instant,
    /// Milliseconds after `epoch` of the last byte read or written.
    last: AtomicU64,
    /// Requests whose response body has not been dropped yet.
    in_flight: AtomicUsize,
    /// Idle past the keep-alive: the next request is dropped.
    dead: AtomicBool,
    /// A response has been sent: as in uvicorn, the keep-alive timer runs
    /// between requests, not before the first.
    served: AtomicBool,
}

impl Activity {
    fn touch(&self) {
        self.last
            .store(self.epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    fn idle_for(&self) -> Duration {
        self.epoch
            .elapsed()
            .saturating_sub(Duration::from_millis(self.last.load(Ordering::Relaxed)))
    }

    /// Waits until the connection has been idle for `limit`.
    async fn idle(&self, limit: Duration) {
        loop {
            let idle_for = self.idle_for();
            if self.served.load(Ordering::Acquire)
                && self.in_flight.load(Ordering::Acquire) == 0
                && idle_for >= limit
            {
                return;
            }
            tokio::time::sleep(
                limit
                    .saturating_sub(idle_for)
                    .max(Duration::from_millis(50)),
            )
            .await;
        }
    }
}

/// Counts a request in flight until its response body is dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.served.store(true, Ordering::Release);
        self.0.touch();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

async fn connection(
    stream: TcpStream,
    app: Router,
    keepalive: Option<Duration>,
    shutdown: CancellationToken,
) {
    let activity = Arc::new(Activity {
        epoch: Instant::now(),
        last: AtomicU64::new(0),
        in_flight: AtomicUsize::new(0),
        dead: AtomicBool::new(false),
        served: AtomicBool::new(false),
    });
    let io = TokioIo::new(Tracked {
        inner: stream,
        activity: Arc::clone(&activity),
    });
    let router = TowerToHyperService::new(app);
    let counted = Arc::clone(&activity);
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        counted.in_flight.fetch_add(1, Ordering::AcqRel);
        let guard = InFlight(Arc::clone(&counted));
        let response = hyper::service::Service::call(&router, request);
        async move {
            let response = response.await?;
            Ok::<_, Infallible>(response.map(|body| {
                Body::new(Guarded {
                    inner: body,
                    _guard: guard,
                })
            }))
        }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .keep_alive(true)
        .serve_connection(io, service);
    tokio::pin!(connection);
    let mut closing = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!(%error, "connection ended with an error");
                }
                return;
            }
            () = async { activity.idle(keepalive.unwrap_or_default()).await },
                if keepalive.is_some() && !closing && !activity.dead.load(Ordering::Acquire) => {
                activity.dead.store(true, Ordering::Release);
            }
            () = shutdown.cancelled(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
        }
    }
}

/// A response body that keeps its request counted in flight.
struct Guarded {
    inner: Body,
    _guard: InFlight,
}

impl http_body::Body for Guarded {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// A socket that records when bytes last moved.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            if self.activity.dead.load(Ordering::Acquire) {
                // A request on a socket the server let go: unanswered.
                buf.set_filled(before);
                return Poll::Ready(Err(io::ErrorKind::ConnectionReset.into()));
            }
            self.activity.touch();
        }
        polled
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}
