//! `gepa-lab schema`: the JSON Schema of the experiment format, for editors (taplo, Even Better
//! TOML) to complete and check experiment files.
use super::ExitStatus;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<ExitStatus> {
    println!(
        "{}",
        serde_json::to_string_pretty(&crate::experiment::json_schema())?
    );
    Ok(ExitStatus::Ok)
}
