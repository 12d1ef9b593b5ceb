//! Which API key a command sends to a service, decided in one place: a key given by flag or
//! environment variable wins; otherwise the key the config file holds for that very base URL
//! (stored by `auth wallet` or `auth key`), with the rpm limit stored beside it. The config file
//! is not read at all when a key is given, so a broken config cannot stop a command that does
//! not need it, and a key is never sent to a URL it was not filed under.
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

/// What to tell a user whose key a service refused (401): which key each service was sent,
/// and how to set one. Never the key itself. `inference_url` is the inference API the command
/// used, when known (else the one of the environment).
pub fn unauthorized_hint(inference_url: Option<&str>) -> String {
    let inference_url = inference_url.map_or_else(super::backends::inference_url, str::to_owned);
    let evolution_url = crate::evolution::config_from_env().base_url;
    let config = config_path().ok();
    let stored = |url: &str| {
        config
            .as_ref()
            .and_then(|path| UserConfig::load(path).ok())
            .and_then(|config| config.service(url).map(|a| a.key.is_some()))
            .unwrap_or(false)
    };
    let source = |var: &str, url: &str| {
        if from_env(var).is_some() {
            format!("the key in {var}")
        } else if stored(url) {
            format!(
                "the key stored for {url} in {}",
                config
                    .as_ref()
                    .map_or_else(String::new, |p| p.display().to_string())
            )
        } else {
            "no key".to_owned()
        }
    };
    format!(
        "the service refused the API key (401 Unauthorized or 403 Forbidden). Sent: {} to the inference API \
         ({inference_url}), {} to the evolution API ({evolution_url}); a --key flag, where \
         given, came first. Set a valid key in {} or {}, or store one with `gepa-lab auth key \
         inference|evolution` (or `gepa-lab auth wallet` for an inference key).",
        source(crate::env::INFERENCE_KEY, &inference_url),
        source(crate::env::EVOLUTION_KEY, &evolution_url),
        crate::env::INFERENCE_KEY,
        crate::env::EVOLUTION_KEY,
    )
}
