//! `gepa-lab compare`: prompt versions against a reference on the same rows, with the paired
//! statistics of the report.
//! - `compare RUN_DIR...`: the version each run's report recommends against the first run's,
//!   offline, from the run directories alone.
//! - `compare --prompts A.txt B.txt --dataset FILE`: each prompt file answers every row of the
//!   dataset on one model, the answers are scored, and each prompt is set against the first.
//!   Tables go to a folder named after the comparison; answers to a cache shared by every
//!   comparison under the same --out, so a command run again (after an interruption, or with
//!   one prompt changed) asks only what was never answered.
use super::ExitStatus;
use std::path::PathBuf;

use anyhow::Context;

use super::inference_args::InferenceArgs;
use super::progress::Progress;
use crate::inference::is_local_model;
use crate::prompt::PromptFile;
use crate::report::{self, CompareReport, PromptSetting};
use crate::runner::prompts::{self, Folders, Planned, PromptsJob};
use crate::score::ScorerSpec;
use crate::score::judge::JudgePlan;
use crate::store::{RunDir, write_atomic};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Two or more run directories; the first is the reference.
    #[arg(
        value_name = "RUN_DIR",
        num_args = 2..,
        required_unless_present = "prompts",
        conflicts_with = "prompts"
    )]
    run_dirs: Vec<PathBuf>,
    /// Two or more prompt files (`{column}` placeholders) to answer on --dataset; the first is
    /// the reference.
    #[arg(long, value_name = "FILE", num_args = 2.., requires = "dataset")]
    prompts: Vec<PathBuf>,
    #[command(flatten)]
    answering: PromptArgs,
    /// Print the comparison as JSON.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print a Markdown table (for a pull-request comment).
    #[arg(long)]
    markdown: bool,
}

/// How prompt files are answered and scored (with --prompts only).
#[derive(Debug, clap::Args)]
struct PromptArgs {
    /// CSV file with a header row: the rows the prompts answer.
    #[arg(long, value_name = "FILE", requires = "prompts")]
    dataset: Option<PathBuf>,
    /// The dataset column holding the expected output.
    #[arg(long, value_name = "COLUMN", default_value = "expected")]
    expected: String,
    /// Model id. `local` (or `local:<name>`) runs the embedded model in this process; any other
    /// id goes to the inference API at --url.
    #[arg(long, default_value = "local")]
    model: String,
    /// How an answer is scored against the expected output: exact_match, exact_match_ci,
    /// contains, regex:<pattern>, numeric[:tolerance], json_schema:<file>, json_match, f1,
    /// command:<program>, or judge (with --judge-model and --rubric).
    #[arg(long, default_value = "exact_match")]
    scorer: ScorerSpec,
    /// The model that grades each answer, for `--scorer judge` (`local` runs in this process).
    #[arg(long, value_name = "MODEL", requires = "rubric")]
    judge_model: Option<String>,
    /// A text file with the rubric the judge grades by, for `--scorer judge`.
    #[arg(long, value_name = "FILE", requires = "judge_model")]
    rubric: Option<PathBuf>,
    /// Sampling temperature, 0 to 2.
    #[arg(long, default_value_t = 0.0, value_parser = super::ranges::temperature)]
    temperature: f64,
    /// Most tokens per answer, 1 to 32768 (default: the model's or service's own).
    #[arg(long,
          value_parser = super::ranges::one_to(crate::experiment::MAX_ANSWER_TOKENS))]
    max_tokens: Option<u32>,
    /// Requests in flight at most, 1 to 256; the key's rpm limit also applies.
    #[arg(long, default_value_t = 16,
          value_parser = super::ranges::one_to(crate::experiment::MAX_CONCURRENCY))]
    concurrency: u32,
    /// Answer only the first N data rows.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// Answer each row N times (1 to 100; sensible with --temperature above 0). A row's score
    /// is then the mean of its answers, every statistic counts rows (not answers), and the
    /// tables show how often a row's answers agree.
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = super::ranges::one_to(crate::experiment::MAX_REPEAT))]
    repeat: u32,
    /// Do not ask before sending requests to a model that is not local (needed without a
    /// terminal).
    #[arg(long)]
    yes: bool,
    /// Folder that holds the comparison folders (`<out>/compare/<a>-vs-<b>-<hash>/`) and their
    /// shared answer cache (`<out>/compare/cache.jsonl`).
    #[arg(long, default_value = "reports")]
    out: PathBuf,
    /// Exit 0 even when some answers are missing (failed after their retries); without it such
    /// a comparison exits 6, since its means rest on fewer rows than asked for.
    #[arg(long)]
    allow_missing: bool,
    /// CI gate: exit 4 when any prompt after the first has a mean score below SCORE (0 to 1),
    /// or no answered row.
    #[arg(long, value_name = "SCORE", value_parser = super::ranges::score, requires = "prompts")]
    fail_under: Option<f64>,
    /// CI gate: exit 4 when any prompt after the first is significantly worse than the first
    /// (the paired test of the comparison table).
    #[arg(long, requires = "prompts")]
    fail_if_worse: bool,
    /// Write JUnit XML to FILE: a test suite per prompt, a test case per row, failed when its
    /// score is below --pass-score or it has no answer.
    #[arg(long, value_name = "FILE", requires = "prompts")]
    junit: Option<PathBuf>,
    /// The score a row needs to pass in --junit (0 to 1).
    #[arg(long, value_name = "SCORE", value_parser = super::ranges::score, default_value_t = 1.0, requires = "junit")]
    pass_score: f64,
    #[command(flatten)]
    inference: InferenceArgs,
}

impl Args {
    pub fn key_sent(&self) -> super::keys::KeySent {
        self.answering.inference.key_sent()
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let mut code = ExitStatus::Ok;
    let comparison = if args.prompts.is_empty() {
        let picks: Vec<report::Pick> = args
            .run_dirs
            .iter()
            .map(|d| report::Pick::recommended(d))
            .collect();
        match report::compare(&picks) {
            Ok(comparison) => comparison,
            Err(err) => return Ok(super::report::report_error(&err)),
        }
    } else {
        match compare_prompts(&args.prompts, &args.answering)? {
            Ok((comparison, missing)) => {
                if missing > 0 && !args.answering.allow_missing {
                    code = ExitStatus::MissingAnswers;
                }
                comparison
            }
            Err(code) => return Ok(code),
        }
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else if args.markdown {
        print!("{}", comparison.markdown());
    } else {
        print!("{}", comparison.text());
    }
    if code == ExitStatus::MissingAnswers {
        eprintln!(
            "answers are missing (see above), so the comparison rests on fewer rows than asked \
             for: exit {}. Run the same command again to ask for them (answers \
             already given come from the cache), or pass --allow-missing.",
            ExitStatus::MissingAnswers
        );
    }
    let gates = gate(
        &comparison,
        args.answering.fail_under,
        args.answering.fail_if_worse,
    );
    for (_, line) in &gates {
        eprintln!("{line}");
    }
    // A missed gate is what a CI job acts on; it outranks missing answers.
    if gates.iter().any(|(passed, _)| !passed) {
        code = ExitStatus::GateMissed;
    }
    Ok(code)
}

/// The CI gates of `compare --prompts`: whether each passed, and a line that says why.
fn gate(
    comparison: &CompareReport,
    fail_under: Option<f64>,
    fail_if_worse: bool,
) -> Vec<(bool, String)> {
    // Every prompt after the first, the reference, is held to the threshold.
    let scored: Vec<(String, Option<f64>)> = comparison
        .contenders
        .iter()
        .skip(1)
        .map(|c| (c.source.clone(), c.mean))
        .collect();
    let outcomes = [
        fail_under.map(|threshold| report::gate::fail_under(threshold, &scored)),
        fail_if_worse.then(|| report::gate::fail_if_worse(comparison)),
    ];
    outcomes
        .into_iter()
        .flatten()
        .map(|outcome| (outcome.passed, outcome.line))
        .collect()
}

/// Answers the prompt files on the dataset and compares them; the outer error is a failure
/// (exit 3), the inner one the exit status of input refused before anything was sent.
fn compare_prompts(
    files: &[PathBuf],
    args: &PromptArgs,
) -> anyhow::Result<Result<(CompareReport, usize), ExitStatus>> {
    let job = match prompts_job(files, args)? {
        Ok(job) => job,
        Err(code) => return Ok(Err(code)),
    };
    let prepared = match prompts::prepare(&job) {
        Ok(prepared) => prepared,
        Err(err) => {
            // Every refusal here is about the user's files or flags; nothing was sent.
            eprintln!("error: {err}");
            return Ok(Err(ExitStatus::Invalid));
        }
    };
    for warning in &prepared.warnings {
        eprintln!("warning: {warning}");
    }

    let root = RunDir::folder(&args.out.join("compare"))?;
    let planned = prompts::plan(&job, &prepared, &root)?;
    if !confirmed(&job, &planned, args)? {
        eprintln!("nothing was sent");
        return Ok(Err(ExitStatus::Invalid));
    }
    let dir = RunDir::folder(&root.path.join(prompts::folder_name(&job, &prepared)))?;
    let mut models = vec![job.model.clone()];
    models.extend(job.judge.as_ref().map(|judge| judge.model.clone()));
    let inference = args.inference.backend(&models)?;
    let progress = Progress::new();
    let answering = prompts::answer(
        &job,
        &prepared.grading,
        planned,
        inference,
        Folders {
            cache: &root,
            output: &dir,
        },
        &progress,
    );
    let Some(answered) = super::until_interrupted(&super::runtime()?, answering) else {
        progress.finish();
        eprintln!(
            "\ninterrupted: every answer received so far is kept in {}. Run the same command \
             again to go on: only the requests never answered are sent.",
            root.file(crate::store::CACHE_FILE).display()
        );
        return Ok(Err(ExitStatus::Interrupted));
    };
    let answered = answered.context("answering the prompts")?;
    progress.finish();

    let failed = warn_of_failures(&answered, args, &dir);
    let comparison = report::compare_prompts(
        PromptSetting {
            dataset_file: job.dataset.display().to_string(),
            dataset_sha256: prepared.sha256.clone(),
            model: job.model.clone(),
            settings: prompts::settings(&job, &prepared, &answered, &dir.path),
            simulated: answered.simulated,
        },
        &job.prompts,
        &answered.rows,
    )?;
    report::write_compare(&dir.path, &comparison)?;
    eprintln!("page: {}", dir.file(report::HTML_FILE).display());
    if let Some(path) = &args.junit {
        let xml = report::junit(
            &job.prompts,
            &answered.rows,
            args.pass_score,
            &comparison.comparisons,
        )?;
        write_atomic(path, xml.as_bytes())
            .with_context(|| format!("writing --junit {}", path.display()))?;
    }
    Ok(Ok((comparison, failed)))
}

/// Says on stderr how many answers failed (returned) and, when the key was refused, what to do.
fn warn_of_failures(answered: &prompts::Answered, args: &PromptArgs, dir: &RunDir) -> usize {
    let failed = answered.rows.iter().filter(|r| !r.error.is_empty()).count();
    if answered.key_refused {
        eprintln!(
            "tip: {}",
            super::keys::unauthorized_hint(&[args.inference.key_sent()])
        );
    }
    if failed > 0 {
        eprintln!(
            "warning: {failed} of {} answers failed and are left out of the comparison; the error column of {} says why",
            answered.rows.len(),
            dir.file(crate::store::REPLAY_FILE).display()
        );
    }
    failed
}

/// The job the flags and files describe, or the exit status of a refusal (said on stderr).
fn prompts_job(
    files: &[PathBuf],
    args: &PromptArgs,
) -> anyhow::Result<Result<PromptsJob, ExitStatus>> {
    let Some(dataset) = &args.dataset else {
        anyhow::bail!("--prompts needs --dataset");
    };
    let judge = match (&args.judge_model, &args.rubric) {
        (Some(model), Some(rubric)) => {
            match crate::input::read_text(rubric, crate::input::TEXT_LIMIT) {
                Ok(text) if !text.trim().is_empty() => Some(JudgePlan {
                    model: model.clone(),
                    rubric: text.trim().to_owned(),
                }),
                Ok(_) => {
                    eprintln!("error: {}: the rubric is empty", rubric.display());
                    return Ok(Err(ExitStatus::Invalid));
                }
                Err(err) => {
                    eprintln!("error: {}: cannot read the rubric: {err}", rubric.display());
                    return Ok(Err(ExitStatus::Invalid));
                }
            }
        }
        _ => None,
    };
    if judge.is_some() && !matches!(args.scorer, ScorerSpec::Judge) {
        eprintln!("error: --judge-model and --rubric grade answers only with --scorer judge");
        return Ok(Err(ExitStatus::Usage));
    }
    // Versions are named by their paths, so one path given twice would be answered twice under
    // one name, which the replay file cannot hold (found after every answer had been paid for).
    if let Some(twice) = files
        .iter()
        .enumerate()
        .find_map(|(at, file)| files[..at].contains(file).then_some(file))
    {
        eprintln!(
            "error: --prompts names {} twice; each prompt file is compared once (to compare a \
             prompt with itself, copy it under another name)",
            twice.display()
        );
        return Ok(Err(ExitStatus::Usage));
    }
    let mut prompt_files = Vec::with_capacity(files.len());
    for file in files {
        match PromptFile::read(file) {
            Ok(prompt) => prompt_files.push(prompt),
            Err(err) => {
                eprintln!(
                    "error: {}: cannot read the prompt file: {err}",
                    file.display()
                );
                return Ok(Err(ExitStatus::Invalid));
            }
        }
    }
    let job = PromptsJob {
        dataset: dataset.clone(),
        expected: args.expected.clone(),
        prompts: prompt_files,
        model: args.model.clone(),
        scorer: args.scorer.clone(),
        temperature: args.temperature,
        max_tokens: args.max_tokens,
        concurrency: args.concurrency as usize,
        limit: args.limit,
        repeat: args.repeat,
        judge,
    };
    if job.repeat > 1 && job.temperature == 0.0 {
        eprintln!(
            "warning: --repeat {} at --temperature 0: a model usually gives the same answer \
             every time, so the repeats add cost and little information",
            job.repeat
        );
    }
    Ok(Ok(job))
}

/// Whether the user agrees to what a comparison will send to a paid service (asked only when
/// it sends anything there, and not with --yes).
fn confirmed(job: &PromptsJob, planned: &Planned, args: &PromptArgs) -> anyhow::Result<bool> {
    // A remote judge is paid too: at most one grading request per answer (cached ones are free).
    let remote_judge = job
        .judge
        .as_ref()
        .filter(|judge| !is_local_model(&judge.model))
        .map(|judge| {
            format!(
                ", and up to {} grading request(s) to the judge {}",
                planned.cells(),
                judge.model
            )
        });
    let paid = !is_local_model(&job.model) && planned.to_send() > 0 || remote_judge.is_some();
    if !paid || args.yes {
        return Ok(true);
    }
    super::confirm(&format!(
        "this comparison sends {} request(s) to {} at {} ({} answer(s) already cached){}",
        planned.to_send(),
        job.model,
        args.inference.base_url,
        planned.cached(),
        remote_judge.unwrap_or_default()
    ))
}
