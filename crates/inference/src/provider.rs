//! Named model providers and model references: which server answers a model id.
//!
//! A provider is an OpenAI-compatible endpoint a user declares by name (`[providers.ollama]`):
//! its base URL, the name of the environment variable holding its key (never the key), and its
//! limits. A model reference is the string a file names a model with. [`ModelRef::parse`] is the
//! one place that reads it: `<provider>/<model-id>` when `<provider>` is declared, `local` and
//! `local:<name>` for the embedded models, `public/<model-id>` or any other id for the public
//! inference API, exactly as before providers existed.
//!
//! Not here: where providers are declared and checked (`experiment`), and building the clients
//! (`cli::backends`, through [`Provider::config`]).
use std::collections::BTreeMap;
use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::client::InferenceConfig;
use super::embedded::is_local_model;
use gepa_lab_http::Secret;

/// The provider name of the embedded models.
pub const EMBEDDED_PROVIDER: &str = "local";
/// The provider name of the public inference API.
pub const PUBLIC_PROVIDER: &str = "public";
/// Longest provider name.
pub const MAX_PROVIDER_NAME_LEN: usize = 32;
/// Ranges of a provider's limits.
pub const RPM_RANGE: std::ops::RangeInclusive<i64> = 1..=100_000;
pub const MAX_IN_FLIGHT_RANGE: std::ops::RangeInclusive<i64> = 1..=1024;
pub const TIMEOUT_SECS_RANGE: std::ops::RangeInclusive<i64> = 1..=3600;

/// A declared provider's name: `[a-z0-9_-]`, 1 to 32 characters, neither `local` nor `public`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ProviderName(String);

impl ProviderName {
    /// The name, or why it cannot be one.
    pub fn parse(text: &str) -> Result<Self, String> {
        let length = text.chars().count();
        if !(1..=MAX_PROVIDER_NAME_LEN).contains(&length)
            || !text
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
        {
            return Err(format!(
                "a provider name uses only a-z, 0-9, `_` and `-`, 1 to {MAX_PROVIDER_NAME_LEN} \
                 characters"
            ));
        }
        if [EMBEDDED_PROVIDER, PUBLIC_PROVIDER].contains(&text) {
            return Err(format!(
                "`{text}` is reserved: `local` names the embedded models and `public` the public \
                 inference API"
            ));
        }
        Ok(Self(text.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ProviderName {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<ProviderName> for String {
    fn from(name: ProviderName) -> Self {
        name.0
    }
}

impl fmt::Display for ProviderName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which server answers a model, and the id that server knows it by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ModelRef {
    /// `local` or `local:<name>`: an embedded model, in this process.
    Embedded(String),
    /// `<provider>/<model>` of a declared provider; `model` is what the provider is sent.
    Provider {
        provider: ProviderName,
        model: String,
    },
    /// Any other id (or `public/<id>`): the public inference API, or the server `--backend`
    /// names.
    Public(String),
}

impl ModelRef {
    /// Reads a reference; `declared` says whether a provider of that name exists. The provider
    /// prefix ends at the first `/`, so the model id may hold more (`openrouter/openai/gpt-4.1`).
    pub fn parse(text: &str, declared: impl Fn(&str) -> bool) -> Self {
        if is_local_model(text) {
            return Self::Embedded(text.to_owned());
        }
        if let Some((prefix, model)) = text.split_once('/') {
            if prefix == PUBLIC_PROVIDER && !model.is_empty() {
                return Self::Public(model.to_owned());
            }
            if declared(prefix)
                && let Ok(provider) = ProviderName::parse(prefix)
            {
                return Self::Provider {
                    provider,
                    model: model.to_owned(),
                };
            }
        }
        Self::Public(text.to_owned())
    }

    /// The provider's name: `local`, `public` or a declared one.
    pub fn provider(&self) -> &str {
        match self {
            Self::Embedded(_) => EMBEDDED_PROVIDER,
            Self::Provider { provider, .. } => provider.as_str(),
            Self::Public(_) => PUBLIC_PROVIDER,
        }
    }

    /// The id its server knows the model by.
    pub fn model(&self) -> &str {
        match self {
            Self::Embedded(model) | Self::Public(model) | Self::Provider { model, .. } => model,
        }
    }

    pub fn is_embedded(&self) -> bool {
        matches!(self, Self::Embedded(_))
    }
}

/// The reference as a file writes it (a public id without `public/`).
impl fmt::Display for ModelRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded(model) | Self::Public(model) => f.write_str(model),
            Self::Provider { provider, model } => write!(f, "{provider}/{model}"),
        }
    }
}

/// `{"provider": "ollama", "model": "qwen3:8b"}`: a run record names both, whatever the
/// provider, so that it reads the same without the experiment's list of providers.
#[derive(Serialize, Deserialize)]
struct ModelRefFields {
    provider: String,
    model: String,
}

impl Serialize for ModelRef {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        ModelRefFields {
            provider: self.provider().to_owned(),
            model: self.model().to_owned(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for ModelRef {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let fields = ModelRefFields::deserialize(deserializer)?;
        Ok(match fields.provider.as_str() {
            EMBEDDED_PROVIDER => Self::Embedded(fields.model),
            PUBLIC_PROVIDER => Self::Public(fields.model),
            name => Self::Provider {
                provider: ProviderName::parse(name).map_err(serde::de::Error::custom)?,
                model: fields.model,
            },
        })
    }
}

/// An extra header's value: written out, or the name of the environment variable holding it
/// (`{ env = "VAR" }`), for a value that is a secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum HeaderSource {
    Text(String),
    Env { env: String },
}

/// A declared provider, checked: everything needed to build its client except the key, which
/// is read from `key_env` when the client is built. It is kept in `run.json` (so a resume
/// builds the same client) and holds no secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Provider {
    pub name: ProviderName,
    /// The OpenAI-compatible base URL as written (without a trailing slash).
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_env: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<NonZeroU32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, HeaderSource>,
}

/// Why a provider's client cannot be built: a variable it names is unset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("provider `{provider}`: the environment variable {variable} ({what}) is not set")]
pub struct MissingVariable {
    pub provider: String,
    pub variable: String,
    pub what: String,
}

impl Provider {
    /// The base URL `HttpInference` appends `/v1/...` to: the URL without a final `/v1`, so
    /// that both the form providers document (`http://host:11434/v1`) and a server's root work.
    pub fn api_root(&self) -> &str {
        let url = self.url.trim_end_matches('/');
        url.strip_suffix("/v1").unwrap_or(url)
    }

    /// The client configuration, the key and secret headers read from the environment through
    /// `env` (a function, so tests need not set variables).
    pub fn config(
        &self,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<InferenceConfig, MissingVariable> {
        let missing = |variable: &str, what: String| MissingVariable {
            provider: self.name.to_string(),
            variable: variable.to_owned(),
            what,
        };
        let key = match &self.key_env {
            Some(variable) => Some(Secret::new(
                env(variable).ok_or_else(|| missing(variable, "its key".into()))?,
            )),
            None => None,
        };
        let mut config = InferenceConfig::new(self.api_root().to_owned(), key);
        config.rpm = self.rpm;
        config.timeout = self.timeout_secs.map(Duration::from_secs);
        for (name, source) in &self.headers {
            let value = match source {
                HeaderSource::Text(text) => text.clone(),
                HeaderSource::Env { env: variable } => {
                    env(variable).ok_or_else(|| missing(variable, format!("header {name}")))?
                }
            };
            config.headers.push((name.clone(), Secret::new(value)));
        }
        Ok(config)
    }
}

/// Whether `text` can name an environment variable: ASCII letters, digits and `_`, not starting
/// with a digit.
pub fn is_variable_name(text: &str) -> bool {
    !text.is_empty()
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn declared(name: &str) -> bool {
        ["ollama", "openrouter"].contains(&name)
    }

    #[test]
    fn a_reference_names_a_declared_provider_the_embedded_models_or_the_public_api() {
        let parse = |text: &str| ModelRef::parse(text, declared);
        assert_eq!(
            parse("ollama/qwen3:8b"),
            ModelRef::Provider {
                provider: ProviderName::parse("ollama").unwrap(),
                model: "qwen3:8b".into()
            }
        );
        let routed = parse("openrouter/openai/gpt-4.1-mini");
        assert_eq!(
            (routed.provider(), routed.model()),
            ("openrouter", "openai/gpt-4.1-mini")
        );
        assert_eq!(routed.to_string(), "openrouter/openai/gpt-4.1-mini");
        assert_eq!(parse("local"), ModelRef::Embedded("local".into()));
        assert_eq!(parse("local:qwen"), ModelRef::Embedded("local:qwen".into()));
        // Undeclared prefixes stay public ids, exactly as written before providers existed.
        assert_eq!(
            parse("meta/llama-3"),
            ModelRef::Public("meta/llama-3".into())
        );
        assert_eq!(parse("gpt-4o-mini"), ModelRef::Public("gpt-4o-mini".into()));
        assert_eq!(parse("public/gpt-4o"), ModelRef::Public("gpt-4o".into()));
        // A declared name with nothing after the slash is no reference to it.
        assert_eq!(parse("ollama"), ModelRef::Public("ollama".into()));
    }

    #[test]
    fn provider_names_are_short_plain_and_not_reserved() {
        assert!(ProviderName::parse("open-router_2").is_ok());
        for bad in ["", "Ollama", "a/b", "local", "public", &"x".repeat(33)] {
            assert!(ProviderName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_reference_is_recorded_as_provider_and_model_and_read_back() {
        for text in ["ollama/qwen3:8b", "local:x", "gpt-4o"] {
            let model = ModelRef::parse(text, declared);
            let json = serde_json::to_value(&model).unwrap();
            assert_eq!(json["provider"], model.provider());
            assert_eq!(json["model"], model.model());
            assert_eq!(serde_json::from_value::<ModelRef>(json).unwrap(), model);
        }
        let bad = serde_json::json!({"provider": "Not A Name", "model": "m"});
        assert!(serde_json::from_value::<ModelRef>(bad).is_err());
    }

    fn provider(url: &str) -> Provider {
        Provider {
            name: ProviderName::parse("ollama").unwrap(),
            url: url.into(),
            key_env: Some("OLLAMA_KEY".into()),
            rpm: NonZeroU32::new(30),
            max_in_flight: Some(2),
            timeout_secs: Some(9),
            headers: BTreeMap::from([
                ("X-Title".into(), HeaderSource::Text("gepa-lab".into())),
                (
                    "X-Secret".into(),
                    HeaderSource::Env {
                        env: "SECRET_HEADER".into(),
                    },
                ),
            ]),
        }
    }

    #[test]
    fn the_client_reads_its_key_and_secret_headers_by_name_only_when_built() {
        let env = |name: &str| match name {
            "OLLAMA_KEY" => Some("k-123".to_owned()),
            "SECRET_HEADER" => Some("s-456".to_owned()),
            _ => None,
        };
        let config = provider("http://127.0.0.1:11434/v1/").config(env).unwrap();
        assert_eq!(config.base_url, "http://127.0.0.1:11434");
        assert_eq!(config.key.as_ref().map(Secret::expose), Some("k-123"));
        assert_eq!(config.rpm, NonZeroU32::new(30));
        assert_eq!(config.timeout, Some(Duration::from_secs(9)));
        assert_eq!(config.headers.len(), 2);
        let recorded = serde_json::to_string(&provider("http://h/v1")).unwrap();
        assert!(recorded.contains("OLLAMA_KEY") && !recorded.contains("k-123"));
        let err = provider("http://h").config(|_| None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "provider `ollama`: the environment variable OLLAMA_KEY (its key) is not set"
        );
        assert_eq!(provider("http://h:1").api_root(), "http://h:1");
    }

    #[test]
    fn variable_names_are_what_a_shell_accepts() {
        assert!(is_variable_name("OPENAI_API_KEY") && is_variable_name("_x1"));
        for bad in ["", "1KEY", "MY-KEY", "sk-abc def"] {
            assert!(!is_variable_name(bad), "{bad:?}");
        }
    }
}
