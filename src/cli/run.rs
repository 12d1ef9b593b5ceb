//! `gepa-lab run FILE...`: the whole experiment — validate, plan, start, poll, history, replay,
//! score, store, report — and `run --resume RUN_DIR` to continue a run that was stopped.
use super::ExitStatus;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;

use super::backends::{self, BackendChoice};
use super::progress::Progress;
use crate::experiment::{Plan, validate_file};
use crate::inference::embedded::CatalogModel;
use crate::runner::{self, Outcome};
use crate::store::{RunDir, RunManifest};
use crate::tracking::Tracker;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Experiment files (TOML); each becomes one run directory.
    #[arg(value_name = "FILE", required_unless_present = "resume")]
    files: Vec<PathBuf>,
    /// Where the services are: `remote` (the public APIs, keys from GEPA_LAB_EVOLUTION_KEY and
    /// GEPA_LAB_INFERENCE_KEY or the config file), `local` (built-in engine and embedded model)
    /// or the URL of a `gepa-lab serve`. Default: remote when keys for both are at hand, else
    /// local.
    #[arg(long, value_name = "remote|local|URL")]
    backend: Option<BackendChoice>,
    /// Folder that holds the run directories (`<out>/<name>/<run-id>/`).
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Continue the run in this directory: nothing already started is started again and nothing
    /// already answered is asked again.
    #[arg(long, value_name = "RUN_DIR", conflicts_with_all = ["files", "new"])]
    resume: Option<PathBuf>,
    /// Start a new run even when an unfinished run of the same experiment exists.
    #[arg(long)]
    new: bool,
    /// Do not ask for confirmation before spending budget on a paid backend.
    #[arg(long)]
    yes: bool,
    /// Refuse to run when the estimated replay credits exceed N.
    #[arg(long, value_name = "N", value_parser = super::ranges::credits)]
    max_credits: Option<f64>,
    /// Exit with status 4 when the mean holdout score of the prompt the report names best (by
    /// the evolution's score; the seed when nothing evolved was replayed) is below SCORE (0 to 1).
    #[arg(long, value_name = "SCORE", value_parser = super::ranges::score)]
    fail_under: Option<f64>,
    /// Also write each chart of the report as `charts/<name>.png` (for a README or a slide).
    #[arg(long)]
    png: bool,
    /// Exit 0 even when replay answers are missing (failed after their retries); without it
    /// such a run exits 6, since its means rest on fewer rows than planned.
    #[arg(long)]
    allow_missing: bool,
    /// Seconds between polls of an execution (default: 10-30 s with jitter for the public
    /// service, about 1 s for local and self-hosted ones). Above 0, at most 30 days.
    #[arg(long, value_name = "SECONDS", value_parser = super::ranges::seconds)]
    poll_interval: Option<Duration>,
    /// Give up waiting for executions after this many seconds (default 6 hours). Above 0, at
    /// most 30 days.
    #[arg(long, value_name = "SECONDS", value_parser = super::ranges::seconds)]
    timeout: Option<Duration>,
    /// The inference key's requests-per-minute limit: replay requests are spaced to stay under
    /// it. Default: the stored rpmLimit of a key from the config file; with neither, the client
    /// learns the limit from 429 answers.
    #[arg(long, value_name = "N", env = crate::env::INFERENCE_RPM)]
    rpm: Option<std::num::NonZeroU32>,
    /// The run's seed, 0 to 9223372036854775807 (2^63 - 1): each variant's engine seed and
    /// the models' sampling seeds are derived from it, so that the same file, seed and a
    /// deterministic model repeat a run exactly. Default: the file's `[engine] seed`, else one
    /// drawn for this run; either way `run.json` records it. gepa-lab's engine only (local or
    /// serve): the public service takes no seed.
    #[arg(long, value_name = "N", value_parser = super::ranges::seed, conflicts_with = "resume")]
    seed: Option<u64>,
    /// Which replay answers get a line in `events.jsonl`: `failed` (the default) only failed
    /// requests, `all` every answer too (about 185 bytes each, 185 MB for a million rows).
    /// Either way every answer's model, latency, wait and error are in `replay.csv`.
    #[arg(long, value_enum, value_name = "WHICH", default_value_t = AnswerEventsArg::Failed)]
    answer_events: AnswerEventsArg,
    /// Log each execution as a run of this MLflow tracking server (`http://host:port`), in the
    /// MLflow experiment named after the experiment: parameters, the score per generation, the
    /// holdout results, the report. Overrides the file's `[tracking]`. A resumed run continues
    /// the same MLflow runs. An unreachable server is a warning; the run goes on.
    #[arg(long, value_name = "URL", value_parser = crate::http::server_url)]
    mlflow: Option<String>,
    #[command(flatten)]
    settings: super::SettingsArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum AnswerEventsArg {
    All,
    Failed,
}

impl From<AnswerEventsArg> for runner::AnswerEvents {
    fn from(which: AnswerEventsArg) -> Self {
        match which {
            AnswerEventsArg::All => runner::AnswerEvents::All,
            AnswerEventsArg::Failed => runner::AnswerEvents::Failed,
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let plans = match validate_all(&args.files, &args.settings) {
        Ok(plans) => plans,
        Err(code) => return Ok(code),
    };
    // A resumed run goes on where it started, unless told otherwise: executions of one backend
    // are unknown to another, which must never mark them failed.
    let resumed = args.resume.as_deref().map(open_resumed).transpose()?;
    let recorded = resumed
        .as_ref()
        .map(|(_, manifest)| backends::recorded(&manifest.backend));
    if let (Some(asked), Some(recorded)) = (&args.backend, &recorded)
        && asked != recorded
    {
        eprintln!(
            "warning: this run was recorded on {}; resuming it on {} as asked. Executions the \
             other backend does not know keep their state (they are not marked failed); resume \
             on the backend that started them to go on with them.",
            backends::choice_label(recorded),
            backends::choice_label(asked)
        );
    }
    let (choice, note) = backends::resolve(args.backend.clone().or(recorded))?;
    if let Some(note) = note {
        eprintln!("{note}");
    }
    // The public service's API takes no engine settings: refused before anything is created.
    if choice == backends::BackendChoice::Remote
        && let Some(refusal) = runner::public_service_refusal(
            args.seed,
            plans.iter().map(|(file, plan)| (file.as_path(), plan)),
            resumed
                .as_ref()
                .map(|(dir, manifest)| (dir.path.as_path(), manifest)),
        )
    {
        eprintln!("{refusal}");
        return Ok(ExitStatus::Invalid);
    }
    if let Some(refusal) = backends::provider_engine_refusal(&choice, &plans) {
        eprintln!("{refusal}");
        return Ok(ExitStatus::Invalid);
    }
    let mut options = backends::options(&choice);
    if let Some(interval) = args.poll_interval {
        options.poll_interval = interval;
        options.poll_jitter = interval / 2;
    }
    if let Some(timeout) = args.timeout {
        options.timeout = timeout;
    }
    options.answer_events = args.answer_events.into();
    let runtime = super::runtime()?;
    let mut worst = ExitStatus::Ok;
    let jobs: Vec<(RunDir, RunManifest)> = match resumed {
        Some(job) => vec![job],
        None => {
            let mut jobs = Vec::new();
            for (file, plan) in plans {
                match prepare(&args, file, plan, &choice)? {
                    Ok(job) => jobs.push(job),
                    Err(code) => return Ok(code),
                }
            }
            jobs
        }
    };
    for (dir, manifest) in jobs {
        match run_one(&args, &choice, &options, &runtime, dir, manifest)? {
            Ok(code) => worst = worst.max(code),
            Err(code) => return Ok(code),
        }
    }
    Ok(worst)
}

/// Validates every file before anything else is said or done: a missing or broken file is the
/// first thing a user needs to hear about. Each new run gets customIds of its own: a later run's
/// lookup by customId (after a lost start answer) must never find an earlier run's execution and
/// adopt it.
fn validate_all<'a>(
    files: &'a [PathBuf],
    settings: &super::SettingsArgs,
) -> Result<Vec<(&'a PathBuf, Plan)>, ExitStatus> {
    let mut plans = Vec::new();
    let mut settings = settings.settings();
    settings.run_suffix = Some(format!(
        "{:06x}",
        rand::Rng::random::<u32>(&mut rand::rng()) & 0x00ff_ffff
    ));
    for file in files {
        let validation = validate_file(file, &settings);
        for diagnostic in &validation.diagnostics {
            eprintln!("{diagnostic}\n");
        }
        let Some(plan) = validation.plan else {
            eprintln!("{}: invalid; nothing was started", file.display());
            return Err(ExitStatus::Invalid);
        };
        // A provider that is down, or lacks a model the file names, would fail the run after
        // it started spending.
        if !super::plan::check_providers(&plan).unwrap_or(false) {
            eprintln!(
                "{}: a provider cannot serve this run; nothing was started",
                file.display()
            );
            return Err(ExitStatus::Invalid);
        }
        plans.push((file, plan));
    }
    Ok(plans)
}

/// The run directory to resume, locked for this process (refused while another writes it),
/// with what a write cut short left in it removed (and said).
fn open_resumed(path: &Path) -> anyhow::Result<(RunDir, RunManifest)> {
    let dir = RunDir::open_for_writing(path)?;
    let manifest = dir.read_manifest()?;
    let leftovers = dir.remove_leftovers()?;
    if !leftovers.is_empty() {
        eprintln!(
            "removed {} temporary file(s) that a write cut short left in {}: {}",
            leftovers.len(),
            dir.path.display(),
            leftovers.join(", ")
        );
    }
    Ok((dir, manifest))
}

/// Runs (or resumes) one run directory to its end and reports it: the exit status it earns, or
/// `Err` with the status of an interruption.
fn run_one(
    args: &Args,
    choice: &BackendChoice,
    options: &runner::RunOptions,
    runtime: &tokio::runtime::Runtime,
    dir: RunDir,
    manifest: RunManifest,
) -> anyhow::Result<Result<ExitStatus, ExitStatus>> {
    // The local engine continues its unfinished executions as soon as it is built.
    let _runtime = runtime.enter();
    let (backends, keys_sent) = build_backends(args, choice, &dir, &manifest)?;
    let warn = &mut |warning: String| eprintln!("warning: MLflow: {warning}");
    let tracker = runtime.block_on(Tracker::start(
        &dir,
        &manifest,
        args.mlflow.as_deref(),
        warn,
    ));
    if let Some(tracker) = &tracker {
        for (custom_id, run_id) in tracker.runs() {
            eprintln!("MLflow: {custom_id} is run {run_id}");
        }
    }
    let progress = Progress::new();
    let path = dir.path.clone();
    let local = matches!(manifest.backend, crate::store::Backend::Local);
    let job = runner::execute(dir, manifest, &backends, options, &progress);
    let Some(outcome) = super::until_interrupted(runtime, job) else {
        progress.finish();
        if let Some(tracker) = &tracker {
            runtime.block_on(tracker.interrupted(warn));
        }
        say_interrupted(&path, local);
        return Ok(Err(ExitStatus::Interrupted));
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        // The key, not the run: said with where each key went, and the run stops here.
        Err(err @ runner::RunError::KeyRefused { .. }) => {
            let err = anyhow::Error::from(err).context("running the experiment");
            eprint!("{}", super::error_report(&err));
            eprintln!("tip: {}", super::keys::unauthorized_hint(&keys_sent));
            return Ok(Err(ExitStatus::Failure));
        }
        Err(err) => return Err(err).context("running the experiment"),
    };
    let options = crate::report::RenderOptions { png: args.png };
    let context = render_report(&outcome, options)?;
    if let Some(tracker) = &tracker {
        runtime.block_on(tracker.finish(&outcome.manifest, context.as_ref(), warn));
    }
    Ok(Ok(finish(
        &outcome,
        context.as_ref().and_then(|c| c.best.as_ref()),
        (args.fail_under, args.allow_missing),
        &keys_sent,
    )))
}

/// The backends a run directory's executions need on `choice` (the models its replays and
/// engines name; a local run's engine keeps its checkpoint in the directory), and where each
/// key goes.
fn build_backends(
    args: &Args,
    choice: &BackendChoice,
    dir: &RunDir,
    manifest: &RunManifest,
) -> anyhow::Result<(runner::Backends, Vec<super::keys::KeySent>)> {
    let replay_scorer = manifest
        .executions
        .iter()
        .find_map(|e| e.plan.replay.as_ref())
        .map(|r| &r.scorer);
    backends::build(
        choice,
        &backends::RunModels::of(manifest),
        replay_scorer,
        args.rpm,
        &dir.file(crate::store::ENGINE_FILE),
    )
}

/// What a run stopped by Ctrl-C kept in `path`, and how to go on; `local` for a run of the
/// local engine, which continues from its checkpoint.
fn say_interrupted(path: &Path, local: bool) {
    eprintln!(
        "\ninterrupted: everything received so far is kept in {} (states in run.json, \
         answers in cache.jsonl). Continue with:\n  gepa-lab run --resume {}{}",
        path.display(),
        path.display(),
        if local {
            "\nAn evolution of the local engine that was still running continues from \
             its checkpoint (engine.jsonl): only the calls in flight now are made again."
        } else {
            ""
        }
    );
}

/// Validates one file, applies the cost guard, and creates its run directory. `Err(code)` means
/// the run must not start (invalid, refused, or an unfinished run to resume first).
fn prepare(
    args: &Args,
    file: &Path,
    mut plan: Plan,
    choice: &BackendChoice,
) -> anyhow::Result<Result<(RunDir, RunManifest), ExitStatus>> {
    if let Some(unfinished) =
        crate::store::unfinished_run(&args.out, &plan.name, &plan.content_hash)
        && !args.new
    {
        eprintln!(
            "an unfinished run of this experiment exists: {}\n  resume it:        gepa-lab run --resume {}\n  or start afresh:  gepa-lab run --new {}",
            unfinished.display(),
            unfinished.display(),
            file.display()
        );
        return Ok(Err(ExitStatus::Usage));
    }
    eprintln!("{}: {}", plan.name, super::validate::describe(&plan));
    if let Some(cap) = args.max_credits
        && plan.estimate.credits > cap
    {
        eprintln!(
            "refused: the estimate of {:.0} credits is above --max-credits {cap}",
            plan.estimate.credits
        );
        return Ok(Err(ExitStatus::Invalid));
    }
    if backends::costs_money(choice)
        && !args.yes
        && !super::confirm(&format!(
            "this run spends an evolution budget of {} calls and up to {} replay calls",
            plan.estimate.evolution_calls, plan.estimate.replay_calls
        ))?
    {
        eprintln!("not started");
        return Ok(Err(ExitStatus::Invalid));
    }
    // gepa-lab's engine gets a seed for every run, so that any run can be repeated.
    let seed = (*choice != BackendChoice::Remote).then(|| {
        args.seed
            .or(plan.file_seed())
            .unwrap_or_else(|| rand::random::<u64>() & crate::evolution::wire::MAX_ENGINE_SEED)
    });
    if let Some(seed) = seed {
        plan.seed_executions(seed);
    }
    if *choice == BackendChoice::Local {
        backends::fill_local_roles(&mut plan);
    }
    let (dir, manifest) = runner::create_run(&args.out, &plan, backends::describe(choice), seed)?;
    eprintln!("run directory: {}", dir.path.display());
    if let Some(seed) = seed {
        // The seed fixes the engine's draws, not the model's answers: the embedded model's
        // batched answers differ in a row or two between runs, and a decision can turn on one.
        eprintln!(
            "seed: {seed} (the same file with --seed {seed} repeats this run's random choices; \
             answers that differ between runs can still change its course)"
        );
    }
    Ok(Ok((dir, manifest)))
}

/// The `--fail-under` gate on the version the report recommends (the seed when nothing evolved
/// beats it).
fn gate(best: Option<&crate::report::Recommendation>, threshold: f64) -> (bool, String) {
    let scored: Vec<(String, Option<f64>)> = best
        .map(|r| {
            (
                format!("{} {} on {}", r.execution, r.version, r.model),
                r.mean,
            )
        })
        .into_iter()
        .collect();
    let outcome = crate::report::gate::fail_under(threshold, &scored);
    (outcome.passed, outcome.line)
}

/// Prints the outcome and picks the exit status.
/// When the seed of a classification answered one label to nearly every holdout row on an
/// embedded model, or scored no better than always answering the most common one, a larger
/// installed catalog model the replay did not use, named. This reads the machine (which models
/// are installed), so it is said on the terminal only, never in the report, which reads the run
/// directory alone.
fn larger_model_note(context: &crate::report::ReportContext) -> Option<String> {
    let (model, cautions) = context
        .versions
        .iter()
        .filter(|version| version.is_seed)
        .flat_map(|version| &version.scores)
        .find_map(|score| {
            let cautions = &score.answers.as_ref()?.cautions;
            (!cautions.is_empty()).then_some((score.model.as_str(), cautions))
        })?;
    let dir = crate::inference::embedded::models_dir();
    let larger = larger_installed(model, |candidate| candidate.path_in(&dir).is_file())?;
    Some(format!(
        "note: the seed on {model} {}: a model that does this leaves a prompt little to improve. \
         The installed {} may do the task better: `gepa-lab init --dataset FILE --out OTHER.toml` \
         asks each installed model the seed on a few feedback and Pareto rows and writes the \
         better one, or set replay.models = [\"{}\"].",
        cautions.join(" and "),
        larger.model_id(),
        larger.model_id()
    ))
}

/// The smallest catalog model larger than the embedded model `model` names that `installed`
/// holds; none for a model that is not a catalog model.
fn larger_installed(
    model: &str,
    installed: impl Fn(&CatalogModel) -> bool,
) -> Option<&'static CatalogModel> {
    use crate::inference::embedded::{CATALOG, DEFAULT_MODEL, LOCAL, catalog};
    let name = if model == LOCAL {
        DEFAULT_MODEL
    } else {
        model.strip_prefix("local:")?
    };
    let used = catalog::find(name)?;
    CATALOG
        .iter()
        .filter(|candidate| candidate.bytes > used.bytes && installed(candidate))
        .min_by_key(|candidate| candidate.bytes)
}

/// The exit status the run earns, with what the user should know about it; `recommendation`
/// is the report's best version, for `--fail-under`, and `keys_sent` where each key went, for
/// the tip when a service refused one.
fn finish(
    outcome: &Outcome,
    recommendation: Option<&crate::report::Recommendation>,
    (fail_under, allow_missing): (Option<f64>, bool),
    keys_sent: &[super::keys::KeySent],
) -> ExitStatus {
    println!("run directory: {}", outcome.dir.path.display());
    let mut code = ExitStatus::Ok;
    let failed: Vec<&str> = outcome
        .manifest
        .executions
        .iter()
        .filter(|e| !e.state.is_finished())
        .map(|e| e.custom_id.as_str())
        .collect();
    if !failed.is_empty() {
        eprintln!("not completed: {}", failed.join(", "));
        code = ExitStatus::ExecutionFailed;
    }
    let missing = outcome.replay.errors;
    if outcome.key_refused {
        eprintln!("tip: {}", super::keys::unauthorized_hint(keys_sent));
    }
    if missing > 0 {
        eprintln!(
            "{missing} of {} replay answers are missing (the error column of replay.csv says \
             why); they are left out of every mean and test. `gepa-lab run --resume {}` asks \
             for them again",
            outcome.replay.rows,
            outcome.dir.path.display(),
        );
        if !allow_missing && code == ExitStatus::Ok {
            code = ExitStatus::MissingAnswers;
        }
    }
    if outcome.history_failures > 0 {
        eprintln!(
            "the history of {} execution(s) could not be fetched (see events.jsonl); the run \
             directory keeps the generations it already had, and `gepa-lab run --resume {}` \
             fetches them again",
            outcome.history_failures,
            outcome.dir.path.display()
        );
        code = ExitStatus::Failure;
    }
    if let Some(threshold) = fail_under {
        let (passed, message) = gate(recommendation, threshold);
        eprintln!("{message}");
        if !passed {
            code = ExitStatus::GateMissed;
        }
    }
    // Said only when it is the exit status: a failed execution, history or gate outranks it.
    if code == ExitStatus::MissingAnswers {
        eprintln!("exit 6 because answers are missing (--allow-missing makes it 0)");
    }
    code
}

/// Renders and writes the run's report, from the run directory alone exactly as `gepa-lab
/// report` does, and prints its summary; returns the report's context. A report that cannot be
/// rendered is said, not fatal: the run directory holds everything to render it later.
fn render_report(
    outcome: &Outcome,
    options: crate::report::RenderOptions,
) -> anyhow::Result<Option<crate::report::ReportContext>> {
    Ok(match crate::report::build(&outcome.dir.path, options) {
        Ok(report) => {
            crate::report::write(&report, &outcome.dir.path)?;
            print!("{}", crate::report::summary_text(&report.context));
            if let Some(note) = larger_model_note(&report.context) {
                println!("{note}");
            }
            println!(
                "report: {}",
                outcome.dir.file(crate::report::HTML_FILE).display()
            );
            Some(report.context)
        }
        Err(err) => {
            eprintln!("the report could not be rendered: {err}");
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Recommendation;

    fn best(version: &str, mean: Option<f64>) -> Recommendation {
        Recommendation {
            execution: "budget-10".into(),
            version: version.into(),
            model: "m".into(),
            mean,
        }
    }

    #[test]
    fn a_larger_installed_model_is_named_only_when_there_is_one() {
        let all = |_: &CatalogModel| true;
        assert_eq!(
            larger_installed("local", all).map(|m| m.name),
            Some("qwen2.5-coder-1.5b")
        );
        assert_eq!(
            larger_installed("local:smollm2-135m", all).map(|m| m.name),
            Some("qwen2.5-coder-0.5b")
        );
        let none = |_: &CatalogModel| false;
        assert!(larger_installed("local", none).is_none());
        assert!(larger_installed("local:qwen2.5-coder-1.5b", all).is_none());
        assert!(larger_installed("gpt-4o-mini", all).is_none());
        assert!(larger_installed("local:my-model.gguf", all).is_none());
    }

    #[test]
    fn the_gate_checks_the_recommended_version_the_seed_included() {
        let (passed, line) = gate(Some(&best("seed", Some(0.625))), 0.5);
        assert!(passed, "{line}");
        assert!(line.contains("budget-10 seed on m 0.625"), "{line}");
        let (passed, line) = gate(Some(&best("g1", Some(0.25))), 0.5);
        assert!(!passed && line.contains("missed"), "{line}");
        assert!(!gate(Some(&best("g1", None)), 0.5).0);
        assert!(!gate(None, 0.0).0);
        assert!(
            gate(Some(&best("g1", Some(0.5))), 0.5).0,
            "the threshold itself passes"
        );
    }
}
