//! Replay: the seed and the best prompts of each execution, answered by each replay model on
//! every holdout row, and scored.
//!
//! The holdout is read a chunk of [`CHUNK_ROWS`] rows at a time; each chunk is answered, graded
//! and appended to `replay.csv` before the next is read, so memory holds one chunk. Identical
//! requests within a chunk (the same model, messages and parameters: a seed shared by variants,
//! for instance) are sent once. Every answer is appended to the run's cache the moment it
//! arrives, so a resumed run asks only what was never answered.
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use sha2::{Digest, Sha256};

use super::{AnswerFor, Event, Observer, RunError};
use gepa_lab_dataset::{Columns, Row, RowStream};
use gepa_lab_engine::{IterationRecord, Objectives};
use gepa_lab_experiment::ReplayPlan;
use gepa_lab_inference::{
    ChatMessage, ChatRequest, ChatResponse, Inference, InferenceError, sampling_seed,
};
use gepa_lab_prompt::{ChatTemplate, Message, Role};
use gepa_lab_score::{Score, Scorer, ScorerSpec, judge};
use gepa_lab_store::{
    CacheIndex, CachedAnswer, CsvAppender, ExecutionRecord, HistoryRow, IterationRow, ReplayOf,
    ReplayRow, RunDir, Version, may_be_best, objective_choices, rank_by_score,
};

/// A prompt to replay.
#[derive(Debug, Clone)]
struct ToReplay {
    version: Version,
    prompt: String,
}

/// The seed, then the best `top` distinct prompts of the history by the ranking rule, those whose
/// rows show a gain over the seed's ([`may_be_best`], from the execution's `iterations`) first:
/// only they can be best, and without one the highest is still replayed, to show what the
/// search found. A history prompt identical to the seed is the seed. With objectives, the
/// candidate they recommend and the cheapest one not significantly worse than it on the Pareto
/// rows come first, and both are replayed whatever `top` says ([`objective_choices`]).
fn versions(
    seed: &str,
    history: &[&HistoryRow],
    iterations: &[IterationRecord],
    top: usize,
    objectives: Option<&Objectives>,
) -> Vec<ToReplay> {
    let mut ranked: Vec<&HistoryRow> = history.to_vec();
    ranked.sort_by_key(|row| row.generation);
    rank_by_score(&mut ranked, |row| Some(row.score));
    let can_be_best: Vec<u32> = history
        .iter()
        .map(|row| row.generation)
        .filter(|&generation| may_be_best(history, iterations, generation))
        .collect();
    // Stable: by the ranking rule within each group.
    ranked.sort_by_key(|row| !can_be_best.contains(&row.generation));
    let mut chosen: Vec<u32> = objectives
        .map(|objectives| {
            let choices = objective_choices(history, objectives);
            choices
                .recommended
                .into_iter()
                .chain(choices.cheapest.map(|(generation, _)| generation))
                .collect()
        })
        .unwrap_or_default();
    chosen.dedup();
    // Stable: the chosen first, in their order, then the rest by the ranking rule.
    ranked.sort_by_key(|row| {
        chosen
            .iter()
            .position(|&g| g == row.generation)
            .unwrap_or(usize::MAX)
    });
    // The seed is replayed anyway: a chosen generation that is the seed takes no place.
    let evolved = chosen
        .iter()
        .filter(|&&g| {
            history
                .iter()
                .any(|r| r.generation == g && r.prompt != seed)
        })
        .count();
    let most = top.max(evolved);
    let mut out = vec![ToReplay {
        version: Version::Seed,
        prompt: seed.to_owned(),
    }];
    for row in ranked {
        if out.len() > most {
            break;
        }
        if out.iter().any(|version| version.prompt == row.prompt) {
            continue;
        }
        out.push(ToReplay {
            version: Version::Generation(row.generation),
            prompt: row.prompt.clone(),
        });
    }
    out
}

/// One cell of the replay: which answer a (variant, version, model, row, sample) needs.
pub(super) struct Cell {
    pub variant: String,
    pub version: ReplayOf,
    pub model: String,
    pub row: usize,
    /// Which of the row's repeated answers, from 1.
    pub sample: u32,
    pub inputs: std::collections::BTreeMap<String, String>,
    pub expected: String,
    pub key: String,
    /// Set when the prompt could not even be rendered for the row.
    pub error: Option<String>,
}

/// Who waits for an answer: one cell of the replay table.
pub(super) struct Waiting {
    pub variant: String,
    /// What the answer event names: the version or prompt file, or the grade of its answer.
    pub version: AnswerFor,
    pub row: usize,
}

/// A request to send and the cells waiting for its answer.
struct Pending {
    key: String,
    request: ChatRequest,
    waiting: Vec<Waiting>,
}

/// Requests not yet answered, each once, in the order first asked for.
#[derive(Default)]
pub(super) struct Queue {
    items: Vec<Pending>,
    by_key: HashMap<String, usize>,
}

impl Queue {
    pub(super) fn push(&mut self, key: String, request: ChatRequest, waiting: Waiting) {
        match self.by_key.get(&key) {
            Some(&at) => self.items[at].waiting.push(waiting),
            None => {
                self.by_key.insert(key.clone(), self.items.len());
                self.items.push(Pending {
                    key,
                    request,
                    waiting: vec![waiting],
                });
            }
        }
    }

    /// Requests to send: each distinct request once.
    pub(super) fn requests(&self) -> usize {
        self.items.len()
    }

    pub(super) fn cells(&self) -> usize {
        self.items.iter().map(|pending| pending.waiting.len()).sum()
    }
}

pub(super) fn cache_key(request: &ChatRequest) -> String {
    let bytes = serde_json::to_vec(request).expect("a chat request is plain JSON");
    format!("{:x}", Sha256::digest(bytes))
}

/// The cache key of one of a request's repeated answers: the request's own key for the first
/// (so answers cached before repeats existed still count), a key of its own for each other, so
/// that every repeat is asked and kept apart although the request sent is the same.
fn sample_key(request: &ChatRequest, sample: u32) -> String {
    if sample <= 1 {
        return cache_key(request);
    }
    let mut bytes = serde_json::to_vec(request).expect("a chat request is plain JSON");
    bytes.extend_from_slice(format!("\0sample {sample}").as_bytes());
    format!("{:x}", Sha256::digest(bytes))
}

/// A rendered part of a prompt as the chat message it is sent as: a prompt of one part is one
/// user message, as it always was, so its cache keys stay what they were.
pub(super) fn chat_messages(messages: Vec<Message>) -> Vec<ChatMessage> {
    messages
        .into_iter()
        .map(|message| match message.role {
            Role::System => ChatMessage::system(message.text),
            Role::User => ChatMessage::user(message.text),
            Role::Assistant => ChatMessage::assistant(message.text),
        })
        .collect()
}

fn replay_request(replay: &ReplayPlan, model: &str, messages: Vec<ChatMessage>) -> ChatRequest {
    let mut request = ChatRequest::new(model, messages);
    request.temperature = Some(replay.temperature);
    request.max_tokens = replay.max_tokens;
    request
}

/// Who answers, where answers are kept, and who hears of each one.
pub(super) struct Answering<'a> {
    pub inference: Arc<dyn Inference>,
    /// The folder whose `cache.jsonl` receives every answer the moment it arrives.
    pub cache: &'a RunDir,
    /// The folder whose `events.jsonl` records each outcome.
    pub events: &'a RunDir,
    pub observer: &'a dyn Observer,
    /// Which answers get a line in `events.jsonl`; the observer hears of every one.
    pub answer_events: AnswerEvents,
}

/// Which replay answers `events.jsonl` records. Every answer's model, latency, wait and error
/// are in `replay.csv` whatever this says; a line per answer costs about 185 bytes, 185 MB for a
/// million rows, and nothing reads it but a person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AnswerEvents {
    /// A line for every answer and every failed request.
    All,
    /// A line for every failed request only.
    #[default]
    Failed,
}

impl Answering<'_> {
    pub(super) fn emit(&self, event: Event) -> Result<(), RunError> {
        let logged = match &event {
            Event::Answer { error, .. } => {
                error.is_some() || self.answer_events == AnswerEvents::All
            }
            _ => true,
        };
        if logged {
            self.events.append_event(&event)?;
        }
        self.observer.event(&event);
        Ok(())
    }
}

/// The answers a replay can use without asking: those `cache.jsonl` held when it began (read from
/// the file when needed, see [`CacheIndex`]) and those that arrived since, held in memory until
/// [`AnswerCache::forget`].
pub(super) struct AnswerCache {
    earlier: CacheIndex,
    answers: HashMap<String, CachedAnswer>,
    simulated: bool,
}

impl AnswerCache {
    pub(super) fn open(dir: &RunDir) -> Result<Self, RunError> {
        let earlier = dir.index_cache()?;
        Ok(Self {
            simulated: earlier.simulated,
            earlier,
            answers: HashMap::new(),
        })
    }

    /// Whether an answer to `key` exists, in memory or in the file.
    pub(super) fn contains(&self, key: &str) -> bool {
        self.answers.contains_key(key) || self.earlier.contains(key)
    }

    /// Brings the earlier answer to `key`, if any, into memory, where [`AnswerCache::get`] finds
    /// it.
    pub(super) fn load(&mut self, key: &str) -> Result<(), RunError> {
        if !self.answers.contains_key(key)
            && let Some(answer) = self.earlier.read(key)?
        {
            self.answers.insert(key.to_owned(), answer);
        }
        Ok(())
    }

    /// The answer to `key`, among those in memory.
    pub(super) fn get(&self, key: &str) -> Option<&CachedAnswer> {
        self.answers.get(key)
    }

    fn insert(&mut self, answer: CachedAnswer) {
        self.simulated |= answer.simulated;
        self.answers.insert(answer.key.clone(), answer);
    }

    /// Lets go of the answers in memory; they stay in `cache.jsonl`.
    pub(super) fn forget(&mut self) {
        self.answers = HashMap::new();
    }

    /// Whether some answer came from the deterministic test stand-in model.
    pub(super) fn simulated(&self) -> bool {
        self.simulated
    }

    /// Says, when there were any, how many lines of the cache file held no answer and were
    /// skipped.
    pub(super) fn report_skipped(&self, answering: &Answering<'_>) -> Result<(), RunError> {
        match self.earlier.skipped {
            0 => Ok(()),
            lines => answering.emit(Event::CacheLinesSkipped { lines }),
        }
    }
}

/// The longest answer kept for a request: 64 bytes per token asked for (no token is longer), and
/// never less than 64 KiB; 1 MiB when the request sets no limit.
fn answer_limit(max_tokens: Option<u32>) -> usize {
    max_tokens.map_or(1024 * 1024, |tokens| {
        (tokens as usize).saturating_mul(64).max(64 * 1024)
    })
}

/// Requests to one model in a row that failed for the service's reasons
/// ([`InferenceError::is_outage`]) after which the rest of the replay on that model is not
/// sent: each would spend its own retries (24 rows answered 500 throughout took 40 s at
/// concurrency 2, and a long holdout would take hours). They stay missing, and `run --resume`
/// or the same `compare` asks for them again. Other models, which may be served elsewhere, go
/// on.
const OUTAGE_AFTER: usize = 8;

/// What keeps requests from being sent, shared by the requests in flight: a model's outage, or
/// the key the service refused.
#[derive(Debug, Default)]
struct Stops {
    /// By model, once [`OUTAGE_AFTER`] of its requests failed in a row: why the rest are not
    /// sent.
    outages: HashMap<String, String>,
    /// Once the service refused the key (401 or 403): why no request is sent any more. Every
    /// other request goes out with the same key and would be refused the same way; only the
    /// embedded models, which take no key, go on (unless one of them was refused).
    key_refused: Option<String>,
    /// The models a request to which was refused for its key.
    refused_models: std::collections::HashSet<String>,
}

impl Stops {
    /// Why a request to `model` is not to be sent, if it is not.
    fn reason(&self, model: &str) -> Option<String> {
        let keyed =
            !gepa_lab_inference::is_local_model(model) || self.refused_models.contains(model);
        self.key_refused
            .clone()
            .filter(|_| keyed)
            .or_else(|| self.outages.get(model).cloned())
    }
}

type SharedStops = Arc<std::sync::Mutex<Stops>>;

fn lock(stops: &std::sync::Mutex<Stops>) -> std::sync::MutexGuard<'_, Stops> {
    stops.lock().unwrap_or_else(|e| e.into_inner())
}

/// Why a replay request has no answer.
enum Sent {
    Failed(InferenceError),
    /// Not sent, and why: the service was failing.
    NotSent(String),
}

impl std::fmt::Display for Sent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Sent::Failed(err) => err.fmt(f),
            Sent::NotSent(reason) => f.write_str(reason),
        }
    }
}

/// Why each request that has no answer failed, by cache key, and whether any failed because the
/// service refused the key (401 or 403: told by the status, not by the message).
#[derive(Debug, Default)]
pub(super) struct Failures {
    reasons: HashMap<String, String>,
    pub key_refused: bool,
    /// Why requests are not sent any more (a model's outage, the key refused). Kept for the
    /// whole replay, chunk after chunk.
    stops: SharedStops,
    /// By model, its requests that failed for the service's reasons in a row.
    failed_in_a_row: HashMap<String, usize>,
}

impl Failures {
    /// Lets go of the reasons of the requests answered so far (their rows are written); what
    /// the outages decided stays.
    pub(super) fn forget_reasons(&mut self) {
        self.reasons = HashMap::new();
    }

    fn record(&mut self, key: &str, reason: String) {
        self.reasons.insert(key.to_owned(), reason);
    }

    fn failed(&mut self, key: &str, err: &Sent) {
        if let Sent::Failed(err) = err
            && err.api().is_some_and(|api| api.refuses_key())
        {
            self.key_refused = true;
        }
        self.record(key, err.to_string());
    }

    pub(super) fn get(&self, key: &str) -> Option<&String> {
        self.reasons.get(key)
    }
}

/// Answers every request not in the cache, at most `concurrency` at a time; a model's requests
/// stop once [`OUTAGE_AFTER`] of them failed in a row, and every request stops once the service
/// refused the key.
pub(super) async fn answer_all(
    answering: &Answering<'_>,
    queue: Queue,
    concurrency: usize,
    cache: &mut AnswerCache,
    errors: &mut Failures,
) -> Result<(), RunError> {
    let inference = answering.inference.clone();
    let stops = errors.stops.clone();
    let mut answers = futures::stream::iter(
        queue
            .items
            .into_iter()
            .map(|pending| ask(inference.clone(), stops.clone(), pending)),
    )
    .buffer_unordered(concurrency.max(1));
    while let Some((
        Pending {
            key,
            request,
            waiting,
        },
        elapsed,
        result,
    )) = answers.next().await
    {
        let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        // What the client measured of the answered request; the rest of the time this request
        // took was waiting. A backend that measures nothing counts all of it as latency.
        note_outage(
            answering,
            &stops,
            &mut errors.failed_in_a_row,
            &request.model,
            &result,
        )?;
        note_refusal(answering, &stops, &request.model, &result)?;
        let latency = result
            .as_ref()
            .ok()
            .and_then(|r| r.latency)
            .map_or(elapsed, |latency| latency.min(elapsed));
        let latency_ms = millis(latency);
        let waited_ms = millis(elapsed - latency);
        let error = keep_answer(
            answering,
            &key,
            &request,
            result,
            (latency_ms, waited_ms),
            cache,
            errors,
        )?;
        for Waiting {
            variant,
            version,
            row,
        } in waiting
        {
            answering.emit(Event::Answer {
                variant,
                version,
                model: request.model.clone(),
                row,
                answered_by: cache
                    .get(&key)
                    .map(|a| a.answered_by.clone())
                    .unwrap_or_default(),
                latency_ms,
                waited_ms,
                error: error.clone(),
            })?;
        }
    }
    Ok(())
}

/// Sends one pending request, unless requests have stopped (its model's after an outage, or all
/// of them after the key was refused); returns it with the time it took and its answer (or why
/// there is none).
async fn ask(
    inference: Arc<dyn Inference>,
    stops: SharedStops,
    pending: Pending,
) -> (Pending, std::time::Duration, Result<ChatResponse, Sent>) {
    let started = Instant::now();
    let stopped = lock(&stops).reason(&pending.request.model);
    let result = match stopped {
        Some(reason) => Err(Sent::NotSent(reason)),
        None => inference.chat(&pending.request).await.map_err(Sent::Failed),
    };
    (pending, started.elapsed(), result)
}

/// Counts `model`'s failures for the service's reasons in a row; at the [`OUTAGE_AFTER`]th the
/// event is emitted and the model's remaining requests are marked not to be sent, with why.
fn note_outage(
    answering: &Answering<'_>,
    stops: &std::sync::Mutex<Stops>,
    failed_in_a_row: &mut HashMap<String, usize>,
    model: &str,
    result: &Result<ChatResponse, Sent>,
) -> Result<(), RunError> {
    let in_a_row = failed_in_a_row.entry(model.to_owned()).or_default();
    match result {
        Err(Sent::Failed(err)) if err.is_outage() => *in_a_row += 1,
        Err(Sent::NotSent(_)) => {}
        _ => *in_a_row = 0,
    }
    if *in_a_row == OUTAGE_AFTER
        && let Err(Sent::Failed(err)) = result
    {
        answering.emit(Event::ReplayStopped {
            model: model.to_owned(),
            failed: OUTAGE_AFTER,
            last_error: err.to_string(),
        })?;
        lock(stops).outages.insert(
            model.to_owned(),
            format!(
                "not sent: the service failed {OUTAGE_AFTER} requests to {} in a row, the \
                 last with \"{err}\"; a resume asks again",
                model
            ),
        );
    }
    Ok(())
}

/// At the first request the service refused for its key (401 or 403), the event is emitted and
/// no request of the replay is sent any more: each would be refused the same way. Those not sent
/// stay missing, with why, and a resume with a valid key asks for them.
fn note_refusal(
    answering: &Answering<'_>,
    stops: &std::sync::Mutex<Stops>,
    model: &str,
    result: &Result<ChatResponse, Sent>,
) -> Result<(), RunError> {
    let Err(Sent::Failed(err)) = result else {
        return Ok(());
    };
    let Some(api) = err.api() else {
        return Ok(());
    };
    if !api.refuses_key() {
        return Ok(());
    }
    let first = {
        let mut stops = lock(stops);
        stops.refused_models.insert(model.to_owned());
        stops.key_refused.is_none()
    };
    if first {
        refuse_key(
            stops,
            &format!("a request to {model} was answered \"{api}\""),
        );
        answering.emit(Event::ReplayKeyRefused {
            refusal: format!("a request to {model} was answered {api}"),
        })?;
    }
    Ok(())
}

/// From now on no request that takes the key is sent: `refusal` says how the key was refused.
fn refuse_key(stops: &std::sync::Mutex<Stops>, refusal: &str) {
    lock(stops).key_refused = Some(format!(
        "not sent: the service refused the key ({refusal}); a resume with a valid key asks again"
    ));
}

/// Keeps an answer: appended to the cache file and to `cache`, unless it is far longer than its
/// token limit allows. Returns why there is no answer (also recorded in `errors`), if so.
fn keep_answer(
    answering: &Answering<'_>,
    key: &str,
    request: &ChatRequest,
    result: Result<ChatResponse, Sent>,
    (latency_ms, waited_ms): (u64, u64),
    cache: &mut AnswerCache,
    errors: &mut Failures,
) -> Result<Option<String>, RunError> {
    let limit = answer_limit(request.max_tokens);
    Ok(match result {
        Ok(response) if response.content().len() > limit => {
            // Not kept, not scored: an answer far longer than its token limit allows is a
            // service's fault, and keeping it whole costs memory and disk.
            let error = format!(
                "the answer is {} bytes, more than {limit} that max_tokens {} allows; not kept",
                response.content().len(),
                request
                    .max_tokens
                    .map_or_else(|| "(none)".to_owned(), |t| t.to_string())
            );
            errors.record(key, error.clone());
            Some(error)
        }
        Ok(response) => {
            let usage = response.usage.unwrap_or_default();
            let answer = CachedAnswer {
                key: key.to_owned(),
                answered_by: response.model.trim_end_matches(" (simulated)").to_owned(),
                simulated: response.model.ends_with("(simulated)"),
                output: response.content().to_owned(),
                node_id: response.node_id().unwrap_or_default().to_owned(),
                latency_ms,
                waited_ms: Some(waited_ms),
                prompt_tokens: usage.prompt_tokens,
                completion_tokens: usage.completion_tokens,
            };
            answering.cache.append_cached(&answer)?;
            cache.insert(answer);
            None
        }
        Err(err) => {
            errors.failed(key, &err);
            Some(err.to_string())
        }
    })
}

/// Where a cell sits in the replay table.
#[derive(Clone, Copy)]
pub(super) struct CellAt<'a> {
    pub variant: &'a str,
    pub version: &'a ReplayOf,
    pub model: &'a str,
    /// Which of the row's repeated answers, from 1.
    pub sample: u32,
}

/// Renders `template` for `row` and queues the request `request` makes of it, unless its answer
/// is cached. A prompt that cannot be rendered for the row becomes a cell with an error.
pub(super) fn queue_cell(
    queue: &mut Queue,
    cache: &AnswerCache,
    template: &Result<ChatTemplate, gepa_lab_prompt::TemplateError>,
    row: &gepa_lab_dataset::Row,
    at: CellAt<'_>,
    request: impl FnOnce(Vec<ChatMessage>) -> ChatRequest,
) -> Cell {
    let rendered = template
        .as_ref()
        .map_err(ToString::to_string)
        .and_then(|t| {
            t.render(|name| row.inputs.get(name).map(String::as_str))
                .map_err(|e| e.to_string())
        });
    let (key, error) = match rendered {
        Ok(messages) => {
            let mut request = request(chat_messages(messages));
            let key = sample_key(&request, at.sample);
            // The answer above temperature 0 is then a function of its cache key, as the cache
            // already treats it: asked again, the embedded model answers the same.
            request.seed = Some(sampling_seed(&[b"replay", key.as_bytes()]));
            if !cache.contains(&key) {
                let waiting = Waiting {
                    variant: at.variant.to_owned(),
                    version: AnswerFor::Version(at.version.clone()),
                    row: row.index + 1,
                };
                queue.push(key.clone(), request, waiting);
            }
            (key, None)
        }
        Err(error) => (
            String::new(),
            Some(format!(
                "the prompt cannot be rendered for this row: {error}"
            )),
        ),
    };
    Cell {
        variant: at.variant.to_owned(),
        version: at.version.clone(),
        model: at.model.to_owned(),
        row: row.index + 1,
        sample: at.sample,
        inputs: row.inputs.clone(),
        expected: row.expected.clone(),
        key,
        error,
    }
}

/// The score of a cell nobody answered.
pub(super) fn no_answer() -> Score {
    Score {
        value: 0.0,
        feedback: "no answer".to_owned(),
    }
}

/// The line of `replay.csv` for an answer that could not be scored (a failed judge call, a
/// failed scorer command): an error row, left out of every mean and test, not a wrong answer.
pub(super) fn unscored(
    cell: &Cell,
    answer: Option<&CachedAnswer>,
    reason: &str,
    errors: &Failures,
) -> ReplayRow {
    let mut row = replay_row(cell, answer, no_answer(), errors);
    row.feedback = "not graded".to_owned();
    row.error = reason.to_owned();
    row
}

/// The line of `replay.csv` for a cell, its answer (if any) and that answer's score.
pub(super) fn replay_row(
    cell: &Cell,
    answer: Option<&CachedAnswer>,
    score: Score,
    errors: &Failures,
) -> ReplayRow {
    let error = cell
        .error
        .clone()
        .or_else(|| errors.get(&cell.key).cloned())
        .unwrap_or_default();
    ReplayRow {
        variant: cell.variant.clone(),
        version: cell.version.clone(),
        model: cell.model.clone(),
        answered_by: answer.map(|a| a.answered_by.clone()).unwrap_or_default(),
        row: cell.row,
        sample: cell.sample,
        inputs: cell.inputs.clone(),
        expected: cell.expected.clone(),
        output: answer.map(|a| a.output.clone()).unwrap_or_default(),
        score: score.value,
        feedback: score.feedback,
        latency_ms: answer.map_or(0, |a| a.latency_ms),
        waited_ms: answer.and_then(|a| a.waited_ms),
        prompt_tokens: answer.map_or(0, |a| u32::try_from(a.prompt_tokens).unwrap_or(u32::MAX)),
        completion_tokens: answer.map_or(0, |a| {
            u32::try_from(a.completion_tokens).unwrap_or(u32::MAX)
        }),
        node_id: answer.map(|a| a.node_id.clone()).unwrap_or_default(),
        error,
    }
}

/// Holdout rows replayed together: every cell of these rows (each execution, model, version and
/// sample) is planned, answered, graded and written before the next rows are read, so memory
/// holds one chunk whatever the holdout's size. Identical requests within a chunk (a seed shared
/// by variants, which meet on the same rows) are sent once.
pub(super) const CHUNK_ROWS: usize = 1024;

/// The holdout of one execution: which data rows of which file, read a chunk at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Holdout {
    pub file: std::path::PathBuf,
    pub columns: Columns,
    /// 0-based data-row positions; the replay goes through them in file order.
    pub rows: gepa_lab_dataset::RowSet,
}

/// What a replay produced: how many rows `replay.csv` got and how many of them have no answer,
/// whether any answer came from the deterministic stand-in model (the run is then marked
/// simulated), and whether the key was refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replayed {
    pub rows: usize,
    /// Rows with an error instead of a scored answer.
    pub errors: usize,
    pub simulated: bool,
    /// Some request failed because the service refused the key.
    pub key_refused: bool,
}

/// Replays the versions of each execution's history on its holdout rows (`holdouts`, by
/// execution, `None` where the execution has no replay), a chunk of rows at a time: answering
/// what the cache lacks, scoring every cell and appending its row to `out`. Only the cache, the
/// event log and `out` are written to. `key_refused`, when the key the replay uses was already
/// refused (how), sends no request that takes it.
pub(super) async fn replay(
    answering: &Answering<'_>,
    executions: &[ExecutionRecord],
    holdouts: &[Option<Holdout>],
    history: &[HistoryRow],
    iterations: &[IterationRow],
    out: &mut CsvAppender,
    key_refused: Option<&str>,
) -> Result<Replayed, RunError> {
    let mut cache = AnswerCache::open(answering.cache)?;
    cache.report_skipped(answering)?;
    let table = Table::new(executions, holdouts, history, iterations)?;
    // A first pass renders every cell without sending anything, for the counts the progress
    // line shows; the second renders them again, chunk by chunk, and sends.
    answering.emit(table.count(&cache)?)?;
    let mut errors = Failures::default();
    if let Some(refusal) = key_refused {
        refuse_key(&errors.stops, refusal);
        errors.key_refused = true;
        answering.emit(Event::ReplayKeyRefused {
            refusal: refusal.to_owned(),
        })?;
    }
    let mut replayed = Replayed::default();
    let mut chunks = table.chunks()?;
    while let Some(rows) = chunks.next()? {
        let (cells, queue) = table.plan(&rows, &cache);
        for cell in &cells {
            cache.load(&cell.key)?;
        }
        answer_all(answering, queue, table.concurrency, &mut cache, &mut errors).await?;
        let judged = grade(
            answering,
            &table.judges,
            &cells,
            &mut cache,
            table.concurrency,
            &mut errors,
        )
        .await?;
        for row in score(&cells, &cache, &table.scorers, &judged, &errors) {
            replayed.rows += 1;
            replayed.errors += usize::from(!row.error.is_empty());
            out.append(&row)?;
        }
        cache.forget();
        errors.forget_reasons();
    }
    replayed.simulated = cache.simulated();
    replayed.key_refused = errors.key_refused;
    Ok(replayed)
}

/// One execution's part of the replay table.
struct Part<'a> {
    variant: String,
    replay: &'a ReplayPlan,
    versions: Vec<(
        ReplayOf,
        Result<ChatTemplate, gepa_lab_prompt::TemplateError>,
    )>,
    holdout: &'a Holdout,
}

/// The replay table of a run: for each execution with a replay, its versions on its holdout
/// rows, on each of its replay models, as often as `repeat` says.
struct Table<'a> {
    parts: Vec<Part<'a>>,
    /// Scorers by variant; a variant graded by the judge has none.
    scorers: HashMap<String, Scorer>,
    /// Judges by variant, for the variants graded by one.
    judges: HashMap<String, judge::JudgePlan>,
    /// The largest `replay.concurrency` of the executions.
    concurrency: usize,
}

impl<'a> Table<'a> {
    fn new(
        executions: &'a [ExecutionRecord],
        holdouts: &'a [Option<Holdout>],
        history: &[HistoryRow],
        iterations: &[IterationRow],
    ) -> Result<Self, RunError> {
        let mut table = Table {
            parts: Vec::new(),
            scorers: HashMap::new(),
            judges: HashMap::new(),
            concurrency: 1,
        };
        for (record, holdout) in executions.iter().zip(holdouts) {
            let execution = &record.plan;
            let (Some(replay), Some(holdout)) = (&execution.replay, holdout) else {
                continue;
            };
            table.concurrency = table.concurrency.max(replay.concurrency);
            let variant = record.variant().to_owned();
            let own_history: Vec<&HistoryRow> = history
                .iter()
                .filter(|row| row.variant == variant)
                .collect();
            let own_iterations: Vec<IterationRecord> = iterations
                .iter()
                .filter(|row| {
                    row.variant == variant
                        && record.state.evolution_id() == Some(row.evolution_id.as_str())
                })
                .map(|row| row.record.clone())
                .collect();
            let objectives = execution
                .start
                .engine
                .as_ref()
                .and_then(|engine| engine.objectives.as_ref());
            let versions = versions(
                &execution.start.prompt,
                &own_history,
                &own_iterations,
                replay.top,
                objectives,
            )
            .into_iter()
            .map(|version| {
                (
                    ReplayOf::Version(version.version),
                    ChatTemplate::parse(&version.prompt),
                )
            })
            .collect();
            match (&replay.scorer, &replay.judge) {
                (ScorerSpec::Judge, Some(judge)) => {
                    table.judges.insert(variant.clone(), judge.clone());
                }
                (ScorerSpec::Judge, None) => {}
                (spec, _) => {
                    // Schema paths in a plan are already resolved against the experiment file.
                    let scorer = Scorer::new(spec, std::path::Path::new("."))?;
                    table.scorers.insert(variant.clone(), scorer);
                }
            }
            table.parts.push(Part {
                variant,
                replay,
                versions,
                holdout,
            });
        }
        Ok(table)
    }

    /// The holdouts of the parts, read [`CHUNK_ROWS`] rows at a time.
    fn chunks(&self) -> Result<Chunks, RunError> {
        // Parts with the same holdout (the variants of a matrix on one dataset and split) share
        // one stream: the file is read once, and each chunk's rows are held once.
        let mut distinct: Vec<&Holdout> = Vec::new();
        let mut streams = Vec::new();
        let mut stream_of = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            let holdout = part.holdout;
            let at = match distinct.iter().position(|seen| *seen == holdout) {
                Some(at) => at,
                None => {
                    streams.push(RowStream::open(
                        &holdout.file,
                        &holdout.columns,
                        &holdout.rows,
                    )?);
                    distinct.push(holdout);
                    distinct.len() - 1
                }
            };
            stream_of.push(at);
        }
        Ok(Chunks { streams, stream_of })
    }

    /// What the replay will ask, chunk by chunk, as the event that says so; nothing is sent.
    fn count(&self, cache: &AnswerCache) -> Result<Event, RunError> {
        let (mut requests, mut waiting, mut cached) = (0, 0, 0);
        let mut chunks = self.chunks()?;
        while let Some(rows) = chunks.next()? {
            let (cells, queue) = self.plan(&rows, cache);
            requests += queue.requests();
            waiting += queue.cells();
            cached += cells.len() - queue.cells();
        }
        Ok(Event::ReplayPlanned {
            requests,
            waiting,
            cached,
        })
    }

    /// Renders every cell of a chunk (`rows`, by part) and queues the requests the cache lacks.
    fn plan(&self, rows: &[Arc<Vec<Row>>], cache: &AnswerCache) -> (Vec<Cell>, Queue) {
        let mut cells: Vec<Cell> = Vec::new();
        let mut queue = Queue::default();
        for (part, rows) in self.parts.iter().zip(rows) {
            for model in &part.replay.models {
                for (of, template) in &part.versions {
                    for row in rows.iter() {
                        for sample in 1..=part.replay.repeat {
                            let at = CellAt {
                                variant: &part.variant,
                                version: of,
                                model,
                                sample,
                            };
                            cells.push(queue_cell(
                                &mut queue,
                                cache,
                                template,
                                row,
                                at,
                                |prompt| replay_request(part.replay, model, prompt),
                            ));
                        }
                    }
                }
            }
        }
        (cells, queue)
    }
}

/// The next [`CHUNK_ROWS`] holdout rows of each part.
struct Chunks {
    /// One per distinct holdout.
    streams: Vec<RowStream>,
    /// Which stream each part reads.
    stream_of: Vec<usize>,
}

impl Chunks {
    /// The next rows, by part; `None` once every holdout was read.
    fn next(&mut self) -> Result<Option<Vec<Arc<Vec<Row>>>>, RunError> {
        let mut read = Vec::with_capacity(self.streams.len());
        for stream in &mut self.streams {
            read.push(Arc::new(stream.next_chunk(CHUNK_ROWS)?));
        }
        if read.iter().all(|rows| rows.is_empty()) {
            return Ok(None);
        }
        Ok(Some(
            self.stream_of.iter().map(|&at| read[at].clone()).collect(),
        ))
    }
}

/// Each cell's line of `replay.csv`: its answer scored by its variant's scorer or judge, an
/// unscored error row when grading failed, or no answer.
fn score(
    cells: &[Cell],
    cache: &AnswerCache,
    scorers: &HashMap<String, Scorer>,
    judged: &Grades,
    errors: &Failures,
) -> Vec<ReplayRow> {
    cells
        .iter()
        .map(|cell| {
            let answer = cache.get(&cell.key);
            let score = match (answer, scorers.get(&cell.variant)) {
                (Some(answer), Some(scorer)) => {
                    match scorer.score(Some(cell.row), &answer.output, &cell.expected) {
                        Ok(score) => score,
                        Err(err) => return unscored(cell, Some(answer), &err.to_string(), errors),
                    }
                }
                (Some(answer), None) => {
                    match judged.get(&(cell.variant.clone(), answer.key.clone())) {
                        Some(Ok(grade)) => grade.clone(),
                        // Not a wrong answer: an answer nobody graded. The row is an error, so
                        // it is counted as such and left out of every mean and test.
                        failed => {
                            let reason = match failed {
                                Some(Err(reason)) => reason.clone(),
                                _ => "the judge gave no grade".to_owned(),
                            };
                            let reason = format!("judge: {reason}");
                            return unscored(cell, Some(answer), &reason, errors);
                        }
                    }
                }
                (None, _) => no_answer(),
            };
            replay_row(cell, answer, score, errors)
        })
        .collect()
}

/// Grades by (variant, answer key): the judge's score, or why there is none.
pub(super) type Grades = HashMap<(String, String), Result<Score, String>>;

/// Grades the answered cells of the variants in `judges` with each variant's judge. Judge
/// requests go through the same cache as the answers; a grade is `Err` with the reason when the
/// judge call failed or its answer holds no grade.
pub(super) async fn grade(
    answering: &Answering<'_>,
    judges: &HashMap<String, judge::JudgePlan>,
    cells: &[Cell],
    cache: &mut AnswerCache,
    concurrency: usize,
    errors: &mut Failures,
) -> Result<Grades, RunError> {
    if judges.is_empty() {
        return Ok(HashMap::new());
    }
    let mut wanted: Vec<(String, String, String)> = Vec::new(); // (variant, answer key, judge key)
    let mut queue = Queue::default();
    for cell in cells {
        let (Some(judge_plan), Some(answer)) = (judges.get(&cell.variant), cache.get(&cell.key))
        else {
            continue;
        };
        let request = judge::request(judge_plan, &answer.output, &cell.expected);
        let key = cache_key(&request);
        if cache.contains(&key) {
            cache.load(&key)?;
        } else {
            let waiting = Waiting {
                variant: cell.variant.clone(),
                version: AnswerFor::Grade(cell.version.clone()),
                row: cell.row,
            };
            queue.push(key.clone(), request, waiting);
        }
        wanted.push((cell.variant.clone(), cell.key.clone(), key));
    }
    answer_all(answering, queue, concurrency, cache, errors).await?;
    Ok(wanted
        .into_iter()
        .map(|(variant, answer_key, judge_key)| {
            // Failed judge requests are recorded under the judge request's own key.
            let grade = match cache.get(&judge_key) {
                Some(grade) => judge::parse(&grade.output),
                None => Err(errors
                    .get(&judge_key)
                    .cloned()
                    .unwrap_or_else(|| "the judge gave no grade".to_owned())),
            };
            ((variant, answer_key), grade)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(generation: u32, score: f64, prompt: &str) -> HistoryRow {
        HistoryRow {
            variant: String::new(),
            evolution_id: "e".into(),
            generation,
            score,
            prompt: prompt.into(),
            budget_used: None,
            costs: None,
            pareto_scores: None,
        }
    }

    #[test]
    fn with_objectives_the_recommended_and_the_cheapest_are_replayed_first() {
        let costed = |generation: u32, scores: &[f64], tokens: f64| HistoryRow {
            costs: Some(gepa_lab_engine::Costs {
                prompt_tokens: tokens,
                answer_tokens: 1.0,
                latency_ms: None,
                rows: scores.len(),
            }),
            pareto_scores: Some(scores.to_vec()),
            ..row(
                generation,
                scores.iter().sum::<f64>() / scores.len() as f64,
                &format!("p{generation} {{x}}"),
            )
        };
        let history = [
            costed(0, &[0.0; 8], 10.0),
            costed(1, &[1., 1., 1., 1., 1., 1., 0., 0.], 20.0),
            costed(2, &[1., 1., 1., 1., 1., 1., 1., 0.], 40.0),
            costed(3, &[1.0; 8], 90.0),
        ];
        let refs: Vec<&HistoryRow> = history.iter().collect();
        let objectives = Objectives {
            prompt_tokens: Some(gepa_lab_engine::Objective::Limit(50.0)),
            ..Objectives::default()
        };
        let labels = |top: usize, objectives: Option<&Objectives>| -> Vec<String> {
            versions("p0 {x}", &refs, &[], top, objectives)
                .into_iter()
                .map(|v| v.version.to_string())
                .collect()
        };
        // g3 is over the limit: g2 is recommended, and g1, one row behind on 8 (p = 1), is the
        // cheapest close to it (the seed, 7 rows behind, p = 0.016, is significantly worse).
        // Both are replayed even with top = 1.
        assert_eq!(labels(1, Some(&objectives)), ["seed", "g2", "g1"]);
        assert_eq!(labels(3, Some(&objectives)), ["seed", "g2", "g1", "g3"]);
        assert_eq!(labels(1, None), ["seed", "g3"]);
    }

    #[test]
    fn versions_are_the_seed_then_the_best_distinct_prompts() {
        let history = [
            row(0, 0.5, "seed {x}"),
            row(1, 0.7, "a {x}"),
            row(2, 0.9, "b {x}"),
            row(3, 0.7, "c {x}"),
            row(4, 0.9, "b {x}"),
        ];
        let refs: Vec<&HistoryRow> = history.iter().collect();
        let labels: Vec<String> = versions("seed {x}", &refs, &[], 3, None)
            .into_iter()
            .map(|v| v.version.to_string())
            .collect();
        // b (0.9, gen 2 before its repeat in gen 4), then the 0.7 tie goes to the earlier gen 1.
        assert_eq!(labels, ["seed", "g2", "g1", "g3"]);
        let labels: Vec<String> = versions("seed {x}", &refs, &[], 1, None)
            .into_iter()
            .map(|v| v.version.to_string())
            .collect();
        assert_eq!(labels, ["seed", "g2"]);
    }

    /// A prompt that scores higher without winning enough Pareto rows cannot be best, so one
    /// that does is replayed first; without one, the highest still is.
    #[test]
    fn prompts_that_show_a_gain_over_the_seed_are_replayed_first() {
        let scored = |generation: u32, scores: &[f64]| HistoryRow {
            pareto_scores: Some(scores.to_vec()),
            ..row(
                generation,
                scores.iter().sum::<f64>() / scores.len() as f64,
                &format!("p{generation} {{x}}"),
            )
        };
        let seed = scored(0, &[0., 0., 0., 1., 1., 0.]);
        // 4 of 6: four rows won, two lost (p = 0.34).
        let lucky = scored(1, &[1., 1., 1., 0., 0., 1.]);
        // 4 of 6 too, later (a tie goes to the earlier): two rows won, none lost (p = 0.25).
        let shown = scored(2, &[1., 0., 0., 1., 1., 1.]);
        let labels = |history: &[&HistoryRow]| -> Vec<String> {
            versions("p0 {x}", history, &[], 1, None)
                .into_iter()
                .map(|v| v.version.to_string())
                .collect()
        };
        assert_eq!(labels(&[&seed, &lucky, &shown]), ["seed", "g2"]);
        assert_eq!(labels(&[&seed, &lucky]), ["seed", "g1"]);
    }

    #[test]
    fn parts_on_the_same_holdout_share_one_stream_and_its_rows() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("data.csv");
        let mut text = String::from("review,label\n");
        for i in 0..3_000 {
            text.push_str(&format!("review {i},positive\n"));
        }
        std::fs::write(&file, text).unwrap();
        let columns = gepa_lab_dataset::read_header(&file)
            .unwrap()
            .columns(&["review".to_owned()], "label")
            .unwrap();
        let holdout = |rows: gepa_lab_dataset::RowSet| Holdout {
            file: file.clone(),
            columns: columns.clone(),
            rows,
        };
        let (a, b, c) = (
            holdout(gepa_lab_dataset::RowSet::Range(0..3_000)),
            holdout(gepa_lab_dataset::RowSet::Range(0..3_000)),
            holdout(gepa_lab_dataset::RowSet::of([5, 1])),
        );
        let replay = ReplayPlan {
            models: vec!["m".into()],
            top: 1,
            scorer: ScorerSpec::ExactMatch,
            temperature: 0.0,
            max_tokens: None,
            concurrency: 1,
            repeat: 1,
            judge: None,
        };
        let part = |holdout| Part {
            variant: String::new(),
            replay: &replay,
            versions: Vec::new(),
            holdout,
        };
        let table = Table {
            parts: vec![part(&a), part(&b), part(&c)],
            scorers: HashMap::new(),
            judges: HashMap::new(),
            concurrency: 1,
        };
        let mut chunks = table.chunks().unwrap();
        assert_eq!(chunks.streams.len(), 2, "a and b read one stream");
        let first = chunks.next().unwrap().unwrap();
        assert!(Arc::ptr_eq(&first[0], &first[1]));
        assert_eq!(first[0].len(), CHUNK_ROWS);
        let indices: Vec<usize> = first[2].iter().map(|row| row.index).collect();
        assert_eq!(indices, [1, 5], "in file order");
        let mut read = first[0].len();
        while let Some(next) = chunks.next().unwrap() {
            assert!(next[2].is_empty());
            read += next[0].len();
        }
        assert_eq!(read, 3_000);
    }

    #[test]
    fn the_cache_key_covers_model_messages_and_parameters() {
        let replay = ReplayPlan {
            models: vec!["m".into()],
            top: 1,
            scorer: ScorerSpec::ExactMatch,
            temperature: 0.0,
            max_tokens: Some(8),
            concurrency: 1,
            repeat: 1,
            judge: None,
        };
        let a = cache_key(&replay_request(&replay, "m", vec![ChatMessage::user("hi")]));
        assert_eq!(
            a,
            cache_key(&replay_request(&replay, "m", vec![ChatMessage::user("hi")]))
        );
        assert_ne!(
            a,
            cache_key(&replay_request(&replay, "n", vec![ChatMessage::user("hi")]))
        );
        assert_ne!(
            a,
            cache_key(&replay_request(
                &replay,
                "m",
                vec![ChatMessage::user("hello")]
            ))
        );
        let hotter = ReplayPlan {
            temperature: 0.7,
            ..replay.clone()
        };
        assert_ne!(
            a,
            cache_key(&replay_request(&hotter, "m", vec![ChatMessage::user("hi")]))
        );
    }
}
