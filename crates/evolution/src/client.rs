//! `HttpEvolution`: the prompt-evolution API over `http::HttpClient`, at `{url}/api/v0` with the
//! `x-api-key` header.
//!
//! Responses are parsed leniently through the wire types (a missing `prompt`, unknown statuses
//! and unknown fields are accepted). A 404 on an execution's routes is
//! [`EvolutionError::NotFound`]. Pages are numbered from 1 (see `fetch_history`).
//!
//! Starting is never retried: an attempt whose answer was lost may have started an execution,
//! and a second one would spend the budget again. The runner's resume finds such an execution by
//! its customId instead. Reads are retried as the `http` layer's policy says.
use std::time::Duration;

use async_trait::async_trait;
use reqwest::header::HeaderName;
use reqwest::{StatusCode, Url};

use super::wire::{
    BatchJobs, Execution, ExecutionList, HistoryRecord, IterationsPage, PromptsPage,
    StartExecution, Started,
};
use super::{Evolution, EvolutionError, ITERATIONS_LIMIT};
use gepa_lab_engine::IterationRecord;
use gepa_lab_http::{ApiError, Auth, Call, HttpClient, RetryPolicy, Secret, ServiceConfig, Stats};

/// The public prompt-evolution service.
pub const DEFAULT_EVOLUTION_URL: &str = "https://mainnet.dkn.dria.co";
/// Where the service's routes start, below its address.
const API_PREFIX: &str = "/api/v0";

/// The prompt-evolution service, at `{base_url}/api/v0`. The key is sent as `x-api-key`;
/// the retries are for reads (starts are sent once, see the module comment).
pub type EvolutionConfig = ServiceConfig;

/// Time-out of one attempt unless the configuration sets its own.
const EVOLUTION_TIMEOUT: Duration = Duration::from_secs(60);

/// `GEPA_LAB_EVOLUTION_URL` (default [`DEFAULT_EVOLUTION_URL`]) and `GEPA_LAB_EVOLUTION_KEY`.
pub fn config_from_env() -> EvolutionConfig {
    let url = gepa_lab_env::var(gepa_lab_env::EVOLUTION_URL)
        .unwrap_or_else(|| DEFAULT_EVOLUTION_URL.to_owned());
    let key = gepa_lab_env::var(gepa_lab_env::EVOLUTION_KEY).map(Secret::new);
    EvolutionConfig::new(url, key)
}

#[derive(Debug, Clone)]
pub struct HttpEvolution {
    reads: HttpClient,
    starts: HttpClient,
    /// Cleared when the service answers the iterations extension with "no such route", so
    /// that a service without it is asked once, not at every poll.
    offers_iterations: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl HttpEvolution {
    pub fn new(config: EvolutionConfig) -> Result<Self, EvolutionError> {
        let auth = match config.key.clone() {
            Some(key) => Auth::Header {
                name: HeaderName::from_static("x-api-key"),
                value: key,
            },
            None => Auth::None,
        };
        let base_url = format!("{}{API_PREFIX}", config.base_url.trim_end_matches('/'));
        let reads = config.client(base_url, auth, EVOLUTION_TIMEOUT);
        let mut starts = reads.clone();
        starts.retry = RetryPolicy {
            max_attempts: 1,
            ..starts.retry
        };
        Ok(Self {
            reads: HttpClient::new(reads)?,
            starts: HttpClient::new(starts)?,
            offers_iterations: std::sync::Arc::new(true.into()),
        })
    }

    /// Attempts, retries and 429s of the read requests so far.
    pub fn stats(&self) -> Stats {
        self.reads.stats()
    }

    /// Cancels an execution through `gepa-lab serve`'s extension route
    /// `POST /gepa/cancel_execution/{evolutionId}`, which the public service does not offer (it
    /// answers 404 there, as for an unknown id). Sent once. A 409 means it had already ended.
    pub async fn cancel(&self, evolution_id: &str) -> Result<Execution, EvolutionError> {
        let path = route(&["gepa", "cancel_execution", evolution_id], &[])?;
        let call = Call::post_json(path, &serde_json::json!({}))?;
        self.starts
            .send_json(&call)
            .await
            .map_err(|err| not_found_as(evolution_id, err))
    }
}

/// The path and query of a route: `segments` percent-encoded one by one (so an id can never
/// change the route it is sent to), then the pairs that have a value.
fn route(segments: &[&str], pairs: &[(&str, Option<String>)]) -> Result<String, ApiError> {
    let invalid = |reason: String| ApiError::Config(format!("building a request path: {reason}"));
    // Only the path and query of this URL are used; the client prepends the real address.
    let mut url = Url::parse("http://service.invalid/").map_err(|e| invalid(e.to_string()))?;
    url.path_segments_mut()
        .map_err(|()| invalid("the URL cannot hold a path".into()))?
        .pop_if_empty()
        .extend(segments);
    let present: Vec<(&str, &str)> = pairs
        .iter()
        .filter_map(|(name, value)| value.as_deref().map(|value| (*name, value)))
        .collect();
    if !present.is_empty() {
        url.query_pairs_mut().extend_pairs(present);
    }
    Ok(match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    })
}

fn not_found_as(evolution_id: &str, error: ApiError) -> EvolutionError {
    if error.status() == Some(StatusCode::NOT_FOUND) {
        EvolutionError::NotFound(evolution_id.to_owned())
    } else {
        EvolutionError::Api(error)
    }
}

#[async_trait]
impl Evolution for HttpEvolution {
    async fn start(&self, request: &StartExecution) -> Result<String, EvolutionError> {
        let call = Call::post_json("/gepa/start_execution", request)?;
        let started: Started = self.starts.send_json(&call).await?;
        Ok(started.evolution_id)
    }

    async fn get(&self, evolution_id: &str) -> Result<Execution, EvolutionError> {
        let path = route(&["gepa", "get_single_execution", evolution_id], &[])?;
        let mut execution: Execution = self
            .reads
            .send_json(&Call::get(path))
            .await
            .map_err(|err| not_found_as(evolution_id, err))?;
        // The single-execution response leaves the id out; the caller asked by it.
        execution
            .evolution_id
            .get_or_insert_with(|| evolution_id.to_owned());
        Ok(execution)
    }

    async fn list(
        &self,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<Execution>, EvolutionError> {
        let path = route(
            &["gepa", "get_all_executions"],
            &[
                ("page", page.map(|p| p.to_string())),
                ("limit", limit.map(|l| l.to_string())),
            ],
        )?;
        let list: ExecutionList = self.reads.send_json(&Call::get(path)).await?;
        Ok(list.executions)
    }

    async fn prompts(
        &self,
        evolution_id: &str,
        page: Option<u32>,
        limit: Option<u32>,
    ) -> Result<Vec<HistoryRecord>, EvolutionError> {
        let path = route(
            &["gepa", "get_execution_prompts"],
            &[
                ("evolutionId", Some(evolution_id.to_owned())),
                ("page", page.map(|p| p.to_string())),
                ("limit", limit.map(|l| l.to_string())),
            ],
        )?;
        let page: PromptsPage = self
            .reads
            .send_json(&Call::get(path))
            .await
            .map_err(|err| not_found_as(evolution_id, err))?;
        Ok(page.prompts)
    }

    async fn batch_jobs(&self) -> Result<BatchJobs, EvolutionError> {
        Ok(self.reads.send_json(&Call::get("/batch/all_jobs")).await?)
    }

    /// `GET /gepa/get_execution_iterations`, `gepa-lab serve`'s extension. A 404, 405 or 501
    /// (the public service has no such route) means the service does not offer it: `None`, and
    /// it is not asked again; except serve's own 404 for an execution it does not know, which
    /// is `None` for that execution only.
    async fn iterations(
        &self,
        evolution_id: &str,
        after: usize,
    ) -> Result<Option<Vec<IterationRecord>>, EvolutionError> {
        use std::sync::atomic::Ordering;
        if !self.offers_iterations.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let path = route(
            &["gepa", "get_execution_iterations"],
            &[
                ("evolutionId", Some(evolution_id.to_owned())),
                ("after", Some(after.to_string())),
                ("limit", Some(ITERATIONS_LIMIT.to_string())),
            ],
        )?;
        match self
            .reads
            .send_json::<IterationsPage>(&Call::get(path))
            .await
        {
            Ok(page) => Ok(Some(page.iterations)),
            Err(ApiError::Status { status, body, .. })
                if status == StatusCode::NOT_FOUND
                    && body.starts_with(super::UNKNOWN_EXECUTION) =>
            {
                Ok(None)
            }
            Err(err)
                if matches!(
                    err.status(),
                    Some(
                        StatusCode::NOT_FOUND
                            | StatusCode::METHOD_NOT_ALLOWED
                            | StatusCode::NOT_IMPLEMENTED
                    )
                ) =>
            {
                self.offers_iterations.store(false, Ordering::Relaxed);
                Ok(None)
            }
            Err(err) => Err(err.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_and_segments_are_encoded() {
        assert_eq!(
            route(
                &["gepa", "get_execution_prompts"],
                &[
                    ("evolutionId", Some("a b&c".into())),
                    ("page", Some("2".into())),
                    ("limit", None)
                ]
            )
            .unwrap(),
            "/gepa/get_execution_prompts?evolutionId=a+b%26c&page=2"
        );
        assert_eq!(route(&["x"], &[("page", None)]).unwrap(), "/x");
        assert_eq!(
            route(&["gepa", "get_single_execution", "../a b/?"], &[]).unwrap(),
            "/gepa/get_single_execution/..%2Fa%20b%2F%3F"
        );
    }

    #[test]
    fn the_key_never_prints() {
        let client = HttpEvolution::new(EvolutionConfig::new(
            "http://127.0.0.1:9/",
            Some(Secret::new("evo-secret-key")),
        ))
        .unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("evo-secret-key"), "{shown}");
        assert!(shown.contains("127.0.0.1:9/api/v0"), "{shown}");
    }

    #[test]
    fn a_bad_address_is_a_configuration_error() {
        let err = HttpEvolution::new(EvolutionConfig::new("ftp://example.org", None)).unwrap_err();
        assert!(
            matches!(err, EvolutionError::Api(ApiError::Config(_))),
            "{err}"
        );
    }
}
