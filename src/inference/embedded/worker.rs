//! The thread that owns a loaded model and its one llama.cpp context, and runs generation jobs
//! from a queue, one at a time.
//!
//! One context, serialised, rather than a pool: on the 2-core machines this project runs on,
//! two contexts decoding at once only split the same cores (and each holds its own KV cache).
//! Serialising also lets consecutive requests share their common prefix: the KV cache keeps the
//! last prompt, and a request that starts the same way (the same instruction over many dataset
//! rows, as replay and GEPA evaluation send) evaluates only the tokens after it.
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;

use super::EmbeddedError;
use super::template::ChatTemplate;

/// Prompt tokens evaluated per llama.cpp call; llama.cpp's own default.
const BATCH_TOKENS: u32 = 512;

/// How a worker runs its model.
#[derive(Debug, Clone)]
pub(super) struct WorkerConfig {
    pub threads: usize,
    pub context_tokens: u32,
    pub reuse_prefix: bool,
}

/// What loading found out.
#[derive(Debug, Clone)]
pub(super) struct Loaded {
    pub load_time: Duration,
    pub context_tokens: u32,
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
    /// A GBNF grammar (root rule `root`) the answer must follow.
    pub grammar: Option<String>,
    /// How long the worker may spend on this job once it starts it. Time spent waiting in the
    /// queue behind other jobs does not count: on a busy machine that wait says nothing about
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
    fn is_closed(&self) -> bool {
        match self {
            Reply::Whole(sender) => sender.is_closed(),
            Reply::Stream(sender) => sender.is_closed(),
        }
    }

    fn text(&self, piece: &str) {
        if let Reply::Stream(sender) = self {
            // A closed stream is noticed by `is_closed` before the next token.
            let _ = sender.send(Event::Text(piece.to_owned()));
        }
    }

    fn finish(self, result: Result<Generation, EmbeddedError>) {
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

/// Token counts and timings of one answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GenerationStats {
    /// Tokens of the rendered prompt (what `usage.prompt_tokens` reports).
    pub prompt_tokens: u32,
    /// Of those, the ones evaluated now; the rest came from the previous request's KV cache.
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

/// llama.cpp's backend may be initialised once per process, and is then shared by every model.
fn backend() -> Result<&'static LlamaBackend, EmbeddedError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            // llama.cpp reports every tensor it loads; those lines go to tracing (target
            // `llama-cpp-2`), where the default filters keep them quiet.
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            LlamaBackend::init().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|reason| EmbeddedError::Backend(reason.clone()))
}

/// Loads the model on a new thread and returns the queue that feeds it, once it is ready.
pub(super) fn spawn(
    path: PathBuf,
    config: WorkerConfig,
) -> Result<(mpsc::Sender<Job>, Loaded), EmbeddedError> {
    let (ready_tx, ready_rx) = mpsc::sync_channel(1);
    let (jobs_tx, jobs_rx) = mpsc::channel::<Job>();
    let name = format!(
        "local-model {}",
        path.file_name().unwrap_or_default().to_string_lossy()
    );
    std::thread::Builder::new()
        .name(name)
        .spawn(move || run(path, config, jobs_rx, ready_tx))
        .map_err(|e| EmbeddedError::Backend(format!("cannot start the model thread: {e}")))?;
    let loaded = ready_rx.recv().map_err(|_| EmbeddedError::WorkerGone)??;
    Ok((jobs_tx, loaded))
}

fn run(
    path: PathBuf,
    config: WorkerConfig,
    jobs: mpsc::Receiver<Job>,
    ready: mpsc::SyncSender<Result<Loaded, EmbeddedError>>,
) {
    let started = Instant::now();
    let loaded = (|| {
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default())
            .map_err(|e| EmbeddedError::Load {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let context_tokens = config.context_tokens.min(model.n_ctx_train()).max(64);
        let threads = i32::try_from(config.threads).unwrap_or(i32::MAX).max(1);
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(context_tokens))
            .with_n_batch(BATCH_TOKENS)
            .with_n_ubatch(BATCH_TOKENS)
            .with_n_threads(threads)
            .with_n_threads_batch(threads);
        Ok::<_, EmbeddedError>((model, params, context_tokens))
    })();
    let (model, params, context_tokens) = match loaded {
        Ok(loaded) => loaded,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let session = backend().and_then(|backend| Session::new(&model, backend, params, &config));
    let mut session = match session {
        Ok(session) => session,
        Err(err) => {
            let _ = ready.send(Err(err));
            return;
        }
    };
    let _ = ready.send(Ok(Loaded {
        load_time: started.elapsed(),
        context_tokens,
        parameters: model.n_params(),
        jinja_template: session.template.is_some(),
    }));
    drop(ready);
    // Ends when the last `EmbeddedModel` handle is dropped; the model is freed with it.
    while let Ok(job) = jobs.recv() {
        if job.reply.is_closed() {
            continue;
        }
        let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| session.generate(&job)));
        let result = match outcome {
            Ok(result) => result,
            Err(panic) => {
                // The context may be mid-decode: start the next request from an empty cache.
                session.forget();
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                Err(EmbeddedError::Generation(format!(
                    "llama.cpp wrapper panicked: {message}"
                )))
            }
        };
        job.reply.finish(result);
    }
}

struct Session<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Tokens whose keys and values are in the context now, from position 0.
    cached: Vec<LlamaToken>,
    template: Option<ChatTemplate>,
    reuse_prefix: bool,
}

impl<'m> Session<'m> {
    fn new(
        model: &'m LlamaModel,
        backend: &LlamaBackend,
        params: LlamaContextParams,
        config: &WorkerConfig,
    ) -> Result<Self, EmbeddedError> {
        let ctx = model
            .new_context(backend, params)
            .map_err(|e| EmbeddedError::Backend(format!("cannot create a context: {e}")))?;
        let template = jinja_template(model);
        Ok(Session {
            model,
            batch: LlamaBatch::new(BATCH_TOKENS as usize, 1),
            ctx,
            cached: Vec::new(),
            template,
            reuse_prefix: config.reuse_prefix,
        })
    }

    fn forget(&mut self) {
        self.ctx.clear_kv_cache();
        self.cached.clear();
    }

    /// The prompt text: the GGUF's Jinja template, else llama.cpp's built-in one.
    fn render(&self, messages: &[(String, String)]) -> Result<String, EmbeddedError> {
        let pairs: Vec<(&str, &str)> = messages
            .iter()
            .map(|(role, text)| (role.as_str(), text.as_str()))
            .collect();
        if let Some(template) = &self.template {
            match template.render(&pairs) {
                Ok(prompt) => return Ok(prompt),
                Err(err) => {
                    tracing::debug!(%err, "the Jinja chat template failed; using llama.cpp's");
                }
            }
        }
        let builtin = self.model.chat_template(None).map_err(|e| {
            EmbeddedError::Template(format!("the model file has no chat template: {e}"))
        })?;
        let chat = messages
            .iter()
            .map(|(role, text)| LlamaChatMessage::new(role.clone(), text.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| EmbeddedError::Template(format!("a message holds a NUL byte: {e}")))?;
        self.model
            .apply_chat_template(&builtin, &chat, true)
            .map_err(|e| EmbeddedError::Template(e.to_string()))
    }

    fn tokenize(&self, prompt: &str) -> Vec<LlamaToken> {
        let vocab = self.model.vocab();
        // The template writes special tokens as text, so they are parsed as tokens; a BOS the
        // template already wrote is not doubled.
        let mut tokens = vocab.tokenize(prompt.as_bytes(), true, true);
        let bos = vocab.bos();
        if tokens.len() >= 2 && tokens[0] == bos && tokens[1] == bos {
            tokens.remove(0);
        }
        tokens
    }

    fn generate(&mut self, job: &Job) -> Result<Generation, EmbeddedError> {
        let prompt = self.render(&job.messages)?;
        let tokens = self.tokenize(&prompt);
        let context_tokens = self.ctx.n_ctx() as usize;
        if tokens.is_empty() {
            return Err(EmbeddedError::PromptTooLong {
                tokens: 0,
                context_tokens,
            });
        }
        if tokens.len() >= context_tokens {
            return Err(EmbeddedError::PromptTooLong {
                tokens: tokens.len(),
                context_tokens,
            });
        }
        let mut grammar = match &job.grammar {
            Some(gbnf) => Some(
                LlamaSampler::grammar(self.model, gbnf, "root")
                    .map_err(|e| EmbeddedError::Grammar(e.to_string()))?,
            ),
            None => None,
        };

        let deadline = Deadline::new(job.time_limit);
        let started = Instant::now();
        let evaluated = self.evaluate_prompt(&tokens, &job.reply, &deadline)?;
        let prompt_time = started.elapsed();

        let mut chain = sampler(job.temperature);
        let vocab = self.model.vocab();
        let room = context_tokens - tokens.len();
        let limit = (job.max_tokens as usize).min(room);
        let mut text = String::new();
        let mut pending = Vec::new();
        let mut generated = 0usize;
        let mut logits_at = self.batch.n_tokens() - 1;
        let mut finish = Finish::Length;
        let started = Instant::now();
        while generated < limit {
            let token = self.sample(&mut chain, grammar.as_mut(), logits_at)?;
            if vocab.is_eog(token) {
                finish = Finish::Stop;
                break;
            }
            generated += 1;
            pending.extend_from_slice(&vocab.token_to_piece(token, false, None));
            let piece = take_complete_utf8(&mut pending);
            if !piece.is_empty() {
                job.reply.text(&piece);
                text.push_str(&piece);
            }
            if generated == limit {
                break;
            }
            // The next position's logits; the last token of a `length` answer is never needed.
            self.batch.clear();
            self.add(token, self.cached.len(), true)?;
            self.decode()?;
            self.cached.push(token);
            logits_at = 0;
            if job.reply.is_closed() {
                return Err(EmbeddedError::Cancelled);
            }
            deadline.check()?;
        }
        if !pending.is_empty() {
            let rest = String::from_utf8_lossy(&pending).into_owned();
            job.reply.text(&rest);
            text.push_str(&rest);
        }
        Ok(Generation {
            text,
            finish,
            stats: GenerationStats {
                prompt_tokens: count(tokens.len()),
                prompt_tokens_evaluated: count(evaluated),
                completion_tokens: count(generated),
                prompt_time,
                generation_time: started.elapsed(),
            },
        })
    }

    /// Brings the context to hold exactly `tokens`, reusing the cached prefix; returns how many
    /// were evaluated. Logits are those of the last token.
    fn evaluate_prompt(
        &mut self,
        tokens: &[LlamaToken],
        reply: &Reply,
        deadline: &Deadline,
    ) -> Result<usize, EmbeddedError> {
        let mut keep = if self.reuse_prefix {
            self.cached
                .iter()
                .zip(tokens)
                .take_while(|(a, b)| a == b)
                .count()
        } else {
            0
        };
        // At least one token is evaluated, for the logits of the first answer token.
        keep = keep.min(tokens.len() - 1);
        if keep < self.cached.len() {
            let removed = u32::try_from(keep)
                .ok()
                .and_then(|p0| self.ctx.clear_kv_cache_seq(Some(0), Some(p0), None).ok());
            if removed != Some(true) {
                // Some memory kinds cannot drop a suffix; then start over.
                self.ctx.clear_kv_cache();
                keep = 0;
            }
            self.cached.truncate(keep);
        }
        for chunk in tokens[keep..].chunks(BATCH_TOKENS as usize) {
            self.batch.clear();
            let start = self.cached.len();
            for (i, token) in chunk.iter().enumerate() {
                let position = start + i;
                self.add(*token, position, position == tokens.len() - 1)?;
            }
            self.decode()?;
            self.cached.extend_from_slice(chunk);
            if reply.is_closed() {
                return Err(EmbeddedError::Cancelled);
            }
            deadline.check()?;
        }
        Ok(tokens.len() - keep)
    }

    fn add(
        &mut self,
        token: LlamaToken,
        position: usize,
        logits: bool,
    ) -> Result<(), EmbeddedError> {
        let position = i32::try_from(position)
            .map_err(|_| EmbeddedError::Generation("position out of range".into()))?;
        self.batch
            .add(token, position, &[0], logits)
            .map_err(|e| EmbeddedError::Generation(e.to_string()))
    }

    fn decode(&mut self) -> Result<(), EmbeddedError> {
        self.ctx.decode(&mut self.batch).map_err(|e| {
            // What the context holds is unknown after a failed decode.
            self.ctx.clear_kv_cache();
            self.cached.clear();
            EmbeddedError::Generation(format!("llama.cpp decode failed: {e}"))
        })
    }

    /// The next token. With a grammar, the unconstrained choice is checked against it first and
    /// the grammar is applied to the whole vocabulary only when it is refused, as llama.cpp's
    /// own sampler does: most tokens of a JSON answer are what the model would pick anyway.
    fn sample(
        &self,
        chain: &mut LlamaSampler,
        grammar: Option<&mut LlamaSampler>,
        logits_at: i32,
    ) -> Result<LlamaToken, EmbeddedError> {
        let token = chain.sample(&self.ctx, logits_at);
        let Some(grammar) = grammar else {
            return Ok(token);
        };
        let mut single =
            LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 1.0, 0.0)], false);
        single.apply_sampler(grammar);
        let allowed = single
            .data
            .first()
            .is_some_and(|data| data.logit().is_finite());
        let token = if allowed {
            token
        } else {
            let mut all = self.ctx.token_data_array_ith(logits_at);
            all.apply_sampler(grammar);
            all.apply_sampler(chain);
            all.selected_token().ok_or_else(|| {
                EmbeddedError::Grammar("no token is allowed by the schema's grammar here".into())
            })?
        };
        grammar
            .try_accept(token)
            .map_err(|e| EmbeddedError::Grammar(format!("the grammar refused a token: {e}")))?;
        Ok(token)
    }
}

/// Greedy at temperature 0; otherwise llama.cpp's default chain (top-k 40, top-p 0.95,
/// min-p 0.05) at the requested temperature, seeded afresh for each request.
/// The time limit of the job in hand, counted from when the worker took it up.
struct Deadline {
    started: Instant,
    limit: Duration,
}

impl Deadline {
    fn new(limit: Duration) -> Self {
        Self {
            started: Instant::now(),
            limit,
        }
    }

    /// Checked between llama.cpp calls (each a batch of prompt tokens or one generated token),
    /// so a job overruns its limit by at most one such call.
    fn check(&self) -> Result<(), EmbeddedError> {
        if self.started.elapsed() > self.limit {
            return Err(EmbeddedError::TimedOut { limit: self.limit });
        }
        Ok(())
    }
}

fn sampler(temperature: f32) -> LlamaSampler {
    if temperature <= 0.0 {
        return LlamaSampler::greedy();
    }
    LlamaSampler::chain_simple([
        LlamaSampler::top_k(40),
        LlamaSampler::top_p(0.95, 1),
        LlamaSampler::min_p(0.05, 1),
        LlamaSampler::temp(temperature),
        LlamaSampler::dist(rand::random()),
    ])
}

/// The GGUF's Jinja chat template, compiled, when it has one that compiles.
fn jinja_template(model: &LlamaModel) -> Option<ChatTemplate> {
    let source = model.chat_template(None).ok()?;
    let source = source.to_str().ok()?;
    let vocab = model.vocab();
    let text =
        |token| String::from_utf8_lossy(&vocab.token_to_piece(token, true, None)).into_owned();
    match ChatTemplate::new(source, &text(vocab.bos()), &text(vocab.eos())) {
        Ok(template) => Some(template),
        Err(err) => {
            tracing::debug!(%err, "the GGUF's Jinja chat template does not compile");
            None
        }
    }
}

/// Removes and returns the longest valid UTF-8 text at the start of `bytes`; a character cut
/// between two tokens stays for the next call, bytes that can never be valid become U+FFFD.
fn take_complete_utf8(bytes: &mut Vec<u8>) -> String {
    let mut out = String::new();
    loop {
        match std::str::from_utf8(bytes) {
            Ok(text) => {
                out.push_str(text);
                bytes.clear();
                return out;
            }
            Err(err) => {
                let valid = err.valid_up_to();
                // Checked just above: the first `valid` bytes are UTF-8.
                out.push_str(std::str::from_utf8(&bytes[..valid]).unwrap_or_default());
                match err.error_len() {
                    None => {
                        bytes.drain(..valid);
                        return out;
                    }
                    Some(bad) => {
                        out.push(char::REPLACEMENT_CHARACTER);
                        bytes.drain(..valid + bad);
                    }
                }
            }
        }
    }
}

fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_split_between_tokens_waits_for_its_last_byte() {
        let euro = "€".as_bytes();
        let mut pending = vec![b'a', euro[0], euro[1]];
        assert_eq!(take_complete_utf8(&mut pending), "a");
        assert_eq!(pending.len(), 2);
        pending.push(euro[2]);
        assert_eq!(take_complete_utf8(&mut pending), "€");
        assert!(pending.is_empty());
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut pending = vec![b'x', 0xff, b'y'];
        assert_eq!(take_complete_utf8(&mut pending), "x\u{fffd}y");
        assert!(pending.is_empty());
    }
}
