//! `gepa-lab view`: a read-only web app over every run directory under a folder.
//!
//! - `/`: the runs table ([`pages::runs_page`]), filtered and sorted by its query string;
//! - `/experiment?name=`: one experiment's runs over time, with the chart of their holdout
//!   scores;
//! - `/compare?a=&b=`: two runs' best versions, or any two replayed versions
//!   (`RUN|EXECUTION|VERSION`), side by side: the page `compare --prompts` writes, built by the
//!   same [`gepa_lab_report::compare`] as `gepa-lab compare`;
//! - `/rows?run=&page=`: a run's answers, a page of `replay.csv` at a time ([`rows`]);
//! - `/runs/<run>/<file>`: a run's own report files, served as they are.
//!
//! Nothing is written. The folder is read again on every request ([`catalog::Catalog`]), so runs
//! that start or finish while the viewer runs appear without a restart. Work that reads files is
//! done on tokio's blocking threads; connections are bounded as `serve`'s are.
pub mod catalog;
pub mod pages;
pub mod rows;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use serde::Deserialize;

use catalog::Catalog;
use gepa_lab_report::{self as report, Pick, ReportError};
use gepa_lab_server::ClientLimits;
use pages::RunsQuery;

/// Largest report file served (a 1M-row run's `index.html` is under 1 MB).
const FILE_LIMIT: u64 = 256 << 20;

/// The files of a run directory the viewer serves: the report and its exports, never the
/// caches or logs.
const SERVED: [&str; 3] = [report::HTML_FILE, report::RESULTS_FILE, "summary.md"];

/// The viewer over `root`, bound to an address and ready to serve.
pub struct Viewer {
    listener: tokio::net::TcpListener,
    router: Router,
}

impl Viewer {
    pub async fn bind(addr: SocketAddr, root: &Path) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        Ok(Self {
            listener,
            router: router(Arc::new(Catalog::new(root))),
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serves until `shutdown` completes.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send + 'static) {
        gepa_lab_server::limits::serve(
            self.listener,
            self.router,
            ClientLimits::default(),
            shutdown,
        )
        .await;
    }
}

pub fn router(catalog: Arc<Catalog>) -> Router {
    Router::new()
        .route("/", get(runs))
        .route("/experiment", get(experiment))
        .route("/compare", get(compare))
        .route("/rows", get(rows_of_run))
        .route("/runs/{*path}", get(run_file))
        .with_state(catalog)
}

/// An HTML page, or a page that says what went wrong, with its status.
enum Page {
    Ok(String),
    Problem(StatusCode, String, String),
}

impl Page {
    fn problem(status: StatusCode, title: &str, message: impl Into<String>) -> Self {
        Self::Problem(status, title.to_owned(), message.into())
    }

    fn rendered(rendered: Result<String, ReportError>) -> Self {
        match rendered {
            Ok(html) => Self::Ok(html),
            Err(err) => Self::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The page could not be rendered",
                err.to_string(),
            ),
        }
    }
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        match self {
            Self::Ok(html) => Html(html).into_response(),
            Self::Problem(status, title, message) => {
                let html = pages::message_page(&title, &message)
                    .unwrap_or_else(|_| format!("{title}: {message}"));
                (status, Html(html)).into_response()
            }
        }
    }
}

/// Runs `work` on a blocking thread: it reads files.
async fn blocking(work: impl FnOnce() -> Page + Send + 'static) -> Page {
    tokio::task::spawn_blocking(work)
        .await
        .unwrap_or_else(|err| {
            Page::problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The page failed",
                err.to_string(),
            )
        })
}

async fn runs(State(catalog): State<Arc<Catalog>>, Query(query): Query<RunsQuery>) -> Page {
    if let Err(err) = query.check() {
        return Page::problem(
            StatusCode::BAD_REQUEST,
            "Not a filter of the runs table",
            err,
        );
    }
    blocking(move || {
        let runs = catalog.runs();
        Page::rendered(pages::runs_page(catalog.root(), &runs, &query))
    })
    .await
}

#[derive(Deserialize)]
struct ExperimentQuery {
    name: String,
}

async fn experiment(
    State(catalog): State<Arc<Catalog>>,
    Query(query): Query<ExperimentQuery>,
) -> Page {
    blocking(move || {
        let runs = catalog.runs();
        if !runs
            .iter()
            .any(|r| r.summary.as_ref().is_ok_and(|s| s.experiment == query.name))
        {
            return Page::problem(
                StatusCode::NOT_FOUND,
                "No such experiment",
                format!(
                    "no run under {} is of an experiment named {:?}",
                    catalog.root().display(),
                    query.name
                ),
            );
        }
        Page::rendered(pages::experiment_page(&query.name, &runs))
    })
    .await
}

#[derive(Deserialize)]
struct CompareQuery {
    a: Option<String>,
    b: Option<String>,
}

/// `RUN` (its best version) or `RUN|EXECUTION|VERSION`, as the runs table's radio buttons send.
fn pick(catalog: &Catalog, side: &str, value: Option<&str>) -> Result<Pick, Page> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Err(Page::problem(
            StatusCode::BAD_REQUEST,
            "Pick two runs",
            format!(
                "nothing was picked as {side}: pick a run or a version in column {side} of the runs table"
            ),
        ));
    };
    let mut parts = value.rsplitn(3, '|');
    let (key, version) = match (parts.next(), parts.next(), parts.next()) {
        (Some(version), Some(execution), Some(key)) => {
            (key, Some((execution.to_owned(), version.to_owned())))
        }
        _ => (value, None),
    };
    let run = catalog.run(key).ok_or_else(|| {
        Page::problem(
            StatusCode::NOT_FOUND,
            "No such run",
            format!(
                "{side}: there is no run directory {key:?} under {}",
                catalog.root().display()
            ),
        )
    })?;
    Ok(Pick {
        dir: run.dir.clone(),
        version,
    })
}

async fn compare(State(catalog): State<Arc<Catalog>>, Query(query): Query<CompareQuery>) -> Page {
    blocking(move || {
        let picks = match (
            pick(&catalog, "A", query.a.as_deref()),
            pick(&catalog, "B", query.b.as_deref()),
        ) {
            (Ok(a), Ok(b)) => [a, b],
            (Err(page), _) | (_, Err(page)) => return page,
        };
        match report::compare(&picks) {
            Ok(comparison) => Page::rendered(report::render_compare(&comparison)),
            Err(err) => Page::problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "These two cannot be compared",
                err.to_string(),
            ),
        }
    })
    .await
}

#[derive(Deserialize)]
struct RowsQuery {
    run: String,
    page: Option<usize>,
}

async fn rows_of_run(State(catalog): State<Arc<Catalog>>, Query(query): Query<RowsQuery>) -> Page {
    if query.page == Some(0) {
        return Page::problem(
            StatusCode::BAD_REQUEST,
            "No such page",
            "page 0: pages are numbered from 1",
        );
    }
    blocking(move || {
        let Some(run) = catalog.run(&query.run) else {
            return Page::problem(
                StatusCode::NOT_FOUND,
                "No such run",
                format!(
                    "there is no run directory {:?} under {}",
                    query.run,
                    catalog.root().display()
                ),
            );
        };
        match rows::replay_page(&run.dir, query.page.unwrap_or(1), rows::PAGE_RECORDS) {
            Ok(page) => Page::rendered(pages::rows_page(&run, &page)),
            Err(err) => Page::problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "The answers cannot be read",
                err.to_string(),
            ),
        }
    })
    .await
}

/// The run and the file a `/runs/` path names: the run directory it starts with, then one of
/// [`SERVED`] or `charts/<name>.svg|png`.
fn run_file_path(catalog: &Catalog, path: &str) -> Option<(PathBuf, &'static str)> {
    let (run, file) = catalog.run_in(path)?;
    if let Some(name) = SERVED.iter().find(|name| **name == file) {
        let kind = if name.ends_with(".html") {
            "text/html; charset=utf-8"
        } else if name.ends_with(".json") {
            "application/json"
        } else {
            "text/markdown; charset=utf-8"
        };
        return Some((run.dir.join(name), kind));
    }
    let chart = file.strip_prefix("charts/")?;
    let plain = !chart.is_empty()
        && chart
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && !chart.starts_with('.');
    let kind = if chart.ends_with(".svg") {
        "image/svg+xml"
    } else if chart.ends_with(".png") {
        "image/png"
    } else {
        return None;
    };
    plain.then(|| (run.dir.join("charts").join(chart), kind))
}

async fn run_file(State(catalog): State<Arc<Catalog>>, UrlPath(path): UrlPath<String>) -> Response {
    let read = tokio::task::spawn_blocking(move || {
        let (file, kind) = run_file_path(&catalog, &path).ok_or_else(|| {
            format!(
                "{path:?} is not a report file of a run under {}",
                catalog.root().display()
            )
        })?;
        gepa_lab_input::read_bytes(&file, FILE_LIMIT)
            .map(|bytes| (bytes, kind))
            .map_err(|err| format!("{}: {err}", file.display()))
    })
    .await;
    match read {
        Ok(Ok((bytes, kind))) => ([(header::CONTENT_TYPE, kind)], bytes).into_response(),
        Ok(Err(message)) => {
            Page::problem(StatusCode::NOT_FOUND, "No such file", message).into_response()
        }
        Err(err) => Page::problem(
            StatusCode::INTERNAL_SERVER_ERROR,
            "The file could not be read",
            err.to_string(),
        )
        .into_response(),
    }
}
