//! `gepa-lab schema`: the JSON Schema of the experiment format, for editors (taplo, Even Better
//! TOML) to complete and check experiment files.
use std::process::ExitCode;

use super::exit;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitCode> {
    println!(
        "{}",
        serde_json::to_string_pretty(&crate::experiment::json_schema())?
    );
    Ok(ExitCode::from(exit::OK))
}
