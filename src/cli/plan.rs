//! `gepa-lab plan FILE`: validate, then show exactly what would be sent to the evolution service.
use super::ExitStatus;
use std::path::PathBuf;

use crate::experiment::{ModelRoles, Plan, validate_file};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Experiment file (TOML).
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Print the whole plan as JSON (start bodies, splits, replay, estimates).
    #[arg(long)]
    json: bool,
    /// Also ask each declared provider the plan uses for its models (GET /v1/models, 10 s at
    /// most): one line for each that does not answer and each model it does not serve; exit 1
    /// if any.
    #[arg(long)]
    check: bool,
    #[command(flatten)]
    settings: super::SettingsArgs,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let validation = validate_file(&args.file, &args.settings.settings());
    for diagnostic in &validation.diagnostics {
        eprintln!("{diagnostic}\n");
    }
    let Some(plan) = validation.plan else {
        eprintln!("{}: invalid; nothing to plan", args.file.display());
        return Ok(ExitStatus::Invalid);
    };
    let checked = if args.check {
        check_providers(&plan)?
    } else {
        true
    };
    let status = if checked {
        ExitStatus::Ok
    } else {
        ExitStatus::Invalid
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&plan)?);
        return Ok(status);
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
            "dataset {} ({} rows, split {}): minibatch rows {:?}, pareto rows {:?}, holdout {} rows",
            dataset.file.display(),
            dataset.rows,
            dataset.order_words(),
            dataset.minibatch_rows,
            dataset.pareto_rows,
            dataset.holdout_rows,
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
        for line in role_lines(&execution.models) {
            println!("{line}");
        }
        if let Some(lines) = joined_seed(&execution.start.prompt) {
            println!("{lines}");
        }
        println!("POST /gepa/start_execution");
        println!("{}\n", serde_json::to_string_pretty(&execution.start)?);
    }
    println!("{}", super::validate::describe(&plan));
    Ok(status)
}

/// For a seed of several parts: what they are, how they were joined into the one `prompt` the
/// evolution service takes, and the joined text; `None` for a seed of one text.
fn joined_seed(prompt: &str) -> Option<String> {
    use crate::prompt::ChatPrompt;
    let parts = ChatPrompt::split(prompt);
    if parts.is_plain() {
        return None;
    }
    let described: Vec<String> = parts
        .sections()
        .iter()
        .map(|section| {
            let fixed = if section.fixed { " (fixed)" } else { "" };
            format!("{}{fixed}", section.place)
        })
        .collect();
    Some(format!(
        "seed: {} parts: {}\n\
         joined into the one `prompt` below: each part under its marker line (`<system>`, \
         `<turn user>`, `<turn assistant>`, `<user>`; `fixed` after the name of a part that may \
         not change), parts separated by a blank line. The local engine and the replay send the \
         parts as chat messages; the public service evolves the joined text.\n\
         --- joined seed ---\n{prompt}\n--- end of the joined seed ---",
        described.len(),
        described.join(", ")
    ))
}

/// Asks the plan's providers for their models: `true` when each answered and serves every model
/// named of it; otherwise each problem is printed, one line each.
pub fn check_providers(plan: &Plan) -> anyhow::Result<bool> {
    if plan.providers.is_empty() {
        return Ok(true);
    }
    let runtime = super::runtime()?;
    let problems = runtime.block_on(crate::runner::providers::check_providers(
        plan,
        crate::runner::providers::CHECK_TIMEOUT,
    ));
    for problem in &problems {
        eprintln!("{}", problem.headline());
    }
    if problems.is_empty() {
        let names: Vec<String> = plan.providers.keys().map(ToString::to_string).collect();
        eprintln!(
            "providers checked: {} answered and serve every model named",
            names.join(", ")
        );
    }
    Ok(problems.is_empty())
}

/// Each role's model with its provider, as `plan` shows them; the local engine's task and
/// reflection models, when the file leaves them out, are its defaults.
fn role_lines(roles: &ModelRoles) -> Vec<String> {
    let mut lines: Vec<String> = roles
        .iter()
        .map(|(role, model)| {
            format!(
                "{role:<10} provider {:<12} model {}",
                model.provider(),
                model.model()
            )
        })
        .collect();
    if roles.task.is_none() {
        lines.push("task       (local engine: the first replay model, else local)".into());
    }
    if roles.reflection.is_none() {
        lines.push(
            "reflection (local engine: GEPA_LAB_REFLECTION_MODEL, else the catalog's reflection model)"
                .into(),
        );
    }
    lines
}
