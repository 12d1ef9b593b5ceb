//! Choosing and building the services a run talks to: the public APIs, the built-in engine with
//! the embedded model, or a `gepa-lab serve` (or any deployment of both APIs) at one address.
use std::num::NonZeroU32;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;

use super::keys::{self, Credential, KeyOrigin, KeySent, Service};
use crate::evolution::{EvolutionConfig, HttpEvolution};
use crate::inference::embedded::{LOCAL, REFLECTION_MODEL, models_dir};
use crate::inference::{
    EmbeddedModel, HttpInference, Inference, InferenceConfig, ModelRouter, is_local_model,
};
use crate::local::{FileExecutions, LocalEvolution, LocalSettings, ModelSettings};
use crate::runner::{Backends, RunOptions};
use crate::score::ScorerSpec;
use crate::store::Backend;

/// `--backend`: `remote`, `local`, or the URL of a server that speaks both APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendChoice {
    Remote,
    Local,
    Url(String),
}

impl FromStr for BackendChoice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "remote" => Ok(Self::Remote),
            "local" => Ok(Self::Local),
            url if url.starts_with("http://") || url.starts_with("https://") => {
                // Checked here, before anything is created: a URL the clients cannot use would
                // otherwise fail after the run directory exists, leaving it to block the next run.
                crate::http::server_url(url).map(Self::Url)
            }
            other => Err(format!(
                "expected remote, local or an http(s) URL; seen {other:?}"
            )),
        }
    }
}

use crate::env::{EVOLUTION_KEY, INFERENCE_KEY};

/// The keys of the public services: from their environment variables, else from the config file
/// (filed under the services' URLs by `auth key` and `auth wallet`).
fn public_keys() -> anyhow::Result<(Credential, Credential)> {
    Ok((
        keys::for_service(
            keys::from_env(EVOLUTION_KEY),
            &crate::evolution::config_from_env().base_url,
        )?,
        keys::for_service(keys::from_env(INFERENCE_KEY), &inference_url())?,
    ))
}

/// The backend to use: the one asked for, else `remote` when keys for both public services are
/// at hand, else `local`. The note says why, for the terminal.
pub fn resolve(asked: Option<BackendChoice>) -> anyhow::Result<(BackendChoice, Option<String>)> {
    if let Some(choice) = asked {
        return Ok((choice, None));
    }
    let (evolution, inference) = public_keys()?;
    Ok(if evolution.key.is_some() && inference.key.is_some() {
        (
            BackendChoice::Remote,
            Some("keys for both public services found (environment or config file): using the public services".into()),
        )
    } else {
        (
            BackendChoice::Local,
            Some(format!(
                "no keys for both public services ({EVOLUTION_KEY} and {INFERENCE_KEY}, or `gepa-lab auth key`): running locally with the built-in GEPA engine and the embedded model"
            )),
        )
    })
}

/// The backend a run directory records, as a choice to resume it on.
pub fn recorded(backend: &Backend) -> BackendChoice {
    match backend {
        Backend::Local => BackendChoice::Local,
        Backend::Url { url } => BackendChoice::Url(url.clone()),
        Backend::Remote { .. } => BackendChoice::Remote,
    }
}

/// A choice in words: `local`, `remote`, or the URL.
pub fn choice_label(choice: &BackendChoice) -> String {
    match choice {
        BackendChoice::Local => "local".into(),
        BackendChoice::Remote => "remote".into(),
        BackendChoice::Url(url) => url.clone(),
    }
}

/// Whether running on this backend can cost money, and so asks for confirmation.
pub fn costs_money(choice: &BackendChoice) -> bool {
    !matches!(choice, BackendChoice::Local)
}

pub fn options(choice: &BackendChoice) -> RunOptions {
    match choice {
        BackendChoice::Remote => RunOptions::remote(),
        BackendChoice::Local | BackendChoice::Url(_) => RunOptions::local(),
    }
}

/// How `run.json` names the backend: where the services are, never a key.
pub fn describe(choice: &BackendChoice) -> Backend {
    match choice {
        BackendChoice::Local => Backend::Local,
        BackendChoice::Url(url) => Backend::Url { url: url.clone() },
        BackendChoice::Remote => Backend::Remote {
            evolution_url: crate::evolution::config_from_env().base_url,
            inference_url: inference_url(),
        },
    }
}

/// The public inference API's URL: `GEPA_LAB_INFERENCE_URL`, else the default.
pub fn inference_url() -> String {
    crate::env::var(crate::env::INFERENCE_URL)
        .unwrap_or_else(|| crate::inference::DEFAULT_BASE_URL.to_owned())
}

/// The reflection model of a local run: `GEPA_LAB_REFLECTION_MODEL`, else the catalog's
/// reflection model when it is installed (the default model tends to echo the prompt it should
/// improve), else the default model, said on the terminal: a run that reflects with the small
/// model rarely finds anything, and the user should know why.
fn reflection_model_id() -> String {
    if let Some(id) = crate::env::var(crate::env::REFLECTION_MODEL) {
        return id;
    }
    let suggested = crate::inference::embedded::CATALOG
        .iter()
        .find(|model| model.name == REFLECTION_MODEL);
    match suggested {
        Some(model) if model.path_in(&models_dir()).is_file() => model.model_id(),
        _ => {
            eprintln!(
                "warning: the reflection model {REFLECTION_MODEL} is not installed, so the default \
                 model ({LOCAL}) proposes the new prompts, and rarely writes a usable one; install \
                 it with `gepa-lab model install {REFLECTION_MODEL}` (or set \
                 GEPA_LAB_REFLECTION_MODEL)"
            );
            LOCAL.to_owned()
        }
    }
}

/// The task model of a local evolution: the first replay model, so that the prompt is evolved
/// on the model it is then replayed on (and will be used with); `local` without one.
fn local_task_model(replay_models: &[String]) -> String {
    replay_models
        .first()
        .cloned()
        .unwrap_or_else(|| LOCAL.to_owned())
}

/// Builds the backends, and says where each key went (for the tip of a refusal); the embedded
/// models named by `replay_models` (and, for a local run, the
/// task and reflection models) are loaded once, here. A local run's engine keeps its executions
/// in `engine_file` (the run directory's `engine.jsonl`), and continues those the file shows
/// unfinished: call this inside the runtime that will run them. A local run's engine scores with
/// `replay_scorer` (unless it is the judge, which needs a model and rubric of its own) rather
/// than with what the evaluator's metric maps to: the extraction example's `exact_match`
/// metric scored every answer of the small model 0, which left the engine nothing to learn.
pub fn build(
    choice: &BackendChoice,
    replay_models: &[String],
    replay_scorer: Option<&ScorerSpec>,
    rpm: Option<NonZeroU32>,
    engine_models: &[String],
    engine_file: &Path,
) -> anyhow::Result<(Backends, Vec<KeySent>)> {
    let (local_ids, reflection) = models_to_load(choice, replay_models, engine_models)?;
    let built = match choice {
        BackendChoice::Local => local_backends(
            replay_models,
            replay_scorer,
            rpm,
            &local_ids,
            reflection,
            engine_file,
        )?,
        BackendChoice::Remote => public_backends(&local_ids, rpm)?,
        BackendChoice::Url(url) => served_backends(url, &local_ids, rpm)?,
    };
    let backends = Backends {
        evolution: built.evolution,
        inference: built.inference,
        description: describe(choice),
        shared_key: built.shared_key,
    };
    Ok((backends, built.keys_sent))
}

/// The two halves of a backend, where each key went, and whether both take the same one.
struct Built {
    evolution: Arc<dyn crate::evolution::Evolution>,
    inference: Arc<dyn Inference>,
    keys_sent: Vec<KeySent>,
    shared_key: bool,
}

/// The embedded models to load (the replay's; for a local run also the task, reflection and
/// `[engine]` models), and the reflection model's id (empty unless local). A local run refuses
/// a model it cannot run offline.
fn models_to_load(
    choice: &BackendChoice,
    replay_models: &[String],
    engine_models: &[String],
) -> anyhow::Result<(Vec<String>, String)> {
    let mut local_ids: Vec<String> = replay_models
        .iter()
        .filter(|m| is_local_model(m))
        .cloned()
        .collect();
    // Only a local run reflects with an embedded model (and says when the suggested one is
    // missing).
    let reflection = if matches!(choice, BackendChoice::Local) {
        reflection_model_id()
    } else {
        String::new()
    };
    if matches!(choice, BackendChoice::Local) {
        // A reflection model an experiment's [engine] names is loaded with the rest.
        for model in engine_models {
            if !is_local_model(model) {
                anyhow::bail!(
                    "engine.reflection_model {model:?} is not available offline: with --backend local it must be `local` or `local:<name>`"
                );
            }
            local_ids.push(model.clone());
        }
        if let Some(model) = replay_models.iter().find(|m| !is_local_model(m)) {
            anyhow::bail!(
                "replay model {model:?} is not available offline: with --backend local every replay model must be `local` or `local:<name>`"
            );
        }
        local_ids.extend([local_task_model(replay_models), reflection.clone()]);
    }
    Ok((local_ids, reflection))
}

/// The built-in engine and the embedded models (or the server `GEPA_LAB_LOCAL_UPSTREAM` names),
/// continuing the unfinished evolutions `engine_file` holds.
fn local_backends(
    replay_models: &[String],
    replay_scorer: Option<&ScorerSpec>,
    rpm: Option<NonZeroU32>,
    local_ids: &[String],
    reflection: String,
    engine_file: &Path,
) -> anyhow::Result<Built> {
    let mut keys_sent = Vec::new();
    let router = match crate::env::var(crate::env::LOCAL_UPSTREAM) {
        // Every model id is asked of that server; no embedded model is loaded.
        Some(url) => {
            let credential = Credential {
                key: keys::from_env(crate::env::UPSTREAM_KEY),
                rpm: None,
            };
            keys_sent.push(KeySent {
                service: Service::Inference,
                url: url.clone(),
                origin: match credential.key {
                    Some(_) => KeyOrigin::Env(crate::env::UPSTREAM_KEY),
                    None => KeyOrigin::Missing,
                },
            });
            eprintln!(
                "the local engine's models are answered by {url} ({})",
                crate::env::LOCAL_UPSTREAM
            );
            http_inference(&url, credential, rpm)
                .with_context(|| format!("{}={url}", crate::env::LOCAL_UPSTREAM))?
        }
        None => inference_backend(local_ids, None)?,
    };
    let mut models = ModelSettings::new(local_task_model(replay_models));
    models.reflection_model = reflection;
    let mut settings = LocalSettings::new(models);
    settings.scorer = replay_scorer
        .filter(|scorer| !matches!(scorer, ScorerSpec::Judge))
        .cloned();
    let kept = FileExecutions::load(engine_file)?;
    let store = FileExecutions::open(engine_file)
        .with_context(|| format!("opening {}", engine_file.display()))?;
    let evolution = LocalEvolution::new(
        router.clone(),
        router.clone(),
        settings,
        Some(Arc::new(store)),
    );
    let restored = evolution.restore(kept);
    if !restored.continued.is_empty() {
        eprintln!(
            "continuing {} evolution(s) of the local engine from their checkpoint in {}",
            restored.continued.len(),
            engine_file.display()
        );
    }
    Ok(Built {
        evolution: Arc::new(evolution),
        inference: router,
        keys_sent,
        shared_key: false,
    })
}

/// The public services, with the keys from the environment or the config file.
fn public_backends(local_ids: &[String], rpm: Option<NonZeroU32>) -> anyhow::Result<Built> {
    let (evolution, inference) = public_keys()?;
    let Some(evolution_key) = evolution.key else {
        anyhow::bail!(
            "no key for the evolution API: set {EVOLUTION_KEY}, or store one with `gepa-lab auth key evolution`"
        );
    };
    anyhow::ensure!(
        inference.key.is_some(),
        "no key for the inference API: set {INFERENCE_KEY}, or run `gepa-lab auth wallet` or `gepa-lab auth key inference`"
    );
    let evolution_url = crate::evolution::config_from_env().base_url;
    let given = |var: &'static str| keys::from_env(var).is_some().then_some(var);
    let keys_sent = vec![
        KeySent::new(Service::Inference, &inference_url(), given(INFERENCE_KEY)),
        KeySent::new(Service::Evolution, &evolution_url, given(EVOLUTION_KEY)),
    ];
    let evolution_config = EvolutionConfig::new(evolution_url, Some(evolution_key));
    let remote = http_inference(&inference_url(), inference, rpm)?;
    Ok(Built {
        evolution: Arc::new(HttpEvolution::new(evolution_config)?),
        inference: inference_backend(local_ids, Some(remote))?,
        keys_sent,
        // Two services, each with its own key.
        shared_key: false,
    })
}

/// A `gepa-lab serve` at `url`, which speaks both APIs; its keys work for both halves.
fn served_backends(
    url: &str,
    local_ids: &[String],
    rpm: Option<NonZeroU32>,
) -> anyhow::Result<Built> {
    let given = keys::first_env(&[INFERENCE_KEY, EVOLUTION_KEY]);
    let inference_sent = KeySent::new(Service::Inference, url, given.as_ref().map(|g| g.1));
    let inference = keys::for_service(given.map(|g| g.0), url)?;
    let evolution_sent = match keys::from_env(EVOLUTION_KEY) {
        Some(_) => KeySent::new(Service::Evolution, url, Some(EVOLUTION_KEY)),
        None => KeySent {
            service: Service::Evolution,
            ..inference_sent.clone()
        },
    };
    let evolution_key = keys::from_env(EVOLUTION_KEY).or_else(|| inference.key.clone());
    let shared_key = evolution_key == inference.key;
    let remote = http_inference(url, inference, rpm)?;
    Ok(Built {
        evolution: Arc::new(HttpEvolution::new(EvolutionConfig::new(
            url.to_owned(),
            evolution_key,
        ))?),
        inference: inference_backend(local_ids, Some(remote))?,
        keys_sent: vec![inference_sent, evolution_sent],
        shared_key,
    })
}

/// The one way an inference backend is put together: the embedded models named among
/// `models` (`local`, `local:<name>`), loaded here, once, and `remote` for every other model.
pub fn inference_backend(
    models: &[String],
    remote: Option<Arc<dyn Inference>>,
) -> anyhow::Result<Arc<dyn Inference>> {
    // Each error says what to do itself (a model not installed names the install command; a
    // CPU without the build's instructions, the variables to build without them).
    let embedded = EmbeddedModel::load_ids(models).context("loading the embedded model")?;
    Ok(match remote {
        Some(remote) if embedded.is_empty() => remote,
        remote => Arc::new(ModelRouter::new(embedded, remote)),
    })
}

/// An inference client for `url`, paced to `rpm` (`run --rpm`) or else the stored limit; with
/// neither, it adapts to 429 answers.
fn http_inference(
    url: &str,
    credential: Credential,
    rpm: Option<NonZeroU32>,
) -> anyhow::Result<Arc<dyn Inference>> {
    let mut config = InferenceConfig::new(url.to_owned(), credential.key);
    config.rpm = rpm.or(credential.rpm);
    Ok(Arc::new(
        HttpInference::new(config).with_context(|| format!("inference API at {url}"))?,
    ))
}
