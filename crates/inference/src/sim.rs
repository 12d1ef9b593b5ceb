//! `SimModel`: a deterministic, seeded stand-in for a model service, for tests and benchmarks
//! only. It is never chosen by default, and everything it returns says it is simulated.
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::wire::{
    AnswerMessage, ChatRequest, ChatResponse, Choice, ChunkChoice, Delta, Metadata, Model, Role,
    StreamChunk, Usage,
};
use super::{ChunkStream, Inference, InferenceError, check_request};
use gepa_lab_http::ApiError;

/// What happens to one request, in a fault script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Answer normally.
    None,
    /// 429 with `Retry-After: retry_after` (no header when `retry_after=none`).
    RateLimited,
    /// 503, as for a model with no node.
    Unavailable,
    /// 500.
    ServerError,
    /// Answer normally after `slow` more than the usual latency.
    Slow,
    /// A stream that stops half-way without `[DONE]` (a plain answer is unaffected).
    Truncated,
    /// A structured answer that breaks its schema (other answers are unaffected).
    NonConforming,
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "ok" => Fault::None,
            "429" => Fault::RateLimited,
            "503" => Fault::Unavailable,
            "500" => Fault::ServerError,
            "slow" => Fault::Slow,
            "truncate" => Fault::Truncated,
            "nonconforming" => Fault::NonConforming,
            other => {
                return Err(format!(
                    "unknown fault {other:?} (ok, 429, 503, 500, slow, truncate, nonconforming)"
                ));
            }
        })
    }
}

/// How a `SimModel` behaves. Written on the command line as comma-separated `key=value` pairs
/// (see `FromStr`), e.g. `model=tiny,model=tiny-vl,seed=7,latency_ms=20,faults=429*2/ok`.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub seed: u64,
    /// Model ids it serves; any other id gets 503.
    pub models: Vec<String>,
    /// Time before every answer (before the first chunk of a stream).
    pub latency: Duration,
    /// Extra time for a `Fault::Slow` request.
    pub slow: Duration,
    /// `Retry-After` of a simulated 429; none sends no header, as some servers do.
    pub retry_after: Option<Duration>,
    /// Fault of request number i (counted from 0 over chat and stream calls to served models):
    /// `faults[i]`, or `faults[i % cycle]` when `cycle` is set; requests past the end answer.
    pub faults: Vec<Fault>,
    pub cycle: Option<u64>,
    /// One prompt in N (chosen by a hash of the request) gets a structured answer that breaks its
    /// schema, every time it is asked, as a model that cannot follow a schema for some inputs;
    /// asking again does not help, unlike a `nonconforming` fault.
    pub broken_schema_every: Option<u64>,
    /// Answers at a temperature above 0 vary from call to call, as a sampling model's do: the
    /// call's number then counts in what is answered. Off by default, so that a run against
    /// the stand-in model repeats exactly.
    pub varies: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            seed: 0,
            models: vec!["sim-text".into(), "sim-vl".into(), "sim-audio".into()],
            latency: Duration::ZERO,
            slow: Duration::from_secs(2),
            retry_after: Some(Duration::from_secs(1)),
            faults: Vec::new(),
            cycle: None,
            broken_schema_every: None,
            varies: false,
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("simulated model option {option:?}: {reason}")]
pub struct SimConfigError {
    pub option: String,
    pub reason: String,
}

impl FromStr for SimConfig {
    type Err = SimConfigError;

    /// Keys: `model` (repeatable; default `sim-text`, `sim-vl`, `sim-audio`), `seed`,
    /// `latency_ms`, `slow_ms`, `retry_after` (seconds, or `none`: no header), `faults` (a
    /// `/`-separated script of `ok`, `429`, `503`, `500`, `slow`, `truncate`, `nonconforming`,
    /// each optionally `*N`), `cycle` (repeat the script every N requests), `varies` (`1`:
    /// answers at a temperature above 0 differ from call to call), `broken_schema_every` (N: one
    /// prompt in N always gets a structured answer that breaks its schema).
    fn from_str(spec: &str) -> Result<Self, Self::Err> {
        let mut config = SimConfig::default();
        let mut models = Vec::new();
        for pair in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').ok_or_else(|| SimConfigError {
                option: pair.into(),
                reason: "expected key=value".into(),
            })?;
            let bad = |reason: String| SimConfigError {
                option: key.into(),
                reason,
            };
            let number = |v: &str| {
                v.parse::<u64>()
                    .map_err(|_| bad(format!("expected a whole number, got {v:?}")))
            };
            match key {
                "model" if !value.is_empty() => models.push(value.to_owned()),
                "model" => return Err(bad("empty model id".into())),
                "seed" => config.seed = number(value)?,
                "latency_ms" => config.latency = Duration::from_millis(number(value)?),
                "slow_ms" => config.slow = Duration::from_millis(number(value)?),
                "retry_after" if value == "none" => config.retry_after = None,
                "retry_after" => config.retry_after = Some(Duration::from_secs(number(value)?)),
                "broken_schema_every" => match number(value)? {
                    0 => return Err(bad("must be at least 1".into())),
                    n => config.broken_schema_every = Some(n),
                },
                "varies" => match value {
                    "0" => config.varies = false,
                    "1" => config.varies = true,
                    other => return Err(bad(format!("expected 0 or 1, got {other:?}"))),
                },
                "cycle" => match number(value)? {
                    0 => return Err(bad("must be at least 1".into())),
                    n => config.cycle = Some(n),
                },
                "faults" => {
                    for step in value.split('/') {
                        let (fault, times) = match step.split_once('*') {
                            Some((fault, times)) => (fault, number(times)?),
                            None => (step, 1),
                        };
                        let fault: Fault = fault.parse().map_err(bad)?;
                        config
                            .faults
                            .extend(std::iter::repeat_n(fault, times as usize));
                    }
                }
                other => {
                    return Err(SimConfigError {
                        option: other.into(),
                        reason: "unknown option (model, seed, latency_ms, slow_ms, retry_after, faults, cycle, broken_schema_every, varies)".into(),
                    });
                }
            }
        }
        if !models.is_empty() {
            config.models = models;
        }
        Ok(config)
    }
}

/// A simulated model service, deterministic in (seed, model, messages).
///
/// What it answers, looking at the last user message:
/// - **Prompt rewrite**: when the message holds a fenced ```` ``` ```` block and speaks of an
///   "instruction" or a "prompt", the block is taken as the current instruction and the answer
///   is a new instruction in a fenced block: the old one with a refinement sentence added (or,
///   sometimes, one swapped), chosen by a hash of the whole conversation. Reflective
///   optimizers therefore get a different, parseable candidate for each reflection prompt.
/// - **Classification**: when a line reads `Answer with one of: a, b, c` (also `one of:`,
///   `labels:`, `options:`, `choices:`, `choose from:`, `categories:`, or those words followed
///   by a bullet list) in the last user message, or else in an earlier message such as the
///   system instruction, the answer is exactly one of those labels, picked by a hash of the
///   whole prompt (system message included). A different instruction thus yields different
///   picks across rows, and so a different accuracy, which is what an optimizer needs to see.
/// - **Structured output**: with a `json_schema` response format, a JSON value built from the
///   schema (enums, required properties, numeric bounds respected).
/// - Otherwise a short sentence built from words of the message.
///
/// The answer text itself is not marked, so scorers work on it unchanged; the response's
/// `model` is `"<id> (simulated)"` and `metadata.node_id` is `sim-node-<seed>`.
///
/// Faults follow `SimConfig::faults`, counted per `SimModel` over chat and stream calls to
/// served models, so a test knows exactly which request fails.
pub struct SimModel {
    config: SimConfig,
    requests: AtomicU64,
    /// Calls answered at a temperature above 0, for `SimConfig::varies`.
    draws: AtomicU64,
}

impl fmt::Debug for SimModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SimModel")
            .field("config", &self.config)
            .finish()
    }
}

/// Sentences a simulated reflection adds to an instruction.
const REFINEMENTS: &[&str] = &[
    "Read the whole input before deciding.",
    "Base the answer only on what the input says, not on outside knowledge.",
    "When two answers seem possible, prefer the more specific one.",
    "Watch for negations: they often reverse the answer.",
    "Ignore details that do not change the answer.",
    "Give only the final answer, with no explanation.",
    "Check the answer against every candidate before committing to it.",
    "If the input is ambiguous, choose the most common reading.",
    "Pay attention to the last sentence of the input; it often decides the answer.",
    "Use the exact spelling of the candidate answers.",
];

const LABEL_MARKERS: &[&str] = &[
    "answer with one of:",
    "one of:",
    "labels:",
    "options:",
    "choices:",
    "choose from:",
    "categories:",
];

enum Task {
    Rewrite(String),
    Classify(Vec<String>),
    Free,
}

impl SimModel {
    pub fn new(config: SimConfig) -> Self {
        SimModel {
            config,
            requests: AtomicU64::new(0),
            draws: AtomicU64::new(0),
        }
    }

    /// Checks, waits and fails as configured; on success returns the fault that shapes the
    /// answer (`None`, `Slow`, `Truncated` or `NonConforming`).
    async fn admit(&self, request: &ChatRequest) -> Result<Fault, InferenceError> {
        check_request(request)?;
        if !self.config.models.iter().any(|m| m == &request.model) {
            return Err(simulated_status(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!(
                    "no node is available for model {} (simulated)",
                    request.model
                ),
            ));
        }
        let n = self.requests.fetch_add(1, Ordering::SeqCst);
        let index = match self.config.cycle {
            Some(cycle) => n % cycle,
            None => n,
        };
        let fault = usize::try_from(index)
            .ok()
            .and_then(|i| self.config.faults.get(i).copied())
            .unwrap_or(Fault::None);
        let wait = match fault {
            Fault::Slow => self.config.latency + self.config.slow,
            _ => self.config.latency,
        };
        if !wait.is_zero() {
            tokio::time::sleep(wait).await;
        }
        match fault {
            Fault::RateLimited => Err(simulated_status(
                StatusCode::TOO_MANY_REQUESTS,
                self.config.retry_after,
                "rate limit exceeded (simulated)".into(),
            )),
            Fault::Unavailable => Err(simulated_status(
                StatusCode::SERVICE_UNAVAILABLE,
                None,
                format!(
                    "no node is available for model {} (simulated)",
                    request.model
                ),
            )),
            Fault::ServerError => Err(simulated_status(
                StatusCode::INTERNAL_SERVER_ERROR,
                None,
                "internal error (simulated)".into(),
            )),
            other => Ok(other),
        }
    }

    fn respond(&self, request: &ChatRequest, fault: Fault) -> ChatResponse {
        let mut digest = prompt_digest(self.config.seed, request);
        // Decided by the request alone, before any per-call variation: asked again, the same.
        let broken = self.config.broken_schema_every.is_some_and(|n| {
            u64::from_le_bytes(digest[..8].try_into().unwrap_or_default()) % n == 0
        });
        if self.config.varies && request.temperature() > 0.0 {
            let draw = self.draws.fetch_add(1, Ordering::Relaxed);
            digest = Sha256::new()
                .chain_update(digest)
                .chain_update(draw.to_le_bytes())
                .finalize()
                .into();
        }
        let mut rng = ChaCha8Rng::from_seed(digest);
        let mut content = match request.json_schema() {
            Some(schema) if fault == Fault::NonConforming || broken => nonconforming(schema),
            Some(schema) => instance_of(schema, &mut rng, 0).to_string(),
            None => answer_text(request, &mut rng),
        };
        let prompt_tokens: u64 = request
            .messages
            .iter()
            .map(|m| m.text().split_whitespace().count() as u64)
            .sum();
        let mut finish_reason = "stop";
        let words: Vec<&str> = content.split_inclusive(char::is_whitespace).collect();
        let limit = request.max_tokens() as usize;
        if words.len() > limit {
            content = words[..limit].concat();
            finish_reason = "length";
        }
        let completion_tokens = content.split_whitespace().count() as u64;
        ChatResponse {
            id: format!("sim-{}", hex(&digest[..8])),
            model: format!("{} (simulated)", request.model),
            choices: vec![Choice {
                index: 0,
                message: AnswerMessage {
                    role: Some(Role::Assistant),
                    content: Some(content),
                },
                finish_reason: Some(finish_reason.into()),
            }],
            usage: Some(Usage {
                prompt_tokens,
                completion_tokens,
                total_tokens: prompt_tokens + completion_tokens,
            }),
            metadata: Some(Metadata {
                node_id: Some(format!("sim-node-{}", self.config.seed)),
            }),
            latency: None,
        }
    }
}

fn simulated_status(
    status: StatusCode,
    retry_after: Option<Duration>,
    body: String,
) -> InferenceError {
    InferenceError::Api(ApiError::Status {
        status,
        retry_after,
        body,
    })
}

#[async_trait]
impl Inference for SimModel {
    async fn models(&self) -> Result<Vec<Model>, InferenceError> {
        Ok(self
            .config
            .models
            .iter()
            .map(|id| Model {
                id: id.clone(),
                object: "model".into(),
                created: 0,
                owned_by: "gepa-lab-sim".into(),
                node_count: 1,
            })
            .collect())
    }

    async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
        let fault = self.admit(request).await?;
        Ok(self.respond(request, fault))
    }

    async fn chat_stream(&self, request: &ChatRequest) -> Result<ChunkStream, InferenceError> {
        let fault = self.admit(request).await?;
        let response = self.respond(request, fault);
        let content = response.content().to_owned();
        let fragments: Vec<String> = content
            .split_inclusive(char::is_whitespace)
            .map(str::to_owned)
            .collect();
        let total = fragments.len();
        let keep = if fault == Fault::Truncated {
            total / 2
        } else {
            total
        };
        let chunk = |text: Option<String>, finish: Option<String>| StreamChunk {
            id: Some(response.id.clone()),
            model: Some(response.model.clone()),
            choices: vec![ChunkChoice {
                index: 0,
                delta: Delta { content: text },
                finish_reason: finish,
            }],
            metadata: response.metadata.clone(),
        };
        let mut items: Vec<Result<StreamChunk, InferenceError>> = fragments
            .into_iter()
            .take(keep)
            .map(|text| Ok(chunk(Some(text), None)))
            .collect();
        if fault == Fault::Truncated {
            items.push(Err(InferenceError::StreamTruncated { chunks: keep }));
        } else {
            let finish = response
                .choices
                .first()
                .and_then(|c| c.finish_reason.clone());
            items.push(Ok(chunk(None, finish)));
        }
        Ok(Box::pin(futures::stream::iter(items)))
    }
}

fn prompt_digest(seed: u64, request: &ChatRequest) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(seed.to_le_bytes());
    hasher.update(request.model.as_bytes());
    for message in &request.messages {
        // Serialised, so images and roles count as well as text.
        hasher.update(serde_json::to_vec(message).unwrap_or_default());
        hasher.update([0]);
    }
    hasher.finalize().into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn answer_text(request: &ChatRequest, rng: &mut ChaCha8Rng) -> String {
    let last_user = request
        .messages
        .iter()
        .rev()
        .find(|m| m.role == Role::User)
        .map(|m| m.text())
        .unwrap_or_default();
    // Labels are often listed in the instruction (system message) rather than with the input.
    let earlier: Vec<String> = request.messages.iter().rev().map(|m| m.text()).collect();
    match task_of(&last_user, &earlier) {
        Task::Rewrite(current) => rewrite(&current, rng),
        Task::Classify(labels) => labels[rng.random_range(0..labels.len())].clone(),
        Task::Free => {
            let words: Vec<&str> = last_user
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| w.len() > 3)
                .collect();
            if words.is_empty() {
                "I have nothing to add.".to_owned()
            } else {
                let word = words[rng.random_range(0..words.len())];
                format!("The answer is about {}.", word.to_lowercase())
            }
        }
    }
}

/// `message` is the last user message; `others` every message, newest first, where labels are
/// looked for when the message itself lists none.
fn task_of(message: &str, others: &[String]) -> Task {
    if let Some((before, block, after)) = fenced_block(message) {
        let context = format!("{before} {after}").to_lowercase();
        if context.contains("instruction") || context.contains("prompt") {
            return Task::Rewrite(block.to_owned());
        }
    }
    let labels =
        candidate_labels(message).or_else(|| others.iter().find_map(|text| candidate_labels(text)));
    match labels {
        Some(labels) => Task::Classify(labels),
        None => Task::Free,
    }
}

/// The first ```` ``` ```` block: (text before, contents without the language tag, text after).
fn fenced_block(text: &str) -> Option<(&str, &str, &str)> {
    let open = text.find("```")?;
    let after_open = &text[open + 3..];
    let close = after_open.find("```")?;
    let inner = &after_open[..close];
    // A language tag sits on the opening line; the instruction starts on the next.
    let inner = match inner.split_once('\n') {
        Some((tag, rest)) if !tag.trim().contains(' ') => rest,
        _ => inner,
    };
    Some((&text[..open], inner.trim(), &after_open[close + 3..]))
}

fn candidate_labels(message: &str) -> Option<Vec<String>> {
    let lines: Vec<&str> = message.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let lower = line.to_lowercase();
        let Some(marker) = LABEL_MARKERS
            .iter()
            .find_map(|m| lower.find(m).map(|at| at + m.len()))
        else {
            continue;
        };
        let rest = line[marker..].trim();
        let labels: Vec<String> = if rest.is_empty() {
            lines[i + 1..]
                .iter()
                .map(|l| l.trim())
                .take_while(|l| l.starts_with("- ") || l.starts_with("* "))
                .map(|l| clean_label(&l[2..]))
                .filter(|l| !l.is_empty())
                .collect()
        } else {
            rest.split([',', '|', '/'])
                .flat_map(|part| part.split(" or "))
                .map(clean_label)
                .filter(|l| !l.is_empty())
                .collect()
        };
        if labels.len() >= 2 {
            return Some(labels);
        }
    }
    None
}

fn clean_label(raw: &str) -> String {
    raw.trim()
        .trim_end_matches(['.', ';'])
        .trim_matches(|c: char| c == '"' || c == '\'' || c == '`' || c.is_whitespace())
        .to_owned()
}

fn rewrite(current: &str, rng: &mut ChaCha8Rng) -> String {
    let present: Vec<&str> = REFINEMENTS
        .iter()
        .copied()
        .filter(|r| current.contains(r))
        .collect();
    let absent: Vec<&str> = REFINEMENTS
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect();
    let mut instruction = current.trim().to_owned();
    // Now and then drop an earlier refinement, so candidates do not only grow.
    if !present.is_empty() && (absent.is_empty() || rng.random_bool(0.3)) {
        let dropped = present[rng.random_range(0..present.len())];
        instruction = instruction.replace(dropped, "").trim().to_owned();
        instruction = instruction.split_whitespace().collect::<Vec<_>>().join(" ");
    }
    if !absent.is_empty() {
        let added = absent[rng.random_range(0..absent.len())];
        if !instruction.is_empty() {
            instruction.push(' ');
        }
        instruction.push_str(added);
    }
    format!("Here is the improved instruction:\n\n```\n{instruction}\n```\n")
}

/// A value that conforms to the common subset of JSON Schema that structured output uses.
fn instance_of(schema: &Value, rng: &mut ChaCha8Rng, depth: usize) -> Value {
    if let Some(value) = schema.get("const") {
        return value.clone();
    }
    if let Some(Value::Array(options)) = schema.get("enum")
        && !options.is_empty()
    {
        return options[rng.random_range(0..options.len())].clone();
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(options)) = schema.get(combinator)
            && let Some(first) = options.first()
        {
            return instance_of(first, rng, depth + 1);
        }
    }
    match schema_type(schema) {
        "object" => {
            let mut object = serde_json::Map::new();
            if depth < 8
                && let Some(Value::Object(properties)) = schema.get("properties")
            {
                for (name, property) in properties {
                    object.insert(name.clone(), instance_of(property, rng, depth + 1));
                }
            }
            Value::Object(object)
        }
        "array" => {
            let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(1);
            let max = schema.get("maxItems").and_then(Value::as_u64).unwrap_or(3);
            let count = if min >= max {
                min
            } else {
                rng.random_range(min..=max)
            };
            let items = schema.get("items").cloned().unwrap_or(json!({}));
            Value::Array(
                (0..count.min(16))
                    .map(|_| instance_of(&items, rng, depth + 1))
                    .collect(),
            )
        }
        kind => scalar_of(kind, schema, rng),
    }
}

/// The JSON type a schema asks for: its `type` (the first that is not `null` of a list), an
/// object when it has properties, else a string.
fn schema_type(schema: &Value) -> &str {
    match schema.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(Value::Array(kinds)) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .unwrap_or("null"),
        _ if schema.get("properties").is_some() => "object",
        _ => "string",
    }
}

/// A number, boolean, null or string within the schema's bounds; any other type is a string.
fn scalar_of(kind: &str, schema: &Value, rng: &mut ChaCha8Rng) -> Value {
    match kind {
        "integer" => {
            let min = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            let max = schema
                .get("maximum")
                .and_then(Value::as_i64)
                .unwrap_or(min.saturating_add(100));
            json!(if min >= max {
                min
            } else {
                rng.random_range(min..=max)
            })
        }
        "number" => {
            let min = schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            let max = schema
                .get("maximum")
                .and_then(Value::as_f64)
                .unwrap_or(min + 1.0);
            let x = if min >= max {
                min
            } else {
                rng.random_range(min..max)
            };
            json!((x * 100.0).round().clamp(min * 100.0, max * 100.0) / 100.0)
        }
        "boolean" => json!(rng.random_bool(0.5)),
        "null" => Value::Null,
        _ => {
            const WORDS: &[&str] = &["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"];
            let mut text = WORDS[rng.random_range(0..WORDS.len())].to_owned();
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
            while text.chars().count() < min {
                text.push('x');
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64) {
                text = text.chars().take(max as usize).collect();
            }
            json!(text)
        }
    }
}

/// An answer of the wrong type for `schema`, so that validation must fail.
fn nonconforming(schema: &Value) -> String {
    match schema.get("type").and_then(Value::as_str) {
        Some("object") => json!(["not", "an", "object"]).to_string(),
        Some(_) => json!({"unexpected": true}).to_string(),
        None => "this is not JSON".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::structured::validate_answer;
    use crate::wire::{ChatMessage, JsonSchemaFormat, ResponseFormat};
    use futures::StreamExt;

    fn sim(spec: &str) -> SimModel {
        SimModel::new(spec.parse().unwrap())
    }

    fn ask(model: &str, system: &str, user: &str) -> ChatRequest {
        ChatRequest::new(
            model,
            vec![ChatMessage::system(system), ChatMessage::user(user)],
        )
    }

    #[test]
    fn config_parses_every_option_and_names_bad_ones() {
        let config: SimConfig =
            "model=a,model=b-vl,seed=7,latency_ms=20,slow_ms=5,retry_after=2,faults=429*2/ok/truncate,cycle=5,varies=1"
                .parse()
                .unwrap();
        assert!(config.varies);
        assert_eq!(config.models, vec!["a", "b-vl"]);
        assert_eq!(config.seed, 7);
        assert_eq!(config.latency, Duration::from_millis(20));
        assert_eq!(config.retry_after, Some(Duration::from_secs(2)));
        let bare: SimConfig = "faults=429,retry_after=none".parse().unwrap();
        assert_eq!(bare.retry_after, None);
        assert_eq!(
            config.faults,
            vec![
                Fault::RateLimited,
                Fault::RateLimited,
                Fault::None,
                Fault::Truncated
            ]
        );
        assert_eq!(config.cycle, Some(5));
        assert_eq!("".parse::<SimConfig>().unwrap(), SimConfig::default());
        for bad in [
            "colour=red",
            "seed=x",
            "faults=404",
            "cycle=0",
            "latency_ms",
            "varies=yes",
        ] {
            assert!(bad.parse::<SimConfig>().is_err(), "{bad}");
        }
    }

    #[tokio::test]
    async fn answers_are_deterministic_and_labelled_simulated() {
        let request = ask("sim-text", "Be brief.", "Tell me about rivers.");
        let a = sim("seed=3").chat(&request).await.unwrap();
        let b = sim("seed=3").chat(&request).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(a.model, "sim-text (simulated)");
        assert_eq!(a.node_id(), Some("sim-node-3"));
        assert!(!a.content().to_lowercase().contains("simulated"));
        let usage = a.usage.unwrap();
        assert_eq!(usage.prompt_tokens, 6);
        assert_eq!(
            usage.total_tokens,
            usage.prompt_tokens + usage.completion_tokens
        );
    }

    #[tokio::test]
    async fn with_varies_answers_at_a_temperature_above_0_differ_from_call_to_call() {
        let mut request = ask(
            "sim-text",
            "Answer with one of: a, b, c, d, e, f, g, h",
            "Which letter?",
        );
        let answers = |model: SimModel, request: ChatRequest| async move {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..20 {
                seen.insert(model.chat(&request).await.unwrap().content().to_owned());
            }
            seen.len()
        };
        request.temperature = Some(0.8);
        assert!(answers(sim("varies=1"), request.clone()).await > 1);
        assert_eq!(answers(sim(""), request.clone()).await, 1, "off by default");
        request.temperature = Some(0.0);
        assert_eq!(answers(sim("varies=1"), request).await, 1, "greedy at 0");
    }

    #[tokio::test]
    async fn classification_picks_a_listed_label_depending_on_the_prompt() {
        let model = sim("");
        let mut picks_by_prompt = Vec::new();
        for system in ["Classify the sentiment.", "You label reviews carefully."] {
            let mut picks = Vec::new();
            for row in 0..24 {
                let user = format!(
                    "Review {row}: it was fine.\nAnswer with one of: positive, negative, neutral"
                );
                let answer = model.chat(&ask("sim-text", system, &user)).await.unwrap();
                assert!(
                    ["positive", "negative", "neutral"].contains(&answer.content()),
                    "{}",
                    answer.content()
                );
                picks.push(answer.content().to_owned());
            }
            picks_by_prompt.push(picks);
        }
        assert_ne!(picks_by_prompt[0], picks_by_prompt[1]);
        // Labels given in the instruction rather than with the input count too.
        let answer = model
            .chat(&ask(
                "sim-text",
                "Label the mood. Options: calm | tense",
                "The storm broke.",
            ))
            .await
            .unwrap();
        assert!(
            ["calm", "tense"].contains(&answer.content()),
            "{}",
            answer.content()
        );
        // Bullet lists and other markers work too.
        let answer = model
            .chat(&ask("sim-text", "", "Which?\nLabels:\n- spam\n- ham\n"))
            .await
            .unwrap();
        assert!(["spam", "ham"].contains(&answer.content()));
    }

    #[tokio::test]
    async fn rewrite_requests_get_a_new_fenced_instruction_that_varies() {
        let model = sim("");
        let mut instructions = std::collections::BTreeSet::new();
        for example in 0..8 {
            let user = format!(
                "The current instruction is:\n```\nClassify the review.\n```\nExample {example} failed. Write an improved instruction in a fenced block."
            );
            let answer = model.chat(&ask("sim-text", "", &user)).await.unwrap();
            let (_, block, _) = fenced_block(answer.content()).unwrap();
            assert!(block.starts_with("Classify the review."), "{block}");
            assert_ne!(block, "Classify the review.");
            instructions.insert(block.to_owned());
        }
        assert!(instructions.len() >= 3, "{instructions:?}");
    }

    #[tokio::test]
    async fn structured_answers_conform_unless_told_not_to() {
        let schema = json!({"type": "object", "required": ["label", "score", "tags"],
            "properties": {"label": {"enum": ["a", "b"]}, "score": {"type": "number", "minimum": 0, "maximum": 1},
                           "tags": {"type": "array", "items": {"type": "string", "minLength": 7}},
                           "count": {"type": "integer", "minimum": 3, "maximum": 3}}});
        let mut request = ask("sim-text", "", "Rate it.");
        request.response_format = Some(ResponseFormat::JsonSchema {
            json_schema: JsonSchemaFormat {
                name: "rating".into(),
                schema: schema.clone(),
            },
        });
        let model = sim("faults=ok/nonconforming");
        let good = model.chat(&request).await.unwrap();
        let value = validate_answer(&schema, good.content()).unwrap();
        assert_eq!(value["count"], 3);
        let bad = model.chat(&request).await.unwrap();
        assert!(validate_answer(&schema, bad.content()).is_err());
    }

    #[tokio::test]
    async fn faults_follow_the_script_in_order() {
        let model = sim("model=m,faults=429/503/500/ok,retry_after=4");
        let request = ask("m", "", "hi");
        let status = |r: Result<ChatResponse, InferenceError>| match r {
            Err(InferenceError::Api(e)) => (e.status().map(|s| s.as_u16()), e.retry_after()),
            Ok(_) => (Some(200), None),
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            status(model.chat(&request).await),
            (Some(429), Some(Duration::from_secs(4)))
        );
        assert_eq!(status(model.chat(&request).await), (Some(503), None));
        assert_eq!(status(model.chat(&request).await), (Some(500), None));
        assert_eq!(status(model.chat(&request).await), (Some(200), None));
        assert_eq!(status(model.chat(&request).await), (Some(200), None));
        // An unserved model is 503 and does not use up the script.
        assert_eq!(
            status(model.chat(&ask("other", "", "hi")).await),
            (Some(503), None)
        );
    }

    #[tokio::test]
    async fn streams_carry_the_same_answer_or_stop_half_way() {
        let model = sim("faults=ok/truncate");
        let request = ask(
            "sim-text",
            "",
            "Describe the weather in Lisbon in spring please",
        );
        let whole = sim("").chat(&request).await.unwrap().content().to_owned();
        let items: Vec<_> = model.chat_stream(&request).await.unwrap().collect().await;
        let text: String = items
            .iter()
            .map(|i| i.as_ref().unwrap().content())
            .collect();
        assert_eq!(text, whole);
        let items: Vec<_> = model.chat_stream(&request).await.unwrap().collect().await;
        assert!(matches!(
            items.last(),
            Some(Err(InferenceError::StreamTruncated { .. }))
        ));
    }

    #[tokio::test]
    async fn max_tokens_cuts_the_answer() {
        let mut request = ask("sim-text", "", "Tell me about rivers.");
        request.max_tokens = Some(2);
        let answer = sim("").chat(&request).await.unwrap();
        assert_eq!(answer.content().split_whitespace().count(), 2);
        assert_eq!(answer.choices[0].finish_reason.as_deref(), Some("length"));
    }
}
