//! Choosing and building the services a run talks to: the public APIs, the built-in engine with
//! the embedded model, or a `gepa-lab serve` (or any deployment of both APIs) at one address.
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;

use crate::evolution::{
    EvolutionConfig, HttpEvolution, LocalEvolution, LocalSettings, ModelSettings,
};
use crate::http::Secret;
use crate::inference::embedded::{LOCAL, REFLECTION_MODEL, models_dir};
use crate::inference::{
    EmbeddedModel, HttpInference, Inference, InferenceConfig, ModelRouter, is_local_model,
};
use crate::runner::{Backends, RunOptions};
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
                Ok(Self::Url(url.trim_end_matches('/').to_owned()))
            }
            other => Err(format!(
                "expected remote, local or an http(s) URL; seen {other:?}"
            )),
        }
    }
}

fn env_secret(name: &str) -> Option<Secret> {
    std::env::var(name)
        .ok()
        .filter(|value| !value.trim().is_empty())
        .map(|value| Secret::new(value.trim()))
}

/// The backend to use: the one asked for, else `remote` when both service keys are set, else
/// `local`. The note says why, for the terminal.
pub fn resolve(asked: Option<BackendChoice>) -> (BackendChoice, Option<String>) {
    if let Some(choice) = asked {
        return (choice, None);
    }
    let evolution = env_secret("GEPA_LAB_EVOLUTION_KEY").is_some();
    let inference = env_secret("GEPA_LAB_INFERENCE_KEY").is_some();
    if evolution && inference {
        (BackendChoice::Remote, Some("GEPA_LAB_EVOLUTION_KEY and GEPA_LAB_INFERENCE_KEY are set: using the public services".into()))
    } else {
        (
            BackendChoice::Local,
            Some("no service keys set (GEPA_LAB_EVOLUTION_KEY, GEPA_LAB_INFERENCE_KEY): running locally with the built-in GEPA engine and the embedded model".into()),
        )
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
            evolution_url: EvolutionConfig::from_env().base_url,
            inference_url: inference_url(),
        },
    }
}

fn inference_url() -> String {
    std::env::var("GEPA_LAB_INFERENCE_URL")
        .ok()
        .filter(|url| !url.trim().is_empty())
        .unwrap_or_else(|| crate::inference::DEFAULT_BASE_URL.to_owned())
}

/// The reflection model of a local run: `GEPA_LAB_REFLECTION_MODEL`, else the catalog's
/// reflection model when it is installed (the default model tends to echo the prompt it should
/// improve), else the default model.
fn reflection_model_id() -> String {
    if let Ok(id) = std::env::var("GEPA_LAB_REFLECTION_MODEL")
        && !id.trim().is_empty()
    {
        return id.trim().to_owned();
    }
    let suggested = crate::inference::embedded::CATALOG
        .iter()
        .find(|model| model.name == REFLECTION_MODEL);
    match suggested {
        Some(model) if model.path_in(&models_dir()).is_file() => model.model_id(),
        _ => LOCAL.to_owned(),
    }
}

/// Builds the backends; the embedded models named by `replay_models` (and, for a local run, the
/// task and reflection models) are loaded once, here.
pub fn build(choice: &BackendChoice, replay_models: &[String]) -> anyhow::Result<Backends> {
    let mut local_ids: Vec<String> = replay_models
        .iter()
        .filter(|m| is_local_model(m))
        .cloned()
        .collect();
    let reflection = reflection_model_id();
    if matches!(choice, BackendChoice::Local) {
        if let Some(model) = replay_models.iter().find(|m| !is_local_model(m)) {
            anyhow::bail!(
                "replay model {model:?} is not available offline: with --backend local every replay model must be `local` or `local:<name>`"
            );
        }
        local_ids.extend([LOCAL.to_owned(), reflection.clone()]);
    }
    let embedded = EmbeddedModel::load_ids(&local_ids).context(
        "loading the embedded model (install it with scripts/setup-model.sh or `gepa-lab model install`)",
    )?;
    match choice {
        BackendChoice::Local => {
            let router: Arc<dyn Inference> = Arc::new(ModelRouter::new(embedded, None));
            let mut models = ModelSettings::new(LOCAL);
            models.reflection_model = reflection;
            let evolution = LocalEvolution::new(
                router.clone(),
                router.clone(),
                LocalSettings::new(models),
                None,
            );
            Ok(Backends {
                evolution: Arc::new(evolution),
                inference: router,
                description: describe(choice),
            })
        }
        BackendChoice::Remote => {
            let evolution = EvolutionConfig::from_env();
            let key = env_secret("GEPA_LAB_INFERENCE_KEY");
            anyhow::ensure!(
                evolution.key.is_some(),
                "GEPA_LAB_EVOLUTION_KEY is not set; the remote backend needs it"
            );
            anyhow::ensure!(
                key.is_some(),
                "GEPA_LAB_INFERENCE_KEY is not set; the remote backend needs it"
            );
            Ok(Backends {
                evolution: Arc::new(HttpEvolution::new(evolution)?),
                inference: Arc::new(ModelRouter::new(
                    embedded,
                    Some(http_inference(&inference_url(), key)?),
                )),
                description: describe(choice),
            })
        }
        BackendChoice::Url(url) => {
            // One server speaks both APIs; its keys work for both halves.
            let key = env_secret("GEPA_LAB_INFERENCE_KEY")
                .or_else(|| env_secret("GEPA_LAB_EVOLUTION_KEY"));
            let evolution_key = env_secret("GEPA_LAB_EVOLUTION_KEY").or_else(|| key.clone());
            Ok(Backends {
                evolution: Arc::new(HttpEvolution::new(EvolutionConfig::new(
                    url.clone(),
                    evolution_key,
                ))?),
                inference: Arc::new(ModelRouter::new(embedded, Some(http_inference(url, key)?))),
                description: describe(choice),
            })
        }
    }
}

fn http_inference(url: &str, key: Option<Secret>) -> anyhow::Result<Arc<dyn Inference>> {
    let mut config = InferenceConfig::new(url.to_owned(), key);
    config.rpm = std::env::var("GEPA_LAB_INFERENCE_RPM")
        .ok()
        .and_then(|rpm| rpm.trim().parse().ok());
    Ok(Arc::new(
        HttpInference::new(config).with_context(|| format!("inference API at {url}"))?,
    ))
}
