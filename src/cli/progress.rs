//! Progress bars for `run` and `compare --prompts`: one line per execution (status, generation,
//! score, budget spent), then one bar for the answers, with their rate and the time left. Drawn
//! on stderr, and only when stderr is a terminal; otherwise each event worth a line is printed
//! plainly, and the answers' progress once every [`PLAIN_EVERY`], so logs of CI jobs stay
//! readable and never go quiet for long.
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{HumanDuration, MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often the answers' progress is printed when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

use crate::runner::{Event, Observer};

pub struct Progress {
    multi: MultiProgress,
    interactive: bool,
    executions: Mutex<HashMap<String, ProgressBar>>,
    replay: Mutex<Option<ProgressBar>>,
    /// When the answers' progress was last printed plainly.
    last_plain: Mutex<Option<Instant>>,
}

impl Progress {
    pub fn new() -> Self {
        let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let target = if interactive {
            ProgressDrawTarget::stderr()
        } else {
            ProgressDrawTarget::hidden()
        };
        Self {
            multi: MultiProgress::with_draw_target(target),
            interactive,
            executions: Mutex::new(HashMap::new()),
            replay: Mutex::new(None),
            last_plain: Mutex::new(None),
        }
    }

    /// Clears the replay bar once every answer is in.
    pub fn finish(&self) {
        if let Some(bar) = self
            .replay
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
        {
            bar.finish_and_clear();
        }
    }

    fn line(&self, text: String) {
        if self.interactive {
            self.multi.println(text).ok();
        } else {
            eprintln!("{text}");
        }
    }

    /// One plain line of the answers' progress, at most once every [`PLAIN_EVERY`], and at the
    /// last answer.
    fn plain_progress(&self, bar: &ProgressBar) {
        let mut last = self
            .last_plain
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let done = bar.position();
        let total = bar.length().unwrap_or(done);
        let due = last.is_none_or(|at| at.elapsed() >= PLAIN_EVERY);
        if !due && done < total {
            return;
        }
        *last = Some(Instant::now());
        let left = if done < total {
            format!(", about {} left", HumanDuration(bar.eta()))
        } else {
            String::new()
        };
        eprintln!("answers: {done} of {total} ({:.1}/s{left})", bar.per_sec());
    }

    fn execution_bar(&self, variant: &str) -> ProgressBar {
        let mut bars = self
            .executions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        bars.entry(variant.to_owned())
            .or_insert_with(|| {
                let bar = self.multi.add(ProgressBar::new_spinner());
                bar.set_style(
                    ProgressStyle::with_template("{spinner} {prefix:>16} {msg}")
                        .unwrap_or_else(|_| ProgressStyle::default_spinner()),
                );
                bar.set_prefix(label(variant));
                bar.enable_steady_tick(std::time::Duration::from_millis(200));
                bar
            })
            .clone()
    }
}

fn label(variant: &str) -> String {
    if variant.is_empty() {
        "execution".to_owned()
    } else {
        variant.to_owned()
    }
}

impl Progress {
    /// An execution's new state: its bar's message, and a line on a plain terminal when it
    /// changed.
    fn execution_message(&self, variant: &str, message: String) {
        let bar = self.execution_bar(variant);
        if !self.interactive && bar.message() != message {
            eprintln!("{}: {message}", label(variant));
        }
        bar.set_message(message);
    }

    fn execution_finished(&self, variant: &str, status: &str, error: Option<&str>) {
        let bar = self.execution_bar(variant);
        let text = match error {
            Some(error) => format!("{status}: {error}"),
            None => status.to_owned(),
        };
        bar.finish_with_message(text.clone());
        if !self.interactive {
            eprintln!("{}: {text}", label(variant));
        }
    }

    /// The replay's line, and its progress bar over the answers it waits for.
    fn replay_planned(&self, requests: usize, waiting: usize, cached: usize) {
        self.line(format!(
            "replay: {requests} request(s) to send, {cached} answer(s) already cached"
        ));
        let bar = self.multi.add(ProgressBar::new(waiting as u64));
        bar.set_style(
            ProgressStyle::with_template(
                "  answers {bar:30} {pos}/{len} {per_sec} · about {eta} left {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        *self
            .replay
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(bar);
    }

    /// One more answer (or failed request) of the replay.
    fn answered(&self, error: Option<&str>) {
        if let Some(bar) = self
            .replay
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .as_ref()
        {
            bar.inc(1);
            if let Some(error) = error {
                bar.set_message(format!("last error: {error}"));
            }
            if !self.interactive {
                self.plain_progress(bar);
            }
        }
    }
}

/// Why a history's paging stopped early, if it did.
fn paging_note(truncated: bool, repeated_page: bool) -> &'static str {
    if truncated {
        " (the service sent far more generations than the budget allows; the rest was not read)"
    } else if repeated_page {
        " (a page brought no generation not already read; paging stopped there)"
    } else {
        ""
    }
}

/// `1 call`, `3 calls`.
fn count(n: u64, one: &str, many: &str) -> String {
    if n == 1 {
        format!("1 {one}")
    } else {
        format!("{n} {many}")
    }
}

impl Observer for Progress {
    fn event(&self, event: &Event) {
        match event {
            Event::Started {
                variant,
                evolution_id,
                ..
            }
            | Event::StartRecovered {
                variant,
                evolution_id,
                ..
            } => {
                self.execution_bar(variant)
                    .set_message(format!("started {evolution_id}"));
            }
            Event::Poll {
                variant,
                status,
                generation,
                score,
                budget,
                ..
            } => {
                let mut message = status.clone();
                if let Some(generation) = generation {
                    message.push_str(&format!("  generation {generation}"));
                }
                if let Some(score) = score {
                    message.push_str(&format!("  score {score:.3}"));
                }
                if let Some(budget) = budget {
                    message.push_str(&format!("  budget {budget}"));
                }
                self.execution_message(variant, message);
            }
            Event::Finished {
                variant,
                status,
                error,
                ..
            } => self.execution_finished(variant, status, error.as_deref()),
            Event::ReplayPlanned {
                requests,
                waiting,
                cached,
            } => self.replay_planned(*requests, *waiting, *cached),
            Event::Answer { error, .. } => self.answered(error.as_deref()),
            Event::RunFinished { .. } => self.finish(),
            // Tried again at the next poll.
            Event::StartSending { .. } | Event::PollFailed { .. } => {}
            // Every other event is a line of its own.
            _ => {
                if let Some(line) = line_of(event) {
                    self.line(line);
                }
            }
        }
    }
}

/// The line a replay event that stops or skips answers prints on its own, or `None`.
fn replay_line(event: &Event) -> Option<String> {
    Some(match event {
        Event::ReplayStopped {
            model,
            failed,
            last_error,
        } => format!(
            "replay: {failed} requests to {model} failed in a row (the last: {last_error}); \
                 the rest on {model} are not sent, and `run --resume` (or the same `compare`) \
                 asks for them"
        ),
        Event::ReplayKeyRefused { refusal } => format!(
            "replay: the service refused the key ({refusal}); no request that takes it is sent, \
             and `run --resume` (or the same `compare`) with a valid key asks for the rest"
        ),
        Event::CacheLinesSkipped { lines } => format!(
            "warning: {} of the answer cache (cache.jsonl) hold no answer (torn, cut or \
             damaged) and were skipped; their answers are asked again",
            count(*lines as u64, "line", "lines")
        ),
        _ => return None,
    })
}

/// The line an event prints on its own (the rest move progress bars), or `None`.
fn line_of(event: &Event) -> Option<String> {
    Some(match event {
        Event::RunStarted {
            run_id,
            backend,
            executions,
            resumed,
        } => format!(
            "{} run {run_id} on {backend}: {executions} execution(s)",
            if *resumed { "resuming" } else { "starting" }
        ),
        Event::StartFailed { variant, error, .. } => {
            format!("{}: could not start: {error}", label(variant))
        }
        Event::Iteration {
            variant,
            iteration,
            kind,
            parents,
            explanation,
            calls,
            best_generation,
            best_score,
            ..
        } => {
            let from = parents
                .iter()
                .map(|g| format!("g{g}"))
                .collect::<Vec<_>>()
                .join(" + ");
            format!(
                "{}: iteration {iteration} ({kind} of {from}, {}): {explanation}; best so far g{best_generation} {best_score:.3}",
                label(variant),
                count(*calls, "call", "calls")
            )
        }
        Event::TimedOut { variant, .. } => {
            format!("{}: still running at the time-out", label(variant))
        }
        Event::History {
            variant,
            generations,
            repeated_page,
            truncated,
            ..
        } => format!(
            "{}: {generations} generation(s) of history{}",
            label(variant),
            paging_note(*truncated, *repeated_page)
        ),
        Event::HistoryFailed { variant, error, .. } => {
            format!("{}: history unavailable: {error}", label(variant))
        }
        Event::Unknown { variant, note, .. } => {
            format!("{}: {note}", label(variant))
        }
        Event::ReplayStopped { .. }
        | Event::ReplayKeyRefused { .. }
        | Event::CacheLinesSkipped { .. } => return replay_line(event),
        // These move progress bars instead (`Progress::event`).
        Event::Started { .. }
        | Event::StartRecovered { .. }
        | Event::Poll { .. }
        | Event::Finished { .. }
        | Event::ReplayPlanned { .. }
        | Event::Answer { .. }
        | Event::RunFinished { .. }
        | Event::StartSending { .. }
        | Event::PollFailed { .. } => return None,
    })
}
