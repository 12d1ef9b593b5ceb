//! `gepa-lab compare RUN_DIR...`: the best version of each run against the first run's best, on
//! the same dataset, with the paired statistics of the report. Offline, from the run directories
//! alone. (Comparing two prompt files on a dataset needs an inference backend and belongs with
//! `run`; it is not here.)
use std::path::PathBuf;
use std::process::ExitCode;

use super::exit;
use crate::report;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Two or more run directories; the first is the reference.
    #[arg(value_name = "RUN_DIR", required = true, num_args = 2..)]
    run_dirs: Vec<PathBuf>,
    /// Print the comparison as JSON.
    #[arg(long, conflicts_with = "markdown")]
    json: bool,
    /// Print a Markdown table (for a pull-request comment).
    #[arg(long)]
    markdown: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let comparison = match report::compare(&args.run_dirs) {
        Ok(comparison) => comparison,
        Err(err) => return Ok(super::report::report_error(&err)),
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&comparison)?);
    } else if args.markdown {
        print!("{}", comparison.markdown());
    } else {
        print!("{}", comparison.text());
    }
    Ok(ExitCode::from(exit::OK))
}
