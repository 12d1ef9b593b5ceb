//! What a client may hold of serve: connections, time and memory. Without these, 300 clients
//! that trickle their headers (or one that sends a body at a byte a second) stayed connected for
//! as long as they liked, a full file-descriptor table locked normal clients out, SIGTERM waited
//! on a client holding half a request, and a dozen 31 MB chat bodies at once took hundreds of MB.
//!
//! - **Connections:** at most `max_connections` at once. When all are held, a new connection
//!   takes the place of the one that has waited longest for its next request (idle keep-alive
//!   connections, and clients that never finish a request's head), so idle connections cannot
//!   lock a client out; only when every held connection has a request in flight is the new one
//!   closed as soon as it is accepted (the client sees a reset and may retry). The default stays
//!   below the process's open-file limit, so the table never fills: 300 idle connections at
//!   `ulimit -n 256` used to leave a client unanswered until they timed out.
//! - **Headers:** a request's head must arrive within `header_timeout`, counted from when the
//!   connection starts waiting for it; an idle keep-alive connection is closed after as long.
//! - **Bodies:** a request body must arrive whole within `body_timeout` (408 otherwise), and is
//!   read only when the bytes it declares (or, undeclared, the largest any route takes) fit in
//!   [`BODY_MEMORY`] beside the bodies being read at that moment; the others wait their turn.
//! - **Shutdown:** requests in flight get [`SHUTDOWN_GRACE`] to finish; then serve exits anyway.
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::{Notify, Semaphore};

/// The largest request body of any route: a chat request with images inline (see
/// `inference_routes`).
pub const MAX_BODY: usize = 32 << 20;
/// Request bodies being read at once hold at most this much memory.
pub const BODY_MEMORY: usize = 128 << 20;
/// How long requests in flight may go on after a shutdown signal.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// serve's bounds on clients (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientLimits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

/// Connections serve holds at most unless told otherwise, when the open-file limit allows.
pub const MAX_CONNECTIONS: usize = 512;
/// Open files kept free for everything but client connections: the database, logs, model
/// files, upstream connections.
const FILES_KEPT: u64 = 64;

/// [`MAX_CONNECTIONS`], or fewer when the process's open-file limit (`ulimit -n`) leaves less
/// room beside [`FILES_KEPT`], but at least 16: a full file table stops `accept` itself, and the
/// room made for a new connection (see the module comment) never comes.
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    if !known || limit.rlim_cur == libc::RLIM_INFINITY {
        return MAX_CONNECTIONS;
    }
    let room = limit.rlim_cur.saturating_sub(FILES_KEPT).max(16);
    MAX_CONNECTIONS.min(usize::try_from(room).unwrap_or(MAX_CONNECTIONS))
}

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_connections: default_max_connections(),
            header_timeout: Duration::from_secs(20),
            body_timeout: Duration::from_secs(60),
        }
    }
}

/// Accepts connections on `listener` and serves `router` on each, within `limits`, until
/// `shutdown` completes.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ClientLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let body_memory = Arc::new(Semaphore::new(BODY_MEMORY >> 10));
    let body_timeout = limits.body_timeout;
    let router = router.layer(axum::middleware::from_fn(move |request, next| {
        read_body(Arc::clone(&body_memory), body_timeout, request, next)
    }));
    let held = Arc::new(Held::new(limits.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(err) => {
                // Out of file descriptors, say: wait for some to be closed rather than spin.
                tracing::warn!(%err, "accepting a connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(slot) = held.admit() else {
            tracing::warn!(
                max = limits.max_connections,
                "connection refused: every connection serve holds has a request in flight"
            );
            drop(stream);
            continue;
        };
        let service = tracked(router.clone(), Arc::clone(&slot.activity));
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        let held = Arc::clone(&held);
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = tokio::select! {
                result = &mut connection => Some(result),
                () = slot.close.notified() => None,
            };
            // Chosen to make room, it ends if still idle; one whose request arrived in between
            // serves it (and its next ones, until its header time-out).
            let ended = match ended {
                Some(result) => Some(result),
                None if slot.activity.is_busy() => Some(connection.await),
                None => {
                    tracing::debug!("idle connection closed to make room for a new one");
                    None
                }
            };
            if let Some(Err(err)) = ended {
                tracing::debug!(%err, "connection ended");
            }
            held.release(slot.id);
        });
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(
                grace = ?SHUTDOWN_GRACE,
                "requests still in flight after the shutdown grace; exiting anyway"
            );
        }
    }
}

/// The connections serve holds (see the module comment).
struct Held {
    max: usize,
    slots: Mutex<Vec<Slot>>,
    next_id: AtomicU64,
}

/// One held connection.
#[derive(Clone)]
struct Slot {
    id: u64,
    activity: Arc<Activity>,
    /// Told when the slot is given to a new connection; the connection then ends if idle.
    close: Arc<Notify>,
}

/// Whether a connection has a request in flight (its response body included), and since when
/// it has had none.
struct Activity {
    requests: AtomicUsize,
    idle_since: Mutex<Instant>,
}

impl Activity {
    fn is_busy(&self) -> bool {
        self.requests.load(Ordering::SeqCst) > 0
    }

    fn idle_since(&self) -> Instant {
        *self.idle_since.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counts a request in flight from its head to the end of its response body.
struct InFlight(Arc<Activity>);

impl InFlight {
    fn start(activity: &Arc<Activity>) -> Self {
        activity.requests.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(activity))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        *self.0.idle_since.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        self.0.requests.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Held {
    fn new(max: usize) -> Self {
        Held {
            max,
            slots: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
        }
    }

    /// A slot for a new connection: a free one, else the one of the connection idle longest
    /// (which is told to close); `None` when every held connection is busy.
    fn admit(&self) -> Option<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() >= self.max {
            let idlest = slots
                .iter()
                .enumerate()
                .filter(|(_, slot)| !slot.activity.is_busy())
                .min_by_key(|(_, slot)| slot.activity.idle_since())
                .map(|(at, _)| at)?;
            slots.swap_remove(idlest).close.notify_one();
        }
        let slot = Slot {
            id: self.next_id.fetch_add(1, Ordering::SeqCst),
            activity: Arc::new(Activity {
                requests: AtomicUsize::new(0),
                idle_since: Mutex::new(Instant::now()),
            }),
            close: Arc::new(Notify::new()),
        };
        slots.push(slot.clone());
        Some(slot)
    }

    /// The connection of slot `id` ended (a slot given away is no longer there).
    fn release(&self, id: u64) {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.retain(|slot| slot.id != id);
    }
}

/// `router` with each request counted in `activity` until its response body has been sent.
fn tracked(
    router: Router,
    activity: Arc<Activity>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = hyper::Response<Tracked>,
    Error = Infallible,
    Future: Send + 'static,
> + Send
+ 'static {
    let service = TowerToHyperService::new(router);
    hyper::service::service_fn(move |request| {
        let in_flight = InFlight::start(&activity);
        let answer = hyper::service::Service::call(&service, request);
        async move {
            let response = answer.await?;
            Ok::<_, Infallible>(response.map(|body| Tracked {
                body,
                _in_flight: in_flight,
            }))
        }
    })
}

/// A response body that keeps its request counted in flight until it is sent or dropped.
pub struct Tracked {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// Middleware: reads the request body whole, within the time and memory bounds, before the
/// route sees it.
async fn read_body(
    memory: Arc<Semaphore>,
    timeout: Duration,
    request: Request,
    next: Next,
) -> Response {
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > MAX_BODY) {
        return too_large();
    }
    if declared == Some(0) {
        return next.run(request).await;
    }
    let reserved = declared.unwrap_or(MAX_BODY).div_ceil(1024).max(1);
    let Ok(_memory) = memory
        .acquire_many_owned(u32::try_from(reserved).unwrap_or(u32::MAX))
        .await
    else {
        return (StatusCode::SERVICE_UNAVAILABLE, "serve is shutting down").into_response();
    };
    let (parts, body) = request.into_parts();
    let bytes = match tokio::time::timeout(timeout, axum::body::to_bytes(body, MAX_BODY)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(_)) => return too_large(),
        Err(_) => {
            return (
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    timeout.as_secs_f64()
                ),
            )
                .into_response();
        }
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

fn too_large() -> Response {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the request body is larger than {MAX_BODY} bytes"),
    )
        .into_response()
}
