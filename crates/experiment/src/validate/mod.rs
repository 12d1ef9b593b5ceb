//! Validation: every rule of `experiment-format.md` and of the evolution API, reported all at
//! once, turning a loaded experiment file into a [`Plan`].
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::diagnostic::{Diagnostic, Location};
use super::file::{
    DatasetSection, EngineSection, Experiment, Holdout, PromptSection, ReplaySection,
    TrackingSection,
};
use super::plan::{
    DatasetPlan, Estimate, ExecutionPlan, ModelRoles, ModelSources, Plan, ReplayPlan, TrackingPlan,
};
use super::rules::Rule;
use super::source::{Loaded, Resolved, load};
use gepa_lab_dataset::{self as dataset, HoldoutSize, Split};
use gepa_lab_engine::{self as engine, Proposer, ReflectionTemplate};
use gepa_lab_evolution::ServiceProfile;
use gepa_lab_evolution::wire::{
    DatasetItem, EngineSettings, Evaluator, OnError, StartExecution, Strategy,
};
use gepa_lab_inference::ModelRef;
use gepa_lab_prompt::Template;
use gepa_lab_score::judge::JudgePlan;
use gepa_lab_score::{SCORER_NAMES, ScorerSpec};
use gepa_lab_suggest::closest;

/// Longest `name` the format allows.
pub const MAX_NAME_LEN: usize = 40;
/// Longest customId the evolution API accepts.
pub const MAX_CUSTOM_ID_LEN: usize = 50;
/// Budgets below this work but rarely improve the prompt; the service describes it as a minimum.
pub const LOW_BUDGET: i64 = 10;
/// Most answers per version and row (`replay.repeat`, `compare --repeat`).
pub const MAX_REPEAT: u32 = 100;
/// Metrics the evolution service is known to offer; others are passed on with a warning.
pub const KNOWN_METRICS: [&str; 3] = ["accuracy", "exact_match", "coherence"];
/// Row problems shown per dataset; the rest are counted.
const ROW_PROBLEMS_SHOWN: usize = 20;
/// Largest `engine.reflection_minibatch`.
const MAX_REFLECTION_MINIBATCH: i64 = 64;
/// Length of the run suffix appended to generated customIds.
const SUFFIX_LEN: usize = 6;

/// What validation needs besides the file.
#[derive(Debug, Clone)]
pub struct Settings {
    pub profile: ServiceProfile,
    /// Appended to generated customIds; default: the start of the content hash.
    pub run_suffix: Option<String>,
    /// Assumed price of one remote inference request, for the estimate.
    pub credits_per_call: f64,
    /// The user's config file, whose `[providers]` the experiment may name.
    pub config_file: Option<PathBuf>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            profile: ServiceProfile::default(),
            run_suffix: None,
            credits_per_call: 1.0,
            config_file: None,
        }
    }
}

/// The outcome of validating one file: every diagnostic, and the plan when there was no error.
#[derive(Debug)]
pub struct Validation {
    pub diagnostics: Vec<Diagnostic>,
    pub plan: Option<Plan>,
}

impl Validation {
    pub fn errors(&self) -> usize {
        self.diagnostics.iter().filter(|d| d.is_error()).count()
    }

    pub fn warnings(&self) -> usize {
        self.diagnostics.len() - self.errors()
    }
}

/// Loads and validates one experiment file.
pub fn validate_file(path: &Path, settings: &Settings) -> Validation {
    let loaded = match load(path) {
        Ok(loaded) => loaded,
        Err(diagnostic) => {
            return Validation {
                diagnostics: vec![*diagnostic],
                plan: None,
            };
        }
    };
    let mut diagnostics = loaded.diagnostics.clone();
    let providers =
        providers::Providers::declare(&loaded, settings.config_file.as_deref(), &mut diagnostics);
    let mut checker = Checker {
        loaded: &loaded,
        settings,
        base_dir: path.parent().map(Path::to_owned).unwrap_or_default(),
        diagnostics,
        scans: HashMap::new(),
        file_texts: BTreeMap::new(),
        providers,
        references: Vec::new(),
    };
    let drafts: Vec<Option<Draft>> = loaded
        .resolved
        .iter()
        .map(|resolved| checker.experiment(resolved))
        .collect();
    checker.variant_names();
    checker.engine_seeds_agree();
    let content_hash = checker.content_hash();
    let executions = checker.finish_drafts(drafts, &content_hash);
    let (providers, sources) = checker.used_providers();
    let mut diagnostics = dedupe(checker.diagnostics);
    diagnostics.sort_by_key(|d| d.severity);
    let plan = match executions {
        Some(executions) if !diagnostics.iter().any(Diagnostic::is_error) => {
            let first = loaded.resolved.first().and_then(|r| r.experiment.as_ref());
            Some(Plan {
                file: path.to_owned(),
                name: first.map(|e| e.name.clone()).unwrap_or_default(),
                description: first.and_then(|e| e.description.clone()),
                content_hash,
                estimate: executions.iter().map(|e: &ExecutionPlan| e.estimate).sum(),
                executions,
                providers,
                sources,
            })
        }
        _ => None,
    };
    Validation { diagnostics, plan }
}

/// An execution whose checks passed, waiting for its customId (which needs the content hash of
/// the whole file).
struct Draft {
    variant: Option<String>,
    variant_location: Option<Location>,
    custom_id: Option<(String, Option<Location>)>,
    name: String,
    start: StartExecution,
    dataset: DatasetPlan,
    replay: Option<ReplayPlan>,
    tracking: Option<TrackingPlan>,
    estimate: Estimate,
    models: ModelRoles,
}

/// A dataset check, shared by the variants that use the same file and columns.
#[derive(Clone)]
struct ScanOutcome {
    scan: dataset::Scan,
    columns: dataset::Columns,
}

struct Checker<'a> {
    loaded: &'a Loaded,
    settings: &'a Settings,
    base_dir: PathBuf,
    diagnostics: Vec<Diagnostic>,
    scans: HashMap<(PathBuf, Vec<String>, String), Option<ScanOutcome>>,
    /// Texts of the files the experiment names (seed prompts, reflection templates), by path:
    /// part of its content hash.
    file_texts: BTreeMap<PathBuf, String>,
    /// The providers of the file and the config file.
    providers: providers::Providers,
    /// Every model reference read, with its key and place (once per variant).
    references: Vec<(String, ModelRef, Option<Location>)>,
}

/// The checks of one resolved experiment, with a short way to say "at this key".
struct Scope<'c, 'a> {
    checker: &'c mut Checker<'a>,
    resolved: &'a Resolved,
    failed: bool,
}

impl Scope<'_, '_> {
    /// The seed prompt's text, checked: one source, not empty, placeholders that name inputs.
    fn prompt(&mut self, experiment: &Experiment) -> Option<String> {
        let (text, path) = self.seed_text(&experiment.prompt)?;
        if text.trim().is_empty() {
            self.report(
                path,
                Diagnostic::error(
                    Rule::PromptEmpty,
                    "the seed prompt is empty; it needs at least 1 character",
                )
                .seen(format!("{text:?}")),
            );
            return None;
        }
        let template = match Template::parse(&text) {
            Ok(template) => template,
            Err(err) => {
                self.report(
                    path,
                    Diagnostic::error(Rule::PromptSyntax, format!("in the seed prompt: {err}")),
                );
                return None;
            }
        };
        self.check_prompt_columns(&template, path, &experiment.dataset.inputs);
        self.failed.then_some(()).map_or(Some(text), |()| None)
    }

    /// The seed prompt's text from exactly one of `seed` and `seed_file`, and the key it came
    /// from (where its problems are reported).
    fn seed_text(&mut self, section: &PromptSection) -> Option<(String, &'static str)> {
        Some(match (&section.seed, &section.seed_file) {
            (Some(_), Some(_)) | (None, None) => {
                let both = section.seed.is_some();
                self.report(
                    "prompt",
                    Diagnostic::error(
                        Rule::PromptSource,
                        if both {
                            "[prompt] sets both `seed` and `seed_file`; exactly one is allowed"
                        } else {
                            "[prompt] needs a seed prompt: set `seed` or `seed_file`"
                        },
                    )
                    .help("write the prompt inline with seed = \"\"\"...\"\"\", or keep it in a file with seed_file = \"prompts/x.txt\""),
                );
                return None;
            }
            (Some(seed), None) => (seed.clone(), "prompt.seed"),
            (None, Some(file)) => {
                let full = resolve_path(&self.checker.base_dir, file);
                match gepa_lab_input::read_text(&full, gepa_lab_input::TEXT_LIMIT) {
                    Ok(text) => {
                        self.checker.file_texts.insert(full, text.clone());
                        (text, "prompt.seed_file")
                    }
                    Err(err) => {
                        self.report(
                            "prompt.seed_file",
                            Diagnostic::error(
                                Rule::PromptFile,
                                format!("cannot read the seed prompt file: {err}"),
                            )
                            .seen(full.display()),
                        );
                        return None;
                    }
                }
            }
        })
    }

    /// Every `{variable}` of the prompt names an input column; an input the prompt never uses
    /// is a warning.
    fn check_prompt_columns(&mut self, template: &Template, path: &str, inputs: &[String]) {
        for variable in template.variables() {
            if !inputs.iter().any(|input| input == variable) {
                let suggestion = closest(variable, inputs.iter().map(String::as_str));
                self.report(
                    path,
                    Diagnostic::error(
                        Rule::PromptVariable,
                        format!("the prompt uses `{{{variable}}}`, which is not one of dataset.inputs"),
                    )
                    .seen(format!("{{{variable}}}; inputs are {inputs:?}"))
                    .help(match suggestion {
                        Some(s) => format!("did you mean `{{{s}}}`? (or add \"{variable}\" to dataset.inputs; write {{{{ and }}}} for literal braces)"),
                        None => format!("add \"{variable}\" to dataset.inputs, or write {{{{ and }}}} for literal braces"),
                    }),
                );
            }
        }
        let used = template.variables();
        for (index, input) in inputs.iter().enumerate() {
            if !used.contains(&input.as_str()) {
                self.report(
                    &format!("dataset.inputs.{index}"),
                    Diagnostic::warning(
                        Rule::PromptUnusedInput,
                        format!("input column \"{input}\" is never used in the prompt"),
                    )
                    .help(format!(
                        "add {{{input}}} to the prompt, or remove it from dataset.inputs"
                    )),
                );
            }
        }
    }

    /// The dataset, checked row by row, split, with the service's items read back.
    fn dataset(
        &mut self,
        experiment: &Experiment,
        counts: Option<(usize, usize, HoldoutSize)>,
    ) -> Option<(DatasetPlan, Vec<DatasetItem>)> {
        let section = &experiment.dataset;
        let columns_ok = self.check_columns(section);
        let file = resolve_path(&self.checker.base_dir, &section.file);
        let key = (
            file.clone(),
            section.inputs.clone(),
            section.expected.clone(),
        );
        let outcome = match self.checker.scans.get(&key) {
            Some(outcome) => outcome.clone(),
            None => {
                let outcome = scan_dataset(self, &file, &section.inputs, &section.expected);
                self.checker.scans.insert(key, outcome.clone());
                outcome
            }
        };
        let outcome = outcome?;
        let (minibatch, pareto, holdout) = counts?;
        if !columns_ok {
            return None;
        }
        let split = self.split(&file, &outcome.scan, (minibatch, pareto, holdout), section)?;
        if outcome.scan.error_count > 0 {
            return None;
        }
        let wanted: Vec<usize> = split
            .minibatch
            .iter()
            .chain(&split.pareto)
            .copied()
            .collect();
        let rows = match dataset::read_rows(&file, &outcome.columns, &wanted) {
            Ok(rows) => rows,
            Err(err) => {
                self.report(
                    "dataset.file",
                    Diagnostic::error(Rule::DatasetFile, err.to_string()),
                );
                return None;
            }
        };
        let items = rows
            .into_iter()
            .map(|row| DatasetItem {
                input: row.inputs,
                expected_output: row.expected,
            })
            .collect();
        let one_based = |rows: &[usize]| rows.iter().map(|row| row + 1).collect();
        Some((
            DatasetPlan {
                file,
                sha256: outcome.scan.sha256.clone(),
                inputs: section.inputs.clone(),
                expected: section.expected.clone(),
                rows: outcome.scan.rows,
                shuffle_seed: section.shuffle_seed,
                holdout,
                minibatch_rows: one_based(&split.minibatch),
                pareto_rows: one_based(&split.pareto),
                holdout_rows: split.holdout.len(),
                split: Some(split),
            },
            items,
        ))
    }

    /// At least 1 input column, each listed once, none of them the expected column.
    fn check_columns(&mut self, section: &DatasetSection) -> bool {
        let mut columns_ok = true;
        if section.inputs.is_empty() {
            columns_ok = false;
            self.report(
                "dataset.inputs",
                Diagnostic::error(
                    Rule::DatasetInputs,
                    "dataset.inputs needs at least 1 column name",
                )
                .seen("[]"),
            );
        }
        for (index, input) in section.inputs.iter().enumerate() {
            if section.inputs[..index].contains(input) {
                columns_ok = false;
                self.report(
                    &format!("dataset.inputs.{index}"),
                    Diagnostic::error(
                        Rule::DatasetInputs,
                        format!("input column \"{input}\" is listed twice"),
                    )
                    .seen(input),
                );
            }
            if *input == section.expected {
                columns_ok = false;
                self.report(
                    &format!("dataset.inputs.{index}"),
                    Diagnostic::error(
                        Rule::DatasetExpectedInInputs,
                        format!("\"{input}\" is both an input and the expected column; the prompt would show the model the answer"),
                    )
                    .seen(input),
                );
            }
        }
        columns_ok
    }

    /// The dataset's usable rows split into minibatch, Pareto and holdout rows, or the reason
    /// they cannot be (reported at the key to change).
    fn split(
        &mut self,
        file: &Path,
        scan: &dataset::Scan,
        (minibatch, pareto, holdout): (usize, usize, HoldoutSize),
        section: &DatasetSection,
    ) -> Option<Split> {
        match Split::new(
            scan.usable,
            minibatch,
            pareto,
            holdout,
            section.shuffle_seed,
        ) {
            Ok(split) => Some(split),
            Err(dataset::SplitError::TooFewRows { rows, needed }) => {
                self.report(
                    "dataset.pareto",
                    Diagnostic::error(
                        Rule::DatasetRows,
                        format!(
                            "the dataset {} has {rows} usable rows but minibatch + pareto needs {needed}",
                            file.display()
                        ),
                    )
                    .seen(format!("minibatch = {minibatch}, pareto = {pareto}, rows = {}", scan.rows))
                    .help("lower minibatch or pareto, or add rows to the dataset"),
                );
                None
            }
            Err(dataset::SplitError::HoldoutTooLarge { asked, left }) => {
                self.report(
                    "dataset.holdout",
                    Diagnostic::error(
                        Rule::HoldoutSize,
                        format!("holdout asks for {asked} rows but only {left} remain after minibatch and pareto"),
                    )
                    .seen(asked)
                    .help(format!("use holdout = \"rest\" or a count up to {left}")),
                );
                None
            }
        }
    }

    fn at(&self, path: &str) -> Option<Location> {
        self.checker.loaded.location(self.resolved.spans.find(path))
    }

    fn report(&mut self, path: &str, mut diagnostic: Diagnostic) {
        if diagnostic.location.is_none() {
            diagnostic.location = self.at(path);
        }
        if diagnostic.is_error() {
            self.failed = true;
        }
        diagnostic.variant.clone_from(&self.resolved.variant);
        self.checker.diagnostics.push(diagnostic);
    }
}

impl<'a> Checker<'a> {
    fn experiment(&mut self, resolved: &'a Resolved) -> Option<Draft> {
        let experiment = resolved.experiment.as_ref()?;
        let mut scope = Scope {
            checker: self,
            resolved,
            failed: false,
        };
        check_name(&mut scope, &experiment.name);
        let prompt = scope.prompt(experiment);
        let counts = check_counts(&mut scope, experiment);
        let dataset = scope.dataset(experiment, counts);
        let evolution = check_evolution(&mut scope, experiment);
        let evaluator = check_evaluator(&mut scope, experiment);
        let engine = match &experiment.engine {
            Some(section) => check_engine(&mut scope, section),
            None => Some(None),
        };
        let replay = experiment
            .replay
            .as_ref()
            .and_then(|replay| check_replay(&mut scope, replay));
        if let (Some(replay), Some((plan, _))) = (&replay, &dataset) {
            check_holdout_for_replay(&mut scope, replay, plan);
        }
        let tracking = match &experiment.tracking {
            Some(section) => check_tracking(&mut scope, section, &experiment.name),
            None => Some(None),
        };
        let models = providers::model_roles(&mut scope, experiment);
        if let (Some((plan, _)), Some((_, _, budget))) = (&dataset, &evolution) {
            // [engine]'s reflection minibatch when it sets one (a range error is reported above).
            let reflection_minibatch = experiment
                .engine
                .as_ref()
                .and_then(|engine| engine.reflection_minibatch)
                .filter(|size| (1..=MAX_REFLECTION_MINIBATCH).contains(size))
                .map_or(engine::DEFAULT_REFLECTION_MINIBATCH as u64, |size| {
                    size as u64
                });
            check_budget_room(&mut scope, plan, *budget, reflection_minibatch);
        }
        let failed = scope.failed;
        let (prompt, (dataset, items), (strategy, model, budget), evaluator, engine, tracking) = (
            prompt?, dataset?, evolution?, evaluator?, engine?, tracking?,
        );
        let models = models?;
        if failed {
            return None;
        }
        let estimate = estimate(
            replay.as_ref(),
            &models,
            &dataset,
            budget,
            self.settings.credits_per_call,
        );
        let custom_id = experiment.evolution.custom_id.clone().map(|id| {
            (
                id,
                self.loaded
                    .location(resolved.spans.find("evolution.custom_id")),
            )
        });
        Some(Draft {
            variant: resolved.variant.clone(),
            variant_location: self.loaded.location(resolved.variant_span.clone()),
            custom_id,
            name: experiment.name.clone(),
            start: StartExecution {
                strategy,
                model,
                dataset_columns: experiment.dataset.inputs.clone(),
                budget,
                minibatch_size: dataset.minibatch_rows.len() as u64,
                pareto_size: dataset.pareto_rows.len() as u64,
                evaluator: evaluator.to_json_string(),
                dataset: items,
                prompt,
                custom_id: None,
                engine,
            },
            dataset,
            replay,
            tracking,
            estimate,
            models,
        })
    }

    /// The providers the plan's models name, and where they and every reference were written.
    fn used_providers(
        &self,
    ) -> (
        BTreeMap<gepa_lab_inference::ProviderName, gepa_lab_inference::Provider>,
        ModelSources,
    ) {
        let mut sources = ModelSources::default();
        let mut providers = BTreeMap::new();
        for (key, model, at) in &self.references {
            if !sources
                .references
                .iter()
                .any(|(k, m, _)| k == key && m == model)
            {
                sources
                    .references
                    .push((key.clone(), model.clone(), at.clone()));
            }
            if let ModelRef::Provider { provider, .. } = model
                && let Some((checked, url_at)) = self.providers.used(provider)
            {
                providers.insert(provider.clone(), checked.clone());
                sources.providers.insert(provider.clone(), url_at.cloned());
            }
        }
        (providers, sources)
    }

    /// Variant names: well-formed and unique.
    fn variant_names(&mut self) {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for resolved in &self.loaded.resolved {
            let Some(name) = resolved.variant.as_deref() else {
                continue;
            };
            let location = self.loaded.location(resolved.variant_span.clone());
            if name.starts_with('#') {
                continue; // no name at all, already reported
            }
            if !is_valid_name(name) {
                self.diagnostics.push(
                    Diagnostic::error(
                        Rule::VariantName,
                        "a variant name may use only a-z, 0-9, `_` and `-`, at most 40 characters",
                    )
                    .at(location.clone())
                    .seen(format!("{name:?}")),
                );
            }
            if let Some(count) = seen.get_mut(name) {
                *count += 1;
                self.diagnostics.push(
                    Diagnostic::error(
                        Rule::VariantNameUnique,
                        format!("variant name \"{name}\" is used more than once"),
                    )
                    .at(location)
                    .seen(name)
                    .help("every [[variants]] table needs its own name"),
                );
            } else {
                seen.insert(name, 1);
            }
        }
    }

    /// `engine.seed` is the run's seed (see [`super::plan::engine_seed`]): a variant that set
    /// another would have it ignored, so every variant must resolve to the first one's.
    fn engine_seeds_agree(&mut self) {
        let seed_of = |resolved: &Resolved| {
            resolved
                .experiment
                .as_ref()
                .and_then(|experiment| experiment.engine.as_ref()?.seed)
        };
        let Some(first) = self.loaded.resolved.first() else {
            return;
        };
        let shared = seed_of(first);
        for resolved in &self.loaded.resolved[1..] {
            if resolved.experiment.is_none() {
                continue; // unreadable, already reported
            }
            let seed = seed_of(resolved);
            if seed == shared {
                continue;
            }
            let show = |seed: Option<i64>| seed.map_or("no seed".to_owned(), |s| s.to_string());
            let span = resolved
                .spans
                .find("engine.seed")
                .filter(|_| seed.is_some())
                .or_else(|| resolved.variant_span.clone());
            self.diagnostics.push(
                Diagnostic::error(
                    Rule::EngineSeedShared,
                    format!(
                        "variant \"{}\" has engine.seed {}, but the run's seed is {} (the first \
                         variant's): a run has one seed, and each variant's is derived from it",
                        resolved.variant.as_deref().unwrap_or(""),
                        show(seed),
                        show(shared)
                    ),
                )
                .at(self.loaded.location(span))
                .seen(show(seed))
                .help(
                    "set `seed` once, in [engine] outside the variants, or give it on the \
                     command line with `run --seed N`",
                ),
            );
        }
    }

    fn content_hash(&self) -> String {
        let mut hasher = Sha256::new();
        hasher.update(self.loaded.source.text.as_bytes());
        for (path, text) in &self.file_texts {
            hasher.update(path.to_string_lossy().as_bytes());
            hasher.update(text.as_bytes());
        }
        for outcome in self.scans.values().flatten() {
            hasher.update(outcome.scan.sha256.as_bytes());
        }
        format!("{:x}", hasher.finalize())
    }

    /// Gives each execution its customId and checks length and uniqueness.
    fn finish_drafts(
        &mut self,
        drafts: Vec<Option<Draft>>,
        content_hash: &str,
    ) -> Option<Vec<ExecutionPlan>> {
        let suffix = self
            .settings
            .run_suffix
            .clone()
            .unwrap_or_else(|| content_hash[..SUFFIX_LEN].to_owned());
        let mut executions = Vec::new();
        let mut ids: HashMap<String, Option<String>> = HashMap::new();
        for draft in drafts {
            let draft = draft?;
            let (id, location, explicit) = match &draft.custom_id {
                Some((id, location)) => (id.clone(), location.clone(), true),
                None => {
                    let id = match &draft.variant {
                        Some(variant) => format!("{}-{variant}-{suffix}", draft.name),
                        None => format!("{}-{suffix}", draft.name),
                    };
                    (
                        id,
                        draft
                            .variant_location
                            .clone()
                            .or_else(|| self.loaded.location(Some(0..0))),
                        false,
                    )
                }
            };
            let len = id.chars().count();
            if len > MAX_CUSTOM_ID_LEN {
                let mut diagnostic = Diagnostic::error(
                    Rule::CustomIdLength,
                    format!("the customId would be {len} characters; the service allows at most {MAX_CUSTOM_ID_LEN}"),
                )
                .at(location.clone())
                .seen(&id)
                .help(if explicit {
                    "shorten evolution.custom_id".to_owned()
                } else {
                    format!("it is name-variant-{SUFFIX_LEN} characters; shorten the name or the variant name, or set evolution.custom_id")
                });
                diagnostic.variant.clone_from(&draft.variant);
                self.diagnostics.push(diagnostic);
            }
            if let Some(other) = ids.get(&id) {
                let mut diagnostic = Diagnostic::error(
                    Rule::CustomIdUnique,
                    format!(
                        "two executions would share the customId \"{id}\" (also variant {})",
                        other.as_deref().unwrap_or("-")
                    ),
                )
                .at(location)
                .seen(&id)
                .help("give each variant its own evolution.custom_id, or drop custom_id to get generated ones");
                diagnostic.variant.clone_from(&draft.variant);
                self.diagnostics.push(diagnostic);
            }
            ids.insert(id.clone(), draft.variant.clone());
            let mut start = draft.start;
            start.custom_id = Some(id);
            executions.push(ExecutionPlan {
                variant: draft.variant,
                start,
                dataset: draft.dataset,
                replay: draft.replay,
                tracking: draft.tracking,
                estimate: draft.estimate,
                models: draft.models,
            });
        }
        Some(executions)
    }
}

/// `[tracking]`: an http(s) URL with a host, and an experiment name of 1 to 500 characters (the
/// default: the experiment's own name).
fn check_tracking(
    scope: &mut Scope<'_, '_>,
    section: &TrackingSection,
    name: &str,
) -> Option<Option<TrackingPlan>> {
    let url = gepa_lab_http::server_url(&section.mlflow);
    let mut ok = true;
    if let Err(why) = &url {
        ok = false;
        scope.report(
            "tracking.mlflow",
            Diagnostic::error(
                Rule::TrackingMlflow,
                format!("tracking.mlflow must be the address of an MLflow tracking server: {why}"),
            )
            .seen(section.mlflow.trim())
            .help("for example \"http://127.0.0.1:5000\" (what `mlflow server` prints)"),
        );
    }
    let experiment = section
        .experiment
        .clone()
        .unwrap_or_else(|| name.to_owned());
    let length = experiment.trim().chars().count();
    if !(1..=500).contains(&length) {
        ok = false;
        scope.report(
            "tracking.experiment",
            Diagnostic::error(
                Rule::TrackingMlflow,
                format!("tracking.experiment must be 1 to 500 characters; it has {length}"),
            )
            .seen(&experiment),
        );
    }
    let url = url.ok().filter(|_| ok)?;
    Some(Some(TrackingPlan {
        url,
        experiment: experiment.trim().to_owned(),
    }))
}

/// With [replay], the holdout has at least 1 row.
fn check_holdout_for_replay(scope: &mut Scope<'_, '_>, replay: &ReplayPlan, plan: &DatasetPlan) {
    if plan.holdout_rows > 0 {
        return;
    }
    let help = format!(
        "keep rows for replay (holdout = \"rest\" or a count), or remove [replay] ({} models listed)",
        replay.models.len()
    );
    scope.report(
        "dataset.holdout",
        Diagnostic::error(
            Rule::HoldoutEmpty,
            format!(
                "replay is on but the holdout of {} has no rows",
                plan.file.display()
            ),
        )
        .seen(format!(
            "rows = {}, minibatch = {}, pareto = {}",
            plan.rows,
            plan.minibatch_rows.len(),
            plan.pareto_rows.len()
        ))
        .help(help),
    );
}

/// What an execution will cost: its evolution budget, the replay's requests to remote and to
/// local models, the judge's, and the credits of those to the public inference API (a declared
/// provider bills its own way).
fn estimate(
    replay: Option<&ReplayPlan>,
    models: &ModelRoles,
    dataset: &DatasetPlan,
    budget: u64,
    credits_per_call: f64,
) -> Estimate {
    let remote = models.replay.iter().filter(|m| !m.is_embedded()).count();
    let public = |model: &ModelRef| matches!(model, ModelRef::Public(_));
    let paid = models.replay.iter().filter(|m| public(m)).count() as u64;
    let local = replay.map_or(0, |r| r.models.len() - remote);
    let answers_per_model = replay.map_or(0, |r| {
        (r.top + 1) * dataset.holdout_rows * r.repeat as usize
    }) as u64;
    let judge_calls = match replay {
        Some(r) if r.judge.is_some() => answers_per_model * r.models.len() as u64,
        _ => 0,
    };
    let replay_calls = answers_per_model * remote as u64;
    let paid_judge_calls = if models.judge.as_ref().is_some_and(public) {
        judge_calls
    } else {
        0
    };
    Estimate {
        evolution_calls: budget,
        replay_calls,
        local_replay_calls: answers_per_model * local as u64,
        judge_calls,
        credits: (answers_per_model * paid + paid_judge_calls) as f64 * credits_per_call,
    }
}

/// `[a-z0-9_-]`, 1 to 40 characters: safe in a customId, a folder name and a URL.
fn is_valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.chars().count())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// `text`'s first `max` characters with each one other than ASCII letters, digits, `_` and `-`
/// replaced by `replacement`: safe in a folder name and a customId (lowercase it first for a
/// name).
pub fn name_chars(text: &str, replacement: char, max: usize) -> String {
    text.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                replacement
            }
        })
        .take(max)
        .collect()
}

fn check_name(scope: &mut Scope<'_, '_>, name: &str) {
    if !is_valid_name(name) {
        let fixed = name_chars(&name.to_lowercase(), '-', MAX_NAME_LEN);
        scope.report(
            "name",
            Diagnostic::error(
                Rule::NameFormat,
                format!(
                    "`name` may use only a-z, 0-9, `_` and `-`, 1 to {MAX_NAME_LEN} characters"
                ),
            )
            .seen(format!("{name:?} ({} characters)", name.chars().count()))
            .help_if((!fixed.is_empty()).then(|| format!("for example name = \"{fixed}\""))),
        );
    }
}

/// The count at `key` (a path such as `dataset.minibatch`), or `None` with the error reported
/// when it is below 1.
fn at_least_one(scope: &mut Scope<'_, '_>, key: &str, rule: Rule, value: i64) -> Option<usize> {
    if value < 1 {
        scope.report(
            key,
            Diagnostic::error(rule, format!("{key} must be at least 1")).seen(value),
        );
        return None;
    }
    usize::try_from(value).ok()
}

/// Minibatch, Pareto and holdout sizes, before the dataset is looked at.
fn check_counts(
    scope: &mut Scope<'_, '_>,
    experiment: &Experiment,
) -> Option<(usize, usize, HoldoutSize)> {
    let section = &experiment.dataset;
    let minibatch = at_least_one(
        scope,
        "dataset.minibatch",
        Rule::MinibatchMin,
        section.minibatch,
    );
    let pareto = at_least_one(scope, "dataset.pareto", Rule::ParetoMin, section.pareto);
    let holdout = match &section.holdout {
        Holdout::Word(word) if word == "rest" => Some(HoldoutSize::Rest),
        Holdout::Word(word) if word == "none" => Some(HoldoutSize::None),
        Holdout::Count(count) if *count >= 0 => {
            usize::try_from(*count).ok().map(HoldoutSize::Count)
        }
        other => {
            let seen = match other {
                Holdout::Word(word) => format!("{word:?}"),
                Holdout::Count(count) => count.to_string(),
            };
            scope.report(
                "dataset.holdout",
                Diagnostic::error(
                    Rule::HoldoutValue,
                    "dataset.holdout must be \"rest\", \"none\" or a row count >= 0",
                )
                .seen(seen),
            );
            None
        }
    };
    Some((minibatch?, pareto?, holdout?))
}

/// Reads the header, resolves the columns and checks every row, reporting onto the scope.
fn scan_dataset(
    scope: &mut Scope<'_, '_>,
    file: &Path,
    inputs: &[String],
    expected: &str,
) -> Option<ScanOutcome> {
    let header = match dataset::read_header(file) {
        Ok(header) => header,
        Err(err) => {
            let rule = match err {
                dataset::DatasetError::Open { .. } => Rule::DatasetFile,
                _ => Rule::DatasetHeader,
            };
            scope.report(
                "dataset.file",
                Diagnostic::error(rule, err.to_string()).seen(file.display()),
            );
            return None;
        }
    };
    let columns = match header.columns(inputs, expected) {
        Ok(columns) => columns,
        Err(missing) => {
            for column in missing {
                let path = match inputs.iter().position(|input| *input == column.name) {
                    Some(index) => format!("dataset.inputs.{index}"),
                    None => "dataset.expected".to_owned(),
                };
                scope.report(
                    &path,
                    Diagnostic::error(
                        Rule::DatasetColumn,
                        format!(
                            "column \"{}\" is not in the header of {}",
                            column.name,
                            file.display()
                        ),
                    )
                    .seen(format!("header: {}", header.names.join(", ")))
                    .help_if(column.suggestion.map(|s| format!("did you mean \"{s}\"?"))),
                );
            }
            return None;
        }
    };
    let scan = match dataset::scan(file, &columns, ROW_PROBLEMS_SHOWN) {
        Ok(scan) => scan,
        Err(err) => {
            scope.report(
                "dataset.file",
                Diagnostic::error(Rule::DatasetFile, err.to_string()),
            );
            return None;
        }
    };
    report_row_problems(scope, file, &scan);
    Some(ScanOutcome { scan, columns })
}

/// The scan's row problems, each at its line of the dataset, and one line counting those not
/// shown.
fn report_row_problems(scope: &mut Scope<'_, '_>, file: &Path, scan: &dataset::Scan) {
    for problem in &scan.problems {
        let message = format!("row {} {}", problem.row, problem.kind);
        let diagnostic = match problem.severity {
            dataset::Severity::Error => Diagnostic::error(row_rule(&problem.kind), message),
            dataset::Severity::Warning => Diagnostic::warning(row_rule(&problem.kind), message),
        };
        scope.report(
            "dataset.file",
            diagnostic.at(Some(Location {
                file: file.to_owned(),
                line: usize::try_from(problem.line).unwrap_or(usize::MAX),
                column: 1,
                source_line: None,
            })),
        );
    }
    let shown = scan.problems.len();
    let total = scan.error_count + scan.warning_count;
    if total > shown {
        let summary = format!(
            "{} more row problems not shown ({} errors and {} warnings in all)",
            total - shown,
            scan.error_count,
            scan.warning_count
        );
        let diagnostic = if scan.error_count > 0 {
            Diagnostic::error(Rule::DatasetRowsSummary, summary)
        } else {
            Diagnostic::warning(Rule::DatasetRowsSummary, summary)
        };
        scope.report("dataset.file", diagnostic.in_file(file));
    }
}

fn check_model(scope: &mut Scope<'_, '_>, path: &str, rule: Rule, model: &str) -> bool {
    let profile = &scope.checker.settings.profile;
    if profile.supports(model) {
        return true;
    }
    let models = profile.models();
    let suggestion = closest(model, models.iter().map(String::as_str)).map(str::to_owned);
    scope.report(
        path,
        Diagnostic::error(rule, format!("`{path}` is not a supported evolution model"))
            .seen(format!("{model:?}"))
            .help(match suggestion {
                Some(s) => format!("did you mean \"{s}\"? supported: {}", models.join(", ")),
                None => format!(
                    "supported: {} (set GEPA_LAB_MODEL_WORD if your service uses another prefix)",
                    models.join(", ")
                ),
            }),
    );
    false
}

fn check_evolution(
    scope: &mut Scope<'_, '_>,
    experiment: &Experiment,
) -> Option<(String, String, u64)> {
    let section = &experiment.evolution;
    let strategy = match Strategy::parse(&section.strategy) {
        Some(Strategy::Rpm) => Some(section.strategy.clone()),
        Some(Strategy::Sam) => {
            scope.report(
                "evolution.strategy",
                Diagnostic::warning(
                    Rule::StrategySam,
                    "the service may offer only RPM; a SAM execution may be refused",
                )
                .seen("SAM"),
            );
            Some(section.strategy.clone())
        }
        None => {
            let other = &section.strategy;
            scope.report(
                "evolution.strategy",
                Diagnostic::error(Rule::Strategy, "evolution.strategy must be RPM or SAM")
                    .seen(format!("{other:?}"))
                    .help_if(
                        Strategy::ALL
                            .iter()
                            .map(|known| known.as_str())
                            .find(|known| known.eq_ignore_ascii_case(other))
                            .map(|known| format!("write it in capitals: \"{known}\"")),
                    ),
            );
            None
        }
    };
    let model = check_model(
        scope,
        "evolution.model",
        Rule::EvolutionModel,
        &section.model,
    )
    .then(|| section.model.clone());
    let budget = if section.budget < 1 {
        scope.report(
            "evolution.budget",
            Diagnostic::error(Rule::BudgetMin, "evolution.budget must be at least 1")
                .seen(section.budget)
                .help("every inference request of the evolution costs 1; 25 to 50 is recommended"),
        );
        None
    } else {
        if section.budget < LOW_BUDGET {
            scope.report(
                "evolution.budget",
                Diagnostic::warning(
                    Rule::BudgetLow,
                    format!("a budget below {LOW_BUDGET} rarely leaves room to improve the prompt"),
                )
                .seen(section.budget)
                .help("25 to 50 is recommended"),
            );
        }
        u64::try_from(section.budget).ok()
    };
    Some((strategy?, model?, budget?))
}

/// Reflections below which an evolution has little chance to find anything: each proposal is a
/// guess, and most guesses of a small model are rejected.
const FEW_REFLECTIONS: u64 = 3;

fn check_budget_room(
    scope: &mut Scope<'_, '_>,
    dataset: &DatasetPlan,
    budget: u64,
    reflection_minibatch: u64,
) {
    let (minibatch, pareto) = (
        dataset.minibatch_rows.len() as u64,
        dataset.pareto_rows.len() as u64,
    );
    let reflections = engine::reflections_assured(minibatch, pareto, budget, reflection_minibatch);
    if pareto > budget || reflections >= FEW_REFLECTIONS {
        return;
    }
    let shown = reflection_minibatch.min(minibatch);
    let per_mutation = 2 * shown + 1 + pareto;
    let needed = pareto + FEW_REFLECTIONS * per_mutation;
    scope.report(
        "evolution.budget",
        Diagnostic::warning(
            Rule::BudgetReflections,
            format!(
                "budget {budget} with pareto {pareto} leaves room for {reflections} reflection{} \
                 when every proposal is accepted: scoring the seed costs {pareto} calls and each \
                 mutation up to {per_mutation}",
                if reflections == 1 { "" } else { "s" }
            ),
        )
        .seen(format!(
            "budget = {budget}, pareto = {pareto}, minibatch = {minibatch}"
        ))
        .help(format!(
            "raise the budget to {needed} or more, or lower pareto"
        )),
    );
}

fn check_evaluator(scope: &mut Scope<'_, '_>, experiment: &Experiment) -> Option<Evaluator> {
    let section = &experiment.evaluator;
    let model_ok = check_model(
        scope,
        "evaluator.model",
        Rule::EvaluatorModel,
        &section.model,
    );
    if let Some(metric) = &section.metric
        && !KNOWN_METRICS.contains(&metric.as_str())
    {
        scope.report(
            "evaluator.metric",
            Diagnostic::warning(
                Rule::EvaluatorMetric,
                "not a metric the service is known to offer; it is sent as written",
            )
            .seen(format!("{metric:?}"))
            .help_if(
                closest(metric, KNOWN_METRICS)
                    .map(|s| format!("did you mean \"{s}\"? known: {}", KNOWN_METRICS.join(", "))),
            ),
        );
    }
    if let Some(threshold) = section.threshold
        && (!threshold.is_finite() || !(0.0..=1.0).contains(&threshold))
    {
        scope.report(
            "evaluator.threshold",
            Diagnostic::error(
                Rule::EvaluatorThreshold,
                "evaluator.threshold must be a number from 0 to 1",
            )
            .seen(threshold),
        );
        return None;
    }
    model_ok.then(|| Evaluator {
        model: section.model.clone(),
        metric: section.metric.clone(),
        threshold: section.threshold,
        partial_credit: section.partial_credit,
    })
}

/// The `[engine]` table as the engine's settings; `Some(None)` when it sets nothing. Each key
/// out of its range is reported at its line, with the range and the value seen.
fn check_engine(
    scope: &mut Scope<'_, '_>,
    engine: &EngineSection,
) -> Option<Option<EngineSettings>> {
    let mut ok = true;
    let mut whole = |key: &str, value: Option<i64>, min: i64, max: i64| -> Option<u64> {
        let value = value?;
        if (min..=max).contains(&value) {
            return Some(value as u64);
        }
        ok = false;
        scope.report(
            &format!("engine.{key}"),
            Diagnostic::error(
                Rule::EngineRange,
                format!("engine.{key} must be from {min} to {max}"),
            )
            .seen(value),
        );
        None
    };
    let reflection_minibatch = whole(
        "reflection_minibatch",
        engine.reflection_minibatch,
        1,
        MAX_REFLECTION_MINIBATCH,
    );
    let reflection_max_tokens = whole(
        "reflection_max_tokens",
        engine.reflection_max_tokens,
        1,
        32_768,
    );
    let max_seconds = whole("max_seconds", engine.max_seconds, 1, 604_800);
    let stall_iterations = whole("stall_iterations", engine.stall_iterations, 1, 10_000);
    let parallel_calls = whole("parallel_calls", engine.parallel_calls, 1, 64);
    let demonstrations = whole(
        "demonstrations",
        engine.demonstrations,
        0,
        gepa_lab_engine::MAX_DEMONSTRATIONS as i64,
    );
    let seed = whole("seed", engine.seed, 0, i64::MAX);
    let mut fraction = |key: &str, value: Option<f64>, max: f64| -> Option<f64> {
        let value = value?;
        if value.is_finite() && (0.0..=max).contains(&value) {
            return Some(value);
        }
        ok = false;
        scope.report(
            &format!("engine.{key}"),
            Diagnostic::error(
                Rule::EngineRange,
                format!("engine.{key} must be a number from 0 to {max}"),
            )
            .seen(value),
        );
        None
    };
    let reflection_temperature =
        fraction("reflection_temperature", engine.reflection_temperature, 2.0);
    let score_threshold = fraction("score_threshold", engine.score_threshold, 1.0);
    let choices = check_engine_choices(scope, engine);
    ok &= choices.is_some();
    let EngineChoices {
        on_error,
        proposer,
        reflection_template,
    } = choices?;
    if !ok {
        return None;
    }
    let settings = EngineSettings {
        reflection_minibatch: reflection_minibatch.map(|n| n as usize),
        reflection_model: engine.reflection_model.clone(),
        task_model: engine.task_model.clone(),
        proposer,
        reflection_temperature,
        reflection_max_tokens: reflection_max_tokens.map(|n| n as u32),
        max_seconds,
        stall_iterations: stall_iterations.map(|n| n as usize),
        score_threshold,
        on_error,
        merge: engine.merge,
        parallel_calls: parallel_calls.map(|n| n as usize),
        demonstrations: demonstrations.map(|n| n as usize),
        reflection_template,
        seed,
    };
    Some((settings != EngineSettings::default()).then_some(settings))
}

/// `engine.on_error`, `engine.reflection_model` and `engine.reflection_template`, each checked;
/// `None` when any is wrong (each reported at its key).
fn check_engine_choices(
    scope: &mut Scope<'_, '_>,
    engine: &EngineSection,
) -> Option<EngineChoices> {
    let mut ok = true;
    let on_error = match engine.on_error.as_deref() {
        None => None,
        Some("fail") => Some(OnError::Fail),
        Some("score_zero") => Some(OnError::ScoreZero),
        Some(other) => {
            ok = false;
            scope.report(
                "engine.on_error",
                Diagnostic::error(
                    Rule::EngineOnError,
                    "engine.on_error must be fail or score_zero",
                )
                .seen(format!("{other:?}")),
            );
            None
        }
    };
    for (key, model) in [
        ("reflection_model", &engine.reflection_model),
        ("task_model", &engine.task_model),
    ] {
        if let Some(model) = model
            && model.trim().is_empty()
        {
            ok = false;
            scope.report(
                &format!("engine.{key}"),
                Diagnostic::error(
                    Rule::EngineReflectionModel,
                    format!("engine.{key} must name a model"),
                )
                .seen(format!("{model:?}"))
                .help("`local` or `local:<name>`, or `<provider>/<model>` for a local run, a model serve's upstreams serve for gepa-lab serve; remove the key for the default"),
            );
        }
    }
    let reflection_template = match &engine.reflection_template {
        None => None,
        Some(file) => {
            let template = reflection_template(scope, file);
            ok &= template.is_some();
            template
        }
    };
    let proposer = match engine.proposer.as_deref() {
        None => None,
        Some(name) => {
            let proposer = Proposer::parse(name);
            if proposer.is_none() {
                ok = false;
                scope.report(
                    "engine.proposer",
                    Diagnostic::error(
                        Rule::EngineProposer,
                        "engine.proposer must be rules or rewrite",
                    )
                    .seen(format!("{name:?}")),
                );
            }
            proposer
        }
    };
    if proposer == Some(Proposer::Rules) && engine.reflection_template.is_some() {
        ok = false;
        scope.report(
            "engine.proposer",
            Diagnostic::error(
                Rule::EngineProposer,
                "engine.proposer = \"rules\" cannot use engine.reflection_template, which asks for whole prompts",
            )
            .seen("\"rules\"")
            .help("remove one of the two: a reflection template makes the engine rewrite"),
        );
    }
    ok.then_some(EngineChoices {
        on_error,
        proposer,
        reflection_template,
    })
}

/// The `[engine]` keys that name one of a few choices, as parsed.
struct EngineChoices {
    on_error: Option<OnError>,
    proposer: Option<Proposer>,
    reflection_template: Option<String>,
}

/// The text of `engine.reflection_template`'s file, checked: readable, with both placeholders.
/// A template that asks for no fenced block is a warning: the engine reads the new prompt from
/// one, so every answer would fail as `no_fenced_block`.
fn reflection_template(scope: &mut Scope<'_, '_>, file: &Path) -> Option<String> {
    const KEY: &str = "engine.reflection_template";
    let full = resolve_path(&scope.checker.base_dir, file);
    let text = match gepa_lab_input::read_text(&full, gepa_lab_input::TEXT_LIMIT) {
        Ok(text) => text,
        Err(err) => {
            scope.report(
                KEY,
                Diagnostic::error(
                    Rule::EngineReflectionTemplate,
                    format!("cannot read the reflection template file: {err}"),
                )
                .seen(full.display()),
            );
            return None;
        }
    };
    if let Err(missing) = ReflectionTemplate::parse(&text) {
        scope.report(
            KEY,
            Diagnostic::error(
                Rule::EngineReflectionTemplate,
                format!("the reflection template {missing}"),
            )
            .seen(full.display())
            .help("the reference implementation's placeholders, written exactly like that, angle brackets included"),
        );
        return None;
    }
    if !ReflectionTemplate::mentions_a_fence(&text) {
        scope.report(
            KEY,
            Diagnostic::warning(
                Rule::EngineReflectionTemplateFence,
                "the reflection template never mentions a ``` fenced block; the engine reads the \
                 new prompt from one, so answers without it are failed proposals",
            )
            .seen(full.display())
            .help(
                "end it with something like: Write the new instruction inside a ``` fenced block.",
            ),
        );
    }
    scope.checker.file_texts.insert(full, text.clone());
    Some(text)
}

fn check_replay(scope: &mut Scope<'_, '_>, replay: &ReplaySection) -> Option<ReplayPlan> {
    let mut ok = check_replay_models(scope, &replay.models);
    let top = at_least_one(scope, "replay.top", Rule::ReplayTop, replay.top);
    let concurrency = at_least_one(
        scope,
        "replay.concurrency",
        Rule::ReplayConcurrency,
        replay.concurrency,
    );
    let max_tokens = match replay.max_tokens {
        Some(tokens) => {
            at_least_one(scope, "replay.max_tokens", Rule::ReplayMaxTokens, tokens).map(Some)
        }
        None => Some(None),
    };
    let repeat = check_repeat(scope, replay);
    if !replay.temperature.is_finite() || replay.temperature < 0.0 {
        ok = false;
        scope.report(
            "replay.temperature",
            Diagnostic::error(
                Rule::ReplayTemperature,
                "replay.temperature must be a number >= 0",
            )
            .seen(replay.temperature),
        );
    }
    let scorer = check_scorer(scope, replay);
    let judge = replay.judge.as_ref().map(|judge| JudgePlan {
        model: judge.model.clone(),
        rubric: judge.rubric.clone(),
    });
    if !ok {
        return None;
    }
    Some(ReplayPlan {
        models: replay.models.clone(),
        top: top?,
        scorer: scorer?,
        temperature: replay.temperature,
        max_tokens: max_tokens?.and_then(|tokens| u32::try_from(tokens).ok()),
        concurrency: concurrency?,
        repeat: repeat?,
        judge,
    })
}

/// At least 1 replay model, each a non-empty id listed once.
fn check_replay_models(scope: &mut Scope<'_, '_>, models: &[String]) -> bool {
    let mut ok = true;
    if models.is_empty() {
        ok = false;
        scope.report(
            "replay.models",
            Diagnostic::error(Rule::ReplayModels, "replay.models needs at least 1 model id")
                .seen("[]")
                .help("name inference model ids, or \"local\" for the embedded model; remove [replay] to skip replay"),
        );
    }
    for (index, model) in models.iter().enumerate() {
        if model.trim().is_empty() || models[..index].contains(model) {
            ok = false;
            scope.report(
                &format!("replay.models.{index}"),
                Diagnostic::error(
                    Rule::ReplayModels,
                    "each replay model must be a non-empty id, listed once",
                )
                .seen(format!("{model:?}")),
            );
        }
    }
    ok
}

/// `replay.repeat` from 1 to [`MAX_REPEAT`]; above 1 at temperature 0 is a warning.
fn check_repeat(scope: &mut Scope<'_, '_>, replay: &ReplaySection) -> Option<u32> {
    match u32::try_from(replay.repeat) {
        Ok(repeat @ 1..=MAX_REPEAT) => {
            if repeat > 1 && replay.temperature == 0.0 {
                scope.report(
                    "replay.repeat",
                    Diagnostic::warning(
                        Rule::ReplayRepeatGreedy,
                        "at temperature 0 a model usually gives the same answer every time, so \
                         repeated answers add cost and little information",
                    )
                    .seen(replay.repeat)
                    .help(
                        "set replay.temperature above 0 (0.7 is common), or remove replay.repeat",
                    ),
                );
            }
            Some(repeat)
        }
        _ => {
            scope.report(
                "replay.repeat",
                Diagnostic::error(
                    Rule::ReplayRepeat,
                    format!("replay.repeat must be from 1 to {MAX_REPEAT}"),
                )
                .seen(replay.repeat),
            );
            None
        }
    }
}

/// `replay.scorer` parsed, with its schema file or program found; the judge needs its table.
fn check_scorer(scope: &mut Scope<'_, '_>, replay: &ReplaySection) -> Option<ScorerSpec> {
    match replay.scorer.parse::<ScorerSpec>() {
        Ok(ScorerSpec::JsonSchema { schema }) => {
            let full = resolve_path(&scope.checker.base_dir, &schema);
            match gepa_lab_score::load_schema(&full) {
                Ok(_) => Some(ScorerSpec::JsonSchema { schema: full }),
                Err(err) => {
                    scope.report(
                        "replay.scorer",
                        Diagnostic::error(Rule::ReplayScorer, err.to_string()).seen(&replay.scorer),
                    );
                    None
                }
            }
        }
        Ok(ScorerSpec::Command { command, .. }) => {
            // The program runs in the experiment file's folder.
            let dir = scope.checker.base_dir.clone();
            match gepa_lab_score::command::find_program(&command, &dir) {
                Ok(()) => Some(ScorerSpec::Command { command, dir }),
                Err(message) => {
                    scope.report(
                        "replay.scorer",
                        Diagnostic::error(
                            Rule::ReplayScorer,
                            format!("scorer command `{command}`: {message}"),
                        )
                        .seen(&replay.scorer),
                    );
                    None
                }
            }
        }
        Ok(ScorerSpec::Judge) if replay.judge.is_none() => {
            scope.report(
                "replay.scorer",
                Diagnostic::error(
                    Rule::ReplayJudge,
                    "the judge scorer needs a [replay.judge] table with `model` and `rubric`",
                )
                .seen("judge"),
            );
            None
        }
        Ok(spec) => Some(spec),
        Err(err) => {
            let names = SCORER_NAMES.map(|name| name.split([':', '[']).next().unwrap_or(name));
            let head = replay.scorer.split(':').next().unwrap_or_default();
            scope.report(
                "replay.scorer",
                Diagnostic::error(Rule::ReplayScorer, format!("replay.scorer: {err}"))
                    .seen(format!("{:?}", replay.scorer))
                    .help_if(closest(head, names).map(|s| format!("did you mean \"{s}\"?"))),
            );
            None
        }
    }
}

/// One diagnostic per problem: an error in a base table is found once per variant but reported
/// once, without a variant tag.
fn dedupe(diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let mut out: Vec<Diagnostic> = Vec::with_capacity(diagnostics.len());
    for diagnostic in diagnostics {
        let same = out.iter_mut().find(|seen| {
            seen.rule == diagnostic.rule
                && seen.message == diagnostic.message
                && seen.location == diagnostic.location
                && seen.seen == diagnostic.seen
        });
        match same {
            Some(seen) if seen.variant != diagnostic.variant => seen.variant = None,
            Some(_) => {}
            None => out.push(diagnostic),
        }
    }
    out
}

fn row_rule(kind: &dataset::RowProblemKind) -> Rule {
    match kind {
        dataset::RowProblemKind::Ragged { .. } => Rule::DatasetRaggedRow,
        dataset::RowProblemKind::Encoding { .. } => Rule::DatasetEncoding,
        dataset::RowProblemKind::EmptyExpected { .. } => Rule::DatasetExpectedEmpty,
        dataset::RowProblemKind::EmptyInput { .. } => Rule::DatasetInputEmpty,
    }
}

/// `base/rel` with `dir/..` pairs folded away, so messages show `datasets/x.csv` rather than
/// `experiments/../datasets/x.csv`. Purely lexical: symbolic links are not followed.
fn resolve_path(base: &Path, relative: &Path) -> PathBuf {
    use std::path::Component;
    let mut out = PathBuf::new();
    for component in base.join(relative).components() {
        match component {
            Component::ParentDir
                if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
            {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

mod providers;

#[cfg(test)]
mod tests;
