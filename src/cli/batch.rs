//! `gepa-lab batch jobs`: the caller's batch jobs on a prompt-evolution API.
use super::ExitStatus;

use anyhow::Context;
use clap::Subcommand;

use super::evolution_args::{EvolutionArgs, table};
use crate::evolution::Evolution;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List your batch jobs.
    Jobs(JobsArgs),
}

#[derive(Debug, clap::Args)]
pub struct JobsArgs {
    #[command(flatten)]
    pub evolution: EvolutionArgs,
    /// Print the service's answer as JSON.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    pub fn key_sent(&self) -> super::keys::KeySent {
        let Command::Jobs(args) = &self.command;
        args.evolution.key_sent()
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let Command::Jobs(args) = args.command;
    let client = args.evolution.client()?;
    let answer = super::runtime()?
        .block_on(client.batch_jobs())
        .with_context(|| format!("listing batch jobs at {}", args.evolution.base_url))?;
    if args.json {
        let text = serde_json::to_string_pretty(&answer).context("printing JSON")?;
        println!("{text}");
        return Ok(ExitStatus::Ok);
    }
    if !answer.success {
        eprintln!("note: the service answered success: false");
    }
    if answer.jobs.is_empty() {
        eprintln!("no batch jobs");
        return Ok(ExitStatus::Ok);
    }
    let missing = || "-".to_owned();
    let rows: Vec<Vec<String>> = answer
        .jobs
        .iter()
        .map(|job| {
            vec![
                job.file_id.clone().unwrap_or_else(missing),
                job.status.clone().unwrap_or_else(missing),
                job.task_count.map_or_else(missing, |n| n.to_string()),
                job.created_at.clone().unwrap_or_else(missing),
                job.error_message
                    .clone()
                    .or_else(|| job.result_url.clone())
                    .unwrap_or_else(missing),
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &[
                "file_id",
                "status",
                "tasks",
                "created_at",
                "error or result"
            ],
            &rows,
            &[2],
        )
    );
    Ok(ExitStatus::Ok)
}
