//! The inference API's JSON bodies, as `inference-api.md` sections 2 and 4 give them. Both the
//! client and `serve` use these types, so each shape is written down once.
//!
//! Parsing is lenient: unknown fields are ignored, and what the contract does not promise
//! (`usage`, `metadata`, `finish_reason` values, chunk ids) is optional.
use serde::{Deserialize, Serialize};

/// Documented server-side defaults; a request may omit the fields and get these.
pub const DEFAULT_MAX_TOKENS: u32 = 2048;
pub const DEFAULT_TEMPERATURE: f64 = 0.7;
/// The temperatures gepa-lab sends (an experiment's `replay.temperature`, `chat` and `compare`'s
/// `--temperature`): OpenAI's range, which other servers accept too. The contract shows no
/// range, so `serve` takes any number it is sent.
pub const TEMPERATURES: std::ops::RangeInclusive<f64> = 0.0..=2.0;
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// The longest time-out honoured: a day. The contract sets no maximum, and a larger value (up to
/// `u64::MAX` seconds) would overflow the clock arithmetic of every timer that waits on it.
pub const MAX_TIMEOUT_SECS: u64 = 24 * 3600;

/// `GET /v1/models` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelList {
    #[serde(default)]
    pub data: Vec<Model>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Model {
    pub id: String,
    #[serde(default = "model_object")]
    pub object: String,
    #[serde(default)]
    pub created: i64,
    #[serde(default)]
    pub owned_by: String,
    /// Nodes serving the model now; more means better availability and throughput. Servers that
    /// do not report it (vLLM, Ollama) are taken to serve with one.
    #[serde(default = "one")]
    pub node_count: u32,
}

fn model_object() -> String {
    "model".to_owned()
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: Content,
}

impl ChatMessage {
    pub fn system(text: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::System,
            content: Content::Text(text.into()),
        }
    }

    pub fn user(text: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::User,
            content: Content::Text(text.into()),
        }
    }

    pub fn assistant(text: impl Into<String>) -> Self {
        ChatMessage {
            role: Role::Assistant,
            content: Content::Text(text.into()),
        }
    }

    /// The message's text: the string, or its text parts joined by newlines.
    pub fn text(&self) -> String {
        match &self.content {
            Content::Text(text) => text.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter_map(|part| match part {
                    ContentPart::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// A string, or an array of parts for multimodal input.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<ContentPart>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: String },
    ImageUrl { image_url: UrlRef },
    AudioUrl { audio_url: UrlRef },
}

/// `{"url": "..."}`; a `data:` URL with base64 content is accepted for images.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UrlRef {
    pub url: String,
}

/// `response_format`: the only documented kind is `json_schema`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    JsonSchema { json_schema: JsonSchemaFormat },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JsonSchemaFormat {
    pub name: String,
    pub schema: serde_json::Value,
}

/// `POST /v1/chat/completions` body. Optional fields left `None` are not sent, and the server
/// applies the documented defaults (`DEFAULT_*`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// The sampling seed for gepa-lab's embedded model, so that an answer above temperature 0
    /// is a function of the request and its seed (a run repeats). Never sent: the inference
    /// API has no such field.
    #[serde(skip)]
    pub seed: Option<u64>,
}

/// A sampling seed for [`ChatRequest::seed`] that is a function of `parts` alone (the first 8
/// bytes of their SHA-256, each part length-prefixed): the same request in the same run gets the
/// same seed, whatever order the calls are made in and whether or not a resume answered some of
/// them from a checkpoint.
pub fn sampling_seed(parts: &[&[u8]]) -> u64 {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    let digest = hash.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first)
}

impl ChatRequest {
    pub fn new(model: impl Into<String>, messages: Vec<ChatMessage>) -> Self {
        ChatRequest {
            model: model.into(),
            messages,
            max_tokens: None,
            temperature: None,
            stream: None,
            timeout_secs: None,
            response_format: None,
            seed: None,
        }
    }

    pub fn max_tokens(&self) -> u32 {
        self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)
    }

    pub fn temperature(&self) -> f64 {
        self.temperature.unwrap_or(DEFAULT_TEMPERATURE)
    }

    /// The request's time-out in seconds, as sent (default 120).
    pub fn timeout_secs(&self) -> u64 {
        self.timeout_secs.unwrap_or(DEFAULT_TIMEOUT_SECS)
    }

    /// The time-out to wait by: `timeout_secs`, at most [`MAX_TIMEOUT_SECS`].
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_secs().min(MAX_TIMEOUT_SECS))
    }

    /// The schema the answer must conform to, when structured output was asked for.
    pub fn json_schema(&self) -> Option<&serde_json::Value> {
        match &self.response_format {
            Some(ResponseFormat::JsonSchema { json_schema }) => Some(&json_schema.schema),
            None => None,
        }
    }
}

/// Non-streaming answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatResponse {
    #[serde(default)]
    pub id: String,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    #[serde(default)]
    pub choices: Vec<Choice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// Not on the wire: how long the answer took to produce, from sending the request that was
    /// answered (the last attempt) to having all of its body; for the embedded model, from
    /// taking the job up to its last token. Waits before it (rate pacing, retries, the embedded
    /// model's queue) are not in it. Set by the client that received the answer.
    #[serde(skip)]
    pub latency: Option<std::time::Duration>,
}

impl ChatResponse {
    /// The first choice's text, or "" when the server sent none.
    pub fn content(&self) -> &str {
        self.choices
            .first()
            .and_then(|choice| choice.message.content.as_deref())
            .unwrap_or_default()
    }

    /// True when the first choice stopped at its token limit (`finish_reason` `length`).
    pub fn truncated(&self) -> bool {
        self.choices
            .first()
            .and_then(|choice| choice.finish_reason.as_deref())
            == Some("length")
    }

    pub fn node_id(&self) -> Option<&str> {
        self.metadata.as_ref().and_then(|m| m.node_id.as_deref())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    #[serde(default)]
    pub index: u32,
    pub message: AnswerMessage,
    /// Only `stop` is documented; any string is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AnswerMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<Role>,
    /// OpenAI-compatible servers send `null` here for some answers.
    #[serde(default)]
    pub content: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    #[serde(default)]
    pub total_tokens: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Metadata {
    /// The node that served the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

/// The event type of the last event of a stream that fails after it began: its status was
/// already sent (200), so the failure is told in the stream, in place of `data: [DONE]`.
pub const STREAM_ERROR_EVENT: &str = "error";

/// The data of a stream's `error` event (the contract's stream ends only with `[DONE]`; this is
/// the shape OpenAI-compatible servers send when they cannot finish one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamError {
    pub error: StreamErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamErrorDetail {
    pub message: String,
}

impl StreamError {
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            error: StreamErrorDetail {
                message: message.into(),
            },
        }
    }
}

/// One `data:` event of a streaming answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamChunk {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default)]
    pub choices: Vec<ChunkChoice>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
}

impl StreamChunk {
    /// The text fragment of the first choice, or "".
    pub fn content(&self) -> &str {
        self.choices
            .first()
            .and_then(|choice| choice.delta.content.as_deref())
            .unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice {
    #[serde(default)]
    pub index: u32,
    #[serde(default)]
    pub delta: Delta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn completion_parses_with_unknown_fields_and_missing_optionals() {
        let body = json!({
            "id": "gen-1", "model": "qwen3.5:9b", "object": "chat.completion",
            "system_fingerprint": "x",
            "choices": [{"message": {"content": "Paris", "refusal": null}, "logprobs": null}]
        });
        let parsed: ChatResponse = serde_json::from_value(body).unwrap();
        assert_eq!(parsed.content(), "Paris");
        assert_eq!(parsed.usage, None);
        assert_eq!(parsed.node_id(), None);
        assert_eq!(parsed.choices[0].finish_reason, None);
    }

    #[test]
    fn completion_parses_the_documented_example_shape() {
        let body = json!({
            "id": "gen-2", "model": "m",
            "choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            "metadata": {"node_id": "node-7"}
        });
        let parsed: ChatResponse = serde_json::from_value(body).unwrap();
        assert_eq!(parsed.node_id(), Some("node-7"));
        assert_eq!(parsed.usage.unwrap().total_tokens, 4);
        assert_eq!(parsed.choices[0].finish_reason.as_deref(), Some("length"));
    }

    #[test]
    fn null_content_is_an_empty_answer() {
        let parsed: ChatResponse =
            serde_json::from_value(json!({"choices": [{"message": {"content": null}}]})).unwrap();
        assert_eq!(parsed.content(), "");
    }

    #[test]
    fn request_omits_unset_fields_so_the_server_defaults_apply() {
        let request = ChatRequest::new("m", vec![ChatMessage::user("hi")]);
        let sent = serde_json::to_value(&request).unwrap();
        assert_eq!(
            sent,
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        );
        assert_eq!(request.max_tokens(), 2048);
        assert_eq!(request.temperature(), 0.7);
        assert_eq!(request.timeout_secs(), 120);
        assert_eq!(request.timeout(), std::time::Duration::from_secs(120));
        let seeded = ChatRequest {
            seed: Some(7),
            ..request.clone()
        };
        assert_eq!(
            serde_json::to_value(&seeded).unwrap(),
            sent,
            "a seed is never sent"
        );
        let forever = ChatRequest {
            timeout_secs: Some(u64::MAX),
            ..request.clone()
        };
        assert_eq!(forever.timeout().as_secs(), MAX_TIMEOUT_SECS);
    }

    #[test]
    fn multimodal_parts_and_response_format_round_trip_in_wire_shape() {
        let body = json!({
            "model": "qwen-vl",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "audio_url", "audio_url": {"url": "https://x/a.wav"}}
            ]}],
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "answer", "schema": {"type": "object"}}},
            "stream": true
        });
        let parsed: ChatRequest = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(parsed.messages[0].text(), "what is this?");
        assert_eq!(parsed.json_schema(), Some(&json!({"type": "object"})));
        assert_eq!(serde_json::to_value(&parsed).unwrap(), body);
    }

    #[test]
    fn unknown_roles_and_part_types_are_rejected_with_their_path() {
        let bad_role = json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]});
        let err = serde_path_to_error::deserialize::<_, ChatRequest>(bad_role).unwrap_err();
        assert_eq!(err.path().to_string(), "messages[0].role");
        let bad_part = json!({"model": "m", "messages": [{"role": "user",
            "content": [{"type": "video_url", "video_url": {"url": "x"}}]}]});
        assert!(serde_json::from_value::<ChatRequest>(bad_part).is_err());
    }

    #[test]
    fn stream_chunks_parse_with_and_without_content() {
        let chunk: StreamChunk =
            serde_json::from_str(r#"{"choices":[{"delta":{"content":"Hel"}}],"extra":1}"#).unwrap();
        assert_eq!(chunk.content(), "Hel");
        let last: StreamChunk =
            serde_json::from_str(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#).unwrap();
        assert_eq!(last.content(), "");
    }

    #[test]
    fn models_default_node_count_when_a_server_omits_it() {
        let list: ModelList =
            serde_json::from_str(r#"{"object":"list","data":[{"id":"llama3"}]}"#).unwrap();
        assert_eq!(list.data[0].node_count, 1);
        assert_eq!(list.data[0].object, "model");
    }
}
