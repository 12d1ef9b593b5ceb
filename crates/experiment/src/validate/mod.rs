//! Validation: every rule of `experiment-format.md` and of the evolution API, reported all at
//! once, turning a loaded experiment file into a [`Plan`].
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::diagnostic::{Diagnostic, Location};
use super::file::{DatasetSection, Experiment, Holdout, PromptSection, TrackingSection};
use super::plan::{
    DatasetPlan, Estimate, ExecutionPlan, ModelRoles, ModelSources, Plan, ReplayPlan, TrackingPlan,
};
use super::rules::Rule;
use super::source::{Loaded, Resolved, load};
use gepa_lab_dataset::{self as dataset, HoldoutSize, Order, Split};
use gepa_lab_engine as engine;
use gepa_lab_evolution::ServiceProfile;
use gepa_lab_evolution::wire::{DatasetItem, EngineSettings, Evaluator, StartExecution, Strategy};
use gepa_lab_inference::ModelRef;
use gepa_lab_prompt::Template;
use gepa_lab_suggest::closest;

/// Longest `name` the format allows.
pub const MAX_NAME_LEN: usize = 40;
/// Longest customId the evolution API accepts.
pub const MAX_CUSTOM_ID_LEN: usize = 50;
/// Budgets below this work but rarely improve the prompt; the service describes it as a minimum.
pub const LOW_BUDGET: i64 = 10;
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
    /// The seed prompt's text, checked: one source, not empty, placeholders that name inputs. A
    /// prompt of chat parts is checked part by part and its text is their join.
    fn prompt(&mut self, experiment: &Experiment) -> Option<String> {
        if prompt_section::has_parts(&experiment.prompt) {
            return prompt_section::check_parts(self, experiment);
        }
        let (text, path) = self.seed_text(&experiment.prompt)?;
        if !prompt_section::check_one_text(self, &experiment.prompt, &text, path) {
            return None;
        }
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
                            "[prompt] needs a seed prompt: set `seed`, `seed_file`, or `user` (with `system`)"
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

    /// The scan of `file` for `section`'s columns: one per file and columns, but a stratified
    /// variant scans again when another's scan kept no label keys (its diagnostics, the same,
    /// are reported once).
    fn scanned(&mut self, section: &DatasetSection, file: &Path) -> Option<ScanOutcome> {
        let key = (
            file.to_owned(),
            section.inputs.clone(),
            section.expected.clone(),
        );
        let labels = dataset::LabelKeys::for_split(section.stratify);
        let cached = self.checker.scans.get(&key).cloned().filter(|outcome| {
            labels == dataset::LabelKeys::Skip
                || outcome
                    .as_ref()
                    .is_none_or(|outcome| outcome.scan.label_keys.is_some())
        });
        if let Some(outcome) = cached {
            return outcome;
        }
        let outcome = scan_dataset(self, file, &section.inputs, &section.expected, labels);
        self.checker.scans.insert(key, outcome.clone());
        outcome
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
        let outcome = self.scanned(section, &file)?;
        let (minibatch, pareto, holdout) = counts?;
        if !columns_ok {
            return None;
        }
        // A file with row errors is not split (their diagnostics end the check below), so its
        // labels are not used; its sizes are still checked, in the file's order. A plain
        // variant ignores keys a stratified one's scan kept.
        let labels = match &outcome.scan.label_keys {
            Some(keys) if section.stratify && outcome.scan.error_count == 0 => {
                Some(keys.as_slice())
            }
            _ => None,
        };
        let order = Order::new(section.shuffle_seed, labels);
        let split = self.split(&file, &outcome.scan, (minibatch, pareto, holdout), order)?;
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
                stratify: section.stratify,
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
        order: Order<'_>,
    ) -> Option<Split> {
        match Split::new(scan.usable, minibatch, pareto, holdout, order) {
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
            // A label count that is not the row count: the file changed between the passes that
            // read it. (`NotRecorded` is of plans read back, never of a new split.)
            Err(
                err @ (dataset::SplitError::LabelCount { .. } | dataset::SplitError::NotRecorded),
            ) => {
                self.report(
                    "dataset.file",
                    Diagnostic::error(Rule::DatasetFile, format!("{}: {err}", file.display())),
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

/// The sections of one resolved experiment, each checked.
struct Sections {
    prompt: String,
    dataset: DatasetPlan,
    items: Vec<DatasetItem>,
    strategy: Strategy,
    model: String,
    budget: u64,
    evaluator: Evaluator,
    engine: Option<EngineSettings>,
    replay: Option<ReplayPlan>,
    tracking: Option<TrackingPlan>,
    models: ModelRoles,
}

/// Checks every section of `experiment`, each reporting at its keys; `None` when any check
/// failed.
fn check_sections(scope: &mut Scope<'_, '_>, experiment: &Experiment) -> Option<Sections> {
    check_name(scope, &experiment.name);
    let prompt = scope.prompt(experiment);
    let counts = check_counts(scope, experiment);
    let dataset = scope.dataset(experiment, counts);
    let evolution = check_evolution(scope, experiment);
    let evaluator = check_evaluator(scope, experiment);
    let engine = objectives_section::check_engine_and_objectives(scope, experiment);
    let replay = experiment
        .replay
        .as_ref()
        .and_then(|replay| replay_section::check_replay(scope, replay));
    if let (Some(replay), Some((plan, _))) = (&replay, &dataset) {
        check_holdout_for_replay(scope, replay, plan);
    }
    let tracking = match &experiment.tracking {
        Some(section) => check_tracking(scope, section, &experiment.name),
        None => Some(None),
    };
    let models = providers::model_roles(scope, experiment);
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
        check_budget_room(scope, plan, *budget, reflection_minibatch);
    }
    let failed = scope.failed;
    let (prompt, (dataset, items), (strategy, model, budget), evaluator, engine, tracking) = (
        prompt?, dataset?, evolution?, evaluator?, engine?, tracking?,
    );
    let models = models?;
    if failed {
        return None;
    }
    Some(Sections {
        prompt,
        dataset,
        items,
        strategy,
        model,
        budget,
        evaluator,
        engine,
        replay,
        tracking,
        models,
    })
}

impl<'a> Checker<'a> {
    fn experiment(&mut self, resolved: &'a Resolved) -> Option<Draft> {
        let experiment = resolved.experiment.as_ref()?;
        let mut scope = Scope {
            checker: self,
            resolved,
            failed: false,
        };
        let checked = check_sections(&mut scope, experiment)?;
        let estimate = estimate(
            checked.replay.as_ref(),
            &checked.models,
            &checked.dataset,
            checked.budget,
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
                strategy: checked.strategy,
                model: checked.model,
                dataset_columns: experiment.dataset.inputs.clone(),
                budget: checked.budget,
                minibatch_size: checked.dataset.minibatch_rows.len() as u64,
                pareto_size: checked.dataset.pareto_rows.len() as u64,
                evaluator: checked.evaluator.to_json_string(),
                dataset: checked.items,
                prompt: checked.prompt,
                custom_id: None,
                engine: checked.engine,
            },
            dataset: checked.dataset,
            replay: checked.replay,
            tracking: checked.tracking,
            estimate,
            models: checked.models,
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

/// `value` when it is from 1 to `max`; otherwise `None`, with an error at `key` (a path such as
/// `replay.concurrency`) that names the range.
fn one_to(scope: &mut Scope<'_, '_>, key: &str, rule: Rule, value: i64, max: u32) -> Option<usize> {
    if !(1..=i64::from(max)).contains(&value) {
        scope.report(
            key,
            Diagnostic::error(rule, format!("{key} must be from 1 to {max}")).seen(value),
        );
        return None;
    }
    usize::try_from(value).ok()
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
    labels: dataset::LabelKeys,
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
    let scan = match dataset::scan(file, &columns, ROW_PROBLEMS_SHOWN, labels) {
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
) -> Option<(Strategy, String, u64)> {
    let section = &experiment.evolution;
    let strategy = match Strategy::parse(&section.strategy) {
        Some(Strategy::Rpm) => Some(Strategy::Rpm),
        Some(Strategy::Sam) => {
            scope.report(
                "evolution.strategy",
                Diagnostic::warning(
                    Rule::StrategySam,
                    "the service may offer only RPM; a SAM execution may be refused",
                )
                .seen("SAM"),
            );
            Some(Strategy::Sam)
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
    if reflections >= FEW_REFLECTIONS {
        return;
    }
    let shown = reflection_minibatch.min(minibatch);
    let per_mutation = 2 * shown + 1 + pareto;
    let needed = pareto + FEW_REFLECTIONS * per_mutation;
    let message = if !engine::seed_affordable(pareto, budget) {
        // The built-in engine (and `serve`) refuse such a request before spending anything; a
        // run would then replay the seed alone.
        format!(
            "budget {budget} is below pareto {pareto}: scoring the seed on the Pareto rows alone \
             costs {pareto} calls, so no evolution can start (the built-in engine and `serve` \
             refuse it, and the run replays only the seed)"
        )
    } else {
        format!(
            "budget {budget} with pareto {pareto} leaves room for {reflections} reflection{} \
             when every proposal is accepted: scoring the seed costs {pareto} calls and each \
             mutation up to {per_mutation}",
            if reflections == 1 { "" } else { "s" }
        )
    };
    scope.report(
        "evolution.budget",
        Diagnostic::warning(Rule::BudgetReflections, message)
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

mod engine_section;
mod objectives_section;
mod prompt_section;
mod providers;
mod replay_section;

#[cfg(test)]
mod tests;
