//! `gepa-lab validate FILE...`: check experiment files, print every problem at once.
use super::ExitStatus;
use std::path::PathBuf;

use crate::experiment::{Plan, Rule, Validation, validate_file};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Experiment files (TOML).
    #[arg(required_unless_present = "rules", value_name = "FILE")]
    files: Vec<PathBuf>,
    /// List every rule the validator enforces, as a Markdown table, and exit.
    #[arg(long, exclusive = true)]
    rules: bool,
    /// Print the diagnostics as JSON, one object per file.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: super::SettingsArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    if args.rules {
        println!("| rule | requires |\n|---|---|");
        for rule in Rule::ALL {
            println!("| `{}` | {} |", rule.id(), rule.summary());
        }
        return Ok(ExitStatus::Ok);
    }
    let settings = args.settings.settings();
    let results: Vec<(PathBuf, Validation)> = args
        .files
        .iter()
        .map(|file| (file.clone(), validate_file(file, &settings)))
        .collect();
    let all_valid = results.iter().all(|(_, v)| v.plan.is_some());
    if args.json {
        let report: Vec<serde_json::Value> = results
            .iter()
            .map(|(file, validation)| {
                serde_json::json!({
                    "file": file,
                    "valid": validation.plan.is_some(),
                    "diagnostics": validation.diagnostics,
                    "estimate": validation.plan.as_ref().map(|plan| plan.estimate),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        for (file, validation) in &results {
            for diagnostic in &validation.diagnostics {
                println!("{diagnostic}\n");
            }
            println!("{}", summary_line(file, validation));
        }
    }
    Ok(if all_valid {
        ExitStatus::Ok
    } else {
        ExitStatus::Invalid
    })
}

fn summary_line(file: &std::path::Path, validation: &Validation) -> String {
    let counts = format!(
        "{} error{}, {} warning{}",
        validation.errors(),
        if validation.errors() == 1 { "" } else { "s" },
        validation.warnings(),
        if validation.warnings() == 1 { "" } else { "s" },
    );
    match &validation.plan {
        Some(plan) => format!("{}: valid ({counts}); {}", file.display(), describe(plan)),
        None => format!("{}: invalid ({counts})", file.display()),
    }
}

/// One line on what running the plan would spend.
pub fn describe(plan: &Plan) -> String {
    let estimate = plan.estimate;
    let executions = plan.executions.len();
    format!(
        "{executions} execution{}, evolution budget {} calls, replay at most {} remote + {} local calls{}, ~{:.0} credits for replay",
        if executions == 1 { "" } else { "s" },
        estimate.evolution_calls,
        estimate.replay_calls,
        estimate.local_replay_calls,
        if estimate.judge_calls > 0 {
            format!(" + {} judge calls", estimate.judge_calls)
        } else {
            String::new()
        },
        estimate.credits,
    )
}
