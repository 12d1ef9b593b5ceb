//! Flags shared by the subcommands that call an inference API (`models`, `chat`, `credits`,
//! `channel`), and the one place that decides which key and rpm limit they use.
use std::num::NonZeroU32;

use anyhow::Context;

use crate::account::{AccountClient, AccountConfig};
use crate::http::Secret;
use std::sync::Arc;

use crate::inference::{DEFAULT_BASE_URL, HttpInference, Inference, InferenceConfig};

#[derive(Debug, clap::Args)]
pub struct InferenceArgs {
    /// Base URL of the inference API or any OpenAI-compatible server.
    #[arg(long = "url", env = crate::env::INFERENCE_URL, default_value = DEFAULT_BASE_URL)]
    pub base_url: String,
    /// API key, sent as a Bearer token. Prefer the environment variable: a command line is
    /// visible to other users of the machine. Without one, the key `auth wallet` stored in the
    /// config file for this URL is used.
    #[arg(long, env = crate::env::INFERENCE_KEY, hide_env_values = true, value_parser = parse_secret)]
    pub key: Option<Secret>,
    /// The key's requests-per-minute limit; requests are spaced to stay under it. Defaults to
    /// the stored rpmLimit when the key comes from the config file.
    #[arg(long, env = crate::env::INFERENCE_RPM)]
    pub rpm: Option<NonZeroU32>,
}

/// The key and pacing a client of `base_url` uses.
#[derive(Debug, Clone)]
pub struct Credentials {
    pub base_url: String,
    pub key: Option<Secret>,
    pub rpm: Option<NonZeroU32>,
}

impl InferenceArgs {
    /// The key this command sends, and where: what the tip of a refusal names.
    pub fn key_sent(&self) -> super::keys::KeySent {
        use super::keys::{KeyOrigin, KeySent, Service};
        KeySent {
            service: Service::Inference,
            url: self.base_url.clone(),
            origin: match self.key {
                Some(_) => KeyOrigin::Flag(crate::env::INFERENCE_KEY),
                None => KeyOrigin::Config,
            },
        }
    }

    /// A key given by flag or environment wins. Otherwise the config file's key for this very
    /// URL is used, with its rpmLimit for pacing; the file is not read at all when a key is
    /// given, so a broken config cannot stop a command that does not need it.
    pub fn credentials(&self) -> anyhow::Result<Credentials> {
        let found = super::keys::for_service(self.key.clone(), &self.base_url)?;
        Ok(Credentials {
            base_url: self.base_url.clone(),
            key: found.key,
            rpm: self.rpm.or(found.rpm),
        })
    }

    /// A client for the account routes, which all need a key.
    pub fn account_client(&self) -> anyhow::Result<AccountClient> {
        let credentials = self.credentials()?;
        let Some(key) = credentials.key else {
            anyhow::bail!(
                "no API key for {}: run `gepa-lab auth wallet`, or set GEPA_LAB_INFERENCE_KEY",
                credentials.base_url
            );
        };
        let mut config = AccountConfig::new(credentials.base_url, Some(key));
        config.rpm = credentials.rpm;
        AccountClient::new(config).with_context(|| format!("inference API at {}", self.base_url))
    }

    /// What answers `models`: the embedded model, in this process, for the `local` ids among
    /// them (loaded here, once), and the inference API at --url for the rest.
    pub fn backend(&self, models: &[String]) -> anyhow::Result<Arc<dyn Inference>> {
        super::backends::inference_backend(models, Some(Arc::new(self.client()?)))
    }

    pub fn client(&self) -> anyhow::Result<HttpInference> {
        let credentials = self.credentials()?;
        let mut config = InferenceConfig::new(credentials.base_url, credentials.key);
        config.rpm = credentials.rpm;
        HttpInference::new(config).with_context(|| format!("inference API at {}", self.base_url))
    }
}

pub fn parse_secret(value: &str) -> Result<Secret, String> {
    if value.trim().is_empty() {
        return Err("the key is empty".into());
    }
    Ok(Secret::new(value.trim()))
}
