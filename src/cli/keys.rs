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
