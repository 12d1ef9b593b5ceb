//! Command-line front end: parses arguments (clap), calls the library, prints results.
//!
//! One file per subcommand, each with an `Args` struct and a `run` function returning the process
//! exit code. `anyhow` is used here and only here; library modules return their own error enums.
use std::process::ExitCode;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

mod auth;
mod backends;
mod batch;
mod channel;
mod chat;
mod compare;
mod completions;
mod credits;
mod evolution_args;
mod executions;
mod inference_args;
mod init;
mod keys;
mod model;
mod models;
mod plan;
mod progress;
mod ranges;
mod report;
mod run;
mod schema;
mod serve;
mod serve_account;
mod validate;
mod view;
mod wallet_args;

/// How a command ended, as its exit status: one value per outcome a script may tell apart,
/// shared by every subcommand. `main` turns it into the process's exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum ExitStatus {
    /// Everything worked and every input was valid.
    Ok = 0,
    /// The command ran but its input was invalid or its check failed (validation errors, a
    /// `--fail-under` gate, a refused payment).
    Invalid = 1,
    /// The command line itself was wrong (clap's own usage errors exit with 2 as well).
    Usage = 2,
    /// A service, file system or other runtime failure stopped the command.
    Failure = 3,
    /// A CI gate was missed: `run --fail-under`, `compare --fail-under` or `--fail-if-worse`.
    GateMissed = 4,
    /// `run` finished, but an execution failed or timed out.
    ExecutionFailed = 5,
    /// `run` and `compare --prompts` finished, but answers are missing (failed after their
    /// retries), so the means rest on fewer rows than planned; `--allow-missing` makes it 0.
    /// Also `executions history --all-pages` when paging had to stop before the end.
    MissingAnswers = 6,
    /// Stopped by Ctrl-C (128 + SIGINT, as shells report it); what was received is kept.
    Interrupted = 130,
}

impl ExitStatus {
    /// Every status, in the order of `docs/cli.md`'s table.
    pub const ALL: [ExitStatus; 8] = [
        ExitStatus::Ok,
        ExitStatus::Invalid,
        ExitStatus::Usage,
        ExitStatus::Failure,
        ExitStatus::GateMissed,
        ExitStatus::ExecutionFailed,
        ExitStatus::MissingAnswers,
        ExitStatus::Interrupted,
    ];
}

impl From<ExitStatus> for ExitCode {
    fn from(status: ExitStatus) -> ExitCode {
        ExitCode::from(status as u8)
    }
}

/// The number, as a shell shows it (`exit 6`).
impl std::fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", *self as u8)
    }
}

// The whole command line. Public so that the docs test (`tests/it/docs.rs`) can parse every
// `gepa-lab ...` line of the README and `docs/` with `Cli::try_parse_from`, as `main` does;
// what a command then does stays private to this module. A plain comment: a doc comment here
// would become clap's help text.
#[derive(Debug, Parser)]
#[command(name = "gepa-lab", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommand clap did not know, when that is what went wrong.
fn unknown_subcommand(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if err.kind() != ErrorKind::InvalidSubcommand {
        return None;
    }
    match err.get(ContextKind::InvalidSubcommand)? {
        ContextValue::String(seen) => Some(seen.clone()),
        _ => None,
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check experiment files against every rule of the format and the evolution API.
    Validate(validate::Args),
    /// Validate, then print the exact start_execution bodies each variant would send.
    Plan(plan::Args),
    /// Run experiments end to end: evolve, fetch every history page, replay, score, report.
    Run(run::Args),
    /// Print the JSON Schema of the experiment file format (for editors).
    Schema(schema::Args),
    /// List the models of an inference API, most available first.
    Models(models::Args),
    /// Send one chat message to an inference API and print the answer.
    Chat(chat::Args),
    /// Serve the inference and evolution APIs on this machine, backed by upstream servers, the
    /// embedded model or the simulated model.
    Serve(serve::Args),
    /// Log in to the inference API with a wallet and store the API key it issues.
    Auth(auth::Args),
    /// Credit balance, and top-ups paid in USDC (x402).
    Credits(credits::Args),
    /// Post to and read the community channels.
    Channel(channel::Args),
    /// Read executions of a prompt-evolution API: list, show one, or read its history.
    Executions(executions::Args),
    /// Batch jobs of a prompt-evolution API.
    Batch(batch::Args),
    /// Render a run's report again from its run directory, offline.
    Report(report::Args),
    /// Compare prompt versions on the same rows: the best of several runs, or prompt files
    /// answered on a dataset.
    Compare(compare::Args),
    /// Browse every run under a folder in a local web app: the runs table, an experiment's
    /// runs over time, any two runs or versions side by side, and each run's report.
    View(view::Args),
    /// Install and list the embedded models (`local`, `local:<name>`).
    Model(model::Args),
    /// Print the completion script of a shell: bash, zsh, fish, elvish or powershell.
    Completions(completions::Args),
    /// Write a first experiment file for a dataset, commented, that validates.
    Init(init::Args),
}

/// Options that change how experiments are checked and estimated, shared by `validate`, `plan`
/// and `run`.
#[derive(Debug, clap::Args)]
pub struct SettingsArgs {
    /// The fixed word of evolution model ids (`<word>-4o-mini`).
    #[arg(
        long,
        env = crate::env::MODEL_WORD,
        default_value = "gpt",
        value_name = "WORD"
    )]
    model_word: String,
    /// Assumed credits per remote inference request, for estimates (no price is published).
    #[arg(
        long,
        env = crate::env::CREDITS_PER_CALL,
        default_value_t = 1.0,
        value_name = "N"
    )]
    credits_per_call: f64,
}

impl SettingsArgs {
    pub fn settings(&self) -> crate::experiment::Settings {
        crate::experiment::Settings {
            profile: crate::evolution::ServiceProfile {
                model_word: self.model_word.clone(),
                max_budget: None,
            },
            run_suffix: None,
            credits_per_call: self.credits_per_call,
            config_file: config_with_providers(),
        }
    }
}

/// The user's config file, when there is one that may be read, for the `[providers]` an
/// experiment may name. One that may not be read (too open, broken) is said, and left out.
fn config_with_providers() -> Option<std::path::PathBuf> {
    let path = crate::account::config_path().ok()?;
    if !path.is_file() {
        return None;
    }
    match crate::account::UserConfig::load(&path) {
        Ok(config) if config.providers.is_empty() => None,
        Ok(_) => Some(path),
        Err(err) => {
            eprintln!("warning: {err}; the providers it declares are not used");
            None
        }
    }
}

/// A command whose output goes to a reader that stops reading (`gepa-lab validate f | head -1`)
/// ends quietly, as any Unix tool does, instead of panicking in `println!` (Rust ignores SIGPIPE
/// by default, so the write fails). Not for `serve` and `view`, whose sockets must outlive a
/// closed terminal pipe; their socket writes never raise SIGPIPE on Linux anyway (MSG_NOSIGNAL).
fn quit_on_closed_pipe() {
    #[cfg(unix)]
    // SAFETY: called on the main thread before any other thread exists; SIG_DFL is a valid
    // disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let suggestion = unknown_subcommand(&err).and_then(|seen| {
                let names: Vec<String> = Cli::command()
                    .get_subcommands()
                    .map(|command| command.get_name().to_owned())
                    .collect();
                crate::suggest::closest(&seen, names.iter().map(String::as_str)).map(str::to_owned)
            });
            let _ = err.print();
            if let Some(name) = suggestion {
                eprintln!("\ntip: did you mean `gepa-lab {name}`?");
            }
            return ExitCode::from(
                u8::try_from(err.exit_code()).unwrap_or(ExitStatus::Usage as u8),
            );
        }
    };
    if !matches!(cli.command, Command::Serve(_) | Command::View(_)) {
        quit_on_closed_pipe();
    }
    if !matches!(cli.command, Command::Serve(_)) {
        // Quiet unless asked: `RUST_LOG=gepa_lab=info gepa-lab run ...` shows, among other
        // things, why the local engine stopped. serve sets up its own, louder, logging.
        tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                    tracing_subscriber::EnvFilter::new("warn,llama-cpp-2=error")
                }),
            )
            .try_init()
            .ok();
    }
    // Where the command sends keys, for the tip of a refusal; the command consumes its args.
    let keys_sent = cli.command.keys_sent();
    let result = match cli.command {
        Command::Validate(args) => validate::run(args),
        Command::Plan(args) => plan::run(args),
        Command::Run(args) => run::run(args),
        Command::Schema(args) => schema::run(args),
        Command::Models(args) => models::run(args),
        Command::Chat(args) => chat::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Auth(args) => auth::run(args),
        Command::Credits(args) => credits::run(args),
        Command::Channel(args) => channel::run(args),
        Command::Executions(args) => executions::run(args),
        Command::Batch(args) => batch::run(args),
        Command::Report(args) => report::run(args),
        Command::View(args) => view::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Model(args) => model::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Init(args) => init::run(args),
    };
    match result {
        Ok(status) => status.into(),
        Err(err) => {
            eprint!("{}", error_report(&err));
            if refuses_key(&err) {
                let keys_sent = keys_sent.unwrap_or_else(keys::public_destinations);
                eprintln!("tip: {}", keys::unauthorized_hint(&keys_sent));
            }
            ExitStatus::Failure.into()
        }
    }
}

impl Command {
    /// Where the command sends keys, when it says (`None`: the public services).
    fn keys_sent(&self) -> Option<Vec<keys::KeySent>> {
        Some(match self {
            Command::Models(args) => vec![args.inference.key_sent()],
            Command::Chat(args) => vec![args.inference.key_sent()],
            Command::Compare(args) => vec![args.key_sent()],
            Command::Credits(args) => vec![args.key_sent()],
            Command::Channel(args) => vec![args.key_sent()],
            Command::Executions(args) => vec![args.key_sent()],
            Command::Batch(args) => vec![args.key_sent()],
            _ => return None,
        })
    }
}

/// Whether the service refused the key (401 or 403), by the status of the answer some error of
/// the chain holds.
fn refuses_key(err: &anyhow::Error) -> bool {
    use crate::http::ApiError;
    err.chain().any(|cause| {
        let api = cause
            .downcast_ref::<ApiError>()
            .or_else(|| {
                cause
                    .downcast_ref::<crate::inference::InferenceError>()
                    .and_then(crate::inference::InferenceError::api)
            })
            .or_else(|| match cause.downcast_ref() {
                Some(crate::evolution::EvolutionError::Api(api)) => Some(api),
                _ => None,
            })
            .or_else(|| match cause.downcast_ref() {
                Some(crate::account::AccountError::Api(api)) => Some(api),
                _ => None,
            });
        api.is_some_and(ApiError::refuses_key)
    })
}

/// An error as the terminal shows it: its message, then each cause on a line of its own. A
/// cause whose words the line above already holds (an error of another crate that repeats its
/// source in its message) is not said again.
fn error_report(err: &anyhow::Error) -> String {
    let mut lines: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if lines.last().is_some_and(|above| above.contains(&text)) {
            continue;
        }
        lines.push(text);
    }
    let mut report = String::new();
    for (depth, line) in lines.iter().enumerate() {
        let label = if depth == 0 { "error" } else { "  caused by" };
        report.push_str(&format!("{label}: {line}\n"));
    }
    report
}

/// Asks on the terminal before something that may cost money; `what` says what would happen.
/// Without a terminal it refuses and says that `--yes` goes on without asking.
fn confirm(what: &str) -> anyhow::Result<bool> {
    use std::io::{BufRead, IsTerminal, Write};
    if !std::io::stdin().is_terminal() {
        eprintln!("{what}; pass --yes to go on without a terminal to confirm");
        return Ok(false);
    }
    eprint!("{what}. Go on? [y/N] ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

/// Runs `job` to its end, or until the user presses Ctrl-C: then `None`, and the caller says what
/// was kept and how to go on. Dropping `job` cancels the requests in flight; every answer
/// already received was appended to its cache the moment it arrived.
fn until_interrupted<F: std::future::Future>(
    runtime: &tokio::runtime::Runtime,
    job: F,
) -> Option<F::Output> {
    runtime.block_on(async {
        tokio::select! {
            output = job => Some(output),
            _ = tokio::signal::ctrl_c() => None,
        }
    })
}

/// The async runtime for subcommands that talk to services.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

#[cfg(test)]
mod tests {
    use std::error::Error;
    use std::path::PathBuf;

    use super::*;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::from(kind)
    }

    /// Whether some error of the chain says the one under it (its `source`) in its own message,
    /// so that a report of the chain says that cause twice.
    fn says_its_source_twice(err: &(dyn Error + 'static)) -> bool {
        let mut current = err;
        while let Some(source) = current.source() {
            if current.to_string().contains(&source.to_string()) {
                return true;
            }
            current = source;
        }
        false
    }

    #[test]
    fn each_cause_is_said_once_on_a_line_of_its_own() {
        let store = crate::store::StoreError::Io {
            path: PathBuf::from("/dev/null/sentiment"),
            error: io(std::io::ErrorKind::NotADirectory),
        };
        let err = anyhow::Error::from(crate::runner::RunError::Store(store))
            .context("running the experiment");
        assert_eq!(
            error_report(&err),
            "error: running the experiment\n  caused by: /dev/null/sentiment: not a directory\n"
        );
        // Another crate's error that repeats its source is said once all the same.
        #[derive(Debug, thiserror::Error)]
        #[error("reading: {0}")]
        struct Repeats(#[source] std::io::Error);
        let err = anyhow::Error::from(Repeats(io(std::io::ErrorKind::OutOfMemory)));
        assert_eq!(error_report(&err), "error: reading: out of memory\n");
    }

    #[test]
    fn no_error_says_its_source_twice() {
        use crate::http::ApiError;
        let status = |code: u16| ApiError::Status {
            status: reqwest::StatusCode::from_u16(code).unwrap(),
            retry_after: None,
            body: "invalid API key".into(),
        };
        let decode = ApiError::Decode {
            error: serde_json::from_str::<u8>("x").unwrap_err(),
            body: "x".into(),
        };
        let path = || PathBuf::from("run/cache.jsonl");
        let oom = || io(std::io::ErrorKind::OutOfMemory);
        let errors: Vec<Box<dyn Error + 'static>> = vec![
            Box::new(crate::store::StoreError::Io {
                path: path(),
                error: oom(),
            }),
            Box::new(crate::runner::RunError::KeyRefused {
                evolution_id: "e".into(),
                error: status(401),
            }),
            Box::new(crate::runner::RunError::from(
                crate::dataset::SplitError::TooFewRows { rows: 1, needed: 2 },
            )),
            Box::new(crate::runner::RunError::Dataset(
                crate::dataset::DatasetError::Open {
                    path: path(),
                    error: oom(),
                },
            )),
            Box::new(decode),
            Box::new(crate::score::ScorerError::SchemaRead {
                path: path(),
                error: oom(),
            }),
            Box::new(crate::report::ReportError::Io {
                path: path(),
                error: oom(),
            }),
            Box::new(crate::server::db::DbError::from(
                rusqlite::Error::QueryReturnedNoRows,
            )),
            Box::new(crate::evolution::EvolutionError::Store(
                crate::evolution::StoreError(Box::new(oom())),
            )),
        ];
        for err in &errors {
            assert!(!says_its_source_twice(err.as_ref()), "{err}");
        }
    }
}
