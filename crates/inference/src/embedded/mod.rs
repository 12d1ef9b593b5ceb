//! `EmbeddedModel`: a small instruct model run in-process on the CPU through llama.cpp (the
//! `llama-cpp-2` bindings), behind the same `Inference` trait as a remote service. Model ids are
//! `local` (the catalog's default model) and `local:<name>` (a catalog name, or a `.gguf` file).
//!
//! What a request gets: the model's own chat template (from the GGUF file), greedy decoding at
//! temperature 0 and llama.cpp's sampling chain otherwise, generation up to `max_tokens` or the
//! model's end of turn, real token counts in `usage`, `metadata.node_id` = `local/<name>`.
//! Structured output is constrained while it is generated: the request's JSON Schema becomes a
//! GBNF grammar (`inference::grammar`) that the sampler enforces, and the answer is then
//! validated against the schema like a remote one (the grammar does not cover every keyword).
//! A schema the converter cannot handle is generated unconstrained and validated the same way.
//!
//! Also here: the catalog of installable models (`catalog`) and their installation (`install`).
//! Not here: the CLI (`cli::model`), serving over HTTP (`server`).
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak, mpsc};
use std::time::Duration;

use async_trait::async_trait;
use reqwest::StatusCode;

use super::wire::{
    AnswerMessage, ChatRequest, ChatResponse, Choice, ChunkChoice, Delta, Metadata, Model, Role,
    StreamChunk, Usage,
};
use super::{ChunkStream, Inference, InferenceError, check_request, validate_answer};
use gepa_lab_http::ApiError;

pub mod catalog;
pub mod install;
mod jobs;
#[cfg(feature = "embedded")]
mod template;
#[cfg(feature = "embedded")]
mod worker;

pub use catalog::{CATALOG, CatalogModel, DEFAULT_MODEL, REFLECTION_MODEL, models_dir};
pub use install::{FileState, InstallError, Installed, Pip, file_state, install};
pub use jobs::{Finish, Generation, GenerationStats};

/// The model id of the default embedded model.
pub const LOCAL: &str = "local";

/// True for the ids the embedded model answers to: `local` and `local:<anything>`.
pub fn is_local_model(id: &str) -> bool {
    id == LOCAL || id.starts_with("local:")
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum EmbeddedError {
    #[error("unknown local model {name:?}: expected one of {} or a path to a .gguf file", known.join(", "))]
    UnknownModel { name: String, known: Vec<String> },
    #[error(
        "model {name} is not installed at {} ({reason}); install it with `scripts/setup-model.sh {name}` or `gepa-lab model install {name}`",
        path.display()
    )]
    NotInstalled {
        name: String,
        path: PathBuf,
        reason: String,
    },
    #[error("model file {} does not exist", .0.display())]
    FileMissing(PathBuf),
    #[error("{}: {reason}", path.display())]
    Load { path: PathBuf, reason: String },
    #[error("{variable}={value:?}: {reason}")]
    Setting {
        variable: &'static str,
        value: String,
        reason: String,
    },
    #[error("llama.cpp: {0}")]
    Backend(String),
    /// llama.cpp was compiled for instructions this CPU lacks (see `cpu`).
    #[error("{0}")]
    UnsupportedCpu(String),
    #[error("chat template: {0}")]
    Template(String),
    #[error(
        "the prompt is {tokens} tokens; the local model's context holds {context_tokens} (set GEPA_LAB_CONTEXT_TOKENS for more)"
    )]
    PromptTooLong {
        tokens: usize,
        context_tokens: usize,
    },
    #[error("structured output: {0}")]
    Grammar(String),
    #[error("generation failed: {0}")]
    Generation(String),
    #[error("the caller went away before the answer was finished")]
    Cancelled,
    #[error("generation timed out after {} s (embedded model; counted as its share of each batched step; waiting not counted)", limit.as_secs())]
    TimedOut { limit: Duration },
    #[error("the model's thread has stopped")]
    WorkerGone,
    /// This binary was built without the `embedded` feature: no llama.cpp inside.
    #[error(
        "this gepa-lab was built without the embedded model (cargo's `embedded` feature); \
         build it with the default features (`cargo build --release`, which compiles llama.cpp: \
         cmake, a C++ compiler and libclang, installed by scripts/setup-model.sh), or use a model \
         of a server instead: --backend URL, or an OpenAI-compatible endpoint"
    )]
    NotBuilt,
}

/// Loads the model on its own thread (`worker`) and returns the queue that feeds it.
#[cfg(feature = "embedded")]
fn spawn_worker(
    path: PathBuf,
    config: jobs::WorkerConfig,
) -> Result<(mpsc::Sender<jobs::Job>, jobs::Loaded), EmbeddedError> {
    worker::spawn(path, config)
}

/// Without the `embedded` feature there is no model to load.
#[cfg(not(feature = "embedded"))]
fn spawn_worker(
    _path: PathBuf,
    _config: jobs::WorkerConfig,
) -> Result<(mpsc::Sender<jobs::Job>, jobs::Loaded), EmbeddedError> {
    Err(EmbeddedError::NotBuilt)
}

/// Which model to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelChoice {
    /// `local`: the catalog's default model.
    Default,
    /// `local:<name>` for a catalog name.
    Catalog(&'static CatalogModel),
    /// `local:<path>`: any GGUF file with a chat template; `id` is what it was called.
    File { id: String, path: PathBuf },
}

impl ModelChoice {
    /// The choice a model id names, `None` for ids that are not local. A relative file is looked
    /// for in the current folder, then in `models_dir`.
    pub fn from_model_id(id: &str, models_dir: &Path) -> Result<Option<Self>, EmbeddedError> {
        if id == LOCAL {
            return Ok(Some(ModelChoice::Default));
        }
        let Some(name) = id.strip_prefix("local:") else {
            return Ok(None);
        };
        if let Some(model) = catalog::find(name) {
            return Ok(Some(ModelChoice::Catalog(model)));
        }
        if name.ends_with(".gguf") || name.contains(std::path::MAIN_SEPARATOR) {
            let given = PathBuf::from(name);
            let path = if given.is_relative() && !given.exists() {
                models_dir.join(&given)
            } else {
                given
            };
            return Ok(Some(ModelChoice::File {
                id: id.to_owned(),
                path,
            }));
        }
        Err(EmbeddedError::UnknownModel {
            name: name.to_owned(),
            known: CATALOG.iter().map(|m| m.model_id()).collect(),
        })
    }
}

/// How models are run. `from_env` reads the environment; tests and benchmarks set fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmbeddedConfig {
    /// CPU threads for llama.cpp (`GEPA_LAB_THREADS`; default: the cores available).
    pub threads: usize,
    /// Context size in tokens (`GEPA_LAB_CONTEXT_TOKENS`; default 8192, capped at what the model
    /// was trained for): the KV cache shared by the requests decoded together. One request's
    /// prompt and answer may use all of it; a request that does not fit waits for others.
    pub context_tokens: u32,
    /// Requests decoded together (`GEPA_LAB_SLOTS`, 1 to 64; default: 8 per thread, at most 32).
    /// More slots cost no KV memory (the cache is shared) and little time per step, so they
    /// raise throughput until each step's compute, not reading the weights, is what takes time.
    pub slots: usize,
    /// Where catalog models are installed (`GEPA_LAB_MODELS`).
    pub models_dir: PathBuf,
    /// Keep the previous prompt in the KV cache and evaluate only what differs. Off only for
    /// benchmarks that time prompt evaluation.
    pub reuse_prefix: bool,
}

pub const DEFAULT_CONTEXT_TOKENS: u32 = 8192;

impl EmbeddedConfig {
    pub fn from_env() -> Result<Self, EmbeddedError> {
        let threads = match gepa_lab_env::var(gepa_lab_env::THREADS) {
            Some(value) => positive(&value).ok_or_else(|| EmbeddedError::Setting {
                variable: gepa_lab_env::THREADS,
                value: value.clone(),
                reason: "expected a whole number of threads, at least 1".into(),
            })?,
            None => default_threads(),
        };
        let context_tokens = match gepa_lab_env::var(gepa_lab_env::CONTEXT_TOKENS) {
            Some(value) => positive(&value)
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n >= 64)
                .ok_or_else(|| EmbeddedError::Setting {
                    variable: gepa_lab_env::CONTEXT_TOKENS,
                    value: value.clone(),
                    reason: "expected a whole number of tokens, at least 64".into(),
                })?,
            None => DEFAULT_CONTEXT_TOKENS,
        };
        let slots = slots(gepa_lab_env::var(gepa_lab_env::SLOTS), threads)?;
        Ok(EmbeddedConfig {
            threads,
            context_tokens,
            slots,
            models_dir: models_dir(),
            reuse_prefix: true,
        })
    }
}

fn positive(value: &str) -> Option<usize> {
    value.trim().parse::<usize>().ok().filter(|n| *n >= 1)
}

/// `GEPA_LAB_SLOTS` as set (`None`: unset), for `threads` threads.
fn slots(setting: Option<String>, threads: usize) -> Result<usize, EmbeddedError> {
    match setting {
        Some(value) => positive(&value)
            .filter(|n| *n <= jobs::MAX_SLOTS)
            .ok_or_else(|| EmbeddedError::Setting {
                variable: gepa_lab_env::SLOTS,
                reason: format!(
                    "expected a whole number of slots from 1 to {}",
                    jobs::MAX_SLOTS
                ),
                value,
            }),
        None => Ok(default_slots(threads)),
    }
}

/// 8 per thread, at most 32. Measured with `benches/batching.rs` on 2 threads (the README's
/// extraction replay): 1.07 answers/s with 4 slots, 1.46 with 8, 1.55 with 16, 1.61 with 32,
/// 1.56 with 64; one at a time, 0.85.
fn default_slots(threads: usize) -> usize {
    (8 * threads).clamp(1, 32)
}

fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Facts about a loaded model, for logs and benchmarks.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    /// Short name: the catalog name, or the file's stem.
    pub name: String,
    pub path: PathBuf,
    pub file_bytes: u64,
    pub parameters: u64,
    pub threads: usize,
    pub context_tokens: u32,
    /// Requests it decodes together.
    pub slots: usize,
    pub load_time: Duration,
    /// Whether the GGUF's own Jinja template is used (else llama.cpp's built-in version of it).
    pub jinja_template: bool,
}

/// An answer with the timings behind it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub response: ChatResponse,
    pub stats: GenerationStats,
}

/// A GGUF model loaded in this process. Cheap to share: hold it as `Arc<EmbeddedModel>` or
/// `Arc<dyn Inference>`. Requests are queued to one thread that owns the model and decodes up to
/// `slots` of them together (see `worker`).
pub struct EmbeddedModel {
    /// The ids it answers to; the first is the one it reports.
    ids: Vec<String>,
    info: ModelInfo,
    jobs: mpsc::Sender<jobs::Job>,
}

impl std::fmt::Debug for EmbeddedModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedModel")
            .field("ids", &self.ids)
            .field("info", &self.info)
            .finish()
    }
}

/// Models alive in this process, so that the engine, the replay and `serve` asking for the same
/// file share one copy of its weights.
static LOADED: Mutex<Vec<(PathBuf, Weak<EmbeddedModel>)>> = Mutex::new(Vec::new());

impl EmbeddedModel {
    /// Loads the embedded model of each local id among `ids` (others are skipped), each once.
    pub fn load_ids(ids: &[String]) -> Result<Vec<Arc<EmbeddedModel>>, EmbeddedError> {
        let dir = models_dir();
        let mut loaded: Vec<Arc<EmbeddedModel>> = Vec::new();
        for id in ids.iter().filter(|id| is_local_model(id)) {
            if loaded.iter().any(|model| model.ids().contains(id)) {
                continue;
            }
            if let Some(choice) = ModelChoice::from_model_id(id, &dir)? {
                loaded.push(EmbeddedModel::load(choice)?);
            }
        }
        Ok(loaded)
    }

    /// Loads `choice` with the settings of the environment (`EmbeddedConfig::from_env`).
    /// Blocks for the load (about a second for the default model); call it from
    /// `tokio::task::spawn_blocking` inside async code.
    pub fn load(choice: ModelChoice) -> Result<Arc<EmbeddedModel>, EmbeddedError> {
        Self::load_with(choice, EmbeddedConfig::from_env()?)
    }

    /// Loads `choice` with `config`. When this process already holds the same file for the same
    /// ids, that model is returned instead, whatever `config` says.
    pub fn load_with(
        choice: ModelChoice,
        config: EmbeddedConfig,
    ) -> Result<Arc<EmbeddedModel>, EmbeddedError> {
        // Said first: installing the model would not help a build without llama.cpp.
        if cfg!(not(feature = "embedded")) {
            return Err(EmbeddedError::NotBuilt);
        }
        let (ids, name, path) = resolve(&choice, &config.models_dir)?;
        let mut loaded = LOADED
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        loaded.retain(|(_, model)| model.strong_count() > 0);
        if let Some(model) = loaded
            .iter()
            .filter(|(p, _)| *p == path)
            .filter_map(|(_, model)| model.upgrade())
            .find(|model| model.ids == ids)
        {
            return Ok(model);
        }
        let file_bytes = std::fs::metadata(&path)
            .map_err(|_| EmbeddedError::FileMissing(path.clone()))?
            .len();
        let (jobs, facts) = spawn_worker(
            path.clone(),
            jobs::WorkerConfig {
                threads: config.threads,
                context_tokens: config.context_tokens,
                slots: config.slots,
                reuse_prefix: config.reuse_prefix,
            },
        )?;
        let model = Arc::new(EmbeddedModel {
            ids,
            info: ModelInfo {
                name,
                path: path.clone(),
                file_bytes,
                parameters: facts.parameters,
                threads: config.threads,
                context_tokens: facts.context_tokens,
                slots: facts.slots,
                load_time: facts.load_time,
                jinja_template: facts.jinja_template,
            },
            jobs,
        });
        tracing::info!(model = %model.id(), threads = config.threads, slots = facts.slots, load_ms = facts.load_time.as_millis() as u64, "embedded model loaded");
        loaded.push((path, Arc::downgrade(&model)));
        Ok(model)
    }

    /// The id it reports as `model` in answers: `local:<name>`.
    pub fn id(&self) -> &str {
        &self.ids[0]
    }

    /// Every id it answers to (`local` too, for the default model).
    pub fn ids(&self) -> &[String] {
        &self.ids
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    /// `metadata.node_id` of its answers.
    pub fn node_id(&self) -> String {
        format!("local/{}", self.info.name)
    }

    /// Like `chat`, with the token counts and timings of the answer.
    pub async fn generate(&self, request: &ChatRequest) -> Result<Answer, InferenceError> {
        let (job, receiver) = {
            let (sender, receiver) = tokio::sync::oneshot::channel();
            (self.job(request, jobs::Reply::Whole(sender))?, receiver)
        };
        self.jobs.send(job).map_err(|_| EmbeddedError::WorkerGone)?;
        // The worker enforces the request's time limit from when it starts the job; waiting
        // here for the jobs queued before it has no limit of its own.
        let generation = match receiver.await {
            Err(_) => return Err(EmbeddedError::WorkerGone.into()),
            Ok(result) => result?,
        };
        let stats = generation.stats;
        // Answer under the id asked for (`local` or `local:<name>` name the same model), as
        // OpenAI-compatible servers do, so that a reader does not mistake an alias for a fallback.
        let answered_as = if self.ids.contains(&request.model) {
            request.model.clone()
        } else {
            self.id().to_owned()
        };
        let response = ChatResponse {
            id: response_id(),
            model: answered_as,
            choices: vec![Choice {
                index: 0,
                message: AnswerMessage {
                    role: Some(Role::Assistant),
                    content: Some(generation.text),
                },
                finish_reason: Some(generation.finish.as_str().to_owned()),
            }],
            usage: Some(Usage {
                prompt_tokens: u64::from(stats.prompt_tokens),
                completion_tokens: u64::from(stats.completion_tokens),
                total_tokens: u64::from(stats.prompt_tokens) + u64::from(stats.completion_tokens),
            }),
            metadata: Some(Metadata {
                node_id: Some(self.node_id()),
            }),
            latency: Some(stats.prompt_time + stats.generation_time),
        };
        if let Some(schema) = request.json_schema()
            && let Err(errors) = validate_answer(schema, response.content())
        {
            return Err(InferenceError::SchemaMismatch {
                model: self.id().to_owned(),
                content: response.content().to_owned(),
                errors,
            });
        }
        Ok(Answer { response, stats })
    }

    /// Checks `request` and turns it into a job for the worker.
    fn job(&self, request: &ChatRequest, reply: jobs::Reply) -> Result<jobs::Job, InferenceError> {
        check_request(request)?;
        if !self.ids.contains(&request.model) {
            return Err(InferenceError::Api(ApiError::Status {
                status: StatusCode::SERVICE_UNAVAILABLE,
                retry_after: None,
                body: format!(
                    "no node is available for model {} (this embedded model serves {})",
                    request.model,
                    self.ids.join(", ")
                ),
            }));
        }
        let messages = request
            .messages
            .iter()
            .map(|m| {
                let role = match m.role {
                    Role::System => "system",
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                (role.to_owned(), m.text())
            })
            .collect();
        let grammar = request.json_schema().and_then(|schema| {
            match super::grammar::json_schema_to_gbnf(schema) {
                Ok(grammar) => Some(grammar),
                Err(err) => {
                    // Still validated afterwards; only the constraint while generating is lost.
                    tracing::warn!(%err, "JSON Schema not convertible to a grammar; generating unconstrained");
                    None
                }
            }
        });
        Ok(jobs::Job {
            messages,
            max_tokens: request.max_tokens(),
            temperature: request.temperature() as f32,
            // A request without a seed samples afresh.
            seed: request.seed.unwrap_or_else(rand::random),
            grammar,
            time_limit: request.timeout(),
            reply,
        })
    }
}

/// The ids, the short name and the file of `choice`.
fn resolve(
    choice: &ModelChoice,
    models_dir: &Path,
) -> Result<(Vec<String>, String, PathBuf), EmbeddedError> {
    let catalog_model = match choice {
        ModelChoice::Default => catalog::default_model(),
        ModelChoice::Catalog(model) => model,
        ModelChoice::File { id, path } => {
            if !path.is_file() {
                return Err(EmbeddedError::FileMissing(path.clone()));
            }
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|| id.clone());
            return Ok((vec![id.clone()], name, path.clone()));
        }
    };
    let path = catalog_model.path_in(models_dir);
    match file_state(catalog_model, models_dir) {
        FileState::Ready => {}
        FileState::Missing => {
            return Err(EmbeddedError::NotInstalled {
                name: catalog_model.name.into(),
                path,
                reason: "no file".into(),
            });
        }
        FileState::Unusable(reason) => {
            return Err(EmbeddedError::NotInstalled {
                name: catalog_model.name.into(),
                path,
                reason,
            });
        }
    }
    let mut ids = vec![catalog_model.model_id()];
    if catalog_model.name == DEFAULT_MODEL {
        ids.push(LOCAL.to_owned());
    }
    Ok((ids, catalog_model.name.to_owned(), path))
}

fn response_id() -> String {
    format!("local-{:016x}", rand::random::<u64>())
}

#[async_trait]
impl Inference for EmbeddedModel {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        Ok(self
            .ids
            .iter()
            .map(|id| Model {
                id: id.clone(),
                object: "model".into(),
                created: 0,
                owned_by: "gepa-lab-embedded".into(),
                node_count: 1,
            })
            .collect())
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        Ok(self.generate(request).await?.response)
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let job = self.job(request, jobs::Reply::Stream(sender))?;
        self.jobs.send(job).map_err(|_| EmbeddedError::WorkerGone)?;
        let id = response_id();
        let model = self.id().to_owned();
        let metadata = Some(Metadata {
            node_id: Some(self.node_id()),
        });
        let chunk = move |content: Option<String>, finish: Option<&str>| StreamChunk {
            id: Some(id.clone()),
            model: Some(model.clone()),
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta { content },
                finish_reason: finish.map(str::to_owned),
            }],
            metadata: metadata.clone(),
        };
        // Dropping the stream drops the receiver, which stops the worker at the next token.
        let stream = futures::stream::unfold(Some(receiver), move |state| {
            let chunk = chunk.clone();
            async move {
                let mut receiver = state?;
                match receiver.recv().await {
                    Some(jobs::Event::Text(text)) => {
                        Some((Ok(chunk(Some(text), None)), Some(receiver)))
                    }
                    Some(jobs::Event::Done(generation)) => {
                        Some((Ok(chunk(None, Some(generation.finish.as_str()))), None))
                    }
                    Some(jobs::Event::Failed(err)) => Some((Err(err.into()), None)),
                    None => Some((Err(EmbeddedError::WorkerGone.into()), None)),
                }
            }
        });
        Ok(Box::pin(stream))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_ids_name_the_default_a_catalog_model_or_a_file() {
        let dir = Path::new("/models");
        assert_eq!(
            ModelChoice::from_model_id("local", dir).unwrap(),
            Some(ModelChoice::Default)
        );
        assert!(matches!(
            ModelChoice::from_model_id("local:qwen2.5-coder-1.5b", dir).unwrap(),
            Some(ModelChoice::Catalog(m)) if m.name == "qwen2.5-coder-1.5b"
        ));
        assert_eq!(
            ModelChoice::from_model_id("local:mine.gguf", dir).unwrap(),
            Some(ModelChoice::File {
                id: "local:mine.gguf".into(),
                path: PathBuf::from("/models/mine.gguf")
            })
        );
        assert_eq!(ModelChoice::from_model_id("qwen3.5:9b", dir).unwrap(), None);
        let err = ModelChoice::from_model_id("local:qwen-7b", dir).unwrap_err();
        assert!(
            err.to_string().contains("local:qwen2.5-coder-0.5b"),
            "{err}"
        );
        assert!(is_local_model("local") && is_local_model("local:x") && !is_local_model("localx"));
    }

    #[test]
    fn slots_default_to_8_per_thread_and_a_setting_outside_1_to_64_is_refused() {
        assert_eq!(slots(None, 2).unwrap(), 16);
        assert_eq!(slots(None, 1).unwrap(), 8);
        assert_eq!(slots(None, 16).unwrap(), 32);
        assert_eq!(slots(Some("1".into()), 2).unwrap(), 1);
        assert_eq!(slots(Some("64".into()), 2).unwrap(), 64);
        for bad in ["0", "65", "-3", "many", "2.5"] {
            let err = slots(Some(bad.into()), 2).unwrap_err().to_string();
            assert!(
                err.contains("GEPA_LAB_SLOTS") && err.contains(bad) && err.contains("1 to 64"),
                "{err}"
            );
        }
    }

    #[test]
    fn a_missing_catalog_model_says_how_to_install_it() {
        let dir = tempfile::tempdir().unwrap();
        let config = EmbeddedConfig {
            threads: 1,
            context_tokens: 512,
            slots: 1,
            models_dir: dir.path().to_owned(),
            reuse_prefix: true,
        };
        let err = EmbeddedModel::load_with(ModelChoice::Default, config).unwrap_err();
        let text = err.to_string();
        if cfg!(feature = "embedded") {
            assert!(
                text.contains("scripts/setup-model.sh qwen2.5-coder-0.5b"),
                "{text}"
            );
        } else {
            // Installing the model would not help a build without llama.cpp.
            assert!(matches!(err, EmbeddedError::NotBuilt), "{text}");
        }
    }

    #[test]
    fn a_file_that_is_not_a_model_is_an_error_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.gguf");
        std::fs::write(&path, b"not a gguf file").unwrap();
        let config = EmbeddedConfig {
            threads: 1,
            context_tokens: 512,
            slots: 1,
            models_dir: dir.path().to_owned(),
            reuse_prefix: true,
        };
        let choice = ModelChoice::File {
            id: "local:junk.gguf".into(),
            path,
        };
        let err = EmbeddedModel::load_with(choice, config).unwrap_err();
        if cfg!(feature = "embedded") {
            assert!(matches!(err, EmbeddedError::Load { .. }), "{err}");
        } else {
            // Without llama.cpp every load says so, and how to get it.
            assert!(matches!(err, EmbeddedError::NotBuilt), "{err}");
            assert!(err.to_string().contains("cargo build --release"), "{err}");
        }
    }
}
