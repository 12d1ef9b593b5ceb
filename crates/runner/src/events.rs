//! What the runner reports as it goes: every event is appended to `events.jsonl` and handed to an
//! [`Observer`] (the terminal's progress bars).
use std::fmt;

use gepa_lab_engine::ProposalKind;
use gepa_lab_store::ReplayOf;
use serde::{Serialize, Serializer};

/// What an answer event's request was for: the answer of a version (or, in `compare --prompts`,
/// a prompt file), or the judge's grade of such an answer. Written as the version's text, and
/// a grade as `judge:<version>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerFor {
    Version(ReplayOf),
    Grade(ReplayOf),
}

impl fmt::Display for AnswerFor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version(version) => version.fmt(f),
            Self::Grade(version) => write!(f, "judge:{version}"),
        }
    }
}

impl Serialize for AnswerFor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    RunStarted {
        run_id: String,
        backend: String,
        executions: usize,
        resumed: bool,
    },
    /// About to send a start request; from here on the service may know the execution.
    StartSending { variant: String, custom_id: String },
    Started {
        variant: String,
        custom_id: String,
        evolution_id: String,
    },
    /// A start request that may have reached the service before a crash, found again by customId.
    StartRecovered {
        variant: String,
        custom_id: String,
        evolution_id: String,
    },
    StartFailed {
        variant: String,
        custom_id: String,
        error: String,
    },
    Poll {
        variant: String,
        evolution_id: String,
        status: String,
        generation: Option<f64>,
        score: Option<f64>,
        budget: Option<f64>,
    },
    PollFailed {
        variant: String,
        evolution_id: String,
        error: String,
    },
    /// The service polled does not know the execution (404): it is not polled again this run,
    /// and its state is kept.
    Unknown {
        variant: String,
        evolution_id: String,
        note: String,
    },
    Finished {
        variant: String,
        evolution_id: String,
        status: String,
        error: Option<String>,
    },
    TimedOut {
        variant: String,
        evolution_id: String,
    },
    /// An iteration of the engine ended (from backends that report them; the whole record is in
    /// `iterations.jsonl`).
    Iteration {
        variant: String,
        evolution_id: String,
        iteration: usize,
        kind: ProposalKind,
        /// Generations the proposal was made from.
        parents: Vec<usize>,
        /// `accepted`, `rejected`, `skipped_perfect`, `screened`, or why no child came out
        /// (`no_fenced_block`, ...).
        outcome: String,
        /// The outcome and its reason in words.
        explanation: String,
        /// Task and reflection calls the iteration spent.
        calls: u64,
        /// The best candidate (highest mean Pareto score) when it ended.
        best_generation: usize,
        best_score: f64,
    },
    History {
        variant: String,
        evolution_id: String,
        generations: usize,
        pages: u32,
        repeated_page: bool,
        duplicates: usize,
        /// More generations than the execution's budget allows; the rest was not read.
        truncated: bool,
    },
    HistoryFailed {
        variant: String,
        evolution_id: String,
        error: String,
    },
    /// `requests` distinct requests to send for `waiting` cells of the replay table; `cached`
    /// cells already have their answer.
    ReplayPlanned {
        requests: usize,
        waiting: usize,
        cached: usize,
    },
    /// Lines of the answer cache (`cache.jsonl`) that hold no answer (torn by a kill, cut, longer
    /// than any answer, or not JSON) were skipped; their answers are asked again.
    CacheLinesSkipped { lines: usize },
    /// `failed` requests to `model` in a row failed for the service's reasons, the last with
    /// `last_error`: the rest of the replay on that model is not sent (a resume asks for it).
    ReplayStopped {
        model: String,
        failed: usize,
        last_error: String,
    },
    /// The service refused the key the replay uses (401 or 403), as `refusal` says: no replay
    /// request that takes the key is sent any more (a resume with a valid key asks for them).
    ReplayKeyRefused { refusal: String },
    /// One replay request's outcome (a cached answer is not sent and not reported here).
    Answer {
        variant: String,
        version: AnswerFor,
        model: String,
        row: usize,
        answered_by: String,
        /// The answered request alone (see `ReplayRow::latency_ms`).
        latency_ms: u64,
        /// Pacing, retries and queues before it.
        waited_ms: u64,
        error: Option<String>,
    },
    RunFinished {
        executions_completed: usize,
        executions_failed: usize,
        replay_rows: usize,
        replay_errors: usize,
    },
}

/// Receives the runner's events as they happen. Every method has a default that does nothing.
pub trait Observer: Send + Sync {
    fn event(&self, _event: &Event) {}
}

/// An observer for callers that want only the files.
pub struct Silent;

impl Observer for Silent {}
