//! The one HTTP client layer of gepa-lab: the shared reqwest client builder, authentication as a
//! parameter (Bearer for the inference API, a named header such as `x-api-key` for the evolution
//! API), client-side pacing to a requests-per-minute limit, the retry loop, and `ApiError`.
//!
//! It knows nothing about any service's paths or wire types; `inference` and `evolution` build
//! their clients on `HttpClient`. Secrets passed in are held in `Secret`, which never prints.
use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use rand::{Rng, SeedableRng};
use reqwest::header::{HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Method, Response, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

mod adaptive;
mod error;
mod retry;

pub use error::ApiError;
pub(crate) use error::parse_retry_after;
pub use retry::{Decision, RetryPolicy, server_failed};

/// The reqwest builder every client of gepa-lab starts from, so TLS (rustls), the user agent and
/// the connect time-out are decided once.
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
        .user_agent(concat!("gepa-lab/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(10))
}

/// Makes ring the crypto provider of rustls in this process, once. reqwest is built without a
/// provider of its own (the workspace Cargo.toml says why) and panics when it builds a TLS client
/// without one. If something else installed a provider first, reqwest uses that one.
fn install_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A credential. `Debug` shows only that one is set, and there is no `Display`, so a key cannot
/// reach a log line or an error message by accident.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that must send or hash it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// How requests prove who sends them.
#[derive(Debug, Clone)]
pub enum Auth {
    None,
    /// `Authorization: Bearer <key>` (the inference API).
    Bearer(Secret),
    /// A header of its own, e.g. `x-api-key: <key>` (the evolution API).
    Header {
        name: HeaderName,
        value: Secret,
    },
}

/// Time-out of one attempt, response body included, unless an API or a call sets its own.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(130);

/// What a caller says of one service, the same for every API: where it is, the key, the pacing
/// and the retries. Each API's client makes the [`ClientConfig`]s it needs from it (its auth
/// header, its own time-out, a start or a payment sent once).
#[derive(Debug, Clone)]
pub struct ServiceConfig {
    pub base_url: String,
    /// The key; how it is sent (a bearer token, a header of its own) is the API's.
    pub key: Option<Secret>,
    /// The key's `rpmLimit`: requests are spaced so that the server never has to answer 429.
    pub rpm: Option<NonZeroU32>,
    pub retry: RetryPolicy,
    /// Time-out of one attempt; `None`: the API client's own.
    pub timeout: Option<Duration>,
    /// Headers sent with every request besides the key (a provider's `headers`); their values
    /// may be secrets, so they are held as such.
    pub headers: Vec<(String, Secret)>,
}

impl ServiceConfig {
    pub fn new(base_url: impl Into<String>, key: Option<Secret>) -> Self {
        Self {
            base_url: base_url.into(),
            key,
            rpm: None,
            retry: RetryPolicy::default(),
            timeout: None,
            headers: Vec::new(),
        }
    }

    /// The client configuration for `base_url` with `auth`, this service's pacing and retries,
    /// and its time-out or else `default_timeout`.
    pub fn client(&self, base_url: String, auth: Auth, default_timeout: Duration) -> ClientConfig {
        ClientConfig {
            base_url,
            auth,
            rpm: self.rpm,
            retry: self.retry.clone(),
            timeout: self.timeout.unwrap_or(default_timeout),
            headers: self.headers.clone(),
        }
    }
}

/// Everything that shapes one `HttpClient`.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Service address; request paths are appended to it.
    pub base_url: String,
    pub auth: Auth,
    /// Client-side pacing to the key's requests-per-minute limit; `None` sends as fast as asked.
    pub rpm: Option<NonZeroU32>,
    pub retry: RetryPolicy,
    /// Time-out for one attempt, response body included, unless a call sets its own.
    pub timeout: Duration,
    /// Sent with every request, marked sensitive.
    pub headers: Vec<(String, Secret)>,
}

impl ClientConfig {
    pub fn new(base_url: impl Into<String>, auth: Auth) -> Self {
        ClientConfig {
            base_url: base_url.into(),
            auth,
            rpm: None,
            retry: RetryPolicy::default(),
            timeout: ATTEMPT_TIMEOUT,
            headers: Vec::new(),
        }
    }
}

/// Counts of what a client has seen since it was made; shared by its clones.
#[derive(Debug, Default)]
struct Counters {
    attempts: AtomicU64,
    retries: AtomicU64,
    rate_limited: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stats {
    /// Requests put on the wire, retries included.
    pub attempts: u64,
    /// Attempts that were followed by another one.
    pub retries: u64,
    /// 429 answers received.
    pub rate_limited: u64,
}

/// One request to send: rebuilt from these parts on every attempt, since a reqwest request
/// (and a streamed body) cannot be replayed.
#[derive(Debug, Clone)]
pub struct Call {
    pub method: Method,
    pub path: String,
    body: Option<Vec<u8>>,
    /// Extra headers of this call only, such as x402's `X-PAYMENT`.
    headers: Vec<(HeaderName, HeaderValue)>,
    pub timeout: Option<Duration>,
}

impl Call {
    pub fn get(path: impl Into<String>) -> Self {
        Call {
            method: Method::GET,
            path: path.into(),
            body: None,
            headers: Vec::new(),
            timeout: None,
        }
    }

    pub fn post_json<B: Serialize + ?Sized>(
        path: impl Into<String>,
        body: &B,
    ) -> Result<Self, ApiError> {
        let body = serde_json::to_vec(body)
            .map_err(|e| ApiError::Config(format!("request body does not serialise: {e}")))?;
        Ok(Call {
            method: Method::POST,
            path: path.into(),
            body: Some(body),
            headers: Vec::new(),
            timeout: None,
        })
    }

    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// Adds a header to every attempt of this call. The value is marked sensitive, so `Debug`
    /// of the call never shows it: such headers carry signed payments.
    pub fn with_header(mut self, name: HeaderName, value: &str) -> Result<Self, ApiError> {
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| ApiError::Config(format!("{name} value is not a valid header")))?;
        value.set_sensitive(true);
        self.headers.push((name, value));
        Ok(self)
    }
}

/// A paced, retrying client for one service and one credential. Cheap to clone; clones share
/// the connection pool, the pacing and the counters.
#[derive(Clone)]
pub struct HttpClient {
    inner: reqwest::Client,
    base_url: Url,
    auth: Auth,
    retry: RetryPolicy,
    timeout: Duration,
    pacing: Option<Arc<DefaultDirectRateLimiter>>,
    /// Sent with every attempt; values marked sensitive, so `Debug` never shows them.
    headers: Vec<(HeaderName, HeaderValue)>,
    /// Pacing learned from 429s, when no rpm is known.
    adaptive: Arc<adaptive::Adaptive>,
    counters: Arc<Counters>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("base_url", &self.base_url.as_str())
            .field("auth", &self.auth)
            .field("retry", &self.retry)
            .field("paced", &self.pacing.is_some())
            .finish()
    }
}

/// The address of a server as every option and file names one (`run --backend URL`, `run
/// --mlflow URL`, `[tracking] mlflow`): an absolute http(s) URL with a host, given back trimmed
/// and without a trailing slash; otherwise why not.
pub fn server_url(text: &str) -> Result<String, String> {
    let text = text.trim();
    match Url::parse(text) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => Err(format!(
            "{text:?} is not an http(s) address (such as http://127.0.0.1:5000)"
        )),
        Ok(url) if url.host_str().is_none_or(str::is_empty) => {
            Err(format!("the URL {text:?} names no host"))
        }
        Ok(_) => Ok(text.trim_end_matches('/').to_owned()),
        Err(err) => Err(format!(
            "{text:?} is not a usable URL ({err}); an http(s) address such as \
             http://127.0.0.1:5000 is"
        )),
    }
}

impl HttpClient {
    pub fn new(config: ClientConfig) -> Result<Self, ApiError> {
        let inner = client_builder()
            .build()
            .map_err(|e| ApiError::Config(format!("HTTP client: {e}")))?;
        let base = config.base_url.trim_end_matches('/');
        let base_url =
            Url::parse(base).map_err(|e| ApiError::Config(format!("base URL {base:?}: {e}")))?;
        if !matches!(base_url.scheme(), "http" | "https") {
            return Err(ApiError::Config(format!(
                "base URL {base:?}: scheme must be http or https"
            )));
        }
        let pacing = config
            .rpm
            .map(|rpm| Arc::new(RateLimiter::direct(pacing_quota(rpm))));
        let headers = fixed_headers(&config.headers)?;
        Ok(HttpClient {
            inner,
            base_url,
            auth: config.auth,
            retry: config.retry,
            timeout: config.timeout,
            pacing,
            headers,
            adaptive: Arc::default(),
            counters: Arc::default(),
        })
    }

    pub fn stats(&self) -> Stats {
        Stats {
            attempts: self.counters.attempts.load(Ordering::Relaxed),
            retries: self.counters.retries.load(Ordering::Relaxed),
            rate_limited: self.counters.rate_limited.load(Ordering::Relaxed),
        }
    }

    /// Sends `call`, pacing every attempt and retrying as the policy says. Returns the response
    /// of the first attempt with a success status, body unread (it may be a stream).
    pub async fn send(&self, call: &Call) -> Result<Response, ApiError> {
        Ok(self.send_attempts(call).await?.0)
    }

    /// `send`, and when the answered attempt was sent: latency is measured from there, so that
    /// neither pacing nor earlier attempts count in it.
    async fn send_attempts(&self, call: &Call) -> Result<(Response, Instant), ApiError> {
        let started = Instant::now();
        let mut jitter = rand_chacha::ChaCha8Rng::seed_from_u64(jitter_seed());
        // Attempts that failed for a reason other than rate limiting, and 429s: a 429 means the
        // request was not served, so it is retried until `max_elapsed` without using up an
        // attempt.
        let (mut failed, mut limited) = (0, 0);
        loop {
            match &self.pacing {
                Some(pacing) => pacing.until_ready().await,
                None => {
                    let wait = self.adaptive.reserve(Instant::now());
                    // An earlier 429 may hold every request for longer than this one may take
                    // (a `Retry-After` of a day): it ends now instead of sleeping past its own
                    // time budget, as the request that got that answer did.
                    if started.elapsed() + wait > self.retry.max_elapsed {
                        return Err(ApiError::held(wait));
                    }
                    if !wait.is_zero() {
                        tokio::time::sleep(wait).await;
                    }
                }
            }
            self.counters.attempts.fetch_add(1, Ordering::Relaxed);
            let sent = Instant::now();
            let result = self.attempt(call).await;
            let error = match result {
                Ok(response) => {
                    self.adaptive.answered();
                    return Ok((response, sent));
                }
                Err(error) => error,
            };
            let attempt = if let ApiError::Status {
                status: reqwest::StatusCode::TOO_MANY_REQUESTS,
                retry_after,
                ..
            } = &error
            {
                self.counters.rate_limited.fetch_add(1, Ordering::Relaxed);
                // A `Retry-After` past the time budget ends this request (below); holding every
                // other request of the client (every caller of a serve, every key) that long
                // would make one absurd answer stop them all, so it only slows them down.
                let hold = retry_after.filter(|wait| *wait <= self.retry.max_elapsed);
                self.adaptive.rate_limited(Instant::now(), hold);
                limited += 1;
                limited
            } else {
                self.adaptive.answered();
                failed += 1;
                failed
            };
            match self
                .retry
                .decide(attempt, started.elapsed(), &error, jitter.random())
            {
                Decision::GiveUp => return Err(error),
                Decision::RetryAfter(wait) => {
                    tracing::debug!(path = %call.path, attempt, ?wait, %error, "retrying");
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }

    /// `send`, then the body read as JSON.
    pub async fn send_json<T: DeserializeOwned>(&self, call: &Call) -> Result<T, ApiError> {
        Ok(self.send_json_timed(call).await?.0)
    }

    /// `send_json`, and the latency of the answered attempt: from sending it to having its whole
    /// body.
    pub async fn send_json_timed<T: DeserializeOwned>(
        &self,
        call: &Call,
    ) -> Result<(T, Duration), ApiError> {
        let (mut response, sent) = self.send_attempts(call).await?;
        // Read in chunks up to a bound: a service that sends 10 MB for an 8-token answer must
        // not cost 10 MB per request (six such answers once held 546 MB).
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(ApiError::Transport)? {
            if bytes.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(ApiError::TooLarge {
                    limit: MAX_BODY_BYTES,
                });
            }
            bytes.extend_from_slice(&chunk);
        }
        let body = String::from_utf8_lossy(&bytes).into_owned();
        let latency = sent.elapsed();
        let value =
            serde_json::from_str(&body).map_err(|error| ApiError::Decode { error, body })?;
        Ok((value, latency))
    }

    async fn attempt(&self, call: &Call) -> Result<Response, ApiError> {
        let url = format!(
            "{}{}",
            self.base_url.as_str().trim_end_matches('/'),
            call.path
        );
        let mut request = self
            .inner
            .request(call.method.clone(), url)
            .timeout(call.timeout.unwrap_or(self.timeout));
        request = match &self.auth {
            Auth::None => request,
            Auth::Bearer(key) => request.bearer_auth(key.expose()),
            Auth::Header { name, value } => {
                let mut value = HeaderValue::from_str(value.expose())
                    .map_err(|_| ApiError::Config(format!("{name} value is not a valid header")))?;
                value.set_sensitive(true);
                request.header(name.clone(), value)
            }
        };
        for (name, value) in self.headers.iter().chain(&call.headers) {
            request = request.header(name.clone(), value.clone());
        }
        if let Some(body) = &call.body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let response = request.send().await.map_err(ApiError::Transport)?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        // A body that cannot be read is still an error with a status; keep what we have.
        let body = response.text().await.unwrap_or_default();
        Err(ApiError::Status {
            status,
            retry_after,
            body,
        })
    }
}

/// Headers of every request, checked once; a value is never quoted in the error, since it may
/// be a secret.
fn fixed_headers(headers: &[(String, Secret)]) -> Result<Vec<(HeaderName, HeaderValue)>, ApiError> {
    headers
        .iter()
        .map(|(name, value)| {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| ApiError::Config(format!("{name:?} is not a header name")))?;
            let mut value = HeaderValue::from_str(value.expose()).map_err(|_| {
                ApiError::Config(format!(
                    "the value of header {name} is not valid in a header"
                ))
            })?;
            value.set_sensitive(true);
            Ok((name, value))
        })
        .collect()
}

/// The longest JSON body read: far above any answer, history page or list of these APIs.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Even spacing at the key's rate, with no burst: the server counts a burst against the same
/// minute, and requests spaced exactly one period apart can never exceed a limit of `rpm` per
/// minute however the server's window is aligned or how much latency jitter reorders arrivals.
fn pacing_quota(rpm: NonZeroU32) -> Quota {
    let period = Duration::from_secs(60) / rpm.get();
    // `with_period` is `None` only for a zero period, impossible for rpm <= u32::MAX.
    Quota::with_period(period.max(Duration::from_nanos(1)))
        .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
}

/// Jitter only has to differ between concurrent callers, not be unpredictable.
fn jitter_seed() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default();
    now ^ NEXT.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_is_http_with_a_host_and_loses_its_trailing_slash() {
        assert_eq!(
            server_url(" http://127.0.0.1:5000/ ").unwrap(),
            "http://127.0.0.1:5000"
        );
        assert_eq!(
            server_url("https://mlflow.example/team").unwrap(),
            "https://mlflow.example/team"
        );
        for bad in ["mlruns", "file:///tmp/mlruns", "ftp://host", "http://"] {
            let err = server_url(bad).unwrap_err();
            assert!(err.contains(bad.trim_end_matches('/')), "{bad}: {err}");
        }
    }

    #[test]
    fn secrets_never_print() {
        let auth = Auth::Bearer(Secret::new("dkn_live_abcdef"));
        let shown = format!("{auth:?}");
        assert!(!shown.contains("dkn_live"), "{shown}");
        let client = HttpClient::new(ClientConfig::new("http://127.0.0.1:9", auth)).unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("abcdef"), "{shown}");
    }

    #[test]
    fn base_url_must_be_http() {
        for bad in ["ftp://example.org", "not a url", ""] {
            let err = HttpClient::new(ClientConfig::new(bad, Auth::None)).unwrap_err();
            assert!(matches!(err, ApiError::Config(_)), "{bad}: {err}");
        }
    }

    #[test]
    fn pacing_spaces_requests_one_period_apart() {
        let quota = pacing_quota(NonZeroU32::new(120).unwrap());
        assert_eq!(quota.replenish_interval(), Duration::from_millis(500));
        assert_eq!(quota.burst_size().get(), 1);
    }

    /// The client's TLS, end to end and offline: a handshake with a rustls server on loopback
    /// whose certificate (for `localhost`, valid until 2126) is signed by a test CA that the
    /// client is told to trust, made with openssl (testdata/).
    #[tokio::test]
    async fn the_client_completes_a_tls_handshake_and_checks_the_certificate() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let chain = CertificateDer::pem_slice_iter(include_bytes!("../testdata/localhost.pem"))
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key =
            PrivateKeyDer::from_pem_slice(include_bytes!("../testdata/localhost.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (tcp, _) = listener.accept().await.unwrap();
            let mut tls = acceptor.accept(tcp).await.unwrap();
            let (mut request, mut buffer) = (Vec::new(), [0; 1024]);
            while !request.windows(4).any(|end| end == b"\r\n\r\n") {
                let read = tls.read(&mut buffer).await.unwrap();
                assert!(read > 0, "the request ended early");
                request.extend_from_slice(&buffer[..read]);
            }
            tls.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await
                .unwrap();
            tls.shutdown().await.unwrap();
        });

        let ca = reqwest::Certificate::from_pem(include_bytes!("../testdata/ca.pem")).unwrap();
        let client = client_builder()
            .tls_certs_only([ca])
            .resolve("localhost", address)
            .build()
            .unwrap();
        let response = client
            .get(format!("https://localhost:{}/", address.port()))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::OK);
        assert_eq!(response.text().await.unwrap(), "ok");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn connection_errors_are_retried_then_reported() {
        // A port just released by the OS has no listener: every attempt is refused at once.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut config = ClientConfig::new(format!("http://127.0.0.1:{port}"), Auth::None);
        config.retry = RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            ..RetryPolicy::default()
        };
        let client = HttpClient::new(config).unwrap();
        let err = client.send(&Call::get("/v1/models")).await.unwrap_err();
        assert!(matches!(err, ApiError::Transport(_)), "{err}");
        assert_eq!(client.stats().attempts, 3);
        assert_eq!(client.stats().retries, 2);
    }
}
