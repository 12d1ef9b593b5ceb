//! Providers and model references: the `[providers.<name>]` tables of the experiment file and
//! of the user's config file (the file's win on a name clash), each field checked, and every
//! model reference of the file read with them ([`ModelRef::parse`]): an undeclared prefix that
//! looks like a typo of a declared name, and an unset key variable of a provider a model uses,
//! are errors at their line.
use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::path::Path;

use super::super::diagnostic::{Diagnostic, Location};
use super::super::file::{Experiment, ProviderSection};
use super::super::plan::ModelRoles;
use super::super::rules::Rule;
use super::super::source::{Loaded, config_providers};
use super::Scope;
use gepa_lab_inference::provider::{
    HeaderSource, MAX_IN_FLIGHT_RANGE, PUBLIC_PROVIDER, RPM_RANGE, TIMEOUT_SECS_RANGE,
    is_variable_name,
};
use gepa_lab_inference::{ModelRef, Provider, ProviderName};

/// Edits within which an undeclared prefix is taken for a misspelt provider name.
const TYPO_EDITS: usize = 2;

/// A declared provider: checked (`None` when a field is wrong, which was reported), and where
/// its `url` and `key_env` were written.
#[derive(Debug)]
pub(super) struct Declared {
    provider: Option<Provider>,
    url_at: Option<Location>,
    key_env_at: Option<Location>,
}

/// Every declared provider, by name.
#[derive(Debug, Default)]
pub(super) struct Providers {
    declared: BTreeMap<String, Declared>,
}

impl Providers {
    /// The config file's providers, then the experiment file's over them.
    pub(super) fn declare(
        loaded: &Loaded,
        config: Option<&Path>,
        diagnostics: &mut Vec<Diagnostic>,
    ) -> Self {
        let mut providers = Self::default();
        let file = loaded
            .resolved
            .iter()
            .find_map(|resolved| Some((resolved.experiment.as_ref()?, &resolved.spans)));
        let in_file = |name: &str| file.is_some_and(|(e, _)| e.providers.contains_key(name));
        if let Some(config) = config.and_then(|path| config_providers(path, diagnostics)) {
            // A provider the experiment declares again is the experiment's alone.
            for (name, section) in config.providers.iter().filter(|(name, _)| !in_file(name)) {
                let at = |key: &str| config.location(&format!("providers.{name}.{key}"));
                providers.add(name, section, at, diagnostics);
            }
        }
        if let Some((experiment, spans)) = file {
            for (name, section) in &experiment.providers {
                let at =
                    |key: &str| loaded.location(spans.find(&format!("providers.{name}.{key}")));
                providers.add(name, section, at, diagnostics);
            }
        }
        providers
    }

    fn add(
        &mut self,
        name: &str,
        section: &ProviderSection,
        at: impl Fn(&str) -> Option<Location>,
        diagnostics: &mut Vec<Diagnostic>,
    ) {
        let declared = Declared {
            provider: check_provider(name, section, &at, diagnostics),
            url_at: at("url"),
            key_env_at: at("key_env").or_else(|| at("url")),
        };
        self.declared.insert(name.to_owned(), declared);
    }

    fn is_declared(&self, name: &str) -> bool {
        self.declared.contains_key(name)
    }

    /// A used provider, checked, and where its `url` was written.
    pub(super) fn used(&self, name: &ProviderName) -> Option<(&Provider, Option<&Location>)> {
        let declared = self.declared.get(name.as_str())?;
        Some((declared.provider.as_ref()?, declared.url_at.as_ref()))
    }
}

/// One `[providers.<name>]` table checked field by field, every problem reported.
fn check_provider(
    name: &str,
    section: &ProviderSection,
    at: &impl Fn(&str) -> Option<Location>,
    diagnostics: &mut Vec<Diagnostic>,
) -> Option<Provider> {
    let before = diagnostics.len();
    let mut report = |key: &str, mut diagnostic: Diagnostic| {
        if diagnostic.location.is_none() {
            diagnostic.location = at(key);
        }
        diagnostics.push(diagnostic);
    };
    let provider_name = ProviderName::parse(name)
        .map_err(|why| {
            report(
                "",
                Diagnostic::error(Rule::ProviderName, format!("[providers.{name}]: {why}"))
                    .seen(format!("{name:?}")),
            );
        })
        .ok();
    let url = gepa_lab_http::server_url(&section.url)
        .map_err(|why| {
            report(
                "url",
                Diagnostic::error(
                    Rule::ProviderUrl,
                    format!("providers.{name}.url is not usable: {why}"),
                )
                .seen(section.url.trim())
                .help("the OpenAI-compatible base URL, such as https://api.openai.com/v1 or http://127.0.0.1:11434/v1"),
            );
        })
        .ok();
    if let Some(variable) = &section.key_env
        && !is_variable_name(variable)
    {
        report("key_env", key_env_not_a_name(name, at("key_env")));
    }
    let mut in_range =
        |key: &str, value: Option<i64>, range| limit(name, key, value, range, &mut report);
    let rpm = in_range("rpm", section.rpm, RPM_RANGE);
    let max_in_flight = in_range("max_in_flight", section.max_in_flight, MAX_IN_FLIGHT_RANGE);
    let timeout_secs = in_range("timeout_secs", section.timeout_secs, TIMEOUT_SECS_RANGE);
    check_headers(name, section, &mut report);
    if diagnostics.len() > before {
        return None;
    }
    Some(Provider {
        name: provider_name?,
        url: url?,
        key_env: section.key_env.clone(),
        rpm: rpm.and_then(|n| NonZeroU32::new(n as u32)),
        max_in_flight: max_in_flight.map(|n| n as u32),
        timeout_secs: timeout_secs.map(|n| n as u64),
        headers: section.headers.clone(),
    })
}

/// A `key_env` that names no variable: it may be the key itself, put where its variable's name
/// belongs, so neither it nor its line is shown.
fn key_env_not_a_name(name: &str, mut location: Option<Location>) -> Diagnostic {
    if let Some(location) = &mut location {
        location.source_line = None;
    }
    Diagnostic::error(
        Rule::ProviderKeyEnv,
        format!(
            "providers.{name}.key_env must be the name of an environment variable (letters, \
             digits and _), not a key"
        ),
    )
    .seen("(not shown: it may be a key)")
    .help("put the key in an environment variable and write its name: key_env = \"OPENAI_API_KEY\"")
    .at(location)
}

/// A limit of a provider within its range, or `None` (reported when it is out of it).
fn limit(
    name: &str,
    key: &str,
    value: Option<i64>,
    range: std::ops::RangeInclusive<i64>,
    report: &mut impl FnMut(&str, Diagnostic),
) -> Option<i64> {
    let value = value?;
    if range.contains(&value) {
        return Some(value);
    }
    report(
        key,
        Diagnostic::error(
            Rule::ProviderRange,
            format!(
                "providers.{name}.{key} must be from {} to {}; seen {value}",
                range.start(),
                range.end()
            ),
        )
        .seen(value),
    );
    None
}

/// Header names a server accepts, and `{ env = "VAR" }` values that name a variable.
fn check_headers(name: &str, section: &ProviderSection, report: &mut impl FnMut(&str, Diagnostic)) {
    for (header, value) in &section.headers {
        let key = format!("headers.{header}");
        if reqwest::header::HeaderName::from_bytes(header.as_bytes()).is_err() {
            report(
                &key,
                Diagnostic::error(
                    Rule::ProviderHeader,
                    format!("providers.{name}.headers: {header:?} is not a header name"),
                )
                .seen(format!("{header:?}")),
            );
        }
        match value {
            HeaderSource::Env { env } if !is_variable_name(env) => report(
                &key,
                Diagnostic::error(
                    Rule::ProviderKeyEnv,
                    format!(
                        "providers.{name}.headers.{header}: env must name an environment variable"
                    ),
                )
                .seen("(not shown: it may be a secret)"),
            ),
            HeaderSource::Text(text) if reqwest::header::HeaderValue::from_str(text).is_err() => {
                report(
                    &key,
                    Diagnostic::error(
                        Rule::ProviderHeader,
                        format!(
                            "providers.{name}.headers.{header}: the value is not valid in a header"
                        ),
                    ),
                );
            }
            _ => {}
        }
    }
}

/// The model of every role the file names, read with the declared providers; `None` when a
/// reference is wrong (reported at its key).
pub(super) fn model_roles(
    scope: &mut Scope<'_, '_>,
    experiment: &Experiment,
) -> Option<ModelRoles> {
    let mut ok = true;
    let mut read = |scope: &mut Scope<'_, '_>, key: String, text: &str| {
        let model = reference(scope, &key, text);
        ok &= model.is_some();
        model
    };
    let engine = experiment.engine.as_ref();
    let mut roles = ModelRoles {
        task: engine
            .and_then(|e| e.task_model.as_deref())
            .and_then(|text| read(scope, "engine.task_model".into(), text)),
        reflection: engine
            .and_then(|e| e.reflection_model.as_deref())
            .and_then(|text| read(scope, "engine.reflection_model".into(), text)),
        judge: None,
        replay: Vec::new(),
    };
    if let Some(replay) = &experiment.replay {
        roles.judge = replay
            .judge
            .as_ref()
            .and_then(|judge| read(scope, "replay.judge.model".into(), &judge.model));
        for (index, text) in replay.models.iter().enumerate() {
            if let Some(model) = read(scope, format!("replay.models.{index}"), text) {
                roles.replay.push(model);
            }
        }
    }
    ok.then_some(roles)
}

/// One model reference at `key`: a declared provider's with a model id and its variables set,
/// an embedded model, or a public id whose prefix is no misspelt provider name.
fn reference(scope: &mut Scope<'_, '_>, key: &str, text: &str) -> Option<ModelRef> {
    let providers = &scope.checker.providers;
    let model = ModelRef::parse(text, |name| providers.is_declared(name));
    let at = scope.at(key);
    match &model {
        ModelRef::Provider {
            provider,
            model: id,
        } => {
            if id.trim().is_empty() {
                scope.report(
                    key,
                    Diagnostic::error(
                        Rule::ModelProvider,
                        format!(
                            "{key} {text:?} names provider `{provider}` but no model after the /"
                        ),
                    )
                    .seen(format!("{text:?}"))
                    .help(format!(
                        "write {provider}/<model-id>, such as the ids its /v1/models lists"
                    )),
                );
                return None;
            }
            // A provider with a wrong field was reported where it is declared.
            scope.checker.providers.used(provider)?;
            variables_set(scope, provider)?;
        }
        ModelRef::Public(_) => misspelt_provider(scope, key, text)?,
        ModelRef::Embedded(_) => {}
    }
    scope
        .checker
        .references
        .push((key.to_owned(), model.clone(), at));
    Some(model)
}

/// `Some(())` unless `text` starts with an undeclared provider name within [`TYPO_EDITS`] of
/// a declared one (reported).
fn misspelt_provider(scope: &mut Scope<'_, '_>, key: &str, text: &str) -> Option<()> {
    let Some((prefix, rest)) = text.split_once('/') else {
        return Some(());
    };
    if prefix == PUBLIC_PROVIDER {
        return Some(());
    }
    let near = scope
        .checker
        .providers
        .declared
        .keys()
        .filter(|name| strsim::levenshtein(prefix, name) <= TYPO_EDITS)
        .min_by_key(|name| strsim::levenshtein(prefix, name))
        .cloned();
    // Far from every declared name: a public model id with a `/` (`meta-llama/llama-3`).
    let Some(near) = near else {
        return Some(());
    };
    let declared: Vec<&str> = scope
        .checker
        .providers
        .declared
        .keys()
        .map(String::as_str)
        .collect();
    scope.report(
        key,
        Diagnostic::error(
            Rule::ModelProvider,
            format!("{key} {text:?}: `{prefix}` is not a declared provider"),
        )
        .seen(format!("{text:?}"))
        .help(format!(
            "did you mean \"{near}/{rest}\"? declared providers: {} (write public/{text} for a public inference API model)",
            declared.join(", ")
        )),
    );
    None
}

/// `Some(())` when every variable the provider names (its key, header values) is set; each
/// unset one reported by name, at the provider's `key_env`, never with a value.
fn variables_set(scope: &mut Scope<'_, '_>, name: &ProviderName) -> Option<()> {
    let declared = scope.checker.providers.declared.get(name.as_str())?;
    let provider = declared.provider.as_ref()?;
    let at = declared.key_env_at.clone();
    let mut missing: Vec<String> = provider.key_env.iter().cloned().collect();
    missing.extend(provider.headers.values().filter_map(|value| match value {
        HeaderSource::Env { env } => Some(env.clone()),
        HeaderSource::Text(_) => None,
    }));
    missing.retain(|variable| gepa_lab_env::var(variable).is_none());
    for variable in &missing {
        let diagnostic = Diagnostic::error(
            Rule::ProviderKeyEnv,
            format!(
                "provider `{name}` needs the environment variable {variable}, which is not set"
            ),
        )
        .at(at.clone())
        .seen(variable)
        .help(format!(
            "export {variable}=... before running (its value is never written anywhere)"
        ));
        scope.report("", diagnostic);
    }
    missing.is_empty().then_some(())
}
