//! Prompt files answered on a dataset, for `compare --prompts`: each prompt answers every row
//! of the file on one model and each answer is scored. This is the replay step with no evolution
//! before it: the same request cache, bounded concurrency, events and `replay.csv` rows, with one
//! version per prompt file (named as the user gave it) and no variant.
//!
//! [`prepare`] checks everything that can be checked before a model is loaded or a request is
//! sent; [`plan`] renders the requests and finds which the cache lacks; [`answer`] sends those.
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use thiserror::Error;

use super::replay::{
    self, AnswerCache, AnswerEvents, Answering, Cell, CellAt, Queue, queue_cell, replay_row,
};
use super::{Event, Observer, RunError};
use gepa_lab_dataset::{self as dataset, DatasetError, Row, RowProblem};
use gepa_lab_inference::{ChatRequest, Inference};
use gepa_lab_prompt::{ChatTemplate, PromptFile, TemplateError};
use gepa_lab_score::judge::JudgePlan;
use gepa_lab_score::{Scorer, ScorerError, ScorerSpec};
use gepa_lab_store::{REPLAY_FILE, ReplayOf, ReplayRow, RunDir};

/// Row problems listed when a dataset has rows that cannot be used; the rest are counted.
const PROBLEMS_SHOWN: usize = 20;

/// What to answer, and how.
#[derive(Debug, Clone)]
pub struct PromptsJob {
    pub dataset: PathBuf,
    /// The column holding the expected output.
    pub expected: String,
    /// The prompts; the first is the reference the others are compared with.
    pub prompts: Vec<PromptFile>,
    pub model: String,
    pub scorer: ScorerSpec,
    pub temperature: f64,
    pub max_tokens: Option<u32>,
    /// Requests in flight at most; the key's rpm limit also applies.
    pub concurrency: usize,
    /// Only the first N data rows.
    pub limit: Option<usize>,
    /// Answers per prompt and row (each asked apart; see `ReplayRow::sample`).
    pub repeat: u32,
    /// The judge, for `--scorer judge`.
    pub judge: Option<JudgePlan>,
}

/// How answers are scored: by a scorer, or graded by a judge model.
#[derive(Debug)]
pub enum Grading {
    Scorer(Scorer),
    Judge(JudgePlan),
}

#[derive(Debug, Error)]
pub enum PromptsError {
    #[error("{file}:{line}:{column}: {error}")]
    Template {
        file: String,
        line: usize,
        column: usize,
        error: TemplateError,
    },
    #[error(
        "{file}: placeholder {{{variable}}} is not a column of {dataset} (columns: {}){}",
        columns.join(", "),
        suggestion.as_ref().map_or(String::new(), |s| format!("; did you mean {{{s}}}?"))
    )]
    UnknownVariable {
        file: String,
        variable: String,
        dataset: String,
        columns: Vec<String>,
        suggestion: Option<String>,
    },
    #[error(
        "--expected: column {column:?} is not in the header of {dataset} (columns: {}){}",
        columns.join(", "),
        suggestion.as_ref().map_or(String::new(), |s| format!("; did you mean {s:?}?"))
    )]
    MissingExpected {
        column: String,
        dataset: String,
        columns: Vec<String>,
        suggestion: Option<String>,
    },
    #[error(
        "{dataset}: {errors} row problem(s) make rows unusable; fix them or leave the rows out:\n{}",
        problems.iter().map(|p| format!("  line {} (row {}): {}", p.line, p.row, p.kind)).collect::<Vec<_>>().join("\n")
    )]
    UnusableRows {
        dataset: String,
        errors: usize,
        problems: Vec<RowProblem>,
    },
    #[error("{dataset}: no data rows to answer")]
    NoRows { dataset: String },
    #[error("--scorer judge needs a judge: --judge-model MODEL and --rubric FILE")]
    Judge,
    #[error("--scorer: {0}")]
    Scorer(ScorerError),
    #[error(transparent)]
    Dataset(#[from] DatasetError),
}

// By hand rather than `#[from]`, which would make the error a `source` as well as part of the
// message, and a report of the chain would say it twice.
impl From<ScorerError> for PromptsError {
    fn from(error: ScorerError) -> Self {
        Self::Scorer(error)
    }
}

/// The rows to answer, checked, and the scorer for their answers.
#[derive(Debug)]
pub struct Prepared {
    pub rows: Vec<Row>,
    pub grading: Grading,
    /// Data rows in the file (the answered ones may be fewer, with a limit).
    pub file_rows: usize,
    /// SHA-256 of the dataset file.
    pub sha256: String,
    /// Problems that do not stop the comparison (empty inputs), for the terminal.
    pub warnings: Vec<String>,
}

/// What [`answer`] produced.
#[derive(Debug, Clone)]
pub struct Answered {
    pub rows: Vec<ReplayRow>,
    /// Some answer came from the test stand-in model.
    pub simulated: bool,
    /// Some request failed because the service refused the key (401 or 403).
    pub key_refused: bool,
}

/// Checks the prompts, the columns they use, the scorer and every row of the dataset, and reads
/// the rows to answer. Nothing is sent.
pub fn prepare(job: &PromptsJob) -> Result<Prepared, PromptsError> {
    let dataset = job.dataset.display().to_string();
    let grading = match (&job.scorer, &job.judge) {
        (ScorerSpec::Judge, Some(judge)) => Grading::Judge(judge.clone()),
        (ScorerSpec::Judge, None) => return Err(PromptsError::Judge),
        (spec, _) => Grading::Scorer(Scorer::new(spec, Path::new("."))?),
    };
    let header = dataset::read_header(&job.dataset)?;
    let mut inputs: Vec<String> = Vec::new();
    let mut seen = BTreeSet::new();
    for prompt in &job.prompts {
        let template = parse(prompt)?;
        for variable in template.variables() {
            if !header.names.iter().any(|name| name == variable) {
                return Err(PromptsError::UnknownVariable {
                    file: prompt.file.clone(),
                    variable: variable.to_owned(),
                    dataset,
                    columns: header.names.clone(),
                    suggestion: gepa_lab_suggest::closest(
                        variable,
                        header.names.iter().map(String::as_str),
                    )
                    .map(str::to_owned),
                });
            }
            if seen.insert(variable.to_owned()) {
                inputs.push(variable.to_owned());
            }
        }
    }
    let columns = header.columns(&inputs, &job.expected).map_err(|missing| {
        PromptsError::MissingExpected {
            column: job.expected.clone(),
            dataset: dataset.clone(),
            columns: header.names.clone(),
            suggestion: missing.into_iter().find_map(|m| m.suggestion),
        }
    })?;
    let scan = dataset::scan(
        &job.dataset,
        &columns,
        PROBLEMS_SHOWN,
        dataset::LabelKeys::Skip,
    )?;
    if scan.error_count > 0 {
        return Err(PromptsError::UnusableRows {
            dataset,
            errors: scan.error_count,
            problems: scan
                .problems
                .into_iter()
                .filter(|p| p.severity == dataset::Severity::Error)
                .collect(),
        });
    }
    let warnings = scan
        .problems
        .iter()
        .map(|p| format!("{dataset}: line {} (row {}): {}", p.line, p.row, p.kind))
        .collect();
    let wanted = job.limit.map_or(scan.rows, |limit| limit.min(scan.rows));
    if wanted == 0 {
        return Err(PromptsError::NoRows { dataset });
    }
    let indices: Vec<usize> = (0..wanted).collect();
    Ok(Prepared {
        rows: dataset::read_rows(&job.dataset, &columns, &indices)?,
        grading,
        file_rows: scan.rows,
        sha256: scan.sha256,
        warnings,
    })
}

fn parse(prompt: &PromptFile) -> Result<ChatTemplate, PromptsError> {
    ChatTemplate::parse(&prompt.text).map_err(|source| {
        let (line, column) = source.position();
        PromptsError::Template {
            file: prompt.file.clone(),
            line,
            column,
            error: source,
        }
    })
}

/// Where [`answer`] keeps what it gets.
pub struct Folders<'a> {
    /// Holds `cache.jsonl`: answers by a hash of the request, so it can be shared by every
    /// comparison; only what it lacks is asked.
    pub cache: &'a RunDir,
    /// Receives `events.jsonl` and `replay.csv` of this comparison.
    pub output: &'a RunDir,
}

/// Every answer a comparison needs, and which of them the cache lacks: what [`answer`] will
/// send, known before anything is sent (for a confirmation, say).
pub struct Planned {
    cells: Vec<Cell>,
    queue: Queue,
    cache: AnswerCache,
}

impl Planned {
    /// Requests to send: each distinct request the cache does not answer, once.
    pub fn to_send(&self) -> usize {
        self.queue.requests()
    }

    /// Answers the cache already holds.
    pub fn cached(&self) -> usize {
        self.cells.len() - self.queue.cells()
    }

    /// Answers wanted in all: each prompt on each row.
    pub fn cells(&self) -> usize {
        self.cells.len()
    }
}

/// Renders every prompt for every prepared row and looks each request up in the cache.
pub fn plan(job: &PromptsJob, prepared: &Prepared, cache: &RunDir) -> Result<Planned, RunError> {
    let cache = AnswerCache::open(cache)?;
    let mut queue = Queue::default();
    let mut cells = Vec::new();
    for prompt in &job.prompts {
        let template = ChatTemplate::parse(&prompt.text);
        let of = ReplayOf::PromptFile(prompt.file.clone());
        for row in &prepared.rows {
            for sample in 1..=job.repeat {
                let at = CellAt {
                    variant: "",
                    version: &of,
                    model: &job.model,
                    sample,
                };
                cells.push(queue_cell(
                    &mut queue,
                    &cache,
                    &template,
                    row,
                    at,
                    |messages| {
                        let mut request = ChatRequest::new(&job.model, messages);
                        request.temperature = Some(job.temperature);
                        request.max_tokens = job.max_tokens;
                        request
                    },
                ));
            }
        }
    }
    Ok(Planned {
        cells,
        queue,
        cache,
    })
}

/// Sends what the plan lacks (appending each answer to the cache folder's `cache.jsonl` as it
/// arrives), scores every answer and writes them to `replay.csv` in the output folder.
pub async fn answer(
    job: &PromptsJob,
    grading: &Grading,
    planned: Planned,
    inference: Arc<dyn Inference>,
    folders: Folders<'_>,
    observer: &dyn Observer,
) -> Result<Answered, RunError> {
    let answering = Answering {
        inference,
        cache: folders.cache,
        events: folders.output,
        observer,
        // A comparison is small next to a run's holdout, and its log says what each row got.
        answer_events: AnswerEvents::All,
    };
    let Planned {
        cells,
        queue,
        mut cache,
    } = planned;
    cache.report_skipped(&answering)?;
    for cell in &cells {
        cache.load(&cell.key)?;
    }
    let mut errors = replay::Failures::default();
    answering.emit(Event::ReplayPlanned {
        requests: queue.requests(),
        waiting: queue.cells(),
        cached: cells.len() - queue.cells(),
    })?;
    replay::answer_all(&answering, queue, job.concurrency, &mut cache, &mut errors).await?;
    let judges: HashMap<String, JudgePlan> = match grading {
        // Prompt files have no variant: one judge for every cell.
        Grading::Judge(judge) => HashMap::from([(String::new(), judge.clone())]),
        Grading::Scorer(_) => HashMap::new(),
    };
    let grades = replay::grade(
        &answering,
        &judges,
        &cells,
        &mut cache,
        job.concurrency,
        &mut errors,
    )
    .await?;
    let rows: Vec<ReplayRow> = cells
        .iter()
        .map(|cell| {
            let Some(answer) = cache.get(&cell.key) else {
                return replay_row(cell, None, replay::no_answer(), &errors);
            };
            let score = match grading {
                Grading::Scorer(scorer) => scorer
                    .score(Some(cell.row), &answer.output, &cell.expected)
                    .map_err(|err| err.to_string()),
                Grading::Judge(_) => grades
                    .get(&(cell.variant.clone(), answer.key.clone()))
                    .cloned()
                    .unwrap_or_else(|| Err("the judge gave no grade".to_owned()))
                    .map_err(|reason| format!("judge: {reason}")),
            };
            match score {
                Ok(score) => replay_row(cell, Some(answer), score, &errors),
                Err(reason) => replay::unscored(cell, Some(answer), &reason, &errors),
            }
        })
        .collect();
    let simulated = cells
        .iter()
        .filter_map(|cell| cache.get(&cell.key))
        .any(|answer| answer.simulated);
    folders.output.write_csv(REPLAY_FILE, &rows)?;
    Ok(Answered {
        rows,
        simulated,
        key_refused: errors.key_refused,
    })
}
/// The lines that say how the prompts were answered, for the comparison's page: model, scorer
/// and sampling, repeats, and how many rows each prompt answered (with what is missing).
pub fn settings(
    job: &PromptsJob,
    prepared: &Prepared,
    answered: &Answered,
    output: &Path,
) -> Vec<String> {
    let mut settings = vec![format!(
        "model {} · scorer {} · temperature {} · max tokens {}",
        job.model,
        job.scorer,
        job.temperature,
        job.max_tokens
            .map_or_else(|| "default".to_owned(), |t| t.to_string())
    )];
    if job.repeat > 1 {
        settings.push(format!(
            "{} answers per row: a row's score is the mean of its answers, and intervals and \
             tests count rows, not answers",
            job.repeat
        ));
    }
    // Counted per prompt: one prompt's lost answer is not another's.
    let asked = prepared.rows.len() * job.repeat as usize;
    let per_prompt: Vec<(String, usize)> = job
        .prompts
        .iter()
        .map(|prompt| {
            let count = answered
                .rows
                .iter()
                .filter(|row| row.version.is_file(&prompt.file) && row.error.is_empty())
                .count();
            (prompt.file.clone(), count)
        })
        .collect();
    let unit = if job.repeat > 1 {
        "answers"
    } else {
        "data rows"
    };
    if per_prompt.iter().all(|(_, count)| *count == asked) {
        settings.push(format!(
            "{} of {} data rows answered by each prompt{}; answers and tables in {}",
            prepared.rows.len(),
            prepared.file_rows,
            if job.repeat > 1 {
                format!(", {} times each", job.repeat)
            } else {
                String::new()
            },
            output.display()
        ));
    } else {
        let each: Vec<String> = per_prompt
            .iter()
            .map(|(file, count)| format!("{file} {count} ({} missing)", asked - count))
            .collect();
        settings.push(format!(
            "{asked} {unit} asked ({} of {} data rows); answered: {}; answers and tables in {}",
            prepared.rows.len(),
            prepared.file_rows,
            each.join(", "),
            output.display()
        ));
    }
    settings
}

/// `<first>-vs-<second>-<hash>`: the same prompts, dataset and settings always land in the same
/// folder, whose cache then answers what was asked before.
pub fn folder_name(job: &PromptsJob, prepared: &Prepared) -> String {
    let mut hash = Sha256::new();
    for prompt in &job.prompts {
        hash.update(prompt.text.as_bytes());
        hash.update([0]);
    }
    let settings = format!(
        "{}\0{}\0{}\0{:?}\0{}\0{:?}\0{}",
        prepared.sha256,
        job.expected,
        job.model,
        job.scorer,
        job.temperature,
        job.max_tokens,
        prepared.rows.len()
    );
    hash.update(settings.as_bytes());
    if let Some(judge) = &job.judge {
        hash.update(format!("\0{}\0{}", judge.model, judge.rubric).as_bytes());
    }
    // Folders of comparisons made before repeats existed keep their names.
    if job.repeat > 1 {
        hash.update(format!("\0repeat {}", job.repeat).as_bytes());
    }
    let stem = |prompt: &PromptFile| {
        let name = Path::new(&prompt.file)
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        let clean = gepa_lab_experiment::name_chars(&name, '_', 24);
        if clean.is_empty() {
            "prompt".to_owned()
        } else {
            clean
        }
    };
    format!(
        "{}-vs-{}-{}",
        stem(&job.prompts[0]),
        stem(&job.prompts[1]),
        &format!("{:x}", hash.finalize())[..8]
    )
}
