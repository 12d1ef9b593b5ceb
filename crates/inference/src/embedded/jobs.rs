//! What the model's thread and its callers exchange: the jobs of the queue, the replies, and
//! what a finished answer reports. Free of llama.cpp, so that a build without the embedded model
//! (`--no-default-features`) still knows the shapes `EmbeddedModel` is written in.
// The worker that reads most of these is compiled only with the `embedded` feature.
#![cfg_attr(not(feature = "embedded"), allow(dead_code))]
use std::time::Duration;

use super::EmbeddedError;

/// The most sequences one context decodes together.
pub(super) const MAX_SLOTS: usize = 64;

/// How a worker runs its model.
#[derive(Debug, Clone)]
pub(super) struct WorkerConfig {
    pub threads: usize,
    /// KV cache cells, shared by every slot.
    pub context_tokens: u32,
    /// Requests decoded together, 1 to `MAX_SLOTS`.
    pub slots: usize,
    pub reuse_prefix: bool,
}

/// What loading found out.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub load_time: Duration,
    pub context_tokens: u32,
    pub slots: usize,
    pub parameters: u64,
    /// Whether the GGUF's Jinja chat template renders here; if not, llama.cpp's built-in
    /// version of the template family is used.
    pub jinja_template: bool,
}

/// One request for the worker.
pub(super) struct Job {
    /// (role, text), roles as the chat template knows them.
    pub messages: Vec<(String, String)>,
    pub max_tokens: u32,
    pub temperature: f32,
    /// The sampler's seed above temperature 0.
    pub seed: u64,
    /// A GBNF grammar (root rule `root`) the answer must follow.
    pub grammar: Option<String>,
    /// How long the worker may spend on this job once it gives it a slot. Time spent waiting in
    /// the queue behind other jobs does not count: on a busy machine that wait says nothing about
    /// this request, and counting it failed requests that would have taken seconds.
    pub time_limit: Duration,
    pub reply: Reply,
}

pub(super) enum Reply {
    Whole(tokio::sync::oneshot::Sender<Result<Generation, EmbeddedError>>),
    /// Text pieces as they decode, then `Done` or `Failed`.
    Stream(tokio::sync::mpsc::UnboundedSender<Event>),
}

pub(super) enum Event {
    Text(String),
    Done(Generation),
    Failed(EmbeddedError),
}

impl Reply {
    /// The caller has gone (timed out, or dropped the stream): stop working for it.
    pub(super) fn is_closed(&self) -> bool {
        match self {
            Reply::Whole(sender) => sender.is_closed(),
            Reply::Stream(sender) => sender.is_closed(),
        }
    }

    pub(super) fn text(&self, piece: &str) {
        if let Reply::Stream(sender) = self {
            // A closed stream is noticed by `is_closed` before the next token.
            let _ = sender.send(Event::Text(piece.to_owned()));
        }
    }

    pub(super) fn finish(self, result: Result<Generation, EmbeddedError>) {
        // Nobody listening any more is not an error of ours.
        match self {
            Reply::Whole(sender) => {
                let _ = sender.send(result);
            }
            Reply::Stream(sender) => {
                let _ = sender.send(match result {
                    Ok(generation) => Event::Done(generation),
                    Err(err) => Event::Failed(err),
                });
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finish {
    /// The model ended its turn.
    Stop,
    /// `max_tokens`, or the context, ran out first.
    Length,
}

impl Finish {
    pub fn as_str(self) -> &'static str {
        match self {
            Finish::Stop => "stop",
            Finish::Length => "length",
        }
    }
}

/// A finished answer with its real token counts.
#[derive(Debug, Clone)]
pub struct Generation {
    pub text: String,
    pub finish: Finish,
    pub stats: GenerationStats,
}

/// Token counts and timings of one answer. The times are this request's wall-clock times from
/// when it got a slot; requests decoded in the same batch share them, so the rates below are
/// this request's, and the worker's throughput is higher when several run together.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerationStats {
    /// Tokens of the rendered prompt (what `usage.prompt_tokens` reports).
    pub prompt_tokens: u32,
    /// Of those, the ones evaluated now; the rest came from the KV cache (an earlier request
    /// that started the same way).
    pub prompt_tokens_evaluated: u32,
    /// Tokens generated (what `usage.completion_tokens` reports); the end-of-turn token is not
    /// counted.
    pub completion_tokens: u32,
    pub prompt_time: Duration,
    pub generation_time: Duration,
}

impl GenerationStats {
    /// Prompt tokens evaluated per second.
    pub fn prompt_per_sec(&self) -> f64 {
        per_sec(self.prompt_tokens_evaluated, self.prompt_time)
    }

    /// Tokens generated per second.
    pub fn generation_per_sec(&self) -> f64 {
        per_sec(self.completion_tokens, self.generation_time)
    }
}

fn per_sec(tokens: u32, time: Duration) -> f64 {
    if time.is_zero() {
        0.0
    } else {
        f64::from(tokens) / time.as_secs_f64()
    }
}
