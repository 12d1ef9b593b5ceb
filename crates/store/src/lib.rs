//! The run directory: the single source of truth of a run, `reports/<name>/<run-id>/`.
//!
//! ```text
//! run.json       RunManifest: backend, and each execution's plan and state (rewritten atomically)
//! events.jsonl   one JSON object per line, append-only: request outcomes, poll snapshots
//! history.csv    HistoryRow per generation of each execution
//! replay.csv     ReplayRow per (prompt version, model, holdout row)
//! cache.jsonl    CachedAnswer per inference request answered, append-only, so that a resumed
//!                run never pays for an answer twice
//! iterations.jsonl  IterationRow per iteration of each execution, append-only: what the engine
//!                tried and why it kept or dropped each proposal (from backends that say)
//! engine.jsonl   a local run's engine: its executions and every paid call's result, the
//!                checkpoint `run --resume` continues from (`local::FileExecutions`)
//! run.lock       locked by the one process that writes the run; holds its pid
//! ```
//! `report`, `compare` and `resume` read only these files. This module owns their layout and
//! record types and how they are written (atomic replace, or append); it never calls a service
//! and never sees a secret: nothing with a key or a private key is a field here.
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

mod manifest;
mod objectives;
mod version;

pub use manifest::{Backend, ExecutionRecord, ExecutionState, FORMAT_VERSION, RunManifest};
pub use objectives::{ObjectiveChoices, objective_choices};
pub use version::{
    ReplayOf, Version, best_by_score, evidence_over_seed, may_be_best, rank_by_score,
};

pub const MANIFEST_FILE: &str = "run.json";
pub const EVENTS_FILE: &str = "events.jsonl";
pub const HISTORY_FILE: &str = "history.csv";
pub const REPLAY_FILE: &str = "replay.csv";
pub const CACHE_FILE: &str = "cache.jsonl";
pub const ITERATIONS_FILE: &str = "iterations.jsonl";
pub const ENGINE_FILE: &str = "engine.jsonl";
pub const LOCK_FILE: &str = "run.lock";

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("{}: {error}", path.display())]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{}: not a valid run file: {message}", path.display())]
    Format { path: PathBuf, message: String },
    /// Another process holds the run's [`LOCK_FILE`]: it is writing the run now.
    #[error(
        "{}: another gepa-lab process{} is writing this run; wait for it to end, or stop it and \
         then resume",
        path.display(),
        pid.map(|pid| format!(" (pid {pid})")).unwrap_or_default()
    )]
    InUse { path: PathBuf, pid: Option<u32> },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + '_ {
    move |source| StoreError::Io {
        path: path.to_owned(),
        error: source,
    }
}

/// One line of `iterations.jsonl`: an iteration of an execution, as its backend recorded it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IterationRow {
    /// Empty for a file without variants.
    pub variant: String,
    pub evolution_id: String,
    #[serde(flatten)]
    pub record: gepa_lab_engine::IterationRecord,
}

/// One line of `history.csv`: a generation of an execution as the service reported it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryRow {
    /// Empty for a file without variants.
    pub variant: String,
    pub evolution_id: String,
    pub generation: u32,
    pub score: f64,
    pub prompt: String,
    /// Budget units (inference calls) spent when this generation was scored. The local engine
    /// knows it; the evolution API does not report it, so rows from the service leave it empty.
    /// Files written before the column existed read as `None`.
    #[serde(default)]
    pub budget_used: Option<u64>,
    /// The generation's mean cost per answer on its Pareto rows (prompt and answer tokens,
    /// latency, and the rows they rest on), when the backend measured them (the local engine
    /// does). Written as one JSON object, `{"prompt_tokens":41.5,"answer_tokens":2.0,
    /// "rows":8}`; empty, and files written before the column existed, read as `None`.
    #[serde(default, with = "costs_column")]
    pub costs: Option<gepa_lab_engine::Costs>,
    /// The generation's score on each Pareto row, in the order of the Pareto set, when the
    /// service reports them (`serve` and the local engine do; the public service does not).
    /// Written as numbers separated by spaces; files written before the column existed read as
    /// `None`.
    #[serde(default, with = "scores_column")]
    pub pareto_scores: Option<Vec<f64>>,
}

/// One line of `replay.csv`: one prompt version answering one holdout row on one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReplayRow {
    pub variant: String,
    /// The prompt version (in a run) or prompt file (in `compare --prompts`) that answered.
    pub version: ReplayOf,
    /// The model asked.
    pub model: String,
    /// The model that answered (differs from `model` after a 503 fallback).
    pub answered_by: String,
    /// 1-based data row of the dataset file.
    pub row: usize,
    /// Which of the row's repeated answers this is, from 1 (`repeat` answers per row; files
    /// written before repeats existed have one, read as sample 1).
    #[serde(default = "first_sample")]
    pub sample: u32,
    /// The row's input columns, as a JSON object in one CSV field. Kept here, not looked up in
    /// the dataset file, so that a report needs the run directory alone: the dataset may have
    /// moved or changed since (its hash is in the plan). Older files without the column read as
    /// no inputs.
    #[serde(default, with = "json_column")]
    pub inputs: BTreeMap<String, String>,
    pub expected: String,
    pub output: String,
    pub score: f64,
    pub feedback: String,
    /// From sending the request that was answered to having all of its answer: the model and
    /// the network, nothing else.
    pub latency_ms: u64,
    /// Time the answer waited before that request was sent: rate pacing, retries, earlier
    /// attempts, a model's queue, or the unavailable model before a fallback. Unknown (empty) in
    /// files written before the column existed, whose latency included these waits.
    #[serde(default)]
    pub waited_ms: Option<u64>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub node_id: String,
    /// Why there is no answer (after retries and fallbacks); empty when there is one.
    pub error: String,
}

fn first_sample() -> u32 {
    1
}

impl ReplayRow {
    /// The `inputs` field as `replay.csv` holds it: one JSON object of strings.
    pub fn inputs_json(&self) -> String {
        json_column::text(&self.inputs)
    }

    /// The row's fields that say what it answered and how, borrowed.
    pub fn answer(&self) -> ReplayAnswer<'_> {
        ReplayAnswer {
            variant: &self.variant,
            version: self.version.clone(),
            model: &self.model,
            answered_by: &self.answered_by,
            row: self.row,
            sample: self.sample,
            expected: &self.expected,
            output: &self.output,
            score: self.score,
            latency_ms: self.latency_ms,
            waited_ms: self.waited_ms,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            error: &self.error,
        }
    }
}

/// A [`ReplayRow`] without its inputs, feedback and node id, its texts borrowed from the record
/// it was read from: what a report's statistics read of each of millions of records, without
/// parsing the inputs' JSON or copying a text.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ReplayAnswer<'a> {
    pub variant: &'a str,
    pub version: ReplayOf,
    pub model: &'a str,
    pub answered_by: &'a str,
    pub row: usize,
    #[serde(default = "first_sample")]
    pub sample: u32,
    pub expected: &'a str,
    pub output: &'a str,
    pub score: f64,
    pub latency_ms: u64,
    #[serde(default)]
    pub waited_ms: Option<u64>,
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub error: &'a str,
}

/// One record of a CSV file being read by [`RunDir::visit_records`], to be read as whichever
/// type the reader needs.
pub struct Record<'r> {
    path: &'r Path,
    /// 0-based.
    index: usize,
    headers: &'r csv::StringRecord,
    fields: &'r csv::StringRecord,
}

impl<'r> Record<'r> {
    /// The record as `T`; a record that is not one is an error naming the file and the record.
    pub fn read<'de, T: Deserialize<'de>>(&'de self) -> Result<T, StoreError>
    where
        'r: 'de,
    {
        self.fields
            .deserialize(Some(self.headers))
            .map_err(|err| StoreError::Format {
                path: self.path.to_owned(),
                message: format!("record {}: {err}", self.index + 1),
            })
    }
}

/// One answered inference request, keyed by a hash of everything that was asked (model,
/// messages, parameters). Appended the moment the answer arrives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CachedAnswer {
    pub key: String,
    pub answered_by: String,
    pub output: String,
    pub node_id: String,
    /// As in [`ReplayRow::latency_ms`].
    pub latency_ms: u64,
    /// As in [`ReplayRow::waited_ms`].
    #[serde(default)]
    pub waited_ms: Option<u64>,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// The answer came from the deterministic test stand-in model.
    pub simulated: bool,
}

/// A map of strings stored as one CSV field holding a JSON object, since CSV has no nesting.
mod json_column {
    use std::collections::BTreeMap;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn text(map: &BTreeMap<String, String>) -> String {
        // Keys and values are strings, so the JSON always exists.
        serde_json::to_string(map).expect("a map of strings is JSON")
    }

    pub fn serialize<S: Serializer>(
        map: &BTreeMap<String, String>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&text(map))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<BTreeMap<String, String>, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().is_empty() {
            return Ok(BTreeMap::new());
        }
        serde_json::from_str(&text).map_err(|err| {
            serde::de::Error::custom(format!(
                "inputs: expected a JSON object of strings, found {text:?} ({err})"
            ))
        })
    }
}

/// A generation's costs in one CSV field, as a JSON object; empty is `None`.
mod costs_column {
    use gepa_lab_engine::Costs;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        costs: &Option<Costs>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match costs {
            // Costs are numbers, so the JSON always exists.
            Some(costs) => serializer
                .serialize_str(&serde_json::to_string(costs).expect("costs are plain JSON")),
            None => serializer.serialize_str(""),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Costs>, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        serde_json::from_str(&text).map(Some).map_err(|err| {
            serde::de::Error::custom(format!(
                "costs: expected a JSON object of mean costs, found {text:?} ({err})"
            ))
        })
    }
}

/// A list of scores in one CSV field, as numbers separated by spaces; empty is `None`.
mod scores_column {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        scores: &Option<Vec<f64>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        let text = scores
            .as_deref()
            .unwrap_or_default()
            .iter()
            .map(f64::to_string);
        serializer.serialize_str(&text.collect::<Vec<_>>().join(" "))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<f64>>, D::Error> {
        let text = String::deserialize(deserializer)?;
        if text.trim().is_empty() {
            return Ok(None);
        }
        text.split_whitespace()
            .map(|number| {
                number.parse::<f64>().map_err(|err| {
                    serde::de::Error::custom(format!(
                        "pareto_scores: expected numbers separated by spaces, found {number:?} ({err})"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

/// A run directory on disk.
#[derive(Debug, Clone)]
pub struct RunDir {
    pub path: PathBuf,
    /// The locked [`LOCK_FILE`] of a directory opened to write the run ([`Self::create`],
    /// [`Self::open_for_writing`]), shared by the clones; the lock ends when the last clone is
    /// dropped or the process ends, killed or not. `None` for a directory opened to read.
    writer: Option<Arc<File>>,
}

impl RunDir {
    /// Creates `root/<name>/<run_id>/`, locked for writing; fails if it already exists, so two
    /// runs never mix.
    pub fn create(root: &Path, name: &str, run_id: &str) -> Result<Self, StoreError> {
        let parent = root.join(name);
        std::fs::create_dir_all(&parent).map_err(io(&parent))?;
        let path = parent.join(run_id);
        std::fs::create_dir(&path).map_err(io(&path))?;
        let writer = Some(lock_for_writing(&path)?);
        Ok(Self { path, writer })
    }

    /// Opens the run directory at `path` to go on writing it (a resume): fails with
    /// [`StoreError::InUse`] while another process writes it, whose appends and temporary
    /// files a second writer would tear (two `run --resume` of one run, or a resume of a run
    /// still going in another terminal).
    pub fn open_for_writing(path: &Path) -> Result<Self, StoreError> {
        let mut dir = Self::open(path)?;
        dir.writer = Some(lock_for_writing(path)?);
        Ok(dir)
    }

    /// A folder of answers and tables that is not a run (a comparison of prompt files), with no
    /// manifest; created when missing, reused when not.
    pub fn folder(path: &Path) -> Result<Self, StoreError> {
        std::fs::create_dir_all(path).map_err(io(path))?;
        Ok(Self {
            path: path.to_owned(),
            writer: None,
        })
    }

    pub fn open(path: &Path) -> Result<Self, StoreError> {
        let manifest = path.join(MANIFEST_FILE);
        if !manifest.is_file() {
            return Err(StoreError::Format {
                path: path.to_owned(),
                message: format!("no {MANIFEST_FILE}; is this a run directory?"),
            });
        }
        Ok(Self {
            path: path.to_owned(),
            writer: None,
        })
    }

    /// Removes the temporary files that writes cut short by a kill left in the directory, and
    /// returns their names. Only for the one process that writes the run (a resume, after
    /// [`Self::open_for_writing`]): another writer's file in flight would go too.
    pub fn remove_leftovers(&self) -> Result<Vec<String>, StoreError> {
        let mut removed = Vec::new();
        for entry in std::fs::read_dir(&self.path).map_err(io(&self.path))? {
            let entry = entry.map_err(io(&self.path))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if is_leftover(&name) && entry.file_type().is_ok_and(|kind| kind.is_file()) {
                std::fs::remove_file(entry.path()).map_err(io(&entry.path()))?;
                removed.push(name);
            }
        }
        removed.sort();
        Ok(removed)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    pub fn read_manifest(&self) -> Result<RunManifest, StoreError> {
        let path = self.file(MANIFEST_FILE);
        let text =
            gepa_lab_input::read_text(&path, gepa_lab_input::MANIFEST_LIMIT).map_err(io(&path))?;
        manifest::parse(&path, &text)
    }

    /// Replaces `run.json` atomically: a crash leaves the old or the new file, never half of one.
    pub fn write_manifest(&self, manifest: &RunManifest) -> Result<(), StoreError> {
        let text = serde_json::to_vec_pretty(manifest).expect("a manifest is plain JSON");
        write_atomic(&self.file(MANIFEST_FILE), &text)
    }

    /// Appends one event, stamped with the time, as one line of `events.jsonl`.
    pub fn append_event(&self, event: &impl Serialize) -> Result<(), StoreError> {
        #[derive(Serialize)]
        struct Stamped<'a, E> {
            at: DateTime<Utc>,
            #[serde(flatten)]
            event: &'a E,
        }
        let line = serde_json::to_vec(&Stamped {
            at: Utc::now(),
            event,
        })
        .expect("events are plain JSON");
        self.append_line(EVENTS_FILE, line)
    }

    /// Records one answer in `cache.jsonl`.
    pub fn append_cached(&self, answer: &CachedAnswer) -> Result<(), StoreError> {
        let line = serde_json::to_vec(answer).expect("a cached answer is plain JSON");
        self.append_line(CACHE_FILE, line)
    }

    /// Cuts the torn last line a kill may have left in each append-only file (see
    /// [`cut_torn_tail`]); called before a resumed run appends to them.
    pub fn cut_torn_tails(&self) -> Result<(), StoreError> {
        for name in [EVENTS_FILE, CACHE_FILE, ITERATIONS_FILE] {
            cut_torn_tail(&self.file(name))?;
        }
        Ok(())
    }

    /// Records one iteration in `iterations.jsonl`.
    pub fn append_iteration(&self, row: &IterationRow) -> Result<(), StoreError> {
        let line = serde_json::to_vec(row).expect("an iteration record is plain JSON");
        self.append_line(ITERATIONS_FILE, line)
    }

    /// Every iteration recorded in `iterations.jsonl`, in the order written; a torn last line
    /// (a kill mid-write) is skipped, and the iteration is fetched again.
    pub fn read_iterations(&self) -> Result<Vec<IterationRow>, StoreError> {
        let mut rows = Vec::new();
        self.read_lines(ITERATIONS_FILE, |row| rows.push(row))?;
        Ok(rows)
    }

    fn append_line(&self, name: &str, line: Vec<u8>) -> Result<(), StoreError> {
        append_json_line(&self.file(name), line)
    }

    fn read_lines<T: for<'de> Deserialize<'de>>(
        &self,
        name: &str,
        each: impl FnMut(T),
    ) -> Result<(), StoreError> {
        read_json_lines(&self.file(name), each)
    }

    /// The index of every cached answer (see [`CacheIndex`]), read in one streaming pass. A line
    /// that is not a cached answer (torn by a kill, cut, longer than any answer, or not JSON) is
    /// skipped and counted in [`CacheIndex::skipped`]: its answer is simply asked again.
    pub fn index_cache(&self) -> Result<CacheIndex, StoreError> {
        #[derive(Deserialize)]
        struct Keyed {
            key: String,
            #[serde(default)]
            simulated: bool,
        }
        let path = self.file(CACHE_FILE);
        let mut index = CacheIndex {
            path: path.clone(),
            offsets: Vec::new(),
            others: std::collections::HashMap::new(),
            simulated: false,
            skipped: 0,
            file: None,
        };
        index.skipped = read_json_lines_at(&path, Damaged::Skip, |offset, line: Keyed| {
            index.simulated |= line.simulated;
            match key_prefix(&line.key) {
                Some(prefix) => index.offsets.push((prefix, offset)),
                None => {
                    index.others.insert(line.key, offset);
                }
            }
        })?;
        // Stable: of a key written twice, the later line stays last, and is the one kept.
        index.offsets.sort_by_key(|&(key, _)| key);
        let mut kept: Vec<(u128, u64)> = Vec::with_capacity(index.offsets.len());
        for entry in index.offsets {
            match kept.last_mut() {
                Some(last) if last.0 == entry.0 => *last = entry,
                _ => kept.push(entry),
            }
        }
        kept.shrink_to_fit();
        index.offsets = kept;
        Ok(index)
    }

    /// Writes the CSV file `name` one record at a time (see [`CsvAppender`]).
    pub fn csv_appender(&self, name: &str) -> Result<CsvAppender, StoreError> {
        let path = self.file(name);
        let temp = temp_beside(&path)?;
        let file = temp.reopen().map_err(io(&path))?;
        Ok(CsvAppender {
            path,
            temp,
            writer: csv::Writer::from_writer(BufWriter::with_capacity(1 << 16, file)),
            records: 0,
        })
    }

    /// Rewrites a CSV file of records atomically.
    pub fn write_csv<T: Serialize>(&self, name: &str, rows: &[T]) -> Result<(), StoreError> {
        let path = self.file(name);
        let mut writer = csv::Writer::from_writer(Vec::new());
        for row in rows {
            writer.serialize(row).map_err(|err| StoreError::Format {
                path: path.clone(),
                message: err.to_string(),
            })?;
        }
        let bytes = writer.into_inner().map_err(|err| StoreError::Format {
            path: path.clone(),
            message: err.to_string(),
        })?;
        write_atomic(&path, &bytes)
    }

    /// Reads a CSV file of records; a missing file is an empty table.
    pub fn read_csv<T: for<'de> Deserialize<'de>>(&self, name: &str) -> Result<Vec<T>, StoreError> {
        self.csv_records(name)?.collect()
    }

    /// Reads a CSV file one record at a time into one buffer, giving `each` every record with
    /// its 0-based number; a missing file has none. Faster than [`Self::csv_records`] where most
    /// records are read in part, or borrowed ([`ReplayAnswer`]).
    pub fn visit_records<E: From<StoreError>>(
        &self,
        name: &str,
        mut each: impl FnMut(usize, &Record<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let path = self.file(name);
        let file = match gepa_lab_input::open_stream(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(err) => return Err(io(&path)(err).into()),
        };
        let format = |index: usize, err: csv::Error| StoreError::Format {
            path: path.clone(),
            message: format!("record {}: {err}", index + 1),
        };
        let mut reader = csv::Reader::from_reader(file);
        let headers = reader.headers().map_err(|err| format(0, err))?.clone();
        let mut fields = csv::StringRecord::new();
        let mut index = 0;
        while reader
            .read_record(&mut fields)
            .map_err(|err| format(index, err))?
        {
            let record = Record {
                path: &path,
                index,
                headers: &headers,
                fields: &fields,
            };
            each(index, &record)?;
            index += 1;
        }
        Ok(())
    }

    /// The records of a CSV file, read one at a time; a missing file has none. A bad record is
    /// an error naming the file and the record.
    pub fn csv_records<T: for<'de> Deserialize<'de>>(
        &self,
        name: &str,
    ) -> Result<impl Iterator<Item = Result<T, StoreError>> + use<T>, StoreError> {
        let path = self.file(name);
        let file = match gepa_lab_input::open_stream(&path) {
            Ok(file) => Some(file),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => None,
            Err(err) => return Err(io(&path)(err)),
        };
        let records = file
            .into_iter()
            .flat_map(|file| csv::Reader::from_reader(file).into_deserialize::<T>());
        Ok(records.enumerate().map(move |(index, row)| {
            row.map_err(|err| StoreError::Format {
                path: path.clone(),
                message: format!("record {}: {err}", index + 1),
            })
        }))
    }
}

/// The newest run directory under `root/<name>/` of an experiment with this content hash that
/// has not finished, if any: the run a new `run` of the same file should resume instead.
pub fn unfinished_run(root: &Path, name: &str, content_hash: &str) -> Option<PathBuf> {
    let entries = std::fs::read_dir(root.join(name)).ok()?;
    let mut found: Vec<(chrono::DateTime<chrono::Utc>, PathBuf)> = Vec::new();
    for entry in entries.flatten() {
        let Ok(dir) = RunDir::open(&entry.path()) else {
            continue;
        };
        let Ok(manifest) = dir.read_manifest() else {
            continue;
        };
        if manifest.plan.content_hash == content_hash && manifest.finished_at.is_none() {
            found.push((manifest.created_at, dir.path));
        }
    }
    found.sort();
    found.pop().map(|(_, path)| path)
}

/// Appends `line` (one JSON value) and a line feed to the file at `path`, creating it. One write
/// call per line: concurrent appends of short lines do not interleave, and a kill leaves at most
/// a torn last line.
pub fn append_json_line(path: &Path, mut line: Vec<u8>) -> Result<(), StoreError> {
    line.push(b'\n');
    existing_regular_file(path)?;
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io(path))?;
    file.write_all(&line).map_err(io(path))
}

/// Reads the JSON Lines file at `path` one record at a time, streamed; a missing file has none.
/// Only the last line can be torn, and only it lacks its line feed: it is skipped, while a bad
/// line elsewhere (not JSON of a record, or longer than [`gepa_lab_input::MAX_LINE`]) is an error
/// naming it.
pub fn read_json_lines<T: for<'de> Deserialize<'de>>(
    path: &Path,
    mut each: impl FnMut(T),
) -> Result<(), StoreError> {
    read_json_lines_at(path, Damaged::Error, |_, record| each(record))?;
    Ok(())
}

/// What a JSON Lines reader does with a line other than a torn last one that holds no record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Damaged {
    /// Fails, naming the line: a file whose every line matters (an engine's checkpoint).
    Error,
    /// Skips it and counts it: a file whose lines can be done again (cached answers).
    Skip,
}

/// Reads a JSON Lines file as [`read_json_lines`] does, handing each record over with the byte
/// offset where its line starts; with [`Damaged::Skip`], every line that holds no record (a
/// torn last one included) is skipped, and the count of them returned. Memory holds one line of
/// at most [`gepa_lab_input::MAX_LINE`] bytes, whatever the file holds.
fn read_json_lines_at<T: for<'de> Deserialize<'de>>(
    path: &Path,
    damaged: Damaged,
    mut each: impl FnMut(u64, T),
) -> Result<usize, StoreError> {
    use gepa_lab_input::{MAX_LINE, read_line_within};
    let mut reader = match gepa_lab_input::open_regular(path) {
        Ok(file) => std::io::BufReader::with_capacity(1 << 16, file),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(io(path)(err)),
    };
    let mut line = Vec::new();
    let (mut offset, mut skipped) = (0u64, 0);
    for number in 1.. {
        let (length, kept) =
            read_line_within(&mut reader, &mut line, MAX_LINE).map_err(io(path))?;
        if length == 0 {
            break;
        }
        let problem = if kept {
            match serde_json::from_slice::<T>(&line) {
                Ok(record) => {
                    each(offset, record);
                    None
                }
                Err(err) => Some(err.to_string()),
            }
        } else {
            Some(format!("longer than {MAX_LINE} bytes"))
        };
        offset += length;
        let torn = kept && !line.ends_with(b"\n");
        match problem {
            None => {}
            Some(_) if damaged == Damaged::Skip => skipped += 1,
            Some(_) if torn => {}
            Some(problem) => {
                return Err(StoreError::Format {
                    path: path.to_owned(),
                    message: format!("line {number}: {problem}"),
                });
            }
        }
    }
    Ok(skipped)
}

/// Fails when `path` exists and is not a regular file (a device, a FIFO, a folder): appending to
/// one, or reading its tail, would block or never end.
fn existing_regular_file(path: &Path) -> Result<(), StoreError> {
    match gepa_lab_input::regular_file(path) {
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(io(path)(err)),
    }
}

/// Cuts a torn last line (a process killed in the middle of a write) off an append-only JSON
/// Lines file, so that the next line appended does not join it into a damaged line in the
/// middle of the file. Returns how many bytes were cut; a missing file is left missing.
pub fn cut_torn_tail(path: &Path) -> Result<u64, StoreError> {
    use std::io::{Read, Seek, SeekFrom};
    existing_regular_file(path)?;
    let mut file = match OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(err) => return Err(io(path)(err)),
    };
    let length = file.metadata().map_err(io(path))?.len();
    // Lines are short next to this; a longer torn line is cut in more than one step.
    let window = length.min(1 << 20);
    file.seek(SeekFrom::Start(length - window))
        .map_err(io(path))?;
    let mut tail = Vec::with_capacity(window as usize);
    // Never more than the window, whatever the file turned into since its length was read.
    (&mut file)
        .take(window)
        .read_to_end(&mut tail)
        .map_err(io(path))?;
    if tail.last().is_none_or(|&byte| byte == b'\n') {
        return Ok(0);
    }
    let keep = match tail.iter().rposition(|&byte| byte == b'\n') {
        Some(end) => length - window + end as u64 + 1,
        None if window == length => 0,
        None => length - window,
    };
    file.set_len(keep).map_err(io(path))?;
    Ok(length - keep)
}

/// How the temporary files of [`write_atomic`] start; a kill between creating one and renaming
/// it leaves it behind, for [`RunDir::remove_leftovers`].
const TEMP_PREFIX: &str = ".gepa-lab-tmp";

/// Whether `name` is a temporary file a killed [`write_atomic`] left: ours, or one of the
/// `tempfile` crate's default names (`.tmp` and six letters or digits) that builds before
/// [`TEMP_PREFIX`] wrote.
fn is_leftover(name: &str) -> bool {
    name.starts_with(TEMP_PREFIX)
        || name
            .strip_prefix(".tmp")
            .is_some_and(|rest| rest.len() == 6 && rest.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// Locks the [`LOCK_FILE`] of the run directory `dir` (created when missing) for this process,
/// without waiting, and writes this process's id into it; the id of the process that holds it
/// is read back for [`StoreError::InUse`]. The lock is advisory (`flock` on Unix): every
/// gepa-lab process that writes a run takes it, and the system ends it with the process.
fn lock_for_writing(dir: &Path) -> Result<Arc<File>, StoreError> {
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io(&path))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            // "pid N" and a line break: a few bytes, read with a bound all the same.
            let mut text = String::new();
            let _ = (&file).take(64).read_to_string(&mut text);
            let pid = text
                .trim()
                .strip_prefix("pid ")
                .and_then(|pid| pid.parse().ok());
            return Err(StoreError::InUse {
                path: dir.to_owned(),
                pid,
            });
        }
        Err(std::fs::TryLockError::Error(error)) => return Err(StoreError::Io { path, error }),
    }
    file.set_len(0).map_err(io(&path))?;
    writeln!(file, "pid {}", std::process::id()).map_err(io(&path))?;
    Ok(Arc::new(file))
}

/// Writes `bytes` to a temporary file beside `path`, flushes it to disk, then renames it over
/// `path`.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let mut temp = temp_beside(path)?;
    {
        let mut writer = BufWriter::new(temp.as_file_mut());
        writer.write_all(bytes).map_err(io(path))?;
        writer.flush().map_err(io(path))?;
    }
    persist(temp, path)
}

/// Writes the file at `path` as [`write_atomic`] does, from what `write` puts into a buffered
/// writer on the temporary file; the file is replaced only when `write` returns `Ok`.
pub fn write_atomic_with<E: From<StoreError>>(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&mut std::fs::File>) -> Result<(), E>,
) -> Result<(), E> {
    let mut temp = temp_beside(path)?;
    {
        let mut writer = BufWriter::with_capacity(1 << 16, temp.as_file_mut());
        write(&mut writer)?;
        writer.flush().map_err(io(path))?;
    }
    Ok(persist(temp, path)?)
}

/// A new temporary file in `path`'s folder, named so that [`RunDir::remove_leftovers`] knows it.
fn temp_beside(path: &Path) -> Result<tempfile::NamedTempFile, StoreError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    tempfile::Builder::new()
        .prefix(TEMP_PREFIX)
        .tempfile_in(dir)
        .map_err(io(path))
}

/// Flushes a written temporary file to disk and renames it over `path`.
fn persist(temp: tempfile::NamedTempFile, path: &Path) -> Result<(), StoreError> {
    // A temporary file is created private (0600); run files hold no secret and are meant to be
    // read, shared and served, so they get the usual 0644.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        temp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(io(path))?;
    }
    temp.as_file().sync_all().map_err(io(path))?;
    temp.persist(path).map_err(|err| io(path)(err.error))?;
    Ok(())
}

/// A CSV file of records written one at a time into a temporary file beside it, which replaces
/// the file only at [`CsvAppender::finish`]: a table of any length is never held in memory, and
/// a kill mid-way leaves the old file (or none), never half of a new one.
pub struct CsvAppender {
    path: PathBuf,
    temp: tempfile::NamedTempFile,
    writer: csv::Writer<BufWriter<std::fs::File>>,
    records: usize,
}

impl CsvAppender {
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<(), StoreError> {
        self.writer
            .serialize(record)
            .map_err(|err| StoreError::Format {
                path: self.path.clone(),
                message: err.to_string(),
            })?;
        self.records += 1;
        Ok(())
    }

    /// Records appended so far.
    pub fn records(&self) -> usize {
        self.records
    }

    /// Puts the file in place of the old one.
    pub fn finish(self) -> Result<(), StoreError> {
        let Self {
            path, temp, writer, ..
        } = self;
        let mut buffered = writer.into_inner().map_err(|err| StoreError::Format {
            path: path.clone(),
            message: err.to_string(),
        })?;
        buffered.flush().map_err(io(&path))?;
        drop(buffered);
        persist(temp, &path)
    }
}

/// Where each answer of `cache.jsonl` sits in the file, by key: 24 bytes per answer rather than
/// the answer, so that a resumed run over a million holdout rows does not hold every answer it
/// was given before. An answer is read from the file when it is needed.
#[derive(Debug)]
pub struct CacheIndex {
    path: PathBuf,
    /// (the key's first 128 bits, byte offset of its line), sorted by key; of a key written twice,
    /// the last line.
    offsets: Vec<(u128, u64)>,
    /// Keys that are not SHA-256 hex (none that gepa-lab writes), by key.
    others: std::collections::HashMap<String, u64>,
    /// Some answer came from the deterministic test stand-in model.
    pub simulated: bool,
    /// Lines of the file that hold no answer (torn, cut, too long, not JSON), skipped.
    pub skipped: usize,
    /// The file, opened at the first answer read and kept open for the others.
    file: Option<std::io::BufReader<std::fs::File>>,
}

/// A cache key's first 128 bits, when it is hexadecimal.
fn key_prefix(key: &str) -> Option<u128> {
    let head = key.get(..32)?;
    u128::from_str_radix(head, 16).ok()
}

impl CacheIndex {
    /// How many answers the file holds.
    pub fn len(&self) -> usize {
        self.offsets.len() + self.others.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn offset(&self, key: &str) -> Option<u64> {
        match key_prefix(key) {
            Some(prefix) => self
                .offsets
                .binary_search_by_key(&prefix, |&(k, _)| k)
                .ok()
                .map(|at| self.offsets[at].1),
            None => self.others.get(key).copied(),
        }
    }

    pub fn contains(&self, key: &str) -> bool {
        self.offset(key).is_some()
    }

    /// The answer cached under `key`, read from the file; none when there is none (or the line
    /// found holds another key whose first 128 bits are the same).
    pub fn read(&mut self, key: &str) -> Result<Option<CachedAnswer>, StoreError> {
        use std::io::{Seek, SeekFrom};
        let Some(offset) = self.offset(key) else {
            return Ok(None);
        };
        let file = match &mut self.file {
            Some(file) => file,
            None => {
                let opened = gepa_lab_input::open_regular(&self.path).map_err(io(&self.path))?;
                self.file.insert(std::io::BufReader::new(opened))
            }
        };
        file.seek(SeekFrom::Start(offset)).map_err(io(&self.path))?;
        let mut line = Vec::new();
        let limit = gepa_lab_input::MAX_LINE;
        let (_, kept) =
            gepa_lab_input::read_line_within(file, &mut line, limit).map_err(io(&self.path))?;
        // The line indexed was shorter: the file changed since; its answer is asked again.
        if !kept {
            return Ok(None);
        }
        let answer: CachedAnswer =
            serde_json::from_slice(&line).map_err(|err| StoreError::Format {
                path: self.path.clone(),
                message: format!("at byte {offset}: {err}"),
            })?;
        Ok((answer.key == key).then_some(answer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_process_writes_a_run_at_a_time_and_a_reader_is_never_refused() {
        let root = tempfile::tempdir().unwrap();
        let run = RunDir::create(root.path(), "x", "1").unwrap();
        std::fs::write(run.file(MANIFEST_FILE), "{}").unwrap();
        let writing = run.clone();
        drop(run);
        // The lock is the file's, not this handle's: a second writer in this process is
        // refused as one in another process is, and told who holds it.
        let refused = RunDir::open_for_writing(&writing.path).unwrap_err();
        assert!(
            matches!(refused, StoreError::InUse { pid: Some(pid), .. } if pid == std::process::id()),
            "{refused:?}"
        );
        let message = refused.to_string();
        assert!(
            message.ends_with(&format!(
                "another gepa-lab process (pid {}) is writing this run; wait for it to end, or \
                 stop it and then resume",
                std::process::id()
            )),
            "{message}"
        );
        RunDir::open(&writing.path).expect("reading needs no lock");
        // The last clone dropped, the lock is free again.
        drop(writing);
        let resumed = RunDir::open_for_writing(&root.path().join("x/1")).unwrap();
        let text = std::fs::read_to_string(resumed.file(LOCK_FILE)).unwrap();
        assert_eq!(text, format!("pid {}\n", std::process::id()));
    }

    #[test]
    fn a_resume_removes_the_temporary_files_a_kill_left_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MANIFEST_FILE), "{}").unwrap();
        let run = RunDir::open(dir.path()).unwrap();
        write_atomic(&run.file("results.json"), b"{}").unwrap();
        for name in [
            ".tmpAb3xY9",
            ".gepa-lab-tmpQ1w2E3",
            ".tmp",
            ".tmpseven77",
            "notes.tmpAb3xY9",
        ] {
            std::fs::write(dir.path().join(name), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join(".tmpDir123")).unwrap();
        assert_eq!(
            run.remove_leftovers().unwrap(),
            vec![".gepa-lab-tmpQ1w2E3".to_owned(), ".tmpAb3xY9".to_owned()]
        );
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                ".tmp",
                ".tmpDir123",
                ".tmpseven77",
                "notes.tmpAb3xY9",
                "results.json",
                "run.json"
            ]
        );
    }

    #[test]
    fn a_torn_last_line_is_cut_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.jsonl");
        assert_eq!(cut_torn_tail(&path).unwrap(), 0);
        assert!(!path.exists());
        let cases: [(&[u8], &[u8]); 5] = [
            (b"", b""),
            (b"{\"a\":1}\n", b"{\"a\":1}\n"),
            (b"{\"a\":1}\n{\"b\":", b"{\"a\":1}\n"),
            (b"{\"b\":", b""),
            (b"{\"a\":1}\n{\"b\":2}\n{", b"{\"a\":1}\n{\"b\":2}\n"),
        ];
        for (before, after) in cases {
            std::fs::write(&path, before).unwrap();
            let cut = cut_torn_tail(&path).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), after);
            assert_eq!(cut as usize, before.len() - after.len());
        }
    }

    fn row(generation: u32) -> HistoryRow {
        HistoryRow {
            variant: "budget-10".into(),
            evolution_id: "e1".into(),
            generation,
            score: 0.5,
            prompt: "Line one, with comma\nline \"two\"".into(),
            budget_used: (generation > 0).then_some(u64::from(generation) * 7),
            costs: None,
            pareto_scores: (generation > 0).then(|| vec![1.0, 0.0, 1.0 / 3.0, 0.25]),
        }
    }

    #[test]
    fn costs_round_trip_as_one_json_field() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        let costs = gepa_lab_engine::Costs {
            prompt_tokens: 41.5,
            answer_tokens: 2.0,
            latency_ms: None,
            rows: 8,
        };
        let with = HistoryRow {
            costs: Some(costs),
            ..row(1)
        };
        run.write_csv(HISTORY_FILE, &[row(0), with.clone()])
            .unwrap();
        let back: Vec<HistoryRow> = run.read_csv(HISTORY_FILE).unwrap();
        assert_eq!(back, vec![row(0), with]);
        let text = std::fs::read_to_string(run.file(HISTORY_FILE)).unwrap();
        assert!(
            text.contains(r#","{""prompt_tokens"":41.5,""answer_tokens"":2.0,""rows"":8}","#),
            "{text}"
        );
        std::fs::write(run.file(HISTORY_FILE), text.replace("41.5", "many")).unwrap();
        let err = run.read_csv::<HistoryRow>(HISTORY_FILE).unwrap_err();
        assert!(err.to_string().contains("costs: expected"), "{err}");
    }

    #[test]
    fn csv_round_trips_quotes_commas_and_newlines() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        run.write_csv(HISTORY_FILE, &[row(0), row(1)]).unwrap();
        let back: Vec<HistoryRow> = run.read_csv(HISTORY_FILE).unwrap();
        assert_eq!(back, vec![row(0), row(1)]);
        let text = std::fs::read_to_string(run.file(HISTORY_FILE)).unwrap();
        assert!(text.contains(",1 0 0.3333333333333333 0.25\n"), "{text}");
        std::fs::write(run.file(HISTORY_FILE), text.replace(" 0.25", " x")).unwrap();
        let err = run.read_csv::<HistoryRow>(HISTORY_FILE).unwrap_err();
        assert!(err.to_string().contains("pareto_scores"), "{err}");
        assert!(
            run.read_csv::<ReplayRow>(REPLAY_FILE).unwrap().is_empty(),
            "missing file is empty"
        );
    }

    fn replay_row() -> ReplayRow {
        ReplayRow {
            variant: String::new(),
            version: ReplayOf::Version(Version::Generation(2)),
            model: "local".into(),
            answered_by: "local".into(),
            row: 14,
            sample: 1,
            inputs: BTreeMap::from([("review".into(), "Great, \"really\" | <b>".into())]),
            expected: "positive".into(),
            output: "Positive".into(),
            score: 1.0,
            feedback: String::new(),
            latency_ms: 120,
            waited_ms: Some(480),
            prompt_tokens: 40,
            completion_tokens: 2,
            node_id: "n1".into(),
            error: String::new(),
        }
    }

    #[test]
    fn replay_inputs_round_trip_as_one_json_field() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        run.write_csv(REPLAY_FILE, &[replay_row()]).unwrap();
        let back: Vec<ReplayRow> = run.read_csv(REPLAY_FILE).unwrap();
        assert_eq!(back, vec![replay_row()]);
    }

    #[test]
    fn files_written_before_the_optional_columns_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        std::fs::write(
            run.file(HISTORY_FILE),
            "variant,evolution_id,generation,score,prompt\n,e1,0,0.5,p\n",
        )
        .unwrap();
        let history: Vec<HistoryRow> = run.read_csv(HISTORY_FILE).unwrap();
        assert_eq!(history[0].budget_used, None);
        assert_eq!(history[0].pareto_scores, None);
        std::fs::write(
            run.file(REPLAY_FILE),
            "variant,version,model,answered_by,row,expected,output,score,feedback,latency_ms,prompt_tokens,completion_tokens,node_id,error\n\
             ,seed,m,m,3,x,x,1,,5,1,1,,\n",
        )
        .unwrap();
        let replay: Vec<ReplayRow> = run.read_csv(REPLAY_FILE).unwrap();
        assert!(replay[0].inputs.is_empty());
    }

    #[test]
    fn a_corrupt_inputs_field_names_the_file_and_record() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        run.write_csv(REPLAY_FILE, &[replay_row(), replay_row()])
            .unwrap();
        let text = std::fs::read_to_string(run.file(REPLAY_FILE)).unwrap();
        let broken = text.replacen("{\"\"review\"\"", "{not json", 2);
        std::fs::write(run.file(REPLAY_FILE), broken).unwrap();
        let err = run
            .read_csv::<ReplayRow>(REPLAY_FILE)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("replay.csv") && err.contains("record 1"),
            "{err}"
        );
        assert!(err.contains("inputs"), "{err}");
    }

    #[test]
    fn events_append_one_line_each_with_a_timestamp() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        run.append_event(&serde_json::json!({"kind": "poll", "status": "pending"}))
            .unwrap();
        run.append_event(&serde_json::json!({"kind": "poll", "status": "completed"}))
            .unwrap();
        let text = std::fs::read_to_string(run.file(EVENTS_FILE)).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["status"], "completed");
        assert!(lines[0]["at"].as_str().is_some_and(|at| at.ends_with('Z')));
    }

    #[test]
    fn a_run_directory_is_never_reused_and_must_have_a_manifest() {
        let dir = tempfile::tempdir().unwrap();
        RunDir::create(dir.path(), "x", "r1").unwrap();
        assert!(matches!(
            RunDir::create(dir.path(), "x", "r1"),
            Err(StoreError::Io { .. })
        ));
        assert!(matches!(
            RunDir::open(&dir.path().join("x/r1")),
            Err(StoreError::Format { .. })
        ));
    }

    #[test]
    fn cache_lines_that_hold_no_answer_are_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        let answer = |key: &str| CachedAnswer {
            key: key.into(),
            answered_by: "m".into(),
            output: "positive".into(),
            node_id: "n".into(),
            latency_ms: 3,
            waited_ms: Some(0),
            prompt_tokens: 10,
            completion_tokens: 1,
            simulated: false,
        };
        run.append_cached(&answer("a")).unwrap();
        run.append_cached(&answer("b")).unwrap();
        let path = run.file(CACHE_FILE);
        let mut text = std::fs::read_to_string(&path).unwrap();
        text.push_str("{\"key\":\"c\",\"answ");
        std::fs::write(&path, &text).unwrap();
        let mut cache = run.index_cache().unwrap();
        assert_eq!((cache.len(), cache.skipped), (2, 1), "the torn last line");
        assert_eq!(cache.read("b").unwrap(), Some(answer("b")));
        assert_eq!(cache.read("c").unwrap(), None);
        // A hostile middle: not JSON, cut, and one line longer than any answer (sparse zeros).
        let long = "x".repeat(gepa_lab_input::MAX_LINE + 1);
        std::fs::write(
            &path,
            format!("garbage\n{{\"key\":\"d\",\"out\n{long}\n{text}\n"),
        )
        .unwrap();
        let mut cache = run.index_cache().unwrap();
        assert_eq!((cache.len(), cache.skipped), (2, 4));
        assert_eq!(cache.read("a").unwrap(), Some(answer("a")));
    }

    #[cfg(unix)]
    #[test]
    fn a_run_file_that_is_a_device_is_refused_not_read_for_ever() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        for name in [CACHE_FILE, EVENTS_FILE, ITERATIONS_FILE] {
            std::os::unix::fs::symlink("/dev/zero", run.file(name)).unwrap();
        }
        let said = |err: StoreError| err.to_string();
        let err = said(run.cut_torn_tails().unwrap_err());
        assert!(
            err.ends_with("a character device, not a regular file"),
            "{err}"
        );
        let err = said(run.index_cache().unwrap_err());
        assert!(err.contains("cache.jsonl: a character device"), "{err}");
        let err = said(run.read_iterations().unwrap_err());
        assert!(
            err.contains("iterations.jsonl: a character device"),
            "{err}"
        );
        let err = said(run.append_event(&serde_json::json!({"e": 1})).unwrap_err());
        assert!(err.contains("events.jsonl: a character device"), "{err}");
    }

    #[test]
    fn the_cache_index_finds_each_answer_and_keeps_the_last_of_a_key() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        let answer = |key: String, output: &str| CachedAnswer {
            key,
            answered_by: "m".into(),
            output: output.into(),
            node_id: String::new(),
            latency_ms: 1,
            waited_ms: None,
            prompt_tokens: 1,
            completion_tokens: 1,
            simulated: output == "sim",
        };
        let key = |n: u32| format!("{:032x}{:032x}", u128::from(n) + 1, 7u128);
        for n in 0..50 {
            run.append_cached(&answer(key(n), &format!("first {n}")))
                .unwrap();
        }
        run.append_cached(&answer(key(7), "again")).unwrap();
        run.append_cached(&answer("not-hex".into(), "sim")).unwrap();
        let mut index = run.index_cache().unwrap();
        assert_eq!(index.len(), 51);
        assert!(index.simulated);
        assert_eq!(index.read(&key(7)).unwrap().unwrap().output, "again");
        assert_eq!(index.read(&key(49)).unwrap().unwrap().output, "first 49");
        assert_eq!(index.read("not-hex").unwrap().unwrap().output, "sim");
        // Same first 128 bits, another key: not this answer.
        let mut other = key(3);
        other.replace_range(63.., "f");
        assert!(index.contains(&other));
        assert_eq!(index.read(&other).unwrap(), None);
        assert!(!index.contains(&key(50)));
    }

    #[test]
    fn a_csv_appender_replaces_the_file_only_when_finished() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path(), "x", "r1").unwrap();
        run.write_csv(HISTORY_FILE, &[row(0)]).unwrap();
        let mut appender = run.csv_appender(HISTORY_FILE).unwrap();
        appender.append(&row(1)).unwrap();
        appender.append(&row(2)).unwrap();
        assert_eq!(appender.records(), 2);
        let before: Vec<HistoryRow> = run.read_csv(HISTORY_FILE).unwrap();
        assert_eq!(before, vec![row(0)], "the old file until finished");
        appender.finish().unwrap();
        let after: Vec<HistoryRow> = run.read_csv(HISTORY_FILE).unwrap();
        assert_eq!(after, vec![row(1), row(2)]);
        assert_eq!(run.remove_leftovers().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn atomic_write_replaces_the_whole_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.json");
        write_atomic(&path, b"old content that is longer").unwrap();
        write_atomic(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }
}
