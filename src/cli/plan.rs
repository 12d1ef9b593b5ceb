//! `gepa-lab plan FILE`: validate, then show exactly what would be sent to the evolution service.
use std::path::PathBuf;
use std::process::ExitCode;

use super::exit;
use crate::experiment::validate_file;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Experiment file (TOML).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print the whole plan as JSON (start bodies, splits, replay, estimates).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    settings: super::SettingsArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let validation = validate_file(&args.file, &args.settings.settings());
    for diagnostic in &validation.diagnostics {
        eprintln!("{diagnostic}\n");
    }
    let Some(plan) = validation.plan else {
        eprintln!("{}: invalid; nothing to plan", args.file.display());
        return Ok(ExitCode::from(exit::INVALID));
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(ExitCode::from(exit::OK));
    }
    println!("{} ({})", plan.name, plan.file.display());
    if let Some(description) = &plan.description {
        println!("{description}");
    }
    println!("content hash {}\n", plan.content_hash);
    for execution in &plan.executions {
        let dataset = &execution.dataset;
        println!(
            "== {} ==",
            execution.variant.as_deref().unwrap_or("experiment")
        );
        println!(
            "dataset {} ({} rows): minibatch rows {:?}, pareto rows {:?}, holdout {} rows",
            dataset.file.display(),
            dataset.rows,
            dataset.minibatch_rows,
            dataset.pareto_rows,
            dataset.holdout_rows
        );
        if let Some(replay) = &execution.replay {
            let repeat = if replay.repeat > 1 {
                format!(", {} answers per row", replay.repeat)
            } else {
                String::new()
            };
            println!(
                "replay: seed + top {} on {:?}, scorer {:?}, temperature {}{repeat}",
                replay.top, replay.models, replay.scorer, replay.temperature
            );
            // What the engine's rows say before anything is spent: a prompt that scores no more
            // than this has learnt nothing (the report says the same of the holdout rows).
            let expected = execution
                .start
                .dataset
                .iter()
                .map(|item| item.expected_output.as_str());
            if let Some(labels) = crate::report::Classification::of(&replay.scorer, expected, 0) {
                println!("feedback and Pareto rows: {}", labels.baseline().sentence);
            }
        }
        println!("POST /gepa/start_execution");
        println!("{}\n", serde_json::to_string_pretty(&execution.start)?);
    }
    println!("{}", super::validate::describe(&plan));
    Ok(ExitCode::from(exit::OK))
}
