//! Choosing and building the services a run talks to: the public APIs, the built-in engine with
//! the embedded model, or a `gepa-lab serve` (or any deployment of both APIs) at one address.
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;

use super::keys::{self, Credential, KeyOrigin, KeySent, Service};
use crate::evolution::{EvolutionConfig, HttpEvolution};
use crate::experiment::{ModelRoles, Plan};
use crate::inference::embedded::{LOCAL, REFLECTION_MODEL, models_dir};
use crate::inference::{
    EmbeddedModel, HttpInference, Inference, InferenceConfig, ModelRef, ModelRouter, Provider,
    ProviderName,
};
use crate::local::{FileExecutions, LocalEvolution, LocalSettings, ModelSettings};
use crate::runner::{Backends, RunOptions};
use crate::score::ScorerSpec;
use crate::store::{Backend, RunManifest};

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
        keys::for_service(
            keys::from_env(INFERENCE_KEY),
            &crate::inference::base_url_from_env(),
        )?,
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
            inference_url: crate::inference::base_url_from_env(),
        },
    }
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
                 it with `gepa-lab model install {REFLECTION_MODEL}`, set \
                 GEPA_LAB_REFLECTION_MODEL, or name a provider's model in [engine] reflection_model"
            );
            LOCAL.to_owned()
        }
    }
}

/// The models a run uses, as its record names them: each execution's roles, and the declared
/// providers they name. Runs recorded before roles existed have them read from their plans.
#[derive(Debug, Clone, Default)]
pub struct RunModels {
    pub providers: BTreeMap<ProviderName, Provider>,
    pub roles: Vec<ModelRoles>,
}

impl RunModels {
    pub fn of(manifest: &RunManifest) -> Self {
        let providers = manifest.plan.providers.clone();
        let parse =
            |text: &str| ModelRef::parse(text, |name| providers.keys().any(|p| p.as_str() == name));
        let roles = manifest
            .executions
            .iter()
            .map(|execution| {
                let plan = &execution.plan;
                let mut roles = plan.models.clone();
                let engine = plan.start.engine.as_ref();
                if roles.replay.is_empty() {
                    let replay = plan.replay.iter().flat_map(|r| &r.models);
                    roles.replay = replay.map(|m| parse(m)).collect();
                }
                roles.task = roles
                    .task
                    .or_else(|| engine?.task_model.as_deref().map(parse));
                roles.reflection = roles
                    .reflection
                    .or_else(|| engine?.reflection_model.as_deref().map(parse));
                roles.judge = roles
                    .judge
                    .or_else(|| Some(parse(&plan.replay.as_ref()?.judge.as_ref()?.model)));
                roles
            })
            .collect();
        Self { providers, roles }
    }

    fn all(&self) -> impl Iterator<Item = (&'static str, &ModelRef)> {
        self.roles.iter().flat_map(ModelRoles::iter)
    }

    /// The local engine's task model: the first execution's, else its first replay model, so
    /// that the prompt is evolved on the model it is then replayed on; `local` without one.
    fn task_model(&self) -> ModelRef {
        let first = self.roles.first();
        first
            .and_then(|roles| roles.task.clone().or_else(|| roles.replay.first().cloned()))
            .unwrap_or_else(|| ModelRef::Embedded(LOCAL.to_owned()))
    }

    /// The local engine's reflection model: the first execution's, else the default.
    fn reflection_model(&self) -> ModelRef {
        let declared = |name: &str| self.providers.keys().any(|p| p.as_str() == name);
        self.roles
            .first()
            .and_then(|roles| roles.reflection.clone())
            .unwrap_or_else(|| ModelRef::parse(&reflection_model_id(), declared))
    }
}

/// Why a run on another backend than `local` cannot start: the engine runs at the service,
/// which knows nothing of the providers an execution's task or reflection model names.
pub fn provider_engine_refusal(
    choice: &BackendChoice,
    plans: &[(&PathBuf, Plan)],
) -> Option<String> {
    if matches!(choice, BackendChoice::Local) {
        return None;
    }
    plans.iter().find_map(|(file, plan)| {
        let roles = plan
            .executions
            .iter()
            .flat_map(|e| [&e.models.task, &e.models.reflection]);
        let model = roles
            .flatten()
            .find(|m| matches!(m, ModelRef::Provider { .. }))?;
        Some(format!(
            "{}: the engine's model {model} is a declared provider's, but on {} the evolution \
             runs at the service, which cannot reach it; nothing was started\n  run with \
             --backend local, or name a model the service serves",
            file.display(),
            choice_label(choice)
        ))
    })
}

/// Names the local engine's task and reflection models in every execution of `plan` that
/// leaves them to the default, so that `run.json` names the models that will answer.
pub fn fill_local_roles(plan: &mut Plan) {
    let models = RunModels {
        providers: plan.providers.clone(),
        roles: plan.executions.iter().map(|e| e.models.clone()).collect(),
    };
    let (task, reflection) = (models.task_model(), models.reflection_model());
    for execution in &mut plan.executions {
        let roles = &mut execution.models;
        roles.task.get_or_insert_with(|| task.clone());
        roles.reflection.get_or_insert_with(|| reflection.clone());
    }
}

/// Builds the backends, and says where each key went (for the tip of a refusal); the embedded
/// models the run's roles name are loaded once, here, and each declared provider gets one client
/// with its limits. A local run's engine keeps its executions in `engine_file` (the run
/// directory's `engine.jsonl`), and continues those the file shows unfinished: call this inside
/// the runtime that will run them. A local run's engine scores with `replay_scorer` (unless it
/// is the judge, which needs a model and rubric of its own) rather than with what the
/// evaluator's metric maps to: the extraction example's `exact_match` metric scored every answer
/// of the small model 0, which left the engine nothing to learn.
pub fn build(
    choice: &BackendChoice,
    models: &RunModels,
    replay_scorer: Option<&ScorerSpec>,
    rpm: Option<NonZeroU32>,
    engine_file: &Path,
) -> anyhow::Result<(Backends, Vec<KeySent>)> {
    let local_ids = models_to_load(choice, models)?;
    let providers = provider_clients(&models.providers)?;
    let built = match choice {
        BackendChoice::Local => local_backends(
            models,
            replay_scorer,
            rpm,
            &local_ids,
            providers,
            engine_file,
        )?,
        BackendChoice::Remote => public_backends(&local_ids, rpm, providers)?,
        BackendChoice::Url(url) => served_backends(url, &local_ids, rpm, providers)?,
    };
    let backends = Backends {
        evolution: built.evolution,
        inference: built.inference,
        description: describe(choice),
        shared_key: built.shared_key,
    };
    let mut keys_sent = built.keys_sent;
    keys_sent.extend(models.providers.values().map(provider_key_sent));
    Ok((backends, keys_sent))
}

/// Where a provider's key goes, and the variable it comes from (none without `key_env`).
fn provider_key_sent(provider: &Provider) -> KeySent {
    KeySent {
        service: Service::Provider(provider.name.to_string()),
        url: provider.url.clone(),
        origin: match &provider.key_env {
            Some(variable) => KeyOrigin::Env(variable.clone().into()),
            None => KeyOrigin::Missing,
        },
    }
}

/// The two halves of a backend, where each key went, and whether both take the same one.
struct Built {
    evolution: Arc<dyn crate::evolution::Evolution>,
    inference: Arc<dyn Inference>,
    keys_sent: Vec<KeySent>,
    shared_key: bool,
}

/// A client per declared provider, with its maximum of requests in flight.
type ProviderClients = Vec<(ProviderName, Arc<dyn Inference>, Option<u32>)>;

/// One client per provider, its key and secret headers read from the environment now.
fn provider_clients(
    providers: &BTreeMap<ProviderName, Provider>,
) -> anyhow::Result<ProviderClients> {
    providers
        .values()
        .map(|provider| {
            let config = provider.config(crate::env::var)?;
            let client = HttpInference::new(config)
                .with_context(|| format!("provider `{}` at {}", provider.name, provider.url))?;
            let client: Arc<dyn Inference> = Arc::new(client);
            Ok((provider.name.clone(), client, provider.max_in_flight))
        })
        .collect()
}

/// The embedded models to load: every role's that is embedded, and for a local run the engine's
/// task and reflection models. A local run refuses a model it cannot run offline or on a
/// declared provider.
fn models_to_load(choice: &BackendChoice, models: &RunModels) -> anyhow::Result<Vec<String>> {
    let mut wanted: Vec<(&'static str, ModelRef)> = models
        .all()
        .map(|(role, model)| (role, model.clone()))
        .collect();
    if matches!(choice, BackendChoice::Local) {
        wanted.push(("task", models.task_model()));
        wanted.push(("reflection", models.reflection_model()));
        if let Some((role, model)) = wanted
            .iter()
            .find(|(_, m)| matches!(m, ModelRef::Public(_)))
        {
            anyhow::bail!(
                "the {role} model {model:?} is not available offline: with --backend local every \
                 model must be `local`, `local:<name>` or `<provider>/<model>` of a provider \
                 declared in [providers.<name>]",
                model = model.to_string()
            );
        }
    }
    let mut ids: Vec<String> = Vec::new();
    for (_, model) in wanted {
        if model.is_embedded() && !ids.contains(&model.to_string()) {
            ids.push(model.to_string());
        }
    }
    Ok(ids)
}

/// The built-in engine over the embedded models (or the server `GEPA_LAB_LOCAL_UPSTREAM` names)
/// and the declared providers, continuing the unfinished evolutions `engine_file` holds.
fn local_backends(
    models: &RunModels,
    replay_scorer: Option<&ScorerSpec>,
    rpm: Option<NonZeroU32>,
    local_ids: &[String],
    providers: ProviderClients,
    engine_file: &Path,
) -> anyhow::Result<Built> {
    let mut keys_sent = Vec::new();
    let router = match crate::env::var(crate::env::LOCAL_UPSTREAM) {
        // Every embedded model id is asked of that server; no embedded model is loaded.
        Some(url) => {
            let credential = Credential {
                key: keys::from_env(crate::env::UPSTREAM_KEY),
                rpm: None,
            };
            keys_sent.push(KeySent {
                service: Service::Inference,
                url: url.clone(),
                origin: match credential.key {
                    Some(_) => KeyOrigin::Env(crate::env::UPSTREAM_KEY.into()),
                    None => KeyOrigin::Missing,
                },
            });
            eprintln!(
                "the local engine's embedded models are answered by {url} ({})",
                crate::env::LOCAL_UPSTREAM
            );
            let upstream = http_inference(&url, credential, rpm)
                .with_context(|| format!("{}={url}", crate::env::LOCAL_UPSTREAM))?;
            with_providers(
                ModelRouter::new(Vec::new(), None).with_local_upstream(upstream),
                providers,
            )
        }
        None => router(local_ids, None, providers)?,
    };
    let mut settings = ModelSettings::new(models.task_model().to_string());
    settings.reflection_model = models.reflection_model().to_string();
    let mut settings = LocalSettings::new(settings);
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
fn public_backends(
    local_ids: &[String],
    rpm: Option<NonZeroU32>,
    providers: ProviderClients,
) -> anyhow::Result<Built> {
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
        KeySent::new(
            Service::Inference,
            &crate::inference::base_url_from_env(),
            given(INFERENCE_KEY),
        ),
        KeySent::new(Service::Evolution, &evolution_url, given(EVOLUTION_KEY)),
    ];
    let evolution_config = EvolutionConfig::new(evolution_url, Some(evolution_key));
    let remote = http_inference(&crate::inference::base_url_from_env(), inference, rpm)?;
    Ok(Built {
        evolution: Arc::new(HttpEvolution::new(evolution_config)?),
        inference: router(local_ids, Some(remote), providers)?,
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
    providers: ProviderClients,
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
        inference: router(local_ids, Some(remote), providers)?,
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
    router(models, remote, Vec::new())
}

/// [`inference_backend`] with the declared providers' clients beside it.
fn router(
    models: &[String],
    remote: Option<Arc<dyn Inference>>,
    providers: ProviderClients,
) -> anyhow::Result<Arc<dyn Inference>> {
    // Each error says what to do itself (a model not installed names the install command; a
    // CPU without the build's instructions, the variables to build without them).
    let embedded = EmbeddedModel::load_ids(models).context("loading the embedded model")?;
    Ok(match remote {
        Some(remote) if embedded.is_empty() && providers.is_empty() => remote,
        remote => with_providers(ModelRouter::new(embedded, remote), providers),
    })
}

fn with_providers(router: ModelRouter, providers: ProviderClients) -> Arc<dyn Inference> {
    let router = providers
        .into_iter()
        .fold(router, |router, (name, client, in_flight)| {
            router.with_provider(name, client, in_flight)
        });
    Arc::new(router)
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
