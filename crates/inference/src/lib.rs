//! Text generation behind one trait, `Inference`, and everything that talks the inference API:
//! its wire types (`wire`), the HTTP client for any OpenAI-compatible endpoint
//! (`HttpInference`, with SSE streaming), the model-class rules checked before a request leaves,
//! structured-output validation, fallback to the next model on 503, `EmbeddedModel` (a GGUF
//! model run in-process by llama.cpp, with its catalog and installer), and `SimModel`, the
//! deterministic stand-in used by tests.
//!
//! Not here: retries, pacing and the HTTP error type (`http`), the routes that serve this API
//! (`server`), and what callers do with answers (scoring, replay).
use std::pin::Pin;

use async_trait::async_trait;
use futures::Stream;

use gepa_lab_http::ApiError;

mod client;
pub mod embedded;
mod fallback;
pub mod grammar;
pub mod provider;
mod router;
mod rules;
mod sim;
mod structured;
pub mod wire;

pub use client::{DEFAULT_BASE_URL, HttpInference, InferenceConfig, base_url_from_env};
pub use embedded::{EmbeddedConfig, EmbeddedError, EmbeddedModel, ModelChoice, is_local_model};
pub use fallback::{Answered, Fallback};
pub use provider::{ModelRef, Provider, ProviderName};
pub use router::ModelRouter;
pub use rules::{ModelClass, check_request};
pub use sim::{Fault, SimConfig, SimConfigError, SimModel};
pub use structured::{check_schema, strip_fence, validate_answer};
pub use wire::{
    ChatMessage, ChatRequest, ChatResponse, Content, ContentPart, Model, Role, StreamChunk,
    sampling_seed,
};

/// Chunks of a streaming answer, in order. It ends after the server's `data: [DONE]`; a stream
/// cut short yields `InferenceError::StreamTruncated` as its last item instead.
pub type ChunkStream = Pin<Box<dyn Stream<Item = Result<StreamChunk, InferenceError>> + Send>>;

/// A source of chat completions: the inference API or any OpenAI-compatible server, the
/// embedded model, or the simulated one. Object-safe, so callers hold `Arc<dyn Inference>`.
#[async_trait]
pub trait Inference: Send + Sync {
    /// Models this source serves, with how many nodes serve each.
    async fn models(&self) -> Result<Vec<Model>, InferenceError>;

    /// One complete answer. When the request carries a JSON schema, an answer that does not
    /// conform is `InferenceError::SchemaMismatch`, not a success.
    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError>;

    /// The answer as it is generated. Errors that happen before the first chunk (401, 429, 503)
    /// are returned here; errors during the stream are items of it.
    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError>;
}

#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// The service (or, for `SimModel`, the simulated service) answered with an error status,
    /// or could not be reached.
    #[error(transparent)]
    Api(#[from] ApiError),
    /// The request breaks a rule of the contract and was not sent; `field` is its JSON path.
    #[error("invalid request: {field}: {reason}")]
    InvalidRequest { field: String, reason: String },
    /// An SSE event or chunk that does not parse.
    #[error("malformed stream: {0}")]
    Stream(String),
    /// The service ended the stream with an error event: the answer is incomplete.
    #[error("the stream ended with an error: {message}")]
    StreamFailed { message: String },
    /// The stream ended without `data: [DONE]`: the answer is incomplete.
    #[error("stream ended without [DONE] after {chunks} chunks: the answer is incomplete")]
    StreamTruncated { chunks: usize },
    /// Structured output was asked for and the answer does not conform to the schema. The
    /// answer is kept so that callers can still show or score it.
    #[error("answer of {model} does not conform to the schema: {}", errors.join("; "))]
    SchemaMismatch {
        model: String,
        content: String,
        errors: Vec<String>,
    },
    /// The answer holds no choice: there is no text to keep, not even an empty one.
    #[error("the answer of {model} has no choices")]
    NoChoices { model: String },
    /// Every model of a fallback list answered 503.
    #[error("no node is available for any of the models {}", tried.join(", "))]
    NoModelAvailable { tried: Vec<String> },
    /// The embedded model could not be loaded or failed while generating.
    #[error("embedded model: {0}")]
    Embedded(EmbeddedError),
    /// A declared provider failed a request for one of its models (no answer in time, a 429
    /// after every retry, a 5xx): the error says which provider and which model, since a run
    /// may use several.
    #[error("provider `{provider}`, model {model}: {error}")]
    Provider {
        provider: String,
        model: String,
        error: ApiError,
    },
}

impl From<EmbeddedError> for InferenceError {
    fn from(err: EmbeddedError) -> Self {
        match err {
            // The caller's to fix, as a 400 would be from a service.
            EmbeddedError::PromptTooLong { .. } => InferenceError::InvalidRequest {
                field: "messages".into(),
                reason: err.to_string(),
            },
            // What a gateway in front of a slow model answers; serve passes the status on.
            EmbeddedError::TimedOut { .. } => {
                InferenceError::Api(gepa_lab_http::ApiError::Status {
                    status: reqwest::StatusCode::GATEWAY_TIMEOUT,
                    retry_after: None,
                    body: err.to_string(),
                })
            }
            other => InferenceError::Embedded(other),
        }
    }
}

impl InferenceError {
    /// True when the service, not the request, failed: it could not be reached, failed as a
    /// server ([`gepa_lab_http::server_failed`]; not 503, which the contract uses for "no node
    /// serves this model"), answered 408, or still answered 429 after every retry. Asking again
    /// at once would fail the same way.
    pub fn is_outage(&self) -> bool {
        match self.api() {
            Some(ApiError::Transport(_)) => true,
            Some(err) => err.status().is_some_and(|status| {
                gepa_lab_http::server_failed(status, false)
                    || status == reqwest::StatusCode::TOO_MANY_REQUESTS
                    || status == reqwest::StatusCode::REQUEST_TIMEOUT
            }),
            None => false,
        }
    }

    /// True for the contract's "no node is available for the requested model".
    pub fn is_unavailable(&self) -> bool {
        self.api()
            .is_some_and(|err| err.status() == Some(reqwest::StatusCode::SERVICE_UNAVAILABLE))
    }

    /// The service's answer or failure, whether the public API's or a declared provider's.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            InferenceError::Api(err) | InferenceError::Provider { error: err, .. } => Some(err),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: u16) -> InferenceError {
        InferenceError::Api(ApiError::Status {
            status: reqwest::StatusCode::from_u16(code).unwrap(),
            retry_after: None,
            body: String::new(),
        })
    }

    #[test]
    fn an_outage_is_the_service_failing_not_an_answer_about_the_request_or_model() {
        for code in [500, 502, 504, 408, 429] {
            assert!(status(code).is_outage(), "{code}");
        }
        // 503 is "no node serves this model"; 501 and 505 are about the request.
        for code in [503, 501, 505, 400, 404, 413] {
            assert!(!status(code).is_outage(), "{code}");
        }
        // A provider's failure is an outage as the same failure of the public API is.
        let named = InferenceError::Provider {
            provider: "slow".into(),
            model: "m".into(),
            error: ApiError::Status {
                status: reqwest::StatusCode::BAD_GATEWAY,
                retry_after: None,
                body: "down".into(),
            },
        };
        assert!(named.is_outage());
        assert_eq!(
            named.to_string(),
            "provider `slow`, model m: 502 Bad Gateway: down"
        );
        let refused = InferenceError::InvalidRequest {
            field: "messages".into(),
            reason: "empty".into(),
        };
        assert!(!refused.is_outage());
    }
}
