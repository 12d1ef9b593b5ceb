//! Which API key a command sends to a service, decided in one place: a key given by flag or
//! environment variable wins; otherwise the key the config file holds for that very base URL
//! (stored by `auth wallet` or `auth key`), with the rpm limit stored beside it. The config file
//! is not read at all when a key is given, so a broken config cannot stop a command that does
//! not need it, and a key is never sent to a URL it was not filed under.
use std::borrow::Cow;
use std::num::NonZeroU32;

use crate::account::{UserConfig, config_path};
use crate::http::Secret;

/// A key for one service and the requests-per-minute limit known for it.
#[derive(Debug, Clone, Default)]
pub struct Credential {
    pub key: Option<Secret>,
    pub rpm: Option<NonZeroU32>,
}

/// The key for `base_url`: `given` when there is one, else the config file's.
pub fn for_service(given: Option<Secret>, base_url: &str) -> anyhow::Result<Credential> {
    if let Some(key) = given {
        return Ok(Credential {
            key: Some(key),
            rpm: None,
        });
    }
    let config = UserConfig::load(&config_path()?)?;
    Ok(config
        .service(base_url)
        .map(|account| Credential {
            key: account.key.clone(),
            rpm: account.rpm_limit,
        })
        .unwrap_or_default())
}

/// A non-empty environment variable, as a key.
pub fn from_env(name: &str) -> Option<Secret> {
    crate::env::var(name).map(Secret::new)
}

/// A service a command sends keys to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    Inference,
    Evolution,
    /// A model provider an experiment declares, by its name.
    Provider(String),
}

impl Service {
    fn name(&self) -> String {
        match self {
            Service::Inference => "the inference API".to_owned(),
            Service::Evolution => "the evolution API".to_owned(),
            Service::Provider(name) => format!("provider `{name}`"),
        }
    }
}

/// Where the key a command sent came from; never the key itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOrigin {
    /// An environment variable (a provider's `key_env` is named by the experiment).
    Env(Cow<'static, str>),
    /// `--key`, or the environment variable clap reads in its place.
    Flag(&'static str),
    /// None was given: the key the config file holds for the URL, when it holds one.
    Config,
    /// No key at all.
    Missing,
}

/// A key a command sent to a service at a URL: what a refusal's tip names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeySent {
    pub service: Service,
    pub url: String,
    pub origin: KeyOrigin,
}

impl KeySent {
    /// The key `given` (from `var`, or the config file's for `url` when none) sent to `service`.
    pub fn new(service: Service, url: &str, given: Option<&'static str>) -> Self {
        Self {
            service,
            url: url.to_owned(),
            origin: given.map_or(KeyOrigin::Config, |var| KeyOrigin::Env(var.into())),
        }
    }
}

/// The first of `vars` that holds a key, with its name.
pub fn first_env(vars: &[&'static str]) -> Option<(Secret, &'static str)> {
    vars.iter()
        .find_map(|&var| from_env(var).map(|key| (key, var)))
}

/// Where a command that does not say sends its keys: the public services of the environment
/// (`GEPA_LAB_INFERENCE_URL`, `GEPA_LAB_EVOLUTION_URL`), each with its variable's key.
pub fn public_destinations() -> Vec<KeySent> {
    let given = |var: &'static str| from_env(var).is_some().then_some(var);
    vec![
        KeySent::new(
            Service::Inference,
            &crate::inference::base_url_from_env(),
            given(crate::env::INFERENCE_KEY),
        ),
        KeySent::new(
            Service::Evolution,
            &crate::evolution::config_from_env().base_url,
            given(crate::env::EVOLUTION_KEY),
        ),
    ]
}

/// What to tell a user whose key a service refused (401 or 403): which key went to which
/// service at which URL (`sent`), and how to set one. Never the key itself.
pub fn unauthorized_hint(sent: &[KeySent]) -> String {
    let config = config_path().ok();
    let stored = |url: &str| {
        config
            .as_ref()
            .and_then(|path| UserConfig::load(path).ok())
            .and_then(|config| config.service(url).map(|a| a.key.is_some()))
            .unwrap_or(false)
    };
    let origin = |key: &KeySent| match &key.origin {
        KeyOrigin::Env(var) => format!("the key in {var}"),
        KeyOrigin::Flag(var) if from_env(var).is_some() => format!("the key in {var}"),
        KeyOrigin::Flag(_) => "the key given with --key".to_owned(),
        KeyOrigin::Config if stored(&key.url) => format!(
            "the key stored for {} in {}",
            key.url,
            config
                .as_ref()
                .map_or_else(String::new, |p| p.display().to_string())
        ),
        KeyOrigin::Config | KeyOrigin::Missing => "no key".to_owned(),
    };
    let said: Vec<String> = sent
        .iter()
        .map(|key| format!("{} to {} ({})", origin(key), key.service.name(), key.url))
        .collect();
    let flag = sent
        .iter()
        .any(|key| matches!(key.origin, KeyOrigin::Flag(_)));
    let provider = sent
        .iter()
        .any(|key| matches!(key.service, Service::Provider(_)));
    format!(
        "the service refused the API key (401 Unauthorized or 403 Forbidden). Sent: {}{}. Set a \
         valid key in {} or {}, or store one with `gepa-lab auth key inference|evolution` (or \
         `gepa-lab auth wallet` for an inference key){}.",
        if said.is_empty() {
            "no key to any service".to_owned()
        } else {
            said.join(", ")
        },
        if flag {
            "; a --key flag, where given, came first"
        } else {
            ""
        },
        crate::env::INFERENCE_KEY,
        crate::env::EVOLUTION_KEY,
        if provider {
            "; a provider's key in the variable its `key_env` names"
        } else {
            ""
        },
    )
}
