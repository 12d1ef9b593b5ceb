//! The report context: everything the HTML page, `summary.md`, `results.json` and the terminal
//! table show, as one plain serialisable snapshot of a run. The templates only lay it out; every
//! number and sentence is worked out here, from what `verdict` decides (the recommended version,
//! the headline, the family of comparisons adjusted together, each version's cautions), so a
//! snapshot test of this struct covers what a reader is told.
use std::collections::{HashMap, HashSet};

use serde::Serialize;

use gepa_lab_store::{
    Backend, ExecutionRecord, HistoryRow, ITERATIONS_FILE, RunManifest, Version, evidence_over_seed,
};

use super::ReportError;
use super::answers::RowAnswers;
use super::answers::{self, ReplayTable, Rows, Texts};
use super::baseline::{AnswerCounts, Baseline, Classification, Labels};
use super::diff::{DiffStats, PartDiff, Segment, part_diffs, word_diff};
use super::format::{self, p_phrase};
use super::load::{Execution, IterationLog, PromptVersion, RunData};
use super::samples::{self, Agreement};
use super::search::{self, SearchView};
use super::stats::{self, Adjustment, PairedComparison, Pairs, Values, Verdict};
use super::tables::{HistoryTotals, VersionTotals};

mod costs;
mod verdict;

pub use costs::{CostAxis, CostPoint, CostRole, CostRow, CostView};
pub use verdict::adjust_family;

/// Version of the context's (and `results.json`'s) shape; bumped when a field changes meaning
/// or goes away. 2: a comparison's `verdict` is decided on its Holm-adjusted p-value when it is
/// one of a family (`adjustment`), and `p_value` is given for the paired bootstrap too.
pub const FORMAT_VERSION: u32 = 2;

#[derive(Debug, Clone, Serialize)]
pub struct ReportContext {
    pub format_version: u32,
    /// True when answers came from the deterministic test stand-in model.
    pub simulated: bool,
    pub experiment: ExperimentView,
    pub executions: Vec<ExecutionView>,
    /// The version the run recommends: its best by the ranking rule (`RunData::best`), or the
    /// first replayed seed when no evolved prompt was replayed; with its mean holdout score on
    /// its execution's first replay model. The page, the terminal, `summary.md`, `results.json`
    /// and `run --fail-under` all read this one field.
    pub best: Option<Recommendation>,
    /// Seed against the run's best version, on its first replay model; none when the best is a
    /// seed.
    pub headline: Option<ComparisonView>,
    /// No headline because the seed is the best version: evolved prompts were replayed, but
    /// none scored above the seed on the evolution's own score; or the searches tried and
    /// accepted none, and the seed was replayed.
    pub seed_is_best: bool,
    /// Why the seed is the best version, in the words the page, `summary.md` and the terminal
    /// print ([`seed_is_best_because`], [`seed_stands_because`]); empty when it is not.
    pub seed_is_best_because: String,
    /// Seed against best, for every execution and replay model.
    pub comparisons: Vec<ComparisonView>,
    /// A matrix's own question: each variant's best version against the first variant's, on
    /// the first replay model they share, paired on the holdout rows both answered. Only
    /// variants with the first one's holdout rows (the same dataset and split) are compared.
    pub variant_comparisons: Vec<ComparisonView>,
    /// With `[objectives]`: each execution's candidates against their cost, the frontier, and
    /// the recommended against the cheapest close to it on the holdout. Empty without.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub costs: Vec<CostView>,
    pub versions: Vec<VersionView>,
    pub row_tables: Vec<RowTable>,
    /// How each execution's search went (`iterations.jsonl`), in the order of `executions`.
    pub searches: Vec<SearchView>,
    pub method: MethodView,
    /// Things a reader should know before trusting the numbers (errors, fallbacks, gaps).
    pub notes: Vec<String>,
}

/// The version a run recommends, and its mean holdout score on one replay model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendation {
    pub execution: String,
    pub version: String,
    pub model: String,
    /// Over the rows it answered; none when it answered none.
    pub mean: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExperimentView {
    pub name: String,
    pub description: Option<String>,
    pub file: String,
    pub content_hash: String,
    pub run_id: String,
    pub created_at: String,
    pub updated_at: String,
    pub backend: String,
    /// The declared providers the run used, `name at url` (never a key).
    pub providers: Vec<String>,
}

/// The model of one role of an execution, and the provider that served it.
#[derive(Debug, Clone, Serialize)]
pub struct RoleView {
    /// task, reflection, judge or replay.
    pub role: String,
    /// `local` (embedded), `public` (the inference API) or a declared provider's name.
    pub provider: String,
    /// The id the provider knows the model by.
    pub model: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ExecutionView {
    pub label: String,
    pub custom_id: String,
    pub evolution_id: Option<String>,
    pub status: Option<String>,
    pub error: Option<String>,
    pub strategy: String,
    pub model: String,
    pub budget: u64,
    /// Largest budget spent that the history reports.
    pub budget_used: Option<u64>,
    pub minibatch: u64,
    pub pareto: u64,
    pub holdout_rows: usize,
    pub evaluator: String,
    pub dataset_file: String,
    pub dataset_sha256: String,
    pub inputs: Vec<String>,
    pub expected_column: String,
    /// How the rows were ordered before the split
    /// ([`gepa_lab_experiment::DatasetPlan::order_words`]).
    pub split_order: String,
    pub replay: Option<ReplayView>,
    /// Each role's provider and model, as `run.json` names them (none in runs recorded before
    /// roles were).
    pub models: Vec<RoleView>,
    pub generations: u32,
    pub best_validation_score: Option<f64>,
    /// The version compared with the seed.
    pub best_version: Option<String>,
    /// For a classification (the holdout rows' expected values are a set of labels):
    /// what always answering the most common label would score. None otherwise.
    pub baseline: Option<Baseline>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplayView {
    pub models: Vec<String>,
    pub top: usize,
    pub scorer: String,
    pub temperature: f64,
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ComparisonView {
    pub execution: String,
    pub model: String,
    /// The seed's label and the best version's label.
    pub a: String,
    pub b: String,
    pub rows: usize,
    pub mean_a: f64,
    pub mean_b: f64,
    pub difference: f64,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// The test's own two-sided p-value (exact McNemar, or the paired bootstrap's); none when
    /// too few rows to test.
    pub p_value: Option<f64>,
    /// Whether the verdict was adjusted for the comparisons made beside this one, and how.
    pub adjustment: Adjustment,
    /// The p-value as a table cell prints it: `0.039`, or with its adjustment
    /// `0.039 (Holm, 3 comparisons: 0.078)`; `–` without a test.
    pub p_text: String,
    /// Rows only the seed got right, and only the best got right (binary scores).
    pub only_a: Option<usize>,
    pub only_b: Option<usize>,
    pub test: stats::PairedTest,
    /// The test as the page names it: `exact McNemar`, `paired bootstrap`, …
    pub test_text: &'static str,
    pub verdict: Verdict,
    pub verdict_text: String,
    /// The comparison in one sentence, as every output prints it.
    pub sentence: String,
    /// What a reader should know beside each side's score in a classification (it is no better
    /// than the majority baseline, or gives one label to nearly every row): the clauses of
    /// [`AnswerCounts::cautions`] on this model.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cautions_a: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cautions_b: Vec<String>,
    /// That `b` scores significantly above the majority baseline, in words, when it does
    /// ([`AnswerCounts::above_baseline`]): what a gain over a seed with cautions cannot show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub above_baseline_b: Option<String>,
    /// What the fields above are derived from, kept so that [`adjust_family`] can decide again.
    #[serde(skip)]
    stats: PairedComparison,
    #[serde(skip)]
    scope: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionView {
    /// Unique in the page: `<execution>-<label>`.
    pub id: String,
    pub execution: String,
    pub label: String,
    pub generation: Option<u32>,
    pub is_seed: bool,
    pub is_best: bool,
    pub replayed: bool,
    pub prompt: String,
    pub validation_score: Option<f64>,
    /// Word diff against the execution's seed; empty for the seed itself.
    pub diff: Vec<Segment>,
    pub diff_stats: DiffStats,
    /// For a prompt of several parts, a word diff per part against the seed's; empty otherwise.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub part_diffs: Vec<PartDiff>,
    pub scores: Vec<VersionScore>,
}

#[derive(Debug, Clone, Serialize)]
pub struct VersionScore {
    pub model: String,
    /// Holdout rows asked.
    pub rows: u32,
    /// Answers asked of each row (`[replay] repeat`).
    pub samples: u32,
    /// Answers received and answers failed, over every row and sample.
    pub answered: u32,
    pub errors: u32,
    /// Rows with at least one answer: what the mean and its interval rest on.
    pub answered_rows: u32,
    /// Over rows: each row's score is the mean of its answered samples.
    pub mean: Option<f64>,
    pub ci_low: Option<f64>,
    pub ci_high: Option<f64>,
    /// `wilson` for binary scores, `bootstrap` otherwise (`normal` for many-valued scores on
    /// many rows; see [`stats::IntervalMethod`]).
    pub ci_method: Option<stats::IntervalMethod>,
    /// Send to answer of the request that was answered: the model and the network.
    pub mean_latency_ms: Option<f64>,
    /// Rate pacing, retries and queues before that request was sent.
    pub mean_waited_ms: Option<f64>,
    pub mean_prompt_tokens: Option<f64>,
    pub mean_completion_tokens: Option<f64>,
    pub fallbacks: u32,
    /// How often a row's repeated answers agree; none with one answer per row.
    pub agreement: Option<Agreement>,
    /// In a classification, how many rows got each label (see [`ExecutionView::baseline`]).
    pub answers: Option<AnswerCounts>,
}

/// The holdout rows of one execution on one model, with each version's answer: the answers
/// themselves of at most a page's share of rows (the heatmap reads every row's score from the
/// replay).
#[derive(Debug, Clone, Serialize)]
pub struct RowTable {
    pub id: String,
    pub execution: String,
    pub model: String,
    pub versions: Vec<String>,
    pub best: Option<String>,
    /// Rows some version answered (or failed).
    pub total_rows: usize,
    /// Rows where the seed and the best version score differently (or only one answered).
    pub changed: usize,
    /// The rows shown, in row order: every changed row first, then the others in row order,
    /// up to the table's share of [`ROWS_ON_PAGE`]. All of them when there are fewer.
    pub rows: Vec<RowView>,
}

/// The most rows the page's row tables show in all, so that the page opens at once whatever the
/// holdout's size; each table gets an equal share, and never fewer than [`ROWS_PER_TABLE_MIN`].
/// Every row is in `replay.csv` and `replay.parquet`.
pub const ROWS_ON_PAGE: usize = 2_000;
pub const ROWS_PER_TABLE_MIN: usize = 25;

#[derive(Debug, Clone, Serialize)]
pub struct RowView {
    pub row: usize,
    pub inputs: Vec<InputField>,
    pub expected: String,
    pub changed: bool,
    /// One per version of the table, in order; none where the version did not answer this row.
    pub cells: Vec<Option<Cell>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputField {
    pub name: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    pub output: String,
    /// None when the row has an error instead of an answer.
    pub score: Option<f64>,
    pub error: String,
    /// Set when another model answered (a fallback).
    pub answered_by: Option<String>,
    /// For a row answered several times: how many answers, which ones, how many failed. The
    /// output shown is the first answered sample's; the score is the mean of all answered.
    pub repeats: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MethodView {
    pub resamples: usize,
    pub seed: u64,
    pub confidence: f64,
    pub min_paired_rows: usize,
    pub min_discordant: usize,
    pub text: Vec<String>,
}

/// Builds the context of one run from its checked records and totals. Reads `replay.csv` once
/// more, for the texts of the rows the tables show and the labels of a classification's answers.
pub fn build(
    run: &RunData,
    version_totals: &[VersionTotals],
    history_totals: &[HistoryTotals],
) -> Result<ReportContext, ReportError> {
    let manifest = &run.manifest;
    let classifications: Vec<Option<Classification>> = run
        .executions
        .iter()
        .map(|execution| classification(run, execution))
        .collect();
    let (row_tables, labels) = row_tables(run, &classifications)?;
    let totals: Totals<'_> = version_totals
        .iter()
        .map(|t| ((t.variant.as_str(), t.version, t.model.as_str()), t))
        .collect();
    let history: HashMap<&str, &HistoryTotals> = history_totals
        .iter()
        .map(|t| (t.variant.as_str(), t))
        .collect();

    let Views {
        executions,
        mut comparisons,
        versions,
        searches,
    } = views(run, &totals, &history, &classifications, &labels);

    let mut notes = Vec::new();
    let mut cost_comparisons: Vec<ComparisonView> = run
        .executions
        .iter()
        .filter_map(|execution| verdict::cheapest_against_best(run, execution))
        .collect();
    let (headline, variant_comparisons) =
        page_comparisons(run, &mut comparisons, &mut cost_comparisons, &mut notes);
    let costs = costs::views(&run.executions, &versions, &cost_comparisons);
    notes.extend(run_notes(run, version_totals, &comparisons, &versions));
    // A temporary file of labels that failed to be read gave some answers none: nothing built
    // on it may be shown. (The caller checks the answers' own file once the charts read it too.)
    if let Some(source) = labels.failure() {
        return Err(ReportError::temp_file(source));
    }
    let best = verdict::recommend(run, &versions);
    let seed_is_best_because = match run.best() {
        Some((e, v)) if run.executions[e].versions[v].is_seed() => {
            seed_is_best_because(&run.executions[e])
        }
        Some(_) => String::new(),
        None => seed_stands_because(run).unwrap_or_default(),
    };
    let seed_is_best = !seed_is_best_because.is_empty();

    Ok(ReportContext {
        format_version: FORMAT_VERSION,
        simulated: manifest.simulated,
        experiment: experiment_view(manifest),
        executions,
        best,
        seed_is_best,
        seed_is_best_because,
        headline,
        comparisons,
        variant_comparisons,
        costs,
        versions,
        row_tables,
        searches,
        method: method(),
        notes,
    })
}

/// The row tables of the page, filled with the texts of their rows (read back from
/// `replay.csv` in one pass, with the labels of a classification's answers).
fn row_tables(
    run: &RunData,
    classifications: &[Option<Classification>],
) -> Result<(Vec<RowTable>, Labels), ReportError> {
    let tables = plan_row_tables(run);
    let (texts, labels) = reread(run, &tables, classifications)?;
    let row_tables = tables
        .into_iter()
        .map(|table| {
            let execution = &run.executions[table.execution];
            table.fill(&run.replay, execution, &texts)
        })
        .collect();
    Ok((row_tables, labels))
}

/// The headline and the variants' comparisons, once the page's family is adjusted as
/// `verdict` decides; a note says how, and `variant_comparisons` notes the variants it could
/// not pair.
fn page_comparisons(
    run: &RunData,
    comparisons: &mut [ComparisonView],
    cost_comparisons: &mut [ComparisonView],
    notes: &mut Vec<String>,
) -> (Option<ComparisonView>, Vec<ComparisonView>) {
    let mut variant_comparisons = variant_comparisons(run, notes);
    let headline = verdict::headline(run, comparisons);
    verdict::adjust_page_family(
        headline.as_ref(),
        comparisons,
        &mut variant_comparisons,
        cost_comparisons,
    );
    if let Some(note) = family_note(
        headline.as_ref(),
        comparisons
            .iter()
            .chain(&variant_comparisons)
            .chain(cost_comparisons.iter()),
    ) {
        notes.push(note);
    }
    (headline, variant_comparisons)
}

/// The classification of an execution's holdout rows, when they are one (see
/// [`Classification::of`]): each scored row's expected value, from its earliest answered
/// record.
fn classification(run: &RunData, execution: &Execution) -> Option<Classification> {
    let plan = &run.manifest.executions[execution.index].plan;
    let scorer = &plan.replay.as_ref()?.scorer;
    let groups = execution_rows(&run.replay, execution);
    // A value that was not kept is no label (see `ReplayTable::expected`).
    let mut kept = true;
    let expected = answers::walk(&groups)
        .filter_map(|(_, answers)| {
            answers
                .iter()
                .flatten()
                .filter(|a| a.score().is_some())
                .map(|a| *a.first())
                .min_by_key(|a| a.record)
        })
        .map_while(|answer| {
            let value = run.replay.expected(&execution.variant, &answer);
            kept &= value.is_some();
            value
        });
    let classification = Classification::of(scorer, expected, plan.dataset.holdout_rows);
    classification.filter(|_| kept)
}

/// The answers of every version of an execution on every model.
fn execution_rows<'a>(answers: &'a ReplayTable, execution: &Execution) -> Vec<Option<Rows<'a>>> {
    execution
        .versions
        .iter()
        .flat_map(|v| {
            execution
                .models
                .iter()
                .map(move |model| answers.version(&execution.variant, v.version, model))
        })
        .collect()
}

/// Reads `replay.csv` again: the whole records of the rows the tables show, and each answer's
/// label in its execution's classification.
fn reread<'t>(
    run: &RunData,
    tables: &[PlannedTable],
    classifications: &[Option<Classification>],
) -> Result<(Texts<'t>, Labels), ReportError> {
    let mut wanted: HashSet<u32> = HashSet::new();
    for table in tables {
        let execution = &run.executions[table.execution];
        for version in execution.versions.iter().filter(|v| v.replayed) {
            let Some(rows) = run
                .replay
                .version(&execution.variant, version.version, &table.model)
            else {
                continue;
            };
            for &(row, _) in &table.picked {
                if let Some(answers) = rows.get(row) {
                    wanted.extend(answers.samples().map(|(record, _)| record));
                }
            }
        }
    }
    let by_variant: HashMap<&str, &Classification> = run
        .executions
        .iter()
        .zip(classifications)
        .filter_map(|(e, c)| Some((e.variant.as_str(), c.as_ref()?)))
        .collect();
    let mut labels = Labels::default();
    let texts = run.texts(
        |record| wanted.contains(&record),
        |record, row| {
            if let Some(classification) = by_variant.get(row.variant)
                && row.error.is_empty()
            {
                labels.set(record, classification.label_of(row.output));
            }
        },
    )?;
    labels.finish();
    Ok((texts, labels))
}

/// What the page shows of each execution, in run order.
struct Views {
    executions: Vec<ExecutionView>,
    /// Each execution's seed against its best version, per model.
    comparisons: Vec<ComparisonView>,
    versions: Vec<VersionView>,
    searches: Vec<SearchView>,
}

fn views(
    run: &RunData,
    totals: &Totals<'_>,
    history: &HashMap<&str, &HistoryTotals>,
    classifications: &[Option<Classification>],
    labels: &Labels,
) -> Views {
    let answers = &run.replay;
    let mut executions = Vec::new();
    let mut comparisons = Vec::new();
    let mut versions = Vec::new();
    let mut searches = Vec::new();
    for execution in &run.executions {
        let record = &run.manifest.executions[execution.index];
        let history = history.get(execution.variant.as_str()).copied();
        let best = execution.best.map(|i| &execution.versions[i]);
        let classification = classifications[execution.index].as_ref();
        searches.push(search::view(
            execution,
            &run.iterations,
            best.map(|b| b.version),
            &record.plan.dataset.pareto_rows,
        ));
        executions.push(execution_view(
            record,
            execution,
            history,
            best,
            classification,
        ));
        for version in &execution.versions {
            versions.push(version_view(
                execution,
                version,
                best,
                totals,
                answers,
                classification.map(|c| (c, labels)),
            ));
        }
        for model in &execution.models {
            if let Some(best) = best
                && !best.is_seed()
                && execution.versions[0].replayed
            {
                comparisons.push(seed_against_best(
                    answers, execution, best, model, &versions,
                ));
            }
        }
    }

    Views {
        executions,
        comparisons,
        versions,
        searches,
    }
}

/// Version totals (counted as `replay.csv` was read) by (variant, version, model).
type Totals<'a> = HashMap<(&'a str, Version, &'a str), &'a VersionTotals>;

/// The run's name, file, id, dates and backend.
fn experiment_view(manifest: &RunManifest) -> ExperimentView {
    let plan = &manifest.plan;
    ExperimentView {
        name: plan.name.clone(),
        description: plan.description.clone(),
        file: plan.file.display().to_string(),
        content_hash: plan.content_hash.clone(),
        run_id: manifest.run_id.clone(),
        created_at: manifest
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        updated_at: manifest
            .updated_at
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        backend: backend_text(manifest.backend_description(), manifest.simulated),
        providers: plan
            .providers
            .values()
            .map(|provider| format!("{} at {}", provider.name, provider.url))
            .collect(),
    }
}

/// One execution's settings, state and best version.
fn execution_view(
    record: &ExecutionRecord,
    execution: &Execution,
    history: Option<&HistoryTotals>,
    best: Option<&PromptVersion>,
    classification: Option<&Classification>,
) -> ExecutionView {
    let spec = &record.plan;
    ExecutionView {
        label: execution.label.clone(),
        custom_id: record.custom_id.clone(),
        evolution_id: record.state.evolution_id().map(str::to_owned),
        status: Some(record.state.status_text()),
        error: record.state.problem().map(str::to_owned),
        strategy: spec.start.strategy.as_str().to_owned(),
        model: spec.start.model.clone(),
        budget: spec.start.budget,
        // What the service said the execution spent, else what its last generation had.
        budget_used: record
            .budget_used
            .or_else(|| history.and_then(|h| h.budget_used)),
        minibatch: spec.start.minibatch_size,
        pareto: spec.start.pareto_size,
        holdout_rows: spec.dataset.holdout_rows,
        evaluator: spec.start.evaluator.clone(),
        dataset_file: spec.dataset.file.display().to_string(),
        dataset_sha256: spec.dataset.sha256.clone(),
        inputs: spec.dataset.inputs.clone(),
        expected_column: spec.dataset.expected.clone(),
        split_order: spec.dataset.order_words(),
        replay: spec.replay.as_ref().map(|r| ReplayView {
            models: r.models.clone(),
            top: r.top,
            scorer: r.scorer.to_string(),
            temperature: r.temperature,
            max_tokens: r.max_tokens,
        }),
        models: spec
            .models
            .iter()
            .map(|(role, model)| RoleView {
                role: role.to_owned(),
                provider: model.provider().to_owned(),
                model: model.model().to_owned(),
            })
            .collect(),
        generations: history.map_or(0, |h| h.generations),
        best_validation_score: history.map(|h| h.best_score),
        best_version: best.map(|v| v.label.clone()),
        baseline: classification.map(|c| c.baseline().clone()),
    }
}

/// One prompt version of an execution: its text, diff against the seed, and scores per model.
fn version_view(
    execution: &Execution,
    version: &PromptVersion,
    best: Option<&PromptVersion>,
    totals: &Totals<'_>,
    answers: &ReplayTable,
    classification: Option<(&Classification, &Labels)>,
) -> VersionView {
    let (diff, diff_stats) = if version.is_seed() {
        (Vec::new(), DiffStats::default())
    } else {
        word_diff(&execution.seed, &version.prompt)
    };
    let part_diffs = if version.is_seed() {
        Vec::new()
    } else {
        part_diffs(&execution.seed, &version.prompt)
    };
    let scores = execution
        .models
        .iter()
        .filter_map(|model| {
            let variant = execution.variant.as_str();
            let totals = totals.get(&(variant, version.version, model.as_str()))?;
            let rows = answers.version(variant, version.version, model);
            let counts = classification
                .zip(rows)
                .map(|((classification, labels), rows)| {
                    classification.answers(rows, labels, |answer| answers.expected(variant, answer))
                });
            Some(version_score(model, totals, rows, counts))
        })
        .collect();
    VersionView {
        id: format!("{}-{}", execution.label, version.label),
        execution: execution.label.clone(),
        label: version.label.clone(),
        generation: version.generation(),
        is_seed: version.is_seed(),
        is_best: best.is_some_and(|b| b.label == version.label),
        replayed: version.replayed,
        prompt: version.prompt.clone(),
        validation_score: version.validation_score,
        diff,
        diff_stats,
        part_diffs,
        scores,
    }
}

/// A version's score on one model: its totals, the interval of its row scores, how its
/// repeated answers agree, and its answers per label in a classification (`answers`).
fn version_score(
    model: &str,
    totals: &VersionTotals,
    rows: Option<Rows<'_>>,
    answers: Option<AnswerCounts>,
) -> VersionScore {
    let mut scores = Values::default();
    let mut agreement = Agreement::default();
    for row in rows.iter().flat_map(|rows| rows.values()) {
        if let Some(score) = row.score() {
            scores.push(score);
        }
        agreement.add(&row);
    }
    let interval = scores.interval();
    VersionScore {
        model: model.to_owned(),
        rows: totals.rows,
        samples: totals.samples,
        answered: totals.answered,
        errors: totals.errors,
        answered_rows: u32::try_from(scores.len()).unwrap_or(u32::MAX),
        mean: totals.mean_score,
        ci_low: interval.map(|(i, _)| i.low),
        ci_high: interval.map(|(i, _)| i.high),
        ci_method: interval.map(|(_, method)| method),
        mean_latency_ms: totals.mean_latency_ms,
        mean_waited_ms: totals.mean_waited_ms,
        mean_prompt_tokens: totals.mean_prompt_tokens,
        mean_completion_tokens: totals.mean_completion_tokens,
        fallbacks: totals.fallbacks,
        agreement: agreement.finish(),
        answers,
    }
}

/// The headline test of an execution on one model: its seed against its best version on the
/// holdout rows both answered, with the cautions of either.
fn seed_against_best(
    answers: &ReplayTable,
    execution: &Execution,
    best: &PromptVersion,
    model: &str,
    versions: &[VersionView],
) -> ComparisonView {
    let pairs = paired_scores(answers, execution, Version::Seed, best.version, model);
    let (seed, best) = (Version::Seed.to_string(), best.label.as_str());
    let comparison = pairs.compare();
    let mut view =
        ComparisonView::new(&execution.label, model, &seed, best, &comparison, "holdout");
    view.cautions_a = verdict::cautions(versions, &execution.label, &seed, model);
    view.cautions_b = verdict::cautions(versions, &execution.label, best, model);
    view.above_baseline_b = verdict::above_baseline(versions, &execution.label, best, model);
    view
}

/// The notes below the headline about the whole run: a simulated run, failed answers, cautions,
/// fallbacks, unreadable iteration records, and executions with nothing to compare.
fn run_notes(
    run: &RunData,
    version_totals: &[VersionTotals],
    comparisons: &[ComparisonView],
    versions: &[VersionView],
) -> Vec<String> {
    let mut notes = Vec::new();
    if run.manifest.simulated {
        notes.push(
            "Every answer in this run came from the deterministic test stand-in model, not from a \
             real model: the scores say nothing about how these prompts perform."
                .to_owned(),
        );
    }
    let errors: u32 = version_totals.iter().map(|t| t.errors).sum();
    if errors > 0 {
        // Which means rest on fewer rows, each by name: a total alone hides where.
        let short: Vec<String> = version_totals
            .iter()
            .filter(|t| t.errors > 0)
            .map(|t| {
                let execution = if t.variant.is_empty() {
                    "experiment"
                } else {
                    &t.variant
                };
                format!(
                    "{execution} {} on {}: {} of {} answered, {} missing",
                    t.version, t.model, t.answered, t.asked, t.errors
                )
            })
            .collect();
        notes.push(format!(
            "{errors} replay {} failed ({}; see the per-row tables); failed answers are left out \
             of every mean and every comparison, which pairs only rows both versions answered.",
            if errors == 1 { "answer" } else { "answers" },
            short.join("; ")
        ));
    }
    notes.extend(comparisons.iter().filter_map(caution_note));
    let fallbacks: u32 = version_totals.iter().map(|t| t.fallbacks).sum();
    if fallbacks > 0 {
        notes.push(format!(
            "{fallbacks} {} came from a fallback model after the model asked was unavailable.",
            if fallbacks == 1 { "answer" } else { "answers" }
        ));
    }
    match &run.iterations {
        IterationLog::Unreadable(error) => notes.push(format!(
            "The iteration records could not be read, so the report does not show how the search \
             went: {error}."
        )),
        IterationLog::Read { ignored } if *ignored > 0 => notes.push(format!(
            "Records left out of {ITERATIONS_FILE}: {ignored} (each names no execution of this \
             run by its variant and evolution id, or repeats an iteration already recorded)."
        )),
        IterationLog::Read { .. } | IterationLog::Missing => {}
    }
    for execution in &run.executions {
        if execution.best == Some(0) {
            notes.push(format!(
                "{}: {}; so the seed is the best version; the evolved \
                 prompts' holdout scores are shown for reference, not as an improvement.",
                execution.label,
                seed_is_best_because(execution)
            ));
        } else if execution.best.is_none() {
            notes.push(nothing_replayed(run, execution, versions));
        } else if !execution.versions[0].replayed {
            notes.push(format!(
                "{}: the seed was not replayed, so the evolved prompts cannot be compared with it.",
                execution.label
            ));
        }
    }
    notes
}

/// Why an execution has no evolved version to compare with its seed, and, when the search
/// accepted none, what it tried and what would try more: a user reading "nothing to compare"
/// needs to know whether the seed held against many proposals or the budget ran out after few,
/// or whether the model gives one answer whatever the input, which no budget changes.
fn nothing_replayed(run: &RunData, execution: &Execution, versions: &[VersionView]) -> String {
    let label = &execution.label;
    if execution.generations.iter().any(|row| row.generation > 0) {
        return format!(
            "{label}: no evolved prompt was replayed, so there is nothing to compare with the seed."
        );
    }
    let iterations = execution.iterations.len();
    let spent = run
        .manifest
        .executions
        .get(execution.index)
        .and_then(|record| Some((record.budget_used?, record.plan.start.budget)));
    if iterations == 0 {
        // The built-in engine records every iteration, so none means it proposed nothing.
        // Scoring the seed on the Pareto rows comes first; a budget that takes most of pays for
        // no proposal, and "no evolved prompt was accepted" would hide that none was made.
        if let Some((used, budget)) = spent
            .filter(|&(used, budget)| used * 4 >= budget * 3)
            .filter(|_| run.manifest.backend == Backend::Local)
        {
            return format!(
                "{label}: the evolution spent {used} of its budget of {budget} calls before \
                 proposing any prompt (scoring the seed on the Pareto rows comes first), so the \
                 seed stands and there is nothing to compare with it on the holdout rows; a \
                 larger `budget` pays for proposals."
            );
        }
        // No iteration records: a service's run (it reports none), or a search that made none.
        return format!(
            "{label}: the evolution's history holds only the seed (no evolved prompt was \
             accepted), so the seed stands and there is nothing to compare with it on the \
             holdout rows."
        );
    }
    let mut note = format!(
        "{label}: no evolved prompt was accepted in {iterations} iteration{} (each one's outcome \
         is under \"How the search went\"), so the seed stands and there is nothing to compare \
         with it on the holdout rows.",
        if iterations == 1 { "" } else { "s" }
    );
    // The seed answered one label on every replay model: its proposals were judged against a
    // model that answers alike whatever the input, and a larger budget buys more of the same.
    let seed = &execution.versions[0].label;
    let one_label: Option<Vec<String>> = execution
        .models
        .iter()
        .map(|model| {
            verdict::one_label(versions, label, seed, model)
                .map(|share| format!("{share} on {model}"))
        })
        .collect();
    if let Some(one_label) = one_label.filter(|shares| !shares.is_empty()) {
        note.push_str(&format!(
            " On the holdout rows the seed answers {}: the model gives one answer to nearly every \
             input, which a larger `budget` does not change; a model that tells the rows apart \
             comes first.",
            one_label.join(" and ")
        ));
    } else if let Some((used, budget)) = spent.filter(|&(used, budget)| used * 4 >= budget * 3) {
        // Most of the budget gone: more of it is what would try more proposals.
        note.push_str(&format!(
            " It spent {used} of its budget of {budget} calls; a larger `budget` pays for more \
             proposals."
        ));
    }
    note
}

/// Why the seed stands as the best version of a run whose searches accepted no evolved prompt
/// at all, though they tried (their iterations are recorded) and the seed was replayed: "no
/// evolved prompt was accepted in 14 iterations" is the run's outcome, where "no comparison is
/// possible" would read as a failure of the run. `None` otherwise (nothing tried, an evolved
/// prompt that was not replayed, a seed without answers), when the notes say what is missing.
fn seed_stands_because(run: &RunData) -> Option<String> {
    let executions = &run.executions;
    let searched = executions.iter().all(|execution| {
        execution.generations.iter().all(|row| row.generation == 0)
            && execution.versions.first().is_some_and(|seed| seed.replayed)
    });
    let iterations: usize = executions.iter().map(|e| e.iterations.len()).sum();
    if !searched || iterations == 0 {
        return None;
    }
    Some(format!(
        "no evolved prompt was accepted in {iterations} iteration{}",
        if iterations == 1 { "" } else { "s" }
    ))
}

/// Why the seed is an execution's best version. With `[objectives]` the best is the candidate
/// they recommend, so an evolved prompt may score higher and still not be chosen: above a
/// limit, or below the seed once its weighted costs are taken off. Without, an evolved prompt
/// that scored higher is not the best when its rows do not show the gain ([`may_be_best`]);
/// the reason names the highest such version and the rows it rests on.
pub(crate) fn seed_is_best_because(execution: &Execution) -> String {
    if execution.objectives.is_some() {
        return "no evolved prompt within the objectives' limits scored above the seed on the \
                evolution's own score (its Pareto rows), less its weighted costs"
            .to_owned();
    }
    const NONE_HIGHER: &str =
        "no evolved prompt scored above the seed on the evolution's own score";
    let Some(seed_score) = execution.versions[0].validation_score else {
        return NONE_HIGHER.to_owned();
    };
    let higher = execution
        .versions
        .iter()
        .filter_map(|version| Some((version, version.generation()?, version.validation_score?)))
        .filter(|&(_, _, score)| score > seed_score)
        .max_by(|a, b| a.2.total_cmp(&b.2));
    let history: Vec<&HistoryRow> = execution.generations.iter().collect();
    let Some((version, evidence, score)) = higher.and_then(|(version, generation, score)| {
        let evidence = evidence_over_seed(&history, &execution.iterations, generation)?;
        Some((version, evidence, score))
    }) else {
        return NONE_HIGHER.to_owned();
    };
    let rows = match evidence.feedback_rows {
        0 => format!("its {} Pareto rows", evidence.pareto_rows),
        feedback => format!(
            "{} rows (its {} Pareto rows and {feedback} feedback rows no proposal of its lineage \
             was written from)",
            evidence.pareto_rows + feedback,
            evidence.pareto_rows
        ),
    };
    format!(
        "{} scored {score:.3} against the seed's {seed_score:.3} on the evolution's own score \
         (its Pareto rows), but won {} rows and lost {} of {rows}: a one-sided sign test gives \
         p = {:.2}, and a best needs p ≤ {}",
        version.label,
        evidence.wins,
        evidence.losses,
        evidence.p(),
        gepa_lab_engine::PARETO_ACCEPT_P
    )
}

/// A note for a seed-against-best comparison whose seed or best has cautions: a gain over a
/// seed that answers one label, or that a baseline matches, is no evidence of a good prompt;
/// the best's own test against the baseline is, when it passes.
fn caution_note(c: &ComparisonView) -> Option<String> {
    let mut parts = Vec::new();
    if !c.cautions_a.is_empty() {
        parts.push(format!(
            "the seed {}, so a gain over it is no evidence that {} is a good prompt",
            c.cautions_a.join(" and "),
            c.b
        ));
        if let Some(above) = &c.above_baseline_b {
            parts.push(format!("{} {above}", c.b));
        }
    }
    if !c.cautions_b.is_empty() {
        parts.push(format!("{} {}", c.b, c.cautions_b.join(" and ")));
    }
    (!parts.is_empty()).then(|| format!("{} on {}: {}.", c.execution, c.model, parts.join("; ")))
}

/// Row scores of `a` and `b` on the rows both answered.
fn paired_scores(
    answers: &ReplayTable,
    execution: &Execution,
    a: Version,
    b: Version,
    model: &str,
) -> Pairs {
    match (
        answers.version(&execution.variant, a, model),
        answers.version(&execution.variant, b, model),
    ) {
        (Some(a), Some(b)) => samples::paired(a, b),
        _ => Pairs::default(),
    }
}

/// A row table whose rows are chosen but not yet filled with their texts, which the report
/// reads from `replay.csv` for the chosen rows only.
struct PlannedTable {
    /// Index in `run.executions`.
    execution: usize,
    model: String,
    /// The rows to show, in row order, each with whether it changed.
    picked: Vec<(usize, bool)>,
    table: RowTable,
}

/// Every row table of the run: one per execution and model, in run order, each showing an
/// equal share of [`ROWS_ON_PAGE`].
fn plan_row_tables(run: &RunData) -> Vec<PlannedTable> {
    let tables: usize = run.executions.iter().map(|e| e.models.len()).sum();
    let rows_per_table = (ROWS_ON_PAGE / tables.max(1)).max(ROWS_PER_TABLE_MIN);
    run.executions
        .iter()
        .flat_map(|execution| {
            execution
                .models
                .iter()
                .map(move |model| plan_row_table(&run.replay, execution, model, rows_per_table))
        })
        .collect()
}

/// The replayed versions of an execution, in order, with their answers on `model`.
fn table_versions<'a>(
    answers: &'a ReplayTable,
    execution: &'a Execution,
    model: &str,
) -> Vec<(&'a PromptVersion, Option<Rows<'a>>)> {
    execution
        .versions
        .iter()
        .filter(|v| v.replayed)
        .map(|v| (v, answers.version(&execution.variant, v.version, model)))
        .collect()
}

/// The row table of `execution` on `model`, choosing at most `shown` rows to show.
fn plan_row_table(
    answers: &ReplayTable,
    execution: &Execution,
    model: &str,
    shown: usize,
) -> PlannedTable {
    let replayed = table_versions(answers, execution, model);
    let best = execution.best.map(|i| execution.versions[i].version);
    let seed_at = replayed.iter().position(|(v, _)| v.is_seed());
    let best_at = best.and_then(|b| replayed.iter().position(|(v, _)| v.version == b));
    let versions: Vec<Option<Rows<'_>>> = replayed.iter().map(|(_, rows)| *rows).collect();
    // The first `shown` changed rows and the first `shown` others, in row order: every changed
    // row comes first, then the others; whatever the table's length, no more is kept.
    let (mut changed_rows, mut other_rows) = (Vec::new(), Vec::new());
    let (mut total_rows, mut changed) = (0, 0);
    for (row, answers) in answers::walk(&versions) {
        total_rows += 1;
        // On the exact scores.
        let score = |at: usize| answers[at].as_ref().and_then(RowAnswers::score);
        let is_changed = match (seed_at, best_at) {
            (Some(s), Some(b)) => score(s) != score(b),
            _ => false,
        };
        if is_changed {
            changed += 1;
        }
        let kept = if is_changed {
            &mut changed_rows
        } else {
            &mut other_rows
        };
        if kept.len() < shown {
            kept.push((row, is_changed));
        }
    }
    // Shown in row order.
    let mut picked: Vec<(usize, bool)> = changed_rows
        .into_iter()
        .chain(other_rows)
        .take(shown)
        .collect();
    picked.sort_unstable();
    PlannedTable {
        execution: execution.index,
        model: model.to_owned(),
        picked,
        table: RowTable {
            id: format!("rows-{}-{}", execution.label, slug(model)),
            execution: execution.label.clone(),
            model: model.to_owned(),
            versions: replayed.iter().map(|(v, _)| v.label.clone()).collect(),
            best: best.map(|version| version.to_string()),
            total_rows,
            changed,
            rows: Vec::new(),
        },
    }
}

impl PlannedTable {
    /// The table with its chosen rows, their texts from `texts`.
    fn fill(self, answers: &ReplayTable, execution: &Execution, texts: &Texts<'_>) -> RowTable {
        let replayed = table_versions(answers, execution, &self.model);
        let rows = self
            .picked
            .iter()
            .map(|&(row, changed)| {
                let found: Vec<Option<RowAnswers>> = replayed
                    .iter()
                    .map(|(_, rows)| rows.and_then(|rows| rows.get(row)))
                    .collect();
                row_view(row, changed, &found, texts)
            })
            .collect();
        RowTable { rows, ..self.table }
    }
}

/// One row of a row table: its inputs and expected value, and each version's answer.
fn row_view(row: usize, changed: bool, found: &[Option<RowAnswers>], texts: &Texts<'_>) -> RowView {
    let first = found
        .iter()
        .flatten()
        .next()
        .and_then(|answers| answers.shown_row(texts));
    RowView {
        row,
        inputs: first
            .map(|r| {
                r.inputs
                    .iter()
                    .map(|(name, value)| InputField {
                        name: name.clone(),
                        value: value.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
        expected: first.map(|r| r.expected.clone()).unwrap_or_default(),
        changed,
        cells: found
            .iter()
            .map(|answers| {
                answers.as_ref().map(|answers| {
                    let shown = answers.shown_row(texts);
                    Cell {
                        output: answers.output(texts).to_owned(),
                        score: answers.score(),
                        error: shown.map(|r| r.error.clone()).unwrap_or_default(),
                        answered_by: shown
                            .filter(|r| r.answered_by != r.model)
                            .map(|r| r.answered_by.clone()),
                        repeats: answers.summary(texts),
                    }
                })
            })
            .collect(),
    }
}

impl ComparisonView {
    /// The difference with its 95% interval, as the tables print it: `+0.050 (-0.050 to +0.150)`.
    pub fn difference_text(&self) -> String {
        format!(
            "{} ({} to {})",
            format::signed(Some(self.difference)),
            format::signed(self.ci_low),
            format::signed(self.ci_high)
        )
    }

    /// The view of one paired comparison. `scope` names the rows in its sentence: "holdout" for
    /// a run's holdout rows, "dataset" for the rows of a dataset file.
    pub fn new(
        execution: &str,
        model: &str,
        a: &str,
        b: &str,
        c: &PairedComparison,
        scope: &str,
    ) -> Self {
        ComparisonView {
            execution: execution.to_owned(),
            model: model.to_owned(),
            a: a.to_owned(),
            b: b.to_owned(),
            rows: c.rows,
            mean_a: c.mean_a,
            mean_b: c.mean_b,
            difference: c.difference,
            ci_low: c.interval.map(|i| i.low),
            ci_high: c.interval.map(|i| i.high),
            p_value: c.p_value,
            adjustment: c.adjustment,
            p_text: p_text(c),
            only_a: c.mcnemar.map(|m| m.only_a),
            only_b: c.mcnemar.map(|m| m.only_b),
            test: c.test,
            test_text: c.test.text(),
            verdict: c.verdict,
            verdict_text: c.verdict.text().to_owned(),
            sentence: sentence(execution, model, a, b, c, scope),
            cautions_a: Vec::new(),
            cautions_b: Vec::new(),
            above_baseline_b: None,
            stats: c.clone(),
            scope: scope.to_owned(),
        }
    }
}

/// See [`ComparisonView::p_text`].
fn p_text(c: &PairedComparison) -> String {
    let p = format::p_value(c.p_value);
    match c.adjustment {
        Adjustment::None => p,
        Adjustment::Holm {
            family,
            adjusted_p_value,
        } => format!(
            "{p} (Holm, {family} comparisons: {})",
            format::p_value(Some(adjusted_p_value))
        ),
    }
}

/// One sentence a reader can quote: what was compared, on how many rows, the difference with its
/// interval, the test and the verdict.
fn sentence(
    execution: &str,
    model: &str,
    a: &str,
    b: &str,
    c: &PairedComparison,
    scope: &str,
) -> String {
    if c.rows == 0 {
        return format!(
            "{execution}: {b} and {a} share no answered {scope} row on {model}; nothing to compare."
        );
    }
    let interval = c.interval.map_or(String::new(), |i| {
        format!(
            " (95% CI {} to {})",
            format::signed(Some(i.low)),
            format::signed(Some(i.high))
        )
    });
    let mut test = match c.mcnemar {
        Some(m) => format!(
            "exact McNemar {} ({} rows only {b} got right, {} only {a})",
            p_phrase(Some(m.p_value)),
            m.only_b,
            m.only_a
        ),
        None if c.p_value.is_some() => format!("{} {}", c.test.text(), p_phrase(c.p_value)),
        None => c.test.text().to_owned(),
    };
    if let Adjustment::Holm {
        family,
        adjusted_p_value,
    } = c.adjustment
    {
        test.push_str(&format!(
            ", Holm-adjusted for the {family} comparisons made together {}",
            p_phrase(Some(adjusted_p_value))
        ));
    }
    let verdict = match c.verdict {
        Verdict::TooFewRows => format!(
            "too few rows to call a difference ({} paired rows; at least {} needed)",
            c.rows,
            stats::MIN_PAIRED_ROWS
        ),
        Verdict::TooFewDiscordant => format!(
            "too few rows that differ to call a difference ({} rows differ; the exact test needs at least {})",
            c.mcnemar.map_or(0, |m| m.only_a + m.only_b),
            stats::MIN_DISCORDANT
        ),
        other => other.text().to_owned(),
    };
    format!(
        "{execution}, {model}, {} {scope} rows: {b} scored {:.3} against {a}'s {:.3}, a difference of {}{interval}; {test}: {verdict}.",
        c.rows,
        c.mean_b,
        c.mean_a,
        format::signed(Some(c.difference))
    )
}

/// Each variant's best version against the first variant's (see
/// [`ReportContext::variant_comparisons`]); a variant that cannot be paired with the first is
/// named in a note.
fn variant_comparisons(run: &RunData, notes: &mut Vec<String>) -> Vec<ComparisonView> {
    let answers = &run.replay;
    let Some((first, others)) = run.executions.split_first() else {
        return Vec::new();
    };
    let Some(first_best) = first.best.map(|i| &first.versions[i]) else {
        return Vec::new();
    };
    let holdout = |e: &Execution| {
        let dataset = &run.manifest.executions[e.index].plan.dataset;
        (
            dataset.sha256.clone(),
            dataset.shuffle_seed,
            dataset.stratify,
            dataset.minibatch_rows.len(),
            dataset.pareto_rows.len(),
            dataset.holdout_rows,
        )
    };
    let mut out = Vec::new();
    for other in others {
        let Some(best) = other.best.map(|i| &other.versions[i]) else {
            continue;
        };
        if holdout(other) != holdout(first) {
            notes.push(format!(
                "{} is not compared with {}: their holdout rows differ (another dataset or split).",
                other.label, first.label
            ));
            continue;
        }
        let Some(model) = first.models.iter().find(|m| other.models.contains(m)) else {
            continue;
        };
        let (Some(a), Some(b)) = (
            answers.version(&first.variant, first_best.version, model),
            answers.version(&other.variant, best.version, model),
        ) else {
            continue;
        };
        out.push(ComparisonView::new(
            "variants",
            model,
            &format!("{} {}", first.label, first_best.label),
            &format!("{} {}", other.label, best.label),
            &samples::paired(a, b).compare(),
            "holdout",
        ));
    }
    out
}

/// How the page's verdicts account for making several comparisons, when any was adjusted.
fn family_note<'a>(
    headline: Option<&ComparisonView>,
    comparisons: impl Iterator<Item = &'a ComparisonView>,
) -> Option<String> {
    let family = comparisons
        .filter_map(|c| match c.adjustment {
            Adjustment::Holm { family, .. } => Some(family),
            Adjustment::None => None,
        })
        .max()?;
    let headline = headline.map_or(String::new(), |h| {
        format!(
            "The headline comparison ({} against {} on {}) was chosen before the holdout was \
             read, as the best version by its Pareto score, and is tested alone at 5%. ",
            h.b, h.a, h.model
        )
    });
    Some(format!(
        "{headline}The other {family} comparisons that could be tested are adjusted together by \
         Holm's method: each verdict is read on its adjusted p-value, so that making {family} \
         comparisons does not make a false \"significant\" {family} times as likely."
    ))
}

fn method() -> MethodView {
    MethodView {
        resamples: stats::RESAMPLES,
        seed: stats::SEED,
        confidence: 1.0 - stats::ALPHA,
        min_paired_rows: stats::MIN_PAIRED_ROWS,
        min_discordant: stats::MIN_DISCORDANT,
        text: vec![
            "The best version of an execution is the replayed prompt with the highest evolution \
             (Pareto) score, ties to the earlier generation; the seed competes when its score is \
             known, so an evolved prompt must score above it. The best is chosen before the \
             holdout is looked at, so the holdout comparison is not biased towards it."
                .to_owned(),
            format!(
                "Differences are paired: both versions on the same holdout rows and model, rows \
                 with an error in either left out. The 95% interval of the difference is a \
                 percentile bootstrap over rows ({} resamples, fixed seed). Beyond {} rows whose \
                 differences take more than {} values, it is the normal approximation that \
                 bootstrap tends to (mean ± 1.96 standard errors), whose error there is smaller \
                 than the resampling's; the page then names the test \"paired normal \
                 approximation\".",
                stats::RESAMPLES,
                stats::ROW_BY_ROW_ROWS,
                stats::MANY_VALUES
            ),
            format!(
                "For 0/1 scores the verdict is the exact McNemar test (two-sided binomial test on \
                 the rows where exactly one version is right), at the 5% level; with fewer than {} \
                 such rows it cannot reach 5%, and the report makes no call. For other scores the \
                 verdict is the paired bootstrap's p-value (twice the share of resamples on the \
                 far side of 0), below 5% just when the interval leaves 0 out; with its normal \
                 approximation, twice the normal tail beyond the difference over its standard \
                 error.",
                stats::MIN_DISCORDANT
            ),
            "The headline (the best version by its Pareto score against the seed, chosen before \
             the holdout is read) is a single test. When the page makes other comparisons (more \
             variants or models), those are adjusted together by Holm's method and their \
             verdicts read on the adjusted p-values, so that more comparisons do not mean more \
             false alarms."
                .to_owned(),
            format!(
                "No difference is called on fewer than {} paired rows: below that the bootstrap \
                 interval covers far less than it claims.",
                stats::MIN_PAIRED_ROWS
            ),
            "A version's own 95% interval is the Wilson score interval for 0/1 scores, and a \
             percentile bootstrap of the mean otherwise (or its normal approximation, as above). \
             Comparing two versions by whether their own intervals overlap is weaker than the \
             paired test; use the paired result."
                .to_owned(),
        ],
    }
}

fn backend_text(text: String, simulated: bool) -> String {
    if simulated {
        format!("{text}; answers from the test stand-in model")
    } else {
        text
    }
}

/// An HTML id fragment from a model name, which may contain any character.
fn slug(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::answers::Texts;
    use crate::baseline::Classification;
    use gepa_lab_store::{
        HISTORY_FILE, HistoryRow, REPLAY_FILE, ReplayOf, ReplayRow, RunDir, Version,
    };

    /// The fixture run with the holdout scores of budget-30's g3 raised to 1.0: g3 now beats
    /// g5 on the holdout, while g5 keeps the higher evolution score.
    fn fixture_where_g3_wins_the_holdout() -> tempfile::TempDir {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run");
        let temp = tempfile::tempdir().unwrap();
        for name in ["run.json", "history.csv", REPLAY_FILE] {
            std::fs::copy(fixture.join(name), temp.path().join(name)).unwrap();
        }
        let dir = RunDir::open(temp.path()).unwrap();
        let mut rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
        for row in &mut rows {
            if row.variant == "budget-30"
                && row.version == ReplayOf::Version(Version::Generation(3))
                && row.error.is_empty()
            {
                row.score = 1.0;
            }
        }
        dir.write_csv(REPLAY_FILE, &rows).unwrap();
        temp
    }

    /// The fixture run with its replay rows changed by `edit`.
    fn fixture_with_replay(edit: impl Fn(&mut ReplayRow)) -> tempfile::TempDir {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run");
        let temp = tempfile::tempdir().unwrap();
        for name in ["run.json", "history.csv", REPLAY_FILE] {
            std::fs::copy(fixture.join(name), temp.path().join(name)).unwrap();
        }
        let dir = RunDir::open(temp.path()).unwrap();
        let mut rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
        rows.iter_mut().for_each(edit);
        dir.write_csv(REPLAY_FILE, &rows).unwrap();
        temp
    }

    #[test]
    fn a_seed_that_answers_one_label_is_read_against_the_majority_baseline() {
        // budget-10's seed answers `Negative` to every row it answered: exact_match_ci scores
        // it right on the 15 rows that expect `negative`, the score of always answering it.
        let temp = fixture_with_replay(|row| {
            if row.variant == "budget-10"
                && row.version == ReplayOf::Version(Version::Seed)
                && row.error.is_empty()
            {
                row.output = "Negative".into();
                row.score = if row.expected == "negative" { 1.0 } else { 0.0 };
            }
        });
        let report = crate::build(temp.path(), crate::RenderOptions::default()).unwrap();
        let context = &report.context;
        let baseline = context.executions[0].baseline.as_ref().unwrap();
        assert_eq!(
            (baseline.label.as_str(), baseline.rows, baseline.scored_rows),
            ("negative", 15, 30)
        );
        assert_eq!(baseline.tied_with, ["positive"], "15 rows each");
        assert_eq!(baseline.score, Some(0.5));
        let seed = context
            .versions
            .iter()
            .find(|v| v.execution == "budget-10" && v.is_seed)
            .unwrap();
        let answers = seed.scores[0].answers.as_ref().unwrap();
        assert_eq!(answers.text, "answered `negative` to 30 of 30 rows (100%)");
        assert!(answers.one_label);
        assert_eq!(answers.standing, Some(crate::baseline::Standing::AtOrBelow));
        let comparison = &context.comparisons[0];
        assert_eq!(comparison.execution, "budget-10");
        assert_eq!(comparison.cautions_a, answers.cautions);
        // g1 scores 0.600: above the baseline, but not on enough rows to call it.
        let g1 = "scores above always answering `negative` (0.600 against 0.500 on the same 30 \
                  rows), not significantly (exact McNemar p = 0.549)";
        assert_eq!(comparison.cautions_b, [g1]);
        assert_eq!(comparison.above_baseline_b, None);
        let note = format!(
            "budget-10 on local: the seed scores no better than always answering `negative` \
             (0.500 on the same 30 rows) and answers `negative` to 100% of rows, so a gain over \
             it is no evidence that g1 is a good prompt; g1 {g1}."
        );
        assert!(context.notes.contains(&note), "{:?}", context.notes);
        // budget-30's seed answers both labels, and 0.533 on 30 rows is not shown above always
        // answering `negative`: that, and nothing of one label.
        assert_eq!(
            context.comparisons[1].cautions_a,
            [
                "scores above always answering `negative` (0.533 against 0.500 on the same 30 \
              rows), not significantly (exact McNemar p = 1.000)"
            ]
        );

        // Beside the seed's score on the page and in summary.md.
        assert!(report.html.contains(
            "<div class=\"caution\">answers <code>negative</code> to 100% of rows</div>"
        ));
        assert!(report.html.contains("<h3>Majority baseline</h3>"));
        assert!(
            report.markdown.contains(&format!(
                "| 0.500; **scores no better than always answering `negative` (0.500 on the \
                 same 30 rows)**; **answers `negative` to 100% of rows** | 0.600; **{g1}** |"
            )),
            "{}",
            report.markdown
        );
        assert!(crate::summary_text(context).contains(&format!("note: {note}\n")));

        // And in results.json, for scripts.
        let results = serde_json::to_value(crate::export::results(context)).unwrap();
        let baseline = &results["executions"][0]["baseline"];
        assert_eq!(
            (&baseline["label"], &baseline["rows"], &baseline["score"]),
            (&"negative".into(), &15.into(), &0.5.into())
        );
        let answers = &results["versions"][0]["scores"][0]["answers"];
        assert_eq!(answers["labels"][0]["label"], "negative");
        assert_eq!(answers["labels"][0]["rows"], 30);
        assert_eq!(answers["top_share"], 1.0);
        assert_eq!(
            results["comparisons"][0]["cautions_a"][1],
            "answers `negative` to 100% of rows"
        );
    }

    #[test]
    fn a_best_significantly_above_the_baseline_is_said_beside_a_seed_that_is_not() {
        // budget-10's seed answers `Negative` to every row, and its best, g1, answers every
        // row right: 1.000 against always answering `negative`'s 0.500 on 30 rows.
        let temp = fixture_with_replay(|row| {
            if row.variant != "budget-10" || !row.error.is_empty() {
                return;
            }
            if row.version == ReplayOf::Version(Version::Seed) {
                row.output = "Negative".into();
                row.score = if row.expected == "negative" { 1.0 } else { 0.0 };
            } else if row.version == ReplayOf::Version(Version::Generation(1)) {
                row.output = row.expected.clone();
                row.score = 1.0;
            }
        });
        let report = crate::build(temp.path(), crate::RenderOptions::default()).unwrap();
        let comparison = &report.context.comparisons[0];
        assert_eq!((comparison.b.as_str(), comparison.rows), ("g1", 30));
        assert!(
            comparison.cautions_b.is_empty(),
            "{:?}",
            comparison.cautions_b
        );
        let above = "scores significantly above always answering `negative` (1.000 against \
                     0.500 on the same 30 rows), exact McNemar p < 0.001";
        assert_eq!(comparison.above_baseline_b.as_deref(), Some(above));
        let note = format!(
            "budget-10 on local: the seed scores no better than always answering `negative` \
             (0.500 on the same 30 rows) and answers `negative` to 100% of rows, so a gain over \
             it is no evidence that g1 is a good prompt; g1 {above}."
        );
        assert!(
            report.context.notes.contains(&note),
            "{:?}",
            report.context.notes
        );
    }

    #[test]
    fn the_second_read_keeps_only_the_shown_rows_records_and_labels_every_answer() {
        // budget-10 is a sentiment classification; its table shows 3 of its rows here.
        let temp = fixture_with_replay(|row| {
            if row.variant == "budget-10" && row.version == ReplayOf::Version(Version::Seed) {
                row.output = "Negative".into();
            }
        });
        let run = crate::load::load(temp.path()).unwrap();
        let execution = &run.executions[0];
        let table = super::plan_row_table(&run.replay, execution, &execution.models[0], 3);
        let classifications: Vec<Option<Classification>> = run
            .executions
            .iter()
            .map(|e| super::classification(&run, e))
            .collect();
        assert!(classifications[0].is_some());
        let (texts, labels) =
            super::reread(&run, std::slice::from_ref(&table), &classifications).unwrap();
        let shown: Vec<usize> = table.picked.iter().map(|&(row, _)| row).collect();
        let versions = execution.versions.iter().filter(|v| v.replayed).count();
        let Texts::Read(kept) = &texts else {
            panic!("read from the file")
        };
        assert_eq!(
            kept.len(),
            shown.len() * versions,
            "one answer per version and row"
        );
        assert!(kept.values().all(|r| shown.contains(&r.row)));
        // Every seed answer is `negative`, which is a label: each one has it.
        let seed = run
            .replay
            .version(&execution.variant, Version::Seed, &execution.models[0])
            .unwrap();
        let counts = classifications[0]
            .as_ref()
            .unwrap()
            .answers(seed, &labels, |answer| {
                run.replay.expected(&execution.variant, answer)
            });
        assert_eq!(counts.other, 0);
        assert_eq!(counts.top.map(|t| t.label), Some("negative".to_owned()));
    }

    #[test]
    fn a_long_table_shows_its_changed_rows_first_and_counts_every_row() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/run");
        let run = crate::load::load(&fixture).unwrap();
        let execution = &run.executions[0];
        let model = &execution.models[0];
        // Every record's text, as the report reads them for the rows it shows.
        let texts = run.texts(|_| true, |_, _| {}).unwrap();
        let table = |shown: usize| {
            super::plan_row_table(&run.replay, execution, model, shown).fill(
                &run.replay,
                execution,
                &texts,
            )
        };
        let full = table(usize::MAX);
        assert_eq!(full.rows.len(), full.total_rows);
        assert!(full.changed > 0 && full.changed + 2 < full.total_rows);
        let shown = full.changed + 2;
        let short = table(shown);
        assert_eq!(
            (short.total_rows, short.changed),
            (full.total_rows, full.changed),
            "the counts cover every row"
        );
        // Every changed row, then the first unchanged ones, shown in row order.
        let mut expected: Vec<usize> = full
            .rows
            .iter()
            .filter(|r| r.changed)
            .chain(full.rows.iter().filter(|r| !r.changed))
            .take(shown)
            .map(|r| r.row)
            .collect();
        expected.sort_unstable();
        let rows: Vec<usize> = short.rows.iter().map(|r| r.row).collect();
        assert_eq!(rows, expected);
        for row in &short.rows {
            let same = full.rows.iter().find(|r| r.row == row.row).unwrap();
            assert_eq!(row.changed, same.changed);
            assert_eq!(row.expected, same.expected);
        }
    }

    #[test]
    fn free_text_answers_get_no_baseline() {
        // Every row expects its own text: not a label set.
        let temp = fixture_with_replay(|row| row.expected = format!("answer {}", row.row));
        let report = crate::build(temp.path(), crate::RenderOptions::default()).unwrap();
        let context = &report.context;
        assert!(context.executions.iter().all(|e| e.baseline.is_none()));
        assert!(
            context
                .versions
                .iter()
                .flat_map(|v| &v.scores)
                .all(|s| s.answers.is_none())
        );
        assert!(!report.html.contains("Majority baseline"));
        assert!(!report.markdown.contains("majority baseline"));
        assert!(
            report
                .markdown
                .contains("| execution | model | best | rows | seed | best | difference (95% CI) | p | verdict |\n")
        );
        let results = serde_json::to_value(crate::export::results(context)).unwrap();
        assert!(results["executions"][0]["baseline"].is_null());
    }

    #[test]
    fn variants_are_compared_only_on_the_same_holdout_rows() {
        let temp = fixture_where_g3_wins_the_holdout();
        let build = || {
            crate::build(temp.path(), crate::RenderOptions::default())
                .unwrap()
                .context
        };
        let context = build();
        assert_eq!(context.variant_comparisons.len(), 1);
        let c = &context.variant_comparisons[0];
        assert_eq!(
            (c.a.as_str(), c.b.as_str()),
            ("budget-10 g1", "budget-30 g5")
        );

        // Another shuffle seed makes other holdout rows: no pairing, and a note says why.
        let path = temp.path().join("run.json");
        let mut manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        manifest["plan"]["executions"][1]["dataset"]["shuffle_seed"] = 99.into();
        std::fs::write(&path, manifest.to_string()).unwrap();
        let context = build();
        assert!(context.variant_comparisons.is_empty());
        assert!(
            context.notes.iter().any(|n| n
                .contains("budget-30 is not compared with budget-10: their holdout rows differ")),
            "{:?}",
            context.notes
        );
    }

    #[test]
    fn the_recommendation_is_chosen_by_evolution_score_not_by_holdout() {
        let temp = fixture_where_g3_wins_the_holdout();
        let context = crate::build(temp.path(), crate::RenderOptions::default())
            .unwrap()
            .context;
        let holdout = |label: &str| {
            context
                .versions
                .iter()
                .find(|v| v.execution == "budget-30" && v.label == label)
                .and_then(|v| v.scores[0].mean)
                .unwrap()
        };
        assert!(holdout("g3") > holdout("g5"), "the edit took");
        let recommendation = context.best.clone().unwrap();
        assert_eq!(
            (
                recommendation.execution.as_str(),
                recommendation.version.as_str()
            ),
            ("budget-30", "g5")
        );
        assert_eq!(recommendation.mean, Some(holdout("g5")));
        assert_eq!(recommendation.model, "local");
    }

    #[test]
    fn when_no_evolved_prompt_beats_the_seed_on_the_evolution_score_the_seed_is_best() {
        // The case from the field: an evolved prompt badged best although the seed had the
        // higher evolution score. Every seed (generation 0) now scores above its evolved prompts.
        let temp = fixture_where_g3_wins_the_holdout();
        let dir = RunDir::open(temp.path()).unwrap();
        let mut history: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).unwrap();
        for row in &mut history {
            if row.generation == 0 {
                // g5 has 1.0: a tie keeps the seed, an evolved prompt must score above it.
                row.score = 1.0;
            }
        }
        dir.write_csv(HISTORY_FILE, &history).unwrap();
        let report = crate::build(temp.path(), crate::RenderOptions::default()).unwrap();
        let context = &report.context;
        assert!(context.headline.is_none());
        assert!(context.comparisons.is_empty());
        assert!(context.seed_is_best);
        for execution in &context.executions {
            assert_eq!(execution.best_version.as_deref(), Some("seed"));
        }
        for version in &context.versions {
            assert_eq!(version.is_best, version.is_seed, "{}", version.label);
        }
        assert_eq!(context.best.clone().unwrap().version, "seed");
        assert!(
            context
                .notes
                .iter()
                .any(|n| n.contains("so the seed is the best version")),
            "{:?}",
            context.notes
        );
        let terminal = crate::summary_text(context);
        assert!(
            terminal.contains("\nThe seed is the best version: no evolved prompt scored"),
            "{terminal}"
        );
        assert!(report.html.contains("<p>The seed is the best version"));
        assert!(
            report.markdown.contains("The seed is the best version"),
            "{}",
            report.markdown
        );
        let results = serde_json::to_value(crate::export::results(context)).unwrap();
        assert_eq!(results["best"]["version"], "seed", "{}", results["best"]);
    }

    #[test]
    fn across_a_matrix_the_seed_of_one_variant_can_beat_another_variants_evolved_prompt() {
        // budget-30's g5 has evolution score 1.0. A budget-10 seed below it loses; a seed equal
        // to it wins, as the earlier execution.
        let temp = fixture_where_g3_wins_the_holdout();
        let dir = RunDir::open(temp.path()).unwrap();
        let original: Vec<HistoryRow> = dir.read_csv(HISTORY_FILE).unwrap();
        let best_with_seed_score = |score: f64| {
            let mut history = original.clone();
            for row in &mut history {
                if row.variant == "budget-10" {
                    row.score = if row.generation == 0 { score } else { 0.1 };
                }
            }
            dir.write_csv(HISTORY_FILE, &history).unwrap();
            let report = crate::build(temp.path(), crate::RenderOptions::default()).unwrap();
            let best = report.context.best.clone().unwrap();
            let headline = report.context.headline.as_ref().map(|h| h.b.clone());
            (best.execution, best.version, headline)
        };
        assert_eq!(
            best_with_seed_score(0.99),
            ("budget-30".into(), "g5".into(), Some("g5".into()))
        );
        assert_eq!(
            best_with_seed_score(1.0),
            ("budget-10".into(), "seed".into(), None)
        );
    }

    #[test]
    fn with_no_evolved_prompt_replayed_the_seed_is_recommended() {
        let temp = fixture_where_g3_wins_the_holdout();
        let dir = RunDir::open(temp.path()).unwrap();
        let rows: Vec<ReplayRow> = dir.read_csv(REPLAY_FILE).unwrap();
        let seeds: Vec<ReplayRow> = rows
            .into_iter()
            .filter(|r| r.version == ReplayOf::Version(Version::Seed))
            .collect();
        let seed_mean = {
            let first: Vec<&ReplayRow> = seeds
                .iter()
                .filter(|r| r.variant == "budget-10" && r.error.is_empty())
                .collect();
            first.iter().map(|r| r.score).sum::<f64>() / first.len() as f64
        };
        dir.write_csv(REPLAY_FILE, &seeds).unwrap();
        let context = crate::build(temp.path(), crate::RenderOptions::default())
            .unwrap()
            .context;
        assert!(context.headline.is_none());
        let recommendation = context.best.clone().unwrap();
        assert_eq!(recommendation.version, "seed");
        assert_eq!(recommendation.execution, "budget-10");
        let mean = recommendation.mean.unwrap();
        assert!((mean - seed_mean).abs() < 1e-12, "{mean} vs {seed_mean}");
        let terminal = crate::summary_text(&context);
        assert!(
            terminal.contains(&format!(
                "the seed (budget-10) scored {seed_mean:.3} on the holdout rows of local"
            )),
            "{terminal}"
        );
    }
}
