//! `gepa-lab view`: serve the read-only web app over the run directories under a folder, and
//! report its address.
use super::ExitStatus;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;

use crate::view::Viewer;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The folder whose run directories (folders holding `run.json`, up to 4 levels down) are
    /// shown.
    #[arg(default_value = "reports")]
    folder: PathBuf,
    /// Address to listen on; port 0 picks a free port (the first line of output names it). An
    /// address other than 127.0.0.1 shows every prompt, dataset row and answer of the runs to
    /// whoever reaches it.
    #[arg(long, default_value = "127.0.0.1:8708")]
    bind: SocketAddr,
    /// Open the address in the desktop's browser (`xdg-open`, or `open` on macOS).
    #[arg(long)]
    open: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    if !args.folder.is_dir() {
        eprintln!(
            "error: {}: not a folder; `gepa-lab run` writes its run directories under reports/ \
             (or its --out), and `view` shows the ones under the folder it is given",
            args.folder.display()
        );
        return Ok(ExitStatus::Invalid);
    }
    if !args.bind.ip().is_loopback() {
        eprintln!(
            "warning: listening on {}: every prompt, dataset row and answer under {} is shown \
             to whoever reaches this address",
            args.bind,
            args.folder.display()
        );
    }
    super::runtime()?.block_on(async {
        let viewer = Viewer::bind(args.bind, &args.folder)
            .await
            .with_context(|| format!("binding {}", args.bind))?;
        let addr = viewer.local_addr().context("reading the bound address")?;
        let url = format!("http://{addr}/");
        let mut stdout = std::io::stdout();
        writeln!(stdout, "listening on {url}").context("writing to stdout")?;
        stdout.flush().context("writing to stdout")?;
        if args.open {
            open(&url);
        }
        viewer.run(super::serve::shutdown_signal()).await;
        Ok(ExitStatus::Ok)
    })
}

/// Asks the desktop to open `url`; says so on stderr when it cannot.
fn open(url: &str) {
    let program = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    let opened = std::process::Command::new(program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn();
    if let Err(err) = opened {
        eprintln!("warning: could not open a browser with {program}: {err}; open {url} yourself");
    }
}
