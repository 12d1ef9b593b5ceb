//! `gepa-lab report RUN_DIR`: renders a run's report again from its run directory alone, offline
//! (charts, `index.html`, `summary.md`, `results.json`, `replay.parquet`), and prints the summary
//! table.
use super::ExitStatus;
use std::path::PathBuf;

use crate::report::{self, HTML_FILE, RenderOptions, ReportError};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Run directory (reports/<name>/<run-id>/), as written by `gepa-lab run`.
    #[arg(value_name = "RUN_DIR")]
    run_dir: PathBuf,
    /// Open index.html in the desktop's browser afterwards (xdg-open, or open on macOS).
    #[arg(long)]
    open: bool,
    /// Also write each chart as charts/<name>.png (text drawn with the embedded DejaVu Sans), for
    /// a README or slides; index.html still inlines the SVG.
    #[arg(long, conflicts_with = "context_json")]
    png: bool,
    /// Print the report context (what the templates see) as JSON and write nothing: for
    /// debugging templates and for snapshot tests.
    #[arg(long, conflicts_with = "open")]
    context_json: bool,
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let report = match report::build(&args.run_dir, RenderOptions { png: args.png }) {
        Ok(report) => report,
        Err(err) => return Ok(report_error(&err)),
    };
    if args.context_json {
        println!("{}", serde_json::to_string_pretty(&report.context)?);
        return Ok(ExitStatus::Ok);
    }
    let written = match report::write(&report, &args.run_dir) {
        Ok(written) => written,
        Err(err) => return Ok(report_error(&err)),
    };
    print!("{}", report::summary_text(&report.context));
    println!(
        "\nwrote {} files in {}",
        written.len(),
        args.run_dir.display()
    );
    let page = args.run_dir.join(HTML_FILE);
    println!("report: {}", page.display());
    if args.open {
        open_in_browser(&page);
    }
    Ok(ExitStatus::Ok)
}

/// Prints a report error; a run directory whose files are bad is invalid input (exit 1), anything
/// else (a disk error) a failure (exit 3).
pub fn report_error(err: &ReportError) -> ExitStatus {
    eprintln!("error: {err}");
    match err {
        ReportError::Record { .. }
        | ReportError::DifferentDatasets(_)
        | ReportError::NothingToCompare { .. }
        | ReportError::Store(crate::store::StoreError::Format { .. }) => ExitStatus::Invalid,
        _ => ExitStatus::Failure,
    }
}

/// Best effort: a machine without a desktop has no opener, and the path is printed anyway.
fn open_in_browser(page: &std::path::Path) {
    let opener = if cfg!(target_os = "macos") {
        "open"
    } else {
        "xdg-open"
    };
    match std::process::Command::new(opener).arg(page).status() {
        Ok(status) if status.success() => {}
        _ => eprintln!("could not open a browser ({opener}); open the path above by hand"),
    }
}
