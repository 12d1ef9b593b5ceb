//! `gepa-lab serve`: start the local server (inference and evolution APIs) and report its
//! address.
use super::ExitStatus;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use super::inference_args::parse_secret;
use super::serve_account::ServeAccountArgs;
use crate::evolution::ServiceProfile;
use crate::http::Secret;
use crate::server::{
    AppState, ClientLimits, EvolutionServeConfig, KeySpec, ServeConfig, Server, UpstreamSpec,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on; port 0 picks a free port (the first line of output names it).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,
    /// SQLite file holding keys and usage; created if missing.
    #[arg(long, default_value = "gepa-lab-serve.sqlite3")]
    pub db: PathBuf,
    /// Where answers come from: `local` or `local:NAME` (the embedded model, in this process),
    /// `sim` or `sim:OPTIONS` (the simulated model, for tests), or the http(s) base URL of an
    /// OpenAI-compatible server. Repeat to add nodes; a model served by several upstreams has
    /// that many nodes.
    #[arg(long = "upstream", value_name = "UPSTREAM", required = true)]
    pub upstreams: Vec<UpstreamSpec>,
    /// A key to accept, with its requests-per-minute limit: KEY[:RPM] (default 60). Repeatable.
    /// Keys in GEPA_LAB_SERVE_KEYS (comma-separated) are accepted as well, not replaced.
    #[arg(long = "api-key", value_name = "KEY[:RPM]", value_delimiter = ',')]
    pub keys: Vec<KeySpec>,
    /// Seconds of the window a key's requests-per-minute limit counts in (1 to 3600). The
    /// service's window is a minute; a shorter one keeps the same limit, sliding window and
    /// Retry-After on a shorter clock, so that a test of how a client waits out 429s takes
    /// seconds.
    #[arg(long, default_value_t = 60, value_name = "SECS",
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub rate_window: u64,
    /// Bearer key for http(s) upstreams.
    #[arg(long, env = crate::env::UPSTREAM_KEY, hide_env_values = true, value_parser = parse_secret)]
    pub upstream_key: Option<Secret>,
    #[command(flatten)]
    pub account: ServeAccountArgs,
    #[command(flatten)]
    pub evolution: EngineArgs,
    #[command(flatten)]
    pub clients: ClientArgs,
}

/// What a client may hold of serve (see `server::limits`).
#[derive(Debug, clap::Args)]
pub struct ClientArgs {
    /// Connections open at once (default: 512, or fewer when the open-file limit leaves less
    /// room). When all are held, a new connection takes the place of the one idle longest; one
    /// more than the connections with a request in flight is closed as soon as it is accepted.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_connections: Option<u32>,
    /// Seconds a request's head may take to arrive (an idle connection is closed after as
    /// long).
    #[arg(long, default_value = "20", value_name = "SECS", value_parser = super::ranges::seconds)]
    pub header_timeout: std::time::Duration,
    /// Seconds a request's body may take to arrive whole (408 after that).
    #[arg(long, default_value = "60", value_name = "SECS", value_parser = super::ranges::seconds)]
    pub body_timeout: std::time::Duration,
}

impl ClientArgs {
    fn limits(&self) -> ClientLimits {
        ClientLimits {
            max_connections: self
                .max_connections
                .map_or_else(crate::server::limits::default_max_connections, |n| {
                    n as usize
                }),
            header_timeout: self.header_timeout,
            body_timeout: self.body_timeout,
        }
    }
}

/// How the evolution routes (`/api/v0`) run executions.
#[derive(Debug, clap::Args)]
pub struct EngineArgs {
    /// Upstream model that runs every execution's prompts, whatever evolution model a request
    /// names (default: the first text model the upstreams serve).
    #[arg(long, value_name = "MODEL")]
    pub evolution_model: Option<String>,
    /// Upstream model that writes new prompts (default: the evolution model).
    #[arg(long, value_name = "MODEL")]
    pub reflection_model: Option<String>,
    /// Executions that run at once; later ones wait as pending.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_running_executions: u16,
    /// The fixed word of evolution model ids (`<word>-4o-mini`) that requests may name.
    #[arg(
        long,
        env = crate::env::MODEL_WORD,
        default_value = "gpt",
        value_name = "WORD"
    )]
    pub model_word: String,
    /// The largest evolution budget a start request may ask for (1 to 1000000000); a larger
    /// one is refused with 400 (rule budget-max).
    #[arg(long, default_value_t = DEFAULT_MAX_BUDGET, value_name = "CALLS",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub max_budget: u64,
}

/// Calls a served execution may be granted: about a day of the embedded model, and a few tens
/// of MB of records. A budget of 10^12 would run and grow for ever.
const DEFAULT_MAX_BUDGET: u64 = 100_000;

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    // Logs go to stderr: stdout's first line is the address, which scripts and tests read.
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                // llama.cpp's load report is thousands of lines at info.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,llama-cpp-2=warn")),
        )
        .try_init()
        .ok();
    let config = ServeConfig {
        db: args.db,
        keys: all_keys(args.keys)?,
        upstreams: args.upstreams,
        upstream_key: args.upstream_key,
        account: args.account.settings(),
        rate_window: std::time::Duration::from_secs(args.rate_window),
        evolution: EvolutionServeConfig {
            task_model: args.evolution.evolution_model,
            reflection_model: args.evolution.reflection_model,
            max_running: Some(usize::from(args.evolution.max_running_executions)),
            profile: ServiceProfile {
                model_word: args.evolution.model_word,
                max_budget: Some(args.evolution.max_budget),
            },
        },
    };
    super::runtime()?.block_on(async {
        let state = AppState::new(&config)
            .await
            .context("starting the server")?;
        let server = Server::bind(args.bind, state)
            .await?
            .with_limits(args.clients.limits());
        let addr = server.local_addr()?;
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on http://{addr}").context("writing to stdout")?;
        stdout.flush().context("writing to stdout")?;
        server.run(shutdown_signal()).await?;
        Ok(ExitStatus::Ok)
    })
}

/// The keys given with `--api-key` and those in `GEPA_LAB_SERVE_KEYS`, together: a flag that
/// silently dropped the variable's keys would lock their holders out.
fn all_keys(mut keys: Vec<KeySpec>) -> anyhow::Result<Vec<KeySpec>> {
    if let Some(listed) = crate::env::var(crate::env::SERVE_KEYS) {
        for (index, spec) in listed.split(',').map(str::trim).enumerate() {
            if spec.is_empty() {
                continue;
            }
            // The message names the entry by position only: it may be a secret.
            let key = spec.parse().map_err(|err| {
                anyhow::anyhow!("{}: entry {}: {err}", crate::env::SERVE_KEYS, index + 1)
            })?;
            keys.push(key);
        }
    }
    Ok(keys)
}

/// Ctrl-C or SIGTERM; requests in flight are finished first.
pub(super) async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = terminate => {},
    }
    tracing::info!("shutting down");
}
