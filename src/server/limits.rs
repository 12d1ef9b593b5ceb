//! What a client may hold of serve: connections, time and memory. Without these, 300 clients
//! that trickle their headers (or one that sends a body at a byte a second) stayed connected for
//! as long as they liked, a full file-descriptor table locked normal clients out, SIGTERM waited
//! on a client holding half a request, and a dozen 31 MB chat bodies at once took hundreds of MB.
//!
//! - **Connections:** at most `max_connections` at once; one more is closed as soon as it is
//!   accepted (a client sees a reset and may retry), so the table never fills.
//! - **Headers:** a request's head must arrive within `header_timeout`, counted from when the
//!   connection starts waiting for it; an idle keep-alive connection is closed after as long.
//! - **Bodies:** a request body must arrive whole within `body_timeout` (408 otherwise), and is
//!   read only when the bytes it declares (or, undeclared, the largest any route takes) fit in
//!   [`BODY_MEMORY`] beside the bodies being read at that moment; the others wait their turn.
//! - **Shutdown:** requests in flight get [`SHUTDOWN_GRACE`] to finish; then serve exits anyway.
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

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

impl Default for ClientLimits {
    fn default() -> Self {
        ClientLimits {
            max_connections: 512,
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
    let connections = Arc::new(Semaphore::new(limits.max_connections.max(1)));
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
        let Ok(permit) = Arc::clone(&connections).try_acquire_owned() else {
            tracing::warn!(
                max = limits.max_connections,
                "connection refused: serve holds its maximum of connections"
            );
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout)
            .serve_connection(TokioIo::new(stream), service);
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(%err, "connection ended");
            }
            drop(permit);
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
