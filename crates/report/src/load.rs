//! Reading a run directory for the report, and checking that its files agree with each other:
//! every history and replay record names an execution of the plan, every replay version exists,
//! no answer is recorded twice and every score is a number from 0 to 1. A record that breaks one
//! of these is an error naming the file and the record; the report never guesses around it.
//!
//! `iterations.jsonl` is the exception: it only explains how the search went, so a file that
//! cannot be read leaves the rest of the report standing and is reported as a note instead
//! ([`IterationLog::Unreadable`]).
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use gepa_lab_engine::{IterationRecord, Objectives};
use gepa_lab_experiment::ExecutionPlan;
use gepa_lab_store::{
    HISTORY_FILE, HistoryRow, ITERATIONS_FILE, IterationRow, ObjectiveChoices, REPLAY_FILE,
    ReplayAnswer, ReplayOf, ReplayRow, RunDir, RunManifest, Version, best_by_score, may_be_best,
    objective_choices,
};

use super::ReportError;
use super::answers::{ReplayTable, TableBuilder, Texts};

/// A run directory, read and checked.
#[derive(Debug)]
pub struct RunData {
    pub dir: PathBuf,
    pub manifest: RunManifest,
    pub executions: Vec<Execution>,
    pub history: Vec<HistoryRow>,
    /// The answers of `replay.csv`, without their texts (see [`RunData::texts`]).
    pub replay: ReplayTable,
    /// What `iterations.jsonl` held; each execution's records are in
    /// [`Execution::iterations`].
    pub iterations: IterationLog,
}

/// The state of a run directory's `iterations.jsonl`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IterationLog {
    /// No file: the backend does not report its iterations (the public service), or the run
    /// predates the file.
    Missing,
    /// Read. `ignored` counts records left out: those naming no execution of the plan by its
    /// variant and evolution id (an earlier attempt, another plan), and repeats of an iteration
    /// already read.
    Read { ignored: usize },
    /// A damaged line other than a torn last one: the error, naming the file and the line.
    Unreadable(String),
}

/// One execution (variant) of the plan with what the run recorded for it.
#[derive(Debug, Clone)]
pub struct Execution {
    /// Position in `manifest.executions`.
    pub index: usize,
    /// The variant as the CSV files spell it: empty for a file without variants.
    pub variant: String,
    /// The variant, or "experiment" for a file without variants.
    pub label: String,
    pub seed: String,
    /// The history, by generation.
    pub generations: Vec<HistoryRow>,
    /// Versions that were replayed, the seed first (always present, replayed or not), then by
    /// generation.
    pub versions: Vec<PromptVersion>,
    /// Models of the replay: the plan's order, then any other model the file names.
    pub models: Vec<String>,
    /// Index in `versions` of the best version by the ranking rule, when an evolved one was
    /// replayed: the seed (index 0) when no evolved version scored above the seed's own
    /// evolution score with rows that show the gain ([`may_be_best`]).
    pub best: Option<usize>,
    /// With `[objectives]`: them, and what they choose among the history's generations (the
    /// recommended one is the execution's best).
    pub objectives: Option<(Objectives, ObjectiveChoices)>,
    /// Its records in `iterations.jsonl` (those of its evolution id), by iteration.
    pub iterations: Vec<IterationRecord>,
}

impl RunData {
    /// Reads `replay.csv` again, one record at a time: gives `each` every record's answer with
    /// its 0-based number, and keeps the whole records `wanted` says.
    pub fn texts(
        &self,
        wanted: impl Fn(u32) -> bool,
        mut each: impl FnMut(u32, &ReplayAnswer<'_>),
    ) -> Result<Texts<'static>, ReportError> {
        let mut kept = HashMap::new();
        RunDir::open(&self.dir)?.visit_records(REPLAY_FILE, |index, record| {
            // The first pass refused a file with more records than that.
            let index = u32::try_from(index).unwrap_or(u32::MAX);
            each(index, &record.read()?);
            if wanted(index) {
                kept.insert(index, record.read::<ReplayRow>()?);
            }
            Ok::<_, ReportError>(())
        })?;
        Ok(Texts::Read(kept))
    }

    /// The version the run recommends, as (execution, version) indices: its [`Self::best`], or,
    /// when no evolved version was replayed, the first execution's replayed seed. The report's
    /// `best`, `run --fail-under` and `compare` all go by this one rule. `None` when nothing
    /// was replayed.
    pub fn recommended(&self) -> Option<(usize, usize)> {
        self.best().or_else(|| {
            self.executions
                .iter()
                .find(|e| e.versions[0].replayed)
                .map(|e| (e.index, 0))
        })
    }

    /// The best version of the whole run, as (execution, version) indices: of each execution's
    /// best, the one the ranking rule puts first (ties to the earlier execution). `None` when no
    /// execution has a best version (nothing evolved was replayed).
    pub fn best(&self) -> Option<(usize, usize)> {
        let bests = self
            .executions
            .iter()
            .filter_map(|e| e.best.map(|best| (e.index, best)));
        best_by_score(bests, |&(execution, version)| {
            self.executions[execution].versions[version].validation_score
        })
    }
}

/// One version of an execution's prompt, with what the run knows of it.
#[derive(Debug, Clone, PartialEq)]
pub struct PromptVersion {
    pub version: Version,
    /// The version as files and tables spell it: `seed` or `g<generation>`.
    pub label: String,
    pub prompt: String,
    /// The evolution's own score of this prompt (on the Pareto rows); for the seed, the score of
    /// generation 0 when that is the seed prompt.
    pub validation_score: Option<f64>,
    /// Whether `replay.csv` has answers of it.
    pub replayed: bool,
}

impl PromptVersion {
    pub fn is_seed(&self) -> bool {
        self.version.is_seed()
    }

    pub fn generation(&self) -> Option<u32> {
        self.version.generation()
    }
}

/// Reads and checks the run directory at `path`.
pub fn load(path: &Path) -> Result<RunData, ReportError> {
    let run = RunDir::open(path)?;
    let manifest = run.read_manifest()?;
    let history: Vec<HistoryRow> = run.read_csv(HISTORY_FILE)?;
    let (mut executions, replay) = check(&run, &manifest, &history)?;
    let iterations = match run.read_iterations() {
        Ok(rows) if rows.is_empty() && !run.file(ITERATIONS_FILE).exists() => IterationLog::Missing,
        Ok(rows) => IterationLog::Read {
            ignored: assign_iterations(&manifest, &mut executions, rows),
        },
        Err(err) => IterationLog::Unreadable(err.to_string()),
    };
    for (execution, record) in executions.iter_mut().zip(&manifest.executions) {
        (execution.best, execution.objectives) = best_version(&record.plan, execution);
    }
    Ok(RunData {
        dir: path.to_owned(),
        manifest,
        executions,
        history,
        replay,
        iterations,
    })
}

/// Gives each execution the iteration records of its variant and evolution id, sorted by
/// iteration, the first record of an iteration kept. Returns how many records it left out.
fn assign_iterations(
    manifest: &RunManifest,
    executions: &mut [Execution],
    rows: Vec<IterationRow>,
) -> usize {
    let total = rows.len();
    let by_id: BTreeMap<(&str, &str), usize> = manifest
        .executions
        .iter()
        .enumerate()
        .filter_map(|(index, e)| Some(((e.variant(), e.state.evolution_id()?), index)))
        .collect();
    let mut kept = 0;
    for row in rows {
        let Some(&index) = by_id.get(&(row.variant.as_str(), row.evolution_id.as_str())) else {
            continue;
        };
        executions[index].iterations.push(row.record);
        kept += 1;
    }
    for execution in executions.iter_mut() {
        // Stable: of two records of one iteration, the one written first stays.
        execution.iterations.sort_by_key(IterationRecord::iteration);
        let before = execution.iterations.len();
        execution
            .iterations
            .dedup_by_key(|record| record.iteration());
        kept -= before - execution.iterations.len();
    }
    total - kept
}

/// The plan's executions with the versions `history.csv` and `replay.csv` hold, each record
/// checked against the plan and the other file, and the replay's answers.
fn check(
    run: &RunDir,
    manifest: &RunManifest,
    history: &[HistoryRow],
) -> Result<(Vec<Execution>, ReplayTable), ReportError> {
    let variants = Variants::of(manifest);
    let mut generations = check_history(&run.file(HISTORY_FILE), &variants, history)?;
    let (replayed, table) = check_replay(run, &variants, &generations)?;
    let executions = manifest
        .executions
        .iter()
        .enumerate()
        .map(|(index, record)| {
            execution(
                index,
                &record.plan,
                std::mem::take(&mut generations[index]),
                &replayed[index],
            )
        })
        .collect();
    Ok((executions, table))
}

/// The plan's executions by variant name (empty for an experiment without variants).
struct Variants(BTreeMap<String, usize>);

impl Variants {
    fn of(manifest: &RunManifest) -> Self {
        Self(
            manifest
                .executions
                .iter()
                .enumerate()
                .map(|(index, e)| (e.variant().to_owned(), index))
                .collect(),
        )
    }

    /// The execution of `variant`, or why a record naming it is refused.
    fn index(&self, variant: &str) -> Result<usize, String> {
        self.0.get(variant).copied().ok_or_else(|| {
            let known: Vec<String> = self.0.keys().map(|v| format!("{v:?}")).collect();
            format!(
                "variant {variant:?} is not in the plan (known: {})",
                known.join(", ")
            )
        })
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Each execution's generations, by number; a record of an unknown variant, with a score that
/// is not a number, or repeating a generation is refused.
fn check_history(
    path: &Path,
    variants: &Variants,
    history: &[HistoryRow],
) -> Result<Vec<BTreeMap<u32, HistoryRow>>, ReportError> {
    let mut generations: Vec<BTreeMap<u32, HistoryRow>> = vec![BTreeMap::new(); variants.len()];
    for (index, row) in history.iter().enumerate() {
        let record = |message: String| ReportError::record(path, index, message);
        let execution = variants.index(&row.variant).map_err(record)?;
        if !row.score.is_finite() {
            return Err(record(format!("score {} is not a number", row.score)));
        }
        if generations[execution]
            .insert(row.generation, row.clone())
            .is_some()
        {
            return Err(record(format!(
                "generation {} of variant {:?} appears twice",
                row.generation, row.variant
            )));
        }
    }
    Ok(generations)
}

/// What one execution's replay holds: the versions replayed (`None` the seed, else a
/// generation) and the models asked, in the order first seen.
#[derive(Default)]
struct Replayed {
    versions: BTreeSet<Option<u32>>,
    models: Vec<String>,
}

/// Each execution's replayed versions and models, and the answers, read one record at a time;
/// a record of an unknown variant or version, a score out of range, a row or sample numbered 0,
/// or a cell answered twice is refused.
fn check_replay(
    run: &RunDir,
    variants: &Variants,
    generations: &[BTreeMap<u32, HistoryRow>],
) -> Result<(Vec<Replayed>, ReplayTable), ReportError> {
    let path = &run.file(REPLAY_FILE);
    let mut replayed: Vec<Replayed> = (0..variants.len()).map(|_| Replayed::default()).collect();
    let mut table = TableBuilder::default();
    let refused = |err: super::answers::TableError| err.at(path);
    run.visit_records(REPLAY_FILE, |index, record| {
        let row: ReplayAnswer<'_> = record.read()?;
        let record = |message: String| ReportError::record(path, index, message);
        let execution = variants.index(row.variant).map_err(record)?;
        // Text that is not a version reads as a prompt file's name, which no run holds.
        let version = row.version.to_string();
        let generation = match &row.version {
            ReplayOf::Version(version) => version.generation(),
            ReplayOf::PromptFile(_) => {
                return Err(record(version.parse::<Version>().err().unwrap_or_default()));
            }
        };
        if let Some(generation) = generation
            && !generations[execution].contains_key(&generation)
        {
            return Err(record(format!(
                "version {:?} of variant {:?} is not a generation in {HISTORY_FILE}",
                version, row.variant
            )));
        }
        if row.error.is_empty() && !(0.0..=1.0).contains(&row.score) {
            return Err(record(format!(
                "score {} is outside 0 to 1 (every scorer gives a score from 0 to 1)",
                row.score
            )));
        }
        if row.row == 0 {
            return Err(record("row 0: rows are numbered from 1".into()));
        }
        if row.sample == 0 {
            return Err(record("sample 0: samples are numbered from 1".into()));
        }
        table.push(&row).map_err(refused)?;
        let replayed = &mut replayed[execution];
        replayed.versions.insert(generation);
        if !replayed.models.iter().any(|model| model == row.model) {
            replayed.models.push(row.model.to_owned());
        }
        Ok(())
    })?;
    Ok((replayed, table.finish().map_err(refused)?))
}

/// One execution of the plan: its seed and the replayed generations as versions, the best of
/// them by the ranking rule, and its models (the plan's order, then any other, sorted).
fn execution(
    index: usize,
    spec: &ExecutionPlan,
    history: BTreeMap<u32, HistoryRow>,
    replayed: &Replayed,
) -> Execution {
    let variant = spec.variant.clone().unwrap_or_default();
    let seed = spec.start.prompt.clone();
    // Generation 0 is the seed when its prompt is the seed's: then its score is the
    // seed's evolution score.
    let seed_score = history
        .get(&0)
        .filter(|g| g.prompt == seed)
        .map(|g| g.score);
    let mut versions = vec![PromptVersion {
        version: Version::Seed,
        label: Version::Seed.to_string(),
        prompt: seed.clone(),
        validation_score: seed_score,
        replayed: replayed.versions.contains(&None),
    }];
    versions.extend(
        replayed
            .versions
            .iter()
            .flatten()
            .filter_map(|g| history.get(g))
            .map(|row| PromptVersion {
                version: Version::Generation(row.generation),
                label: Version::Generation(row.generation).to_string(),
                prompt: row.prompt.clone(),
                validation_score: Some(row.score),
                replayed: true,
            }),
    );
    let planned: Vec<String> = spec
        .replay
        .as_ref()
        .map(|r| r.models.clone())
        .unwrap_or_default();
    let mut ordered: Vec<String> = planned
        .iter()
        .filter(|m| replayed.models.contains(m))
        .cloned()
        .collect();
    let mut others: Vec<String> = replayed
        .models
        .iter()
        .filter(|m| !planned.contains(m))
        .cloned()
        .collect();
    others.sort();
    ordered.extend(others);
    Execution {
        index,
        label: spec.variant.clone().unwrap_or_else(|| "experiment".into()),
        variant,
        seed,
        generations: history.into_values().collect(),
        versions,
        models: ordered,
        // Set by `load` once the iterations are read (`best_version`).
        best: None,
        objectives: None,
        iterations: Vec::new(),
    }
}

/// The best of an execution's `versions`, with its objectives and their choices when it has
/// them.
///
/// The best version is chosen by the ranking rule on the evolution's own scores, before the
/// holdout is looked at. The seed competes when its score is known: an evolved prompt that did
/// not score above it is no improvement, whatever its holdout score says by chance; nor is one
/// whose rows do not show the gain ([`may_be_best`]). With
/// objectives, it is the one they recommend (none when no generation is within the limits).
fn best_version(
    spec: &ExecutionPlan,
    execution: &Execution,
) -> (Option<usize>, Option<(Objectives, ObjectiveChoices)>) {
    let versions = &execution.versions;
    let history: Vec<&HistoryRow> = execution.generations.iter().collect();
    let objectives = spec
        .start
        .engine
        .as_ref()
        .and_then(|engine| engine.objectives.clone())
        .map(|objectives| {
            let choices = objective_choices(&history, &objectives);
            (objectives, choices)
        });
    let best = match &objectives {
        Some((_, choices)) => choices
            .recommended
            .and_then(|generation| version_of(versions, history.iter().copied(), generation)),
        None if versions.len() > 1 => {
            let shown = |i: &usize| {
                versions[*i].generation().is_none_or(|generation| {
                    may_be_best(&history, &execution.iterations, generation)
                })
            };
            best_by_score((0..versions.len()).filter(shown), |&i| {
                versions[i].validation_score
            })
        }
        None => None,
    };
    (best, objectives)
}

/// The index in `versions` of generation `generation`: the seed's when it is the seed's prompt
/// (the runner replays it as the seed); `None` when it was not replayed.
pub fn version_of<'h>(
    versions: &[PromptVersion],
    generations: impl IntoIterator<Item = &'h HistoryRow>,
    generation: u32,
) -> Option<usize> {
    let prompt = &generations
        .into_iter()
        .find(|row| row.generation == generation)?
        .prompt;
    versions.iter().position(|version| match version.version {
        Version::Seed => version.prompt == *prompt && version.replayed,
        Version::Generation(g) => g == generation,
    })
}
