//! Asking each declared provider a plan uses for its models before anything is spent: one that
//! does not answer, and a model reference a provider does not list, are each one diagnostic at
//! the line that named it (`plan --check`, and `run` before it creates a run).
use std::time::Duration;

use gepa_lab_experiment::{Diagnostic, Plan, Rule};
use gepa_lab_http::RetryPolicy;
use gepa_lab_inference::{HttpInference, Inference, ModelRef, Provider, ProviderName};

/// How long a provider may take to list its models in a check.
pub const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Served models shown in a diagnostic about one it lacks.
const MODELS_SHOWN: usize = 8;

/// Every used provider of `plan` asked `GET /v1/models` at once, each within `timeout`: the
/// problems found, none when every provider answered and lists every model named of it.
pub async fn check_providers(plan: &Plan, timeout: Duration) -> Vec<Diagnostic> {
    let checks = plan
        .providers
        .iter()
        .map(|(name, provider)| check_one(plan, name, provider, timeout));
    futures::future::join_all(checks)
        .await
        .into_iter()
        .flatten()
        .collect()
}

async fn check_one(
    plan: &Plan,
    name: &ProviderName,
    provider: &Provider,
    timeout: Duration,
) -> Vec<Diagnostic> {
    let at = plan.sources.providers.get(name).cloned().flatten();
    let unreachable = |why: String| {
        vec![
            Diagnostic::error(
                Rule::ProviderUnreachable,
                format!(
                    "provider `{name}` at {} did not list its models: {why}",
                    provider.url
                ),
            )
            .at(at.clone())
            .seen(&provider.url),
        ]
    };
    let mut config = match provider.config(gepa_lab_env::var) {
        Ok(config) => config,
        Err(missing) => return unreachable(missing.to_string()),
    };
    config.timeout = Some(timeout);
    config.retry = RetryPolicy {
        max_attempts: 1,
        max_elapsed: timeout,
        ..RetryPolicy::default()
    };
    let listed = match HttpInference::new(config) {
        Ok(client) => tokio::time::timeout(timeout, client.models()).await,
        Err(err) => return unreachable(err.to_string()),
    };
    let served = match listed {
        Ok(Ok(models)) => models,
        Ok(Err(gepa_lab_inference::InferenceError::Api(err))) if err.refuses_key() => {
            return unreachable(format!("{err} ({})", key_said(provider)));
        }
        Ok(Err(err)) => return unreachable(err.to_string()),
        Err(_) => return unreachable(format!("no answer within {} s", timeout.as_secs())),
    };
    let ids: Vec<&str> = served.iter().map(|model| model.id.as_str()).collect();
    plan.sources
        .references
        .iter()
        .filter_map(|(key, model, location)| match model {
            ModelRef::Provider {
                provider,
                model: id,
            } if provider == name && !ids.contains(&id.as_str()) => {
                Some(unserved(key, model, &ids).at(location.clone()))
            }
            _ => None,
        })
        .collect()
}

/// Which key a provider refused: the variable it came from, never its value.
fn key_said(provider: &Provider) -> String {
    match &provider.key_env {
        Some(variable) => format!("it refused the key in {variable}"),
        None => "it asks for a key: name its variable in key_env".to_owned(),
    }
}

/// A reference to a model its provider does not list, with some of those it does.
fn unserved(key: &str, model: &ModelRef, ids: &[&str]) -> Diagnostic {
    let mut shown: Vec<&str> = ids.iter().take(MODELS_SHOWN).copied().collect();
    if ids.len() > MODELS_SHOWN {
        shown.push("…");
    }
    Diagnostic::error(
        Rule::ProviderModel,
        format!(
            "{key} \"{model}\": provider `{}` does not serve {:?}",
            model.provider(),
            model.model()
        ),
    )
    .seen(model.to_string())
    .help(if ids.is_empty() {
        "it lists no models".to_owned()
    } else {
        format!("it serves: {}", shown.join(", "))
    })
}
