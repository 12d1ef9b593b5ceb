//! `gepa-lab serve`: the two service APIs over HTTP (axum), backed by any `Inference` sources,
//! with state in SQLite. This module owns the shared state, the catalog of served models and the
//! nodes serving them, router assembly and start-up; route groups live in their own files
//! (`inference_routes` for `/v1/models` and `/v1/chat/completions`, `evolution_routes` for
//! `/api/v0`, with the engine behind it in `evolution_backend` and its tables in
//! `evolution_store`), authentication and rate limits in `auth`, the schema in `db`.
//!
//! The wallet, credits and channel routes live in `account_routes` (state in `account_db`). All
//! route groups are merged in `router`.
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;

use gepa_lab_http::Secret;
use gepa_lab_inference::embedded::models_dir;
use gepa_lab_inference::wire::Model;
use gepa_lab_inference::{
    EmbeddedError, EmbeddedModel, HttpInference, Inference, InferenceConfig, InferenceError,
    ModelChoice, SimConfig, SimConfigError, SimModel,
};
use gepa_lab_local::LocalEvolution;

mod account_db;
pub mod account_routes;
pub mod auth;
mod body;
pub mod db;
mod evolution_backend;
mod evolution_routes;
mod evolution_store;
mod inference_routes;
pub mod limits;

use account_routes::AccountSettings;
pub use evolution_backend::{EvolutionServeConfig, EvolutionSetupError};

use auth::RateLimits;
use db::{Db, DbError};
pub use limits::ClientLimits;

/// The rpm limit of a key given without one.
pub const DEFAULT_RPM: u32 = 60;

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("--api-key {shown}: {reason}")]
    Key { shown: String, reason: String },
    #[error("--upstream {spec:?}: {reason}")]
    UpstreamSpec { spec: String, reason: String },
    #[error(transparent)]
    Sim(#[from] SimConfigError),
    #[error("--upstream {spec}: {error}")]
    Local { spec: String, error: EmbeddedError },
    #[error("upstream {upstream}: {error}")]
    Upstream {
        upstream: String,
        error: InferenceError,
    },
    #[error(
        "no upstream given: pass at least one --upstream (local, local:NAME, sim, sim:OPTIONS or an http(s) URL)"
    )]
    NoUpstream,
    #[error(transparent)]
    Db(#[from] DbError),
    #[error(transparent)]
    Evolution(#[from] EvolutionSetupError),
    #[error("{action}: {error}")]
    Io {
        action: String,
        error: std::io::Error,
    },
}

/// An API key to accept and its rpm limit, written `KEY[:RPM]`.
#[derive(Debug, Clone)]
pub struct KeySpec {
    pub key: Secret,
    pub rpm_limit: NonZeroU32,
}

impl FromStr for KeySpec {
    type Err = ServerError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let (key, rpm) = match spec.rsplit_once(':') {
            Some((key, rpm)) if !rpm.is_empty() && rpm.bytes().all(|b| b.is_ascii_digit()) => {
                let rpm = rpm
                    .parse::<u32>()
                    .ok()
                    .and_then(NonZeroU32::new)
                    .ok_or_else(|| ServerError::Key {
                        shown: "<redacted>:RPM".into(),
                        reason: format!("rpm limit must be between 1 and {}", u32::MAX),
                    })?;
                (key, rpm)
            }
            _ => (
                spec,
                NonZeroU32::new(DEFAULT_RPM).unwrap_or(NonZeroU32::MIN),
            ),
        };
        if key.trim().is_empty() || key.chars().any(char::is_whitespace) {
            return Err(ServerError::Key {
                shown: "<redacted>".into(),
                reason: "a key must be non-empty and have no spaces".into(),
            });
        }
        Ok(KeySpec {
            key: Secret::new(key),
            rpm_limit: rpm,
        })
    }
}

/// Where answers come from: the embedded model, the simulated model, or another
/// OpenAI-compatible server.
#[derive(Debug, Clone, PartialEq)]
pub enum UpstreamSpec {
    /// `local` or `local:NAME` (a catalog name or a .gguf file): the embedded model, run in the
    /// server's process. It serves the id it was given (and `local`, for the default model).
    Local(ModelChoice),
    /// `sim` or `sim:OPTIONS` (see `SimConfig`'s options).
    Sim(SimConfig),
    /// An `http://` or `https://` base URL; it serves the models its `/v1/models` lists.
    Http { base_url: String },
}

impl FromStr for UpstreamSpec {
    type Err = ServerError;

    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        if let Some(choice) = ModelChoice::from_model_id(spec, &models_dir()).map_err(|source| {
            ServerError::Local {
                spec: spec.into(),
                error: source,
            }
        })? {
            return Ok(UpstreamSpec::Local(choice));
        }
        if spec == "sim" {
            return Ok(UpstreamSpec::Sim(SimConfig::default()));
        }
        if let Some(options) = spec.strip_prefix("sim:") {
            return Ok(UpstreamSpec::Sim(options.parse()?));
        }
        if spec.starts_with("http://") || spec.starts_with("https://") {
            return Ok(UpstreamSpec::Http {
                base_url: spec.to_owned(),
            });
        }
        Err(ServerError::UpstreamSpec {
            spec: spec.into(),
            reason: "expected local, local:NAME, sim, sim:OPTIONS or an http(s) URL".into(),
        })
    }
}

#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub db: PathBuf,
    pub keys: Vec<KeySpec>,
    pub upstreams: Vec<UpstreamSpec>,
    /// Bearer key for HTTP upstreams.
    pub upstream_key: Option<Secret>,
    pub account: AccountSettings,
    pub evolution: EvolutionServeConfig,
    /// The window the keys' `rpmLimit` counts requests in: [`auth::MINUTE`] as the service
    /// counts, shorter for tests of a client's waiting.
    pub rate_window: std::time::Duration,
}

/// One source of answers. `name` is what `metadata.node_id` reports.
pub struct Node {
    pub name: String,
    pub inference: Arc<dyn Inference>,
}

/// Which nodes serve which model id.
#[derive(Default)]
pub struct Catalog {
    models: BTreeMap<String, Vec<(Arc<Node>, Model)>>,
    next: AtomicUsize,
}

impl Catalog {
    /// Registers `node` as serving each of `models`. A model whose upstream gives no `created`
    /// time (the contract's Unix timestamp) is stamped with the time it was registered.
    pub fn add(&mut self, node: Node, models: Vec<Model>) {
        let node = Arc::new(node);
        let now = chrono::Utc::now().timestamp();
        for mut model in models {
            if model.created <= 0 {
                model.created = now;
            }
            self.models
                .entry(model.id.clone())
                .or_default()
                .push((Arc::clone(&node), model));
        }
    }

    /// One entry per model id, `node_count` being the nodes here that serve it.
    pub fn models(&self) -> Vec<Model> {
        self.models
            .iter()
            .filter_map(|(id, nodes)| {
                let (_, first) = nodes.first()?;
                Some(Model {
                    id: id.clone(),
                    node_count: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
                    ..first.clone()
                })
            })
            .collect()
    }

    /// A node for `model`, taking turns among several; `None` when no node serves it.
    pub fn pick(&self, model: &str) -> Option<Arc<Node>> {
        let nodes = self.models.get(model)?;
        let turn = self.next.fetch_add(1, Ordering::Relaxed);
        nodes
            .get(turn % nodes.len())
            .map(|(node, _)| Arc::clone(node))
    }
}

#[derive(Clone)]
pub struct AppState {
    pub db: Db,
    pub rate_limits: Arc<RateLimits>,
    pub catalog: Arc<Catalog>,
    pub account: Arc<AccountSettings>,
    pub evolution: LocalEvolution,
}

impl AppState {
    /// Opens the database, stores the configured keys, and asks each upstream what it serves.
    pub async fn new(config: &ServeConfig) -> Result<AppState, ServerError> {
        if config.upstreams.is_empty() {
            return Err(ServerError::NoUpstream);
        }
        let db = Db::open(&config.db)?;
        for spec in &config.keys {
            db.upsert_key(&spec.key, spec.rpm_limit.get()).await?;
        }
        if db.count_keys().await? == 0 {
            tracing::warn!(
                "no API key is configured: only keys from POST /v1/auth/wallet will work"
            );
        }
        let mut catalog = Catalog::default();
        for (i, spec) in config.upstreams.iter().enumerate() {
            let (name, inference): (String, Arc<dyn Inference>) = match spec {
                UpstreamSpec::Local(choice) => {
                    let choice = choice.clone();
                    // Loading reads the whole file: off the async threads.
                    let model = tokio::task::spawn_blocking(move || EmbeddedModel::load(choice))
                        .await
                        .map_err(|e| ServerError::Local {
                            spec: format!("upstream {i}"),
                            error: EmbeddedError::Backend(format!("loading stopped: {e}")),
                        })?
                        .map_err(|source| ServerError::Local {
                            spec: format!("upstream {i}"),
                            error: source,
                        })?;
                    (format!("local-{i}"), model)
                }
                UpstreamSpec::Sim(sim) => {
                    (format!("sim-{i}"), Arc::new(SimModel::new(sim.clone())))
                }
                UpstreamSpec::Http { base_url } => {
                    let client = HttpInference::new(InferenceConfig::new(
                        base_url.clone(),
                        config.upstream_key.clone(),
                    ))
                    .map_err(|source| ServerError::Upstream {
                        upstream: base_url.clone(),
                        error: source,
                    })?;
                    (format!("upstream-{i}"), Arc::new(client))
                }
            };
            let models = inference
                .models()
                .await
                .map_err(|source| ServerError::Upstream {
                    upstream: name.clone(),
                    error: source,
                })?;
            tracing::info!(node = %name, models = models.len(), "upstream ready");
            catalog.add(Node { name, inference }, models);
        }
        let catalog = Arc::new(catalog);
        let evolution = evolution_backend::start(&db, &catalog, &config.evolution).await?;
        Ok(AppState {
            db,
            rate_limits: Arc::new(RateLimits::new(config.rate_window)),
            catalog,
            account: Arc::new(config.account.clone()),
            evolution,
        })
    }
}

/// Every route of the server. Route groups that need a Bearer key sit behind `auth::require_key`.
pub fn router(state: AppState) -> Router {
    let inference = inference_routes::routes()
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            account_routes::meter_chat,
        ))
        .merge(account_routes::routes())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ));
    Router::new()
        .merge(inference)
        .merge(account_routes::login_routes())
        .merge(evolution_routes::routes(state.clone()))
        .with_state(state)
}

/// A bound listener and its router, so the caller can report the address before serving.
pub struct Server {
    listener: tokio::net::TcpListener,
    router: Router,
    limits: ClientLimits,
}

impl Server {
    pub async fn bind(addr: SocketAddr, state: AppState) -> Result<Server, ServerError> {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Io {
                action: format!("bind {addr}"),
                error: source,
            })?;
        Ok(Server {
            listener,
            router: router(state),
            limits: ClientLimits::default(),
        })
    }

    /// Bounds on connections and on the time a request's head and body may take.
    pub fn with_limits(self, limits: ClientLimits) -> Self {
        Server { limits, ..self }
    }

    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        self.listener
            .local_addr()
            .map_err(|source| ServerError::Io {
                action: "read the bound address".into(),
                error: source,
            })
    }

    /// Serves until `shutdown` completes, then lets requests in flight finish (for at most
    /// [`limits::SHUTDOWN_GRACE`]).
    pub async fn run(
        self,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        limits::serve(self.listener, self.router, self.limits, shutdown).await;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_specs_read_an_optional_rpm_and_never_show_the_key() {
        let spec: KeySpec = "dkn_live_abc:120".parse().unwrap();
        assert_eq!(spec.key.expose(), "dkn_live_abc");
        assert_eq!(spec.rpm_limit.get(), 120);
        let spec: KeySpec = "plainkey".parse().unwrap();
        assert_eq!(spec.rpm_limit.get(), DEFAULT_RPM);
        assert!(!format!("{spec:?}").contains("plainkey"));
        let err = "secretkey:0".parse::<KeySpec>().unwrap_err();
        assert!(!err.to_string().contains("secretkey"), "{err}");
        assert!("".parse::<KeySpec>().is_err());
    }

    #[test]
    fn upstream_specs() {
        assert!(matches!("sim".parse(), Ok(UpstreamSpec::Sim(_))));
        assert!(matches!(
            "sim:model=a,latency_ms=5".parse::<UpstreamSpec>(),
            Ok(UpstreamSpec::Sim(c)) if c.models == ["a"]
        ));
        assert_eq!(
            "http://127.0.0.1:11434".parse::<UpstreamSpec>().unwrap(),
            UpstreamSpec::Http {
                base_url: "http://127.0.0.1:11434".into()
            }
        );
        assert!("ollama".parse::<UpstreamSpec>().is_err());
        assert_eq!(
            "local".parse::<UpstreamSpec>().unwrap(),
            UpstreamSpec::Local(ModelChoice::Default)
        );
        assert!(matches!(
            "local:smollm2-135m".parse::<UpstreamSpec>(),
            Ok(UpstreamSpec::Local(ModelChoice::Catalog(m))) if m.name == "smollm2-135m"
        ));
        assert!("local:no-such-model".parse::<UpstreamSpec>().is_err());
        assert!("sim:bogus=1".parse::<UpstreamSpec>().is_err());
    }

    #[tokio::test]
    async fn the_catalog_counts_nodes_and_takes_turns() {
        let mut catalog = Catalog::default();
        for name in ["sim-0", "sim-1"] {
            let sim = SimModel::new("model=shared".parse().unwrap());
            let models = sim.models().await.unwrap();
            catalog.add(
                Node {
                    name: name.into(),
                    inference: Arc::new(sim),
                },
                models,
            );
        }
        let sim = SimModel::new("model=solo".parse().unwrap());
        let models = sim.models().await.unwrap();
        catalog.add(
            Node {
                name: "sim-2".into(),
                inference: Arc::new(sim),
            },
            models,
        );
        let counts: Vec<_> = catalog
            .models()
            .into_iter()
            .map(|m| (m.id, m.node_count))
            .collect();
        assert_eq!(counts, vec![("shared".into(), 2), ("solo".into(), 1)]);
        let first = catalog.pick("shared").unwrap().name.clone();
        let second = catalog.pick("shared").unwrap().name.clone();
        assert_ne!(first, second);
        assert!(catalog.pick("missing").is_none());
    }
}
