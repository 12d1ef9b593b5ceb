//! `gepa-lab executions list|show|history`: read executions from a prompt-evolution API (the
//! public service or a `gepa-lab serve`); `executions cancel` stops one on a `gepa-lab serve`
//! (an extension beyond the contract).
use super::ExitStatus;
use std::io::Write;

use anyhow::Context;
use clap::Subcommand;

use super::evolution_args::{EvolutionArgs, first_line, generation, score, table};
use crate::evolution::wire::{Execution, HistoryRecord};
use crate::evolution::{Evolution, EvolutionError, PAGE_LIMIT, fetch_history};
use crate::http::ApiError;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One page of your executions, in the order the service gives (serve: oldest first).
    List(ListArgs),
    /// The state of one execution, with its current prompt.
    Show(ShowArgs),
    /// An execution's history: one record per generation (serve: the seed prompt is 0).
    History(HistoryArgs),
    /// Stops a pending or running execution on a `gepa-lab serve` (an extension beyond the
    /// contract; the public service has no such route). It ends `failed`, keeping its history.
    Cancel(ShowArgs),
}

#[derive(Debug, clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub evolution: EvolutionArgs,
    /// Page number, from 1.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub page: Option<u32>,
    /// Executions per page.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Print the executions as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub evolution: EvolutionArgs,
    /// The execution's evolutionId.
    pub id: String,
    /// Print the execution as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, clap::Args)]
pub struct HistoryArgs {
    #[command(flatten)]
    pub evolution: EvolutionArgs,
    /// The execution's evolutionId.
    pub id: String,
    /// Read every page instead of one, stopping at an empty or short page, or one with no new
    /// generation.
    #[arg(long, conflicts_with = "page")]
    pub all_pages: bool,
    /// Page number, from 1, when reading one page.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub page: Option<u32>,
    /// Records per page.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Print the records as JSON, whole prompts included.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    pub fn key_sent(&self) -> super::keys::KeySent {
        match &self.command {
            Command::List(args) => args.evolution.key_sent(),
            Command::Show(args) | Command::Cancel(args) => args.evolution.key_sent(),
            Command::History(args) => args.evolution.key_sent(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    match args.command {
        Command::List(args) => list(args),
        Command::Show(args) => show(args),
        Command::History(args) => history(args),
        Command::Cancel(args) => cancel(args),
    }
}

fn cancel(args: ShowArgs) -> anyhow::Result<ExitStatus> {
    let client = args.evolution.client()?;
    let execution = match super::runtime()?.block_on(client.cancel(&args.id)) {
        Ok(execution) => execution,
        Err(EvolutionError::NotFound(id)) => {
            eprintln!(
                "error: {} knows no execution {id} that you started, or has no cancel route \
                 (cancel is an extension of gepa-lab serve; the public service does not offer it)",
                args.evolution.base_url
            );
            return Ok(ExitStatus::Invalid);
        }
        Err(EvolutionError::Api(ApiError::Status { status, body, .. }))
            if status == reqwest::StatusCode::CONFLICT =>
        {
            eprintln!("error: {}", body.trim());
            return Ok(ExitStatus::Invalid);
        }
        Err(err) => return Err(err).with_context(|| format!("cancelling execution {}", args.id)),
    };
    if args.json {
        print(&json(&execution)?)?;
    } else {
        print(&describe(&args.id, &execution))?;
    }
    Ok(ExitStatus::Ok)
}

/// An unknown id is the caller's mistake (exit 1), not a failure of the service.
fn unknown(err: &EvolutionError) -> Option<ExitStatus> {
    if let EvolutionError::NotFound(id) = err {
        eprintln!("error: no execution with evolutionId {id}");
        return Some(ExitStatus::Invalid);
    }
    None
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")
}

fn json(value: &impl serde::Serialize) -> anyhow::Result<String> {
    Ok(format!(
        "{}\n",
        serde_json::to_string_pretty(value).context("printing JSON")?
    ))
}

fn list(args: ListArgs) -> anyhow::Result<ExitStatus> {
    let client = args.evolution.client()?;
    let executions = super::runtime()?
        .block_on(client.list(args.page, args.limit))
        .with_context(|| format!("listing executions at {}", args.evolution.base_url))?;
    if args.json {
        print(&json(&executions)?)?;
        return Ok(ExitStatus::Ok);
    }
    if executions.is_empty() {
        eprintln!("no executions on page {}", args.page.unwrap_or(1));
        return Ok(ExitStatus::Ok);
    }
    let rows: Vec<Vec<String>> = executions.iter().map(list_row).collect();
    print(&table(
        &[
            "evolution_id",
            "custom_id",
            "status",
            "strategy",
            "budget",
            "generation",
            "score",
            "created_at",
        ],
        &rows,
        &[4, 5, 6],
    ))?;
    Ok(ExitStatus::Ok)
}

fn list_row(execution: &Execution) -> Vec<String> {
    let prompt = execution.prompt.as_ref();
    vec![
        execution.evolution_id.clone().unwrap_or_else(|| "-".into()),
        execution.custom_id.clone().unwrap_or_else(|| "-".into()),
        execution.status.to_string(),
        execution.strategy.clone().unwrap_or_else(|| "-".into()),
        generation(execution.budget),
        generation(prompt.and_then(|p| p.current_generation)),
        score(prompt.and_then(|p| p.current_prompt_score)),
        execution.created_at.clone().unwrap_or_else(|| "-".into()),
    ]
}

fn show(args: ShowArgs) -> anyhow::Result<ExitStatus> {
    let client = args.evolution.client()?;
    let execution = match super::runtime()?.block_on(client.get(&args.id)) {
        Ok(execution) => execution,
        Err(err) => {
            if let Some(code) = unknown(&err) {
                return Ok(code);
            }
            return Err(err).with_context(|| format!("reading execution {}", args.id));
        }
    };
    if args.json {
        print(&json(&execution)?)?;
        return Ok(ExitStatus::Ok);
    }
    print(&describe(&args.id, &execution))?;
    Ok(ExitStatus::Ok)
}

fn describe(id: &str, execution: &Execution) -> String {
    let missing = || "-".to_owned();
    let prompt = execution.prompt.as_ref();
    let mut rows = vec![
        ("evolution_id", id.to_owned()),
        (
            "custom_id",
            execution.custom_id.clone().unwrap_or_else(missing),
        ),
        ("status", execution.status.to_string()),
        (
            "strategy",
            execution.strategy.clone().unwrap_or_else(missing),
        ),
        ("budget", generation(execution.budget)),
        ("budget_used", generation(execution.budget_used)),
        (
            "created_at",
            execution.created_at.clone().unwrap_or_else(missing),
        ),
        (
            "generation",
            generation(prompt.and_then(|p| p.current_generation)),
        ),
        ("score", score(prompt.and_then(|p| p.current_prompt_score))),
    ];
    if let Some(error) = &execution.error {
        rows.push(("error", error.clone()));
    }
    let mut out = String::new();
    for (name, value) in rows {
        out.push_str(&format!("{name:<12}  {value}\n"));
    }
    match prompt.and_then(|p| p.current_prompt.as_deref()) {
        Some(text) => out.push_str(&format!("prompt:\n{text}\n")),
        None => out.push_str("prompt:     (not reported yet)\n"),
    }
    out
}

fn history(args: HistoryArgs) -> anyhow::Result<ExitStatus> {
    let client = args.evolution.client()?;
    let runtime = super::runtime()?;
    // Set when --all-pages had to stop before the end: records may be missing.
    let mut incomplete = None;
    let records = if args.all_pages {
        let limit = args.limit.unwrap_or(PAGE_LIMIT);
        match runtime.block_on(fetch_history(
            &client,
            &args.id,
            limit,
            crate::evolution::MAX_GENERATIONS,
        )) {
            Ok(history) => {
                if history.repeated_page {
                    incomplete = Some(format!(
                        "page {} brought no generation not already read (a service that ignores \
                         `page`, or sends earlier pages again?), so paging stopped there: {} \
                         records were read, and any past them could not be",
                        history.pages,
                        history.records.len()
                    ));
                }
                if history.duplicates > 0 {
                    eprintln!(
                        "note: {} records repeated a generation of an earlier page; the last one was kept",
                        history.duplicates
                    );
                }
                Ok(history.records)
            }
            Err(err) => Err(err),
        }
    } else {
        runtime.block_on(client.prompts(&args.id, args.page, args.limit))
    };
    let records = match records {
        Ok(records) => records,
        Err(err) => {
            if let Some(code) = unknown(&err) {
                return Ok(code);
            }
            return Err(err).with_context(|| format!("reading the history of {}", args.id));
        }
    };
    if args.json {
        print(&json(&records)?)?;
    } else if records.is_empty() {
        eprintln!("no history records");
    } else {
        print(&history_table(&records))?;
    }
    // Printed after the records, so a reader of a long table still sees it.
    if let Some(why) = incomplete {
        eprintln!(
            "warning: the history may be incomplete: {why}; exit {}",
            ExitStatus::MissingAnswers
        );
        return Ok(ExitStatus::MissingAnswers);
    }
    Ok(ExitStatus::Ok)
}

fn history_table(records: &[HistoryRecord]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|record| {
            vec![
                generation(Some(record.generation)),
                score(Some(record.score)),
                first_line(&record.prompt, 72),
            ]
        })
        .collect();
    table(&["generation", "score", "prompt"], &rows, &[0, 1])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evolution::wire::{PromptState, Status};

    #[test]
    fn show_tolerates_a_missing_prompt_and_names_the_error() {
        let execution = Execution {
            evolution_id: None,
            custom_id: Some("c".into()),
            strategy: None,
            status: Status::Failed,
            budget: Some(30.0),
            prompt: None,
            created_at: None,
            error: Some("why".into()),
            budget_used: Some(12.0),
        };
        let shown = describe("id-1", &execution);
        assert!(shown.contains("evolution_id  id-1\n"), "{shown}");
        assert!(shown.contains("status        failed\n"), "{shown}");
        assert!(shown.contains("error         why\n"), "{shown}");
        assert!(shown.contains("budget_used   12\n"), "{shown}");
        assert!(shown.contains("(not reported yet)"), "{shown}");
        let running = Execution {
            prompt: Some(PromptState {
                current_prompt: Some("line one\nline two".into()),
                current_prompt_score: Some(0.5),
                current_generation: Some(2.0),
            }),
            error: None,
            ..execution
        };
        let shown = describe("id-1", &running);
        assert!(shown.ends_with("prompt:\nline one\nline two\n"), "{shown}");
        assert!(shown.contains("score         0.500\n"), "{shown}");
    }

    #[test]
    fn history_rows_show_the_first_line_of_each_prompt() {
        let records = [HistoryRecord {
            generation: 0.0,
            score: 0.25,
            prompt: "Classify.\nReview: {review}".into(),
            pareto_scores: None,
            costs: None,
        }];
        assert_eq!(
            history_table(&records),
            "generation  score  prompt\n         0  0.250  Classify. …\n"
        );
    }
}
