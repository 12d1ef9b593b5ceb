//! `gepa-lab completions SHELL`: the shell's completion script, generated from the command
//! definition itself, so it never falls behind a new subcommand or option.
use super::ExitStatus;
use std::io::Write;

use clap::CommandFactory;
use clap_complete::Shell;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The shell to complete for. Install, for example: bash: `gepa-lab completions bash >
    /// ~/.local/share/bash-completion/completions/gepa-lab`; zsh: into a folder of `$fpath` as
    /// `_gepa-lab`; fish: `~/.config/fish/completions/gepa-lab.fish`; PowerShell: add the output
    /// to `$PROFILE`.
    #[arg(value_enum)]
    shell: Shell,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let mut command = super::Cli::command();
    // Into memory first: clap_complete panics when its writer fails, as stdout does when the
    // reader has gone (`| head`).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut command, "gepa-lab", &mut script);
    match std::io::stdout().write_all(&script) {
        Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(anyhow::Error::new(err).context("writing the completion script"))
        }
        _ => Ok(ExitStatus::Ok),
    }
}
