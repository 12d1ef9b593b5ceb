//! The thread that owns a loaded model and its llama.cpp context, and answers the jobs of a
//! queue with continuous batching.
//!
//! The context holds up to `slots` sequences in one KV cache. Each step is one llama.cpp decode
//! holding the next token of every request that is generating and, in the room left, prompt
//! tokens of the others: a request joins the running batch between two steps and leaves it when
//! it is done, each with its own token cap, deadline, cancellation, grammar and statistics. On a
//! CPU, decoding several sequences' tokens together costs little more than decoding one, because
//! the weights are read once per step; that is where the speed comes from.
//!
//! Prefixes are shared, not re-read. An idle slot keeps what its cache holds; a new request goes
//! to the free slot whose cache starts like its prompt, and when another slot holds a longer
//! matching prefix, that prefix is copied (the cache is unified, so a copy marks the same cells
//! as shared and costs nothing). So rows of one prompt version evaluate the instruction once, and
//! two versions that alternate each keep theirs.
use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use llama_cpp_2::DecodeError;
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
use super::jobs::{Finish, Generation, GenerationStats, Job, Loaded, MAX_SLOTS, WorkerConfig};
use super::template::ChatTemplate;

/// Prompt tokens evaluated per llama.cpp call; llama.cpp's own default.
const BATCH_TOKENS: u32 = 512;

/// The shortest shared prefix worth keeping a slot's cache for, or waiting a step or two for
/// while a running request evaluates it. Shorter ones (the chat template's first tokens) are
/// cheaper to evaluate again than the cache they would cost.
const SHARED_PREFIX_MIN: usize = 16;

/// llama.cpp's backend may be initialised once per process, and is then shared by every model.
/// The CPU is checked first: ggml compiled for instructions it lacks would stop the process.
fn backend() -> Result<&'static LlamaBackend, EmbeddedError> {
    gepa_lab_cpu::check().map_err(EmbeddedError::UnsupportedCpu)?;
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
    let slots = config.slots.clamp(1, MAX_SLOTS);
    let loaded = (|| {
        let backend = backend()?;
        let model = LlamaModel::load_from_file(backend, &path, &LlamaModelParams::default())
            .map_err(|e| EmbeddedError::Load {
                path: path.clone(),
                reason: e.to_string(),
            })?;
        let context_tokens = config.context_tokens.min(model.n_ctx_train()).max(64);
        let threads = i32::try_from(config.threads).unwrap_or(i32::MAX).max(1);
        // One KV cache shared by every sequence ("unified"): a sequence may use all of it, and
        // copying a prefix from one sequence to another only marks the same cells as shared.
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(context_tokens))
            .with_n_batch(BATCH_TOKENS)
            .with_n_ubatch(BATCH_TOKENS)
            .with_n_seq_max(count(slots))
            .with_kv_unified(true)
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
    let session =
        backend().and_then(|backend| Session::new(&model, backend, params, slots, &config));
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
        slots,
        parameters: model.n_params(),
        jinja_template: session.template.is_some(),
    }));
    drop(ready);
    session.serve(&jobs);
}

/// One sequence of the context: the tokens its part of the KV cache holds, and the request it is
/// answering, if any. An idle slot keeps its tokens, so that the next request that starts the
/// same way (the same prompt version over other rows) evaluates only what differs.
struct Slot {
    seq: i32,
    /// Tokens whose keys and values are in the cache for this sequence, from position 0.
    cached: Vec<LlamaToken>,
    /// When it last took a request, to pick the least recently used of equal slots.
    last_used: u64,
    work: Option<Work>,
}

/// A request being answered in a slot.
struct Work {
    job: Job,
    /// The whole rendered prompt.
    tokens: Vec<LlamaToken>,
    /// How many of `tokens` came from the cache instead of being evaluated.
    reused: usize,
    /// The answer's token cap: `max_tokens`, or what the context has room for.
    limit: usize,
    chain: LlamaSampler,
    grammar: Option<LlamaSampler>,
    deadline: Deadline,
    /// Admission order, so that prompt evaluation serves the oldest request first.
    admitted: u64,
    /// The token sampled last, decoded in the next step; `None` while the prompt is evaluated.
    next_token: Option<LlamaToken>,
    /// Where this request's logits are in the batch being decoded.
    logits_at: Option<i32>,
    generated: usize,
    text: String,
    pending: Vec<u8>,
    first_token: Option<Instant>,
}

impl Work {
    /// Cells of the KV cache it may still claim: the prompt not yet evaluated and the answer.
    fn claim(&self, cached: usize) -> usize {
        self.tokens.len().saturating_sub(cached) + self.limit.saturating_sub(self.generated)
    }

    fn finish(self, result: Result<Finish, EmbeddedError>) {
        let Work {
            job,
            tokens,
            reused,
            generated,
            mut text,
            pending,
            first_token,
            deadline,
            ..
        } = self;
        let result = result.map(|finish| {
            if !pending.is_empty() {
                let rest = String::from_utf8_lossy(&pending).into_owned();
                job.reply.text(&rest);
                text.push_str(&rest);
            }
            let now = Instant::now();
            let first_token = first_token.unwrap_or(now);
            Generation {
                text,
                finish,
                stats: GenerationStats {
                    prompt_tokens: count(tokens.len()),
                    prompt_tokens_evaluated: count(tokens.len() - reused),
                    completion_tokens: count(generated),
                    prompt_time: first_token.duration_since(deadline.started),
                    generation_time: now.duration_since(first_token),
                },
            }
        });
        job.reply.finish(result);
    }
}

/// What a step sampled for one request.
enum Sampled {
    /// Another token follows.
    More,
    Done(Finish),
}

struct Session<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    slots: Vec<Slot>,
    /// A request taken from the queue whose prompt is rendered but which cannot start yet: the
    /// cache has no room for it, or a running request is evaluating its prefix. It goes first.
    waiting: Option<Prepared>,
    queue: VecDeque<Job>,
    template: Option<ChatTemplate>,
    reuse_prefix: bool,
    clock: u64,
}

/// A request with its prompt rendered and tokenized.
struct Prepared {
    job: Job,
    tokens: Vec<LlamaToken>,
    limit: usize,
}

impl<'m> Session<'m> {
    fn new(
        model: &'m LlamaModel,
        backend: &LlamaBackend,
        params: LlamaContextParams,
        slots: usize,
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
            slots: (0..slots)
                .map(|seq| Slot {
                    seq: i32::try_from(seq).unwrap_or(i32::MAX),
                    cached: Vec::new(),
                    last_used: 0,
                    work: None,
                })
                .collect(),
            waiting: None,
            queue: VecDeque::new(),
            template,
            reuse_prefix: config.reuse_prefix,
            clock: 0,
        })
    }

    /// Answers jobs until the last sender is dropped and every request taken is finished.
    fn serve(&mut self, jobs: &mpsc::Receiver<Job>) {
        let mut open = true;
        loop {
            if !self.busy() && self.waiting.is_none() && self.queue.is_empty() {
                if !open {
                    return;
                }
                // Nothing to do: wait for work.
                match jobs.recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(_) => return,
                }
            }
            // Requests that arrived while the last step ran join the batch now.
            while open {
                match jobs.try_recv() {
                    Ok(job) => self.queue.push_back(job),
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => open = false,
                }
            }
            let outcome = std::panic::catch_unwind(AssertUnwindSafe(|| {
                self.admit();
                if self.busy() { self.step() } else { Ok(()) }
            }));
            let failure = match outcome {
                Ok(Ok(())) => continue,
                Ok(Err(err)) => err,
                Err(panic) => {
                    let message = panic
                        .downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "unknown panic".into());
                    EmbeddedError::Generation(format!("llama.cpp wrapper panicked: {message}"))
                }
            };
            // What the context holds is unknown now: every request in it fails, and the next
            // ones start from an empty cache.
            self.forget();
            for slot in &mut self.slots {
                if let Some(work) = slot.work.take() {
                    work.finish(Err(failure.clone()));
                }
            }
        }
    }

    fn busy(&self) -> bool {
        self.slots.iter().any(|slot| slot.work.is_some())
    }

    fn forget(&mut self) {
        self.ctx.clear_kv_cache();
        for slot in &mut self.slots {
            slot.cached.clear();
        }
    }

    /// Starts queued requests in free slots while the cache has room for them.
    fn admit(&mut self) {
        while self.slots.iter().any(|slot| slot.work.is_none()) {
            let prepared = match self.waiting.take() {
                Some(prepared) => prepared,
                None => {
                    let Some(job) = self.queue.pop_front() else {
                        return;
                    };
                    if job.reply.is_closed() {
                        continue;
                    }
                    match self.prepare(job) {
                        Some(prepared) => prepared,
                        None => continue,
                    }
                }
            };
            if prepared.job.reply.is_closed() {
                continue;
            }
            if let Err(prepared) = self.start(prepared) {
                // It waits for room, or for a running request to evaluate its prefix.
                self.waiting = Some(*prepared);
                return;
            }
        }
    }

    /// Renders and tokenizes a job's prompt and checks that it fits the context; a job that
    /// cannot run is answered with the reason here.
    fn prepare(&self, job: Job) -> Option<Prepared> {
        let tokens = match self.render(&job.messages) {
            Ok(prompt) => self.tokenize(&prompt),
            Err(err) => {
                job.reply.finish(Err(err));
                return None;
            }
        };
        let context_tokens = self.ctx.n_ctx() as usize;
        if tokens.is_empty() || tokens.len() >= context_tokens {
            job.reply.finish(Err(EmbeddedError::PromptTooLong {
                tokens: tokens.len(),
                context_tokens,
            }));
            return None;
        }
        let limit = (job.max_tokens as usize).min(context_tokens - tokens.len());
        Some(Prepared { job, tokens, limit })
    }

    /// Puts `prepared` in the free slot whose cache starts like its prompt, after copying a
    /// longer matching prefix from another slot if one has it. Gives it back when it should wait:
    /// the cache has no room for it while other requests run, or a running request is about to
    /// evaluate the prefix it could copy.
    fn start(&mut self, prepared: Prepared) -> Result<(), Box<Prepared>> {
        let tokens = &prepared.tokens;
        let common = |slot: &Slot| shared_prefix(&slot.cached, tokens);
        let Some(chosen) = self.choose_slot(tokens) else {
            return Err(Box::new(prepared));
        };
        // At least one token is evaluated, for the logits of the first answer token.
        let most = tokens.len() - 1;
        let own = if self.reuse_prefix {
            common(&self.slots[chosen]).min(most)
        } else {
            0
        };
        let donor = self
            .slots
            .iter()
            .enumerate()
            .filter(|(index, _)| *index != chosen)
            .map(|(index, slot)| (common(slot).min(most), index))
            .max()
            .filter(|(shared, _)| self.reuse_prefix && *shared > own);
        let keep = donor.map_or(own, |(shared, _)| shared);
        // A request whose prompt a running one is about to evaluate waits for it, then copies
        // it: rows of a new prompt version arrive together, and would otherwise each evaluate
        // the same instruction side by side.
        let upcoming = self
            .slots
            .iter()
            .filter_map(|slot| slot.work.as_ref())
            .filter(|work| work.next_token.is_none())
            .map(|work| shared_prefix(&work.tokens, tokens).min(most))
            .max()
            .unwrap_or(0);
        if self.reuse_prefix && upcoming >= keep + SHARED_PREFIX_MIN {
            return Err(Box::new(prepared));
        }

        let claim = tokens.len() - keep + prepared.limit;
        if !self.make_room(chosen, keep, donor.map(|(_, from)| from), claim) {
            return Err(Box::new(prepared));
        }

        let keep = self.reuse_cache(chosen, keep, donor, tokens);
        self.begin(chosen, prepared, keep);
        Ok(())
    }

    /// The free slot for a prompt: the one whose cache holds a useful part of it; else an empty
    /// one; else the least recently used, whose cache is the least likely to be asked for again.
    /// `None` when every slot is busy.
    fn choose_slot(&self, tokens: &[LlamaToken]) -> Option<usize> {
        let common = |slot: &Slot| shared_prefix(&slot.cached, tokens);
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, slot)| slot.work.is_none())
            .max_by_key(|(_, slot)| {
                let shared = common(slot);
                let useful = if shared >= SHARED_PREFIX_MIN {
                    shared
                } else {
                    0
                };
                (
                    useful,
                    slot.cached.is_empty(),
                    std::cmp::Reverse(slot.last_used),
                )
            })
            .map(|(index, _)| index)
    }

    /// Makes slot `chosen`'s cache hold the first `keep` tokens of `tokens`: copied from the
    /// donor slot when there is one, else its own cache cut to them. Returns how many it holds
    /// (0 when the copy or the cut failed and the slot starts over).
    fn reuse_cache(
        &mut self,
        chosen: usize,
        keep: usize,
        donor: Option<(usize, usize)>,
        tokens: &[LlamaToken],
    ) -> usize {
        let mut keep = keep;
        let seq = self.slots[chosen].seq;
        match donor {
            Some((shared, from)) => {
                self.drop_sequence(chosen);
                let source = self.slots[from].seq;
                let copied = u32::try_from(shared).ok().and_then(|p1| {
                    self.ctx
                        .copy_kv_cache_seq(source, seq, Some(0), Some(p1))
                        .ok()
                });
                if copied.is_some() {
                    self.slots[chosen].cached = tokens[..shared].to_vec();
                } else {
                    keep = 0;
                }
            }
            None => {
                if keep < self.slots[chosen].cached.len() {
                    let removed = u32::try_from(keep).ok().and_then(|p0| {
                        self.ctx
                            .clear_kv_cache_seq(Some(seq as u32), Some(p0), None)
                            .ok()
                    });
                    if removed == Some(true) {
                        self.slots[chosen].cached.truncate(keep);
                    } else {
                        // Some memory kinds cannot drop a suffix; then start this one over.
                        self.drop_sequence(chosen);
                        keep = 0;
                    }
                }
            }
        }

        keep
    }

    /// Starts `prepared`'s generation in slot `chosen`, whose cache holds its first `keep` tokens.
    /// A grammar that does not compile fails the request instead.
    fn begin(&mut self, chosen: usize, prepared: Prepared, keep: usize) {
        let Prepared { job, tokens, limit } = prepared;
        let grammar = match &job.grammar {
            Some(gbnf) => match LlamaSampler::grammar(self.model, gbnf, "root") {
                Ok(grammar) => Some(grammar),
                Err(e) => {
                    job.reply.finish(Err(EmbeddedError::Grammar(e.to_string())));
                    return;
                }
            },
            None => None,
        };
        self.clock += 1;
        let slot = &mut self.slots[chosen];
        slot.last_used = self.clock;
        slot.work = Some(Work {
            chain: sampler(job.temperature, job.seed),
            grammar,
            deadline: Deadline::new(job.time_limit),
            admitted: self.clock,
            job,
            tokens,
            reused: keep,
            limit,
            next_token: None,
            logits_at: None,
            generated: 0,
            text: String::new(),
            pending: Vec::new(),
            first_token: None,
        });
    }

    /// Whether the cache has room for a request in slot `chosen` that keeps `keep` cached tokens
    /// and may claim `claim` more cells. The cells every slot holds or may still claim count a
    /// shared prefix once per slot (an over-estimate). When room is short, idle slots other than
    /// `chosen` and the `donor` give up their prefixes, least recently used first; with nothing
    /// running, the request goes ahead anyway (it fits the context alone, `prepare` checked).
    fn make_room(
        &mut self,
        chosen: usize,
        keep: usize,
        donor: Option<usize>,
        claim: usize,
    ) -> bool {
        let capacity = self.ctx.n_ctx() as usize;
        let held = |slots: &[Slot]| -> usize {
            slots
                .iter()
                .enumerate()
                .map(|(index, slot)| {
                    let cached = if index == chosen {
                        keep
                    } else {
                        slot.cached.len()
                    };
                    cached
                        + slot
                            .work
                            .as_ref()
                            .map_or(0, |work| work.claim(slot.cached.len()))
                })
                .sum()
        };
        if held(&self.slots) + claim <= capacity {
            return true;
        }
        let mut idle: Vec<usize> = (0..self.slots.len())
            .filter(|&i| i != chosen && self.slots[i].work.is_none() && donor != Some(i))
            .collect();
        idle.sort_by_key(|&i| self.slots[i].last_used);
        for index in idle {
            if held(&self.slots) + claim <= capacity {
                return true;
            }
            self.drop_sequence(index);
        }
        held(&self.slots) + claim <= capacity || !self.busy()
    }

    /// Empties a slot's part of the cache.
    fn drop_sequence(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        if !slot.cached.is_empty() {
            // Removing a whole sequence always succeeds.
            let _ = self
                .ctx
                .clear_kv_cache_seq(Some(slot.seq as u32), None, None);
            slot.cached.clear();
        }
    }

    /// One llama.cpp decode for every running request: the next token of each that is
    /// generating, then prompt tokens of the others, oldest request first, up to the batch size.
    /// Then samples, streams and finishes what the decode produced logits for.
    fn step(&mut self) -> Result<(), EmbeddedError> {
        let added = self.fill_batch()?;
        let decoding = Instant::now();
        self.decode()?;
        let share = share_of(decoding.elapsed(), added.len());
        for (index, tokens) in added {
            let slot = &mut self.slots[index];
            slot.cached.extend(tokens);
            if let Some(work) = slot.work.as_mut() {
                work.deadline.charge(share);
            }
        }

        self.sample_and_finish();
        Ok(())
    }

    /// The batch of this step: the next token of each generating request, then prompt tokens
    /// of the others, oldest request first, up to the batch size. Returns, per slot, the tokens
    /// the batch adds to its sequence.
    fn fill_batch(&mut self) -> Result<Vec<(usize, Vec<LlamaToken>)>, EmbeddedError> {
        self.batch.clear();
        // (slot, tokens added to its sequence by this batch)
        let mut added: Vec<(usize, Vec<LlamaToken>)> = Vec::new();
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            let Some(work) = slot.work.as_mut() else {
                continue;
            };
            work.logits_at = None;
            if let Some(token) = work.next_token {
                let position = slot.cached.len();
                add(&mut self.batch, token, position, slot.seq, true)?;
                work.logits_at = Some(self.batch.n_tokens() - 1);
                added.push((index, vec![token]));
            }
        }
        let mut prompting: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .work
                    .as_ref()
                    .is_some_and(|work| work.next_token.is_none())
            })
            .collect();
        prompting.sort_by_key(|&i| self.slots[i].work.as_ref().map_or(0, |w| w.admitted));
        for index in prompting {
            let room = BATCH_TOKENS as usize - self.batch.n_tokens() as usize;
            if room == 0 {
                break;
            }
            let slot = &mut self.slots[index];
            let Some(work) = slot.work.as_mut() else {
                continue;
            };
            let from = slot.cached.len();
            let to = (from + room).min(work.tokens.len());
            for position in from..to {
                let last = position == work.tokens.len() - 1;
                add(
                    &mut self.batch,
                    work.tokens[position],
                    position,
                    slot.seq,
                    last,
                )?;
                if last {
                    work.logits_at = Some(self.batch.n_tokens() - 1);
                }
            }
            added.push((index, work.tokens[from..to].to_vec()));
        }
        Ok(added)
    }

    /// Samples what the decode produced logits for, streams it, and finishes each request that
    /// is done, cancelled or out of time.
    fn sample_and_finish(&mut self) {
        let (ctx, model) = (&self.ctx, self.model);
        for slot in &mut self.slots {
            let Some(work) = slot.work.as_mut() else {
                continue;
            };
            let sampling = Instant::now();
            let outcome = match work.logits_at.take() {
                Some(at) => sample_next(ctx, model, work, at),
                None => Ok(Sampled::More),
            };
            work.deadline.charge(sampling.elapsed());
            let end = match outcome {
                Ok(Sampled::Done(finish)) => Some(Ok(finish)),
                Ok(Sampled::More) if work.job.reply.is_closed() => {
                    Some(Err(EmbeddedError::Cancelled))
                }
                Ok(Sampled::More) => work.deadline.check().err().map(Err),
                Err(err) => Some(Err(err)),
            };
            if let Some(result) = end
                && let Some(work) = slot.work.take()
            {
                work.finish(result);
            }
        }
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

    /// Decodes the batch. When the cache is full, idle slots give up their prefixes and the
    /// decode is tried once more.
    fn decode(&mut self) -> Result<(), EmbeddedError> {
        match self.ctx.decode(&mut self.batch) {
            Ok(()) => return Ok(()),
            Err(DecodeError::NoKvCacheSlot) => {
                for index in 0..self.slots.len() {
                    if self.slots[index].work.is_none() {
                        self.drop_sequence(index);
                    }
                }
            }
            Err(e) => {
                return Err(EmbeddedError::Generation(format!(
                    "llama.cpp decode failed: {e}"
                )));
            }
        }
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| EmbeddedError::Generation(format!("llama.cpp decode failed: {e}")))
    }
}

/// Samples `work`'s next token from the logits at `at`, streams it, and says whether the
/// answer goes on.
fn sample_next(
    ctx: &LlamaContext,
    model: &LlamaModel,
    work: &mut Work,
    at: i32,
) -> Result<Sampled, EmbeddedError> {
    if work.first_token.is_none() {
        work.first_token = Some(Instant::now());
    }
    if work.generated >= work.limit {
        return Ok(Sampled::Done(Finish::Length));
    }
    let token = sample(ctx, &mut work.chain, work.grammar.as_mut(), at)?;
    let vocab = model.vocab();
    if vocab.is_eog(token) {
        return Ok(Sampled::Done(Finish::Stop));
    }
    work.generated += 1;
    work.pending
        .extend_from_slice(&vocab.token_to_piece(token, false, None));
    let piece = take_complete_utf8(&mut work.pending);
    if !piece.is_empty() {
        work.job.reply.text(&piece);
        work.text.push_str(&piece);
    }
    if work.generated == work.limit {
        // The last token of a `length` answer is never decoded: nothing reads its logits.
        return Ok(Sampled::Done(Finish::Length));
    }
    work.next_token = Some(token);
    Ok(Sampled::More)
}

/// The next token. With a grammar, the unconstrained choice is checked against it first and
/// the grammar is applied to the whole vocabulary only when it is refused, as llama.cpp's
/// own sampler does: most tokens of a JSON answer are what the model would pick anyway.
fn sample(
    ctx: &LlamaContext,
    chain: &mut LlamaSampler,
    grammar: Option<&mut LlamaSampler>,
    logits_at: i32,
) -> Result<LlamaToken, EmbeddedError> {
    let token = chain.sample(ctx, logits_at);
    let Some(grammar) = grammar else {
        return Ok(token);
    };
    let mut single = LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 1.0, 0.0)], false);
    single.apply_sampler(grammar);
    let allowed = single
        .data
        .first()
        .is_some_and(|data| data.logit().is_finite());
    let token = if allowed {
        token
    } else {
        let mut all = ctx.token_data_array_ith(logits_at);
        all.apply_sampler(grammar);
        all.apply_sampler(chain);
        all.selected_token().ok_or_else(|| {
            EmbeddedError::Grammar("no token is allowed by the schema's grammar here".into())
        })?
    };
    // The token is one the grammar allows (checked above), so accepting it cannot make
    // llama.cpp's grammar throw (it throws only for a token it does not allow).
    grammar.accept(token);
    Ok(token)
}

/// How many tokens `a` and `b` share from their start.
fn shared_prefix(a: &[LlamaToken], b: &[LlamaToken]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn add(
    batch: &mut LlamaBatch<'static>,
    token: LlamaToken,
    position: usize,
    seq: i32,
    logits: bool,
) -> Result<(), EmbeddedError> {
    let position = i32::try_from(position)
        .map_err(|_| EmbeddedError::Generation("position out of range".into()))?;
    batch
        .add(token, position, &[seq], logits)
        .map_err(|e| EmbeddedError::Generation(e.to_string()))
}

/// The time limit of the job in hand, counted in the model's time spent on it: its share of
/// each step it took part in (the step's decode divided among the requests in its batch) and
/// its own sampling. Waiting is not counted, in the queue or while other requests' prompts fill
/// a step; nor is the rest of a batch. A limit in wall time would charge each of 16 batched
/// requests the whole batch's time: on a busy 2-core machine, the first 15 replay answers of
/// the 1.5B model with 16 in flight (JSON under a grammar) all timed out at 120 s.
struct Deadline {
    started: Instant,
    limit: Duration,
    spent: Duration,
}

impl Deadline {
    fn new(limit: Duration) -> Self {
        Self {
            started: Instant::now(),
            limit,
            spent: Duration::ZERO,
        }
    }

    /// Counts `time` of the model's work as this job's.
    fn charge(&mut self, time: Duration) {
        self.spent = self.spent.saturating_add(time);
    }

    /// Checked between llama.cpp calls (each a batch of prompt tokens or one generated token),
    /// so a job overruns its limit by at most its share of one such call.
    fn check(&self) -> Result<(), EmbeddedError> {
        if self.spent > self.limit {
            return Err(EmbeddedError::TimedOut { limit: self.limit });
        }
        Ok(())
    }
}

/// One request's share of a decode that `requests` took part in.
fn share_of(decode: Duration, requests: usize) -> Duration {
    decode / u32::try_from(requests.max(1)).unwrap_or(u32::MAX)
}

/// Greedy at temperature 0; otherwise llama.cpp's default chain (top-k 40, top-p 0.95,
/// min-p 0.05) at the requested temperature, seeded with `seed`. llama.cpp takes a 32-bit seed:
/// the two halves of `seed` are folded into it.
fn sampler(temperature: f32, seed: u64) -> LlamaSampler {
    if temperature <= 0.0 {
        return LlamaSampler::greedy();
    }
    LlamaSampler::chain_simple([
        LlamaSampler::top_k(40),
        LlamaSampler::top_p(0.95, 1),
        LlamaSampler::min_p(0.05, 1),
        LlamaSampler::temp(temperature),
        LlamaSampler::dist((seed ^ (seed >> 32)) as u32),
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

    /// A request is charged its share of each batch, not the batch's whole time: 16 requests
    /// decoded together for 160 s of steps spend 10 s each against a 120 s limit.
    #[test]
    fn a_batched_request_is_charged_its_share_of_each_step() {
        let mut deadline = Deadline::new(Duration::from_secs(120));
        for _ in 0..160 {
            deadline.charge(share_of(Duration::from_secs(1), 16));
        }
        assert_eq!(deadline.spent, Duration::from_secs(10));
        assert!(deadline.check().is_ok());
        deadline.charge(Duration::from_secs(111));
        assert!(matches!(
            deadline.check(),
            Err(EmbeddedError::TimedOut { limit }) if limit == Duration::from_secs(120)
        ));
        assert_eq!(share_of(Duration::from_secs(3), 0), Duration::from_secs(3));
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut pending = vec![b'x', 0xff, b'y'];
        assert_eq!(take_complete_utf8(&mut pending), "x\u{fffd}y");
        assert!(pending.is_empty());
    }
}
