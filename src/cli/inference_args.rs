//! Flags shared by the subcommands that call an inference API (`models`, `chat`).
use std::num::NonZeroU32;

use anyhow::Context;

use crate::http::Secret;
use crate::inference::{DEFAULT_BASE_URL, HttpInference, InferenceConfig};

#[derive(Debug, clap::Args)]
pub struct InferenceArgs {
    /// Base URL of the inference API or any OpenAI-compatible server.
    #[arg(long = "url", env = "GEPA_LAB_INFERENCE_URL", default_value = DEFAULT_BASE_URL)]
    pub base_url: String,
    /// API key, sent as a Bearer token. Prefer the environment variable: a command line is
    /// visible to other users of the machine.
    #[arg(long, env = "GEPA_LAB_INFERENCE_KEY", hide_env_values = true, value_parser = parse_secret)]
    pub key: Option<Secret>,
    /// The key's requests-per-minute limit; requests are spaced to stay under it.
    #[arg(long, env = "GEPA_LAB_INFERENCE_RPM")]
    pub rpm: Option<NonZeroU32>,
}

impl InferenceArgs {
    pub fn client(&self) -> anyhow::Result<HttpInference> {
        let mut config = InferenceConfig::new(self.base_url.clone(), self.key.clone());
        config.rpm = self.rpm;
        HttpInference::new(config).with_context(|| format!("inference API at {}", self.base_url))
    }
}

pub fn parse_secret(value: &str) -> Result<Secret, String> {
    if value.trim().is_empty() {
        return Err("the key is empty".into());
    }
    Ok(Secret::new(value.trim()))
}
