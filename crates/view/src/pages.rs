//! The viewer's own pages: the runs table (filtered and sorted by the query string, so every
//! view of it is a link), an experiment's runs over time, and a page for a message. Rendered
//! with the report's templates machinery and style; every value is HTML-escaped by minijinja.
use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::catalog::{BackendKind, Holdout, RunEntry, RunSummary};
use super::rows::{PAGE_RECORDS, ReplayPage};
use gepa_lab_report::stats::Verdict;
use gepa_lab_report::{self as report, ReportError, RunPoint};

/// The head and frame every page of the viewer extends.
const BASE: (&str, &str) = ("base.html", include_str!("templates/base.html"));
const RUNS_TEMPLATE: &str = include_str!("templates/runs.html");
const EXPERIMENT_TEMPLATE: &str = include_str!("templates/experiment.html");
const MESSAGE_TEMPLATE: &str = include_str!("templates/message.html");
const ROWS_TEMPLATE: &str = include_str!("templates/rows.html");

/// The runs table's columns a user can sort by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SortKey {
    Experiment,
    Run,
    #[default]
    Date,
    Backend,
    Seed,
    Best,
    Difference,
    Verdict,
    Budget,
    State,
}

impl SortKey {
    const ALL: [SortKey; 10] = [
        Self::Experiment,
        Self::Run,
        Self::Date,
        Self::Backend,
        Self::Seed,
        Self::Best,
        Self::Difference,
        Self::Verdict,
        Self::Budget,
        Self::State,
    ];

    fn word(self) -> &'static str {
        match self {
            Self::Experiment => "experiment",
            Self::Run => "run",
            Self::Date => "date",
            Self::Backend => "backend",
            Self::Seed => "seed",
            Self::Best => "best",
            Self::Difference => "difference",
            Self::Verdict => "verdict",
            Self::Budget => "budget",
            Self::State => "state",
        }
    }

    /// The order a first click sorts in: newest, highest and best first; names A to Z.
    fn first_order(self) -> Order {
        match self {
            Self::Experiment | Self::Run | Self::Backend | Self::State => Order::Asc,
            _ => Order::Desc,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    Asc,
    Desc,
}

impl Order {
    fn flip(self) -> Self {
        match self {
            Self::Asc => Self::Desc,
            Self::Desc => Self::Asc,
        }
    }
}

/// The runs table's query string: `?q=&experiment=&state=&backend=&sort=&order=`. Empty fields
/// filter nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunsQuery {
    /// Words every one of which is in the experiment's name, file, run id, best version or
    /// backend (case aside).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub q: String,
    /// Exactly this experiment.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub experiment: String,
    /// `finished`, `failed` or `unfinished`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// `local`, `serve` or `public`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub backend: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sort: Option<SortKey>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order: Option<Order>,
    /// Which [`PAGE_ROWS`] of the matching runs, from 1.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub page: Option<usize>,
}

/// Runs on one page of the runs table: a folder of thousands stays quick to load and to read.
pub const PAGE_ROWS: usize = 200;

const STATES: [&str; 3] = ["finished", "failed", "unfinished"];
const BACKENDS: [BackendKind; 3] = [BackendKind::Local, BackendKind::Serve, BackendKind::Public];

impl RunsQuery {
    /// Refuses a state or backend the table does not have, naming the ones it has.
    pub fn check(&self) -> Result<(), String> {
        if self.page == Some(0) {
            return Err("page 0: pages are numbered from 1".into());
        }
        if !self.state.is_empty() && !STATES.contains(&self.state.as_str()) {
            return Err(format!(
                "state {:?} is not one of {}",
                self.state,
                STATES.join(", ")
            ));
        }
        let backends: Vec<&str> = BACKENDS.iter().map(|b| b.word()).collect();
        if !self.backend.is_empty() && !backends.contains(&self.backend.as_str()) {
            return Err(format!(
                "backend {:?} is not one of {}",
                self.backend,
                backends.join(", ")
            ));
        }
        Ok(())
    }

    fn keeps(&self, run: &RunEntry) -> bool {
        let Ok(summary) = &run.summary else {
            // An unreadable run is shown unless a filter asks for something it cannot say.
            return self.experiment.is_empty()
                && self.state.is_empty()
                && self.backend.is_empty()
                && self.has_words(&run.key);
        };
        if !self.experiment.is_empty() && summary.experiment != self.experiment {
            return false;
        }
        if !self.state.is_empty() && summary.state.word() != self.state {
            return false;
        }
        if !self.backend.is_empty() && summary.backend.word() != self.backend {
            return false;
        }
        let haystack = format!(
            "{} {} {} {} {} {}",
            summary.experiment,
            summary.file,
            run.key,
            summary.backend_text,
            summary.state.text(),
            summary.results().map_or("", |h| h.best_version.as_str()),
        );
        self.has_words(&haystack)
    }

    /// Whether every word of `q` is in `text`, case aside.
    fn has_words(&self, text: &str) -> bool {
        let text = text.to_lowercase();
        self.q
            .split_whitespace()
            .all(|word| text.contains(&word.to_lowercase()))
    }

    /// This query's link with `change` applied.
    fn href(&self, change: impl FnOnce(&mut Self)) -> String {
        let mut query = self.clone();
        change(&mut query);
        let text = serde_urlencoded::to_string(&query).unwrap_or_default();
        if text.is_empty() {
            "/".to_owned()
        } else {
            format!("/?{text}")
        }
    }

    fn sort(&self) -> (SortKey, Order) {
        let key = self.sort.unwrap_or_default();
        (key, self.order.unwrap_or(key.first_order()))
    }
}

/// Compares two runs by `key`, ascending; runs without the value sort after those with it in
/// either order (see [`sorted`]).
fn compare_by(key: SortKey, a: &RunSummary, b: &RunSummary) -> Option<Ordering> {
    let number = |x: Option<f64>, y: Option<f64>| Some(x?.total_cmp(&y?));
    Some(match key {
        SortKey::Experiment => a.experiment.cmp(&b.experiment),
        SortKey::Run => a.run_id.cmp(&b.run_id),
        SortKey::Date => a.created_at.cmp(&b.created_at),
        SortKey::Backend => a.backend.cmp(&b.backend),
        SortKey::Seed => number(a.scores().0, b.scores().0)?,
        SortKey::Best => number(a.scores().1, b.scores().1)?,
        SortKey::Difference => number(
            a.results().and_then(|h| h.difference),
            b.results().and_then(|h| h.difference),
        )?,
        SortKey::Verdict => {
            verdict_rank(a.results()?.verdict?).cmp(&verdict_rank(b.results()?.verdict?))
        }
        SortKey::Budget => a.budget_used?.cmp(&b.budget_used?),
        SortKey::State => a.state.cmp(&b.state),
    })
}

/// Worse below not significant below better, so that "best first" puts wins on top.
fn verdict_rank(verdict: Verdict) -> u8 {
    match verdict {
        Verdict::Worse => 0,
        Verdict::TooFewRows | Verdict::TooFewDiscordant => 1,
        Verdict::NotSignificant => 2,
        Verdict::Better => 3,
    }
}

/// The runs the query keeps, in its order; ties (and runs without the value) by date, newest
/// first.
fn sorted<'a>(runs: &'a [std::sync::Arc<RunEntry>], query: &RunsQuery) -> Vec<&'a RunEntry> {
    let (key, order) = query.sort();
    let mut kept: Vec<&RunEntry> = runs
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| query.keeps(r))
        .collect();
    // The catalog gives the runs newest first; the sort is stable.
    let present = |s: &RunSummary| compare_by(key, s, s).is_some();
    kept.sort_by(|a, b| match (&a.summary, &b.summary) {
        (Ok(x), Ok(y)) => match compare_by(key, x, y) {
            Some(ordering) if order == Order::Asc => ordering,
            Some(ordering) => ordering.reverse(),
            None => present(y).cmp(&present(x)),
        },
        (Ok(_), Err(_)) => Ordering::Less,
        (Err(_), Ok(_)) => Ordering::Greater,
        (Err(_), Err(_)) => Ordering::Equal,
    });
    kept
}

/// One line of the runs table.
#[derive(Debug, Serialize)]
struct RunRow<'a> {
    key: &'a str,
    report_href: Option<String>,
    /// Its answers, a page at a time.
    rows_href: String,
    experiment_href: Option<String>,
    /// Why the run cannot be summarised, instead of the fields below.
    error: Option<&'a str>,
    summary: Option<&'a RunSummary>,
    date: String,
    budget: String,
    state: String,
    /// The report's holdout results, or why `results.json` cannot be read; neither before the
    /// report is rendered.
    results: Option<&'a Holdout>,
    results_error: Option<&'a str>,
    /// Values of the compare radio buttons: the run's best, then each replayed version.
    picks: Vec<Pick>,
}

#[derive(Debug, Serialize)]
struct Pick {
    value: String,
    label: String,
}

impl<'a> RunRow<'a> {
    fn of(run: &'a RunEntry) -> Self {
        let summary = run.summary.as_ref().ok();
        let holdout = summary.and_then(|s| s.holdout.as_ref());
        let mut picks = vec![Pick {
            value: run.key.clone(),
            label: "best".into(),
        }];
        if let Some(Ok(holdout)) = holdout {
            picks.extend(holdout.versions.iter().map(|(execution, version)| Pick {
                value: format!("{}|{execution}|{version}", run.key),
                label: format!("{execution} · {version}"),
            }));
        }
        Self {
            key: &run.key,
            rows_href: rows_href(&run.key, 1),
            report_href: summary
                .filter(|s| s.has_report)
                .map(|_| run_href(&run.key, gepa_lab_report::HTML_FILE)),
            experiment_href: summary.map(|s| experiment_href(&s.experiment)),
            error: run.summary.as_ref().err().map(String::as_str),
            summary,
            date: summary.map_or_else(String::new, |s| {
                s.created_at.format("%Y-%m-%d %H:%M").to_string()
            }),
            budget: summary.map_or_else(String::new, |s| match s.budget_used {
                Some(used) => format!("{used} of {}", s.budget),
                None => format!("– of {}", s.budget),
            }),
            state: summary.map_or_else(String::new, |s| s.state.text()),
            results: summary.and_then(RunSummary::results),
            results_error: match holdout {
                Some(Err(err)) => Some(err),
                _ => None,
            },
            picks,
        }
    }
}

/// A sortable column heading: its label, its link, and the arrow of the current sort.
#[derive(Debug, Serialize)]
struct Heading {
    label: &'static str,
    href: String,
    arrow: &'static str,
}

#[derive(Debug, Serialize)]
struct RunsPage<'a> {
    root: String,
    query: &'a RunsQuery,
    rows: Vec<RunRow<'a>>,
    /// Runs the query keeps, the 1-based number of the first one shown, and the pages.
    matching: usize,
    first: usize,
    page: usize,
    pages: usize,
    previous_href: Option<String>,
    next_href: Option<String>,
    /// Runs under the folder.
    total: usize,
    headings: Vec<Heading>,
    experiments: Vec<&'a str>,
    states: [&'static str; 3],
    backends: Vec<&'static str>,
}

/// The runs table: every run under the folder the query keeps.
pub fn runs_page(
    root: &std::path::Path,
    runs: &[std::sync::Arc<RunEntry>],
    query: &RunsQuery,
) -> Result<String, ReportError> {
    let (key, order) = query.sort();
    let headings = SortKey::ALL
        .iter()
        .map(|&column| Heading {
            label: column.word(),
            href: query.href(|q| {
                q.page = None;
                q.sort = Some(column);
                q.order = Some(if column == key {
                    order.flip()
                } else {
                    column.first_order()
                });
            }),
            arrow: match (column == key, order) {
                (false, _) => "",
                (true, Order::Asc) => " ▲",
                (true, Order::Desc) => " ▼",
            },
        })
        .collect();
    let mut experiments: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.summary.as_ref().ok())
        .map(|s| s.experiment.as_str())
        .collect();
    experiments.sort_unstable();
    experiments.dedup();
    let matching = sorted(runs, query);
    let pages = matching.len().div_ceil(PAGE_ROWS).max(1);
    // A page past the last shows the last.
    let number = query.page.unwrap_or(1).clamp(1, pages);
    let first = (number - 1) * PAGE_ROWS;
    let link = |to: usize| query.href(|q| q.page = (to > 1).then_some(to));
    let page = RunsPage {
        root: root.display().to_string(),
        query,
        rows: matching
            .iter()
            .skip(first)
            .take(PAGE_ROWS)
            .map(|run| RunRow::of(run))
            .collect(),
        matching: matching.len(),
        first: first + 1,
        page: number,
        pages,
        previous_href: (number > 1).then(|| link(number - 1)),
        next_href: (number < pages).then(|| link(number + 1)),
        total: runs.len(),
        headings,
        experiments,
        states: STATES,
        backends: BACKENDS.iter().map(|b| b.word()).collect(),
    };
    report::render_page_with(&[BASE], "runs.html", RUNS_TEMPLATE, &page)
}

/// One run on an experiment's page.
#[derive(Debug, Serialize)]
struct HistoryRow<'a> {
    row: RunRow<'a>,
    /// The experiment file's content hash, shortened.
    hash: &'a str,
    /// The file changed since the run before.
    changed: bool,
    /// This run's best against the run before's, when there is one.
    compare_href: Option<String>,
}

#[derive(Debug, Serialize)]
struct ExperimentPage<'a> {
    name: &'a str,
    rows: Vec<HistoryRow<'a>>,
    chart: Option<report::Chart>,
    runs_href: String,
}

/// An experiment's runs, oldest first, with the chart of their holdout scores.
pub fn experiment_page(
    name: &str,
    runs: &[std::sync::Arc<RunEntry>],
) -> Result<String, ReportError> {
    let mut mine: Vec<(&RunEntry, &RunSummary)> = runs
        .iter()
        .filter_map(|r| Some((r.as_ref(), r.summary.as_ref().ok()?)))
        .filter(|(_, s)| s.experiment == name)
        .collect();
    mine.sort_by(|a, b| {
        a.1.created_at
            .cmp(&b.1.created_at)
            .then(a.0.key.cmp(&b.0.key))
    });
    let points: Vec<RunPoint> = mine
        .iter()
        .map(|(_, s)| {
            let (seed, best) = s.scores();
            RunPoint {
                label: s.created_at.format("%m-%d %H:%M").to_string(),
                seed,
                best,
            }
        })
        .collect();
    let chart = if points.iter().any(|p| p.seed.is_some() || p.best.is_some()) {
        Some(report::runs_history(name, &points)?)
    } else {
        None
    };
    let rows = mine
        .iter()
        .enumerate()
        .map(|(i, (run, summary))| {
            let before = i.checked_sub(1).map(|i| mine[i]);
            HistoryRow {
                row: RunRow::of(run),
                hash: summary
                    .content_hash
                    .get(..12)
                    .unwrap_or(&summary.content_hash),
                changed: before.is_some_and(|(_, b)| b.content_hash != summary.content_hash),
                compare_href: before
                    .filter(|(_, b)| b.holdout.is_some() && summary.holdout.is_some())
                    .map(|(b, _)| compare_href(&b.key, &run.key)),
            }
        })
        .collect();
    let page = ExperimentPage {
        name,
        rows,
        chart,
        runs_href: RunsQuery {
            experiment: name.to_owned(),
            ..RunsQuery::default()
        }
        .href(|_| {}),
    };
    report::render_page_with(&[BASE], "experiment.html", EXPERIMENT_TEMPLATE, &page)
}

#[derive(Debug, Serialize)]
struct RowsPage<'a> {
    key: &'a str,
    report_href: Option<String>,
    rows: &'a ReplayPage,
    page_records: usize,
    previous_href: Option<String>,
    next_href: Option<String>,
}

/// A page of a run's answers (see [`super::rows`]).
pub fn rows_page(run: &RunEntry, rows: &ReplayPage) -> Result<String, ReportError> {
    let has_report = run.summary.as_ref().is_ok_and(|s| s.has_report);
    let page = RowsPage {
        key: &run.key,
        report_href: has_report.then(|| run_href(&run.key, gepa_lab_report::HTML_FILE)),
        rows,
        page_records: PAGE_RECORDS,
        previous_href: (rows.page > 1).then(|| rows_href(&run.key, rows.page - 1)),
        next_href: rows.more.then(|| rows_href(&run.key, rows.page + 1)),
    };
    report::render_page_with(&[BASE], "rows.html", ROWS_TEMPLATE, &page)
}

/// The link to page `page` of a run's answers.
pub fn rows_href(key: &str, page: usize) -> String {
    let page = page.to_string();
    let query =
        serde_urlencoded::to_string([("run", key), ("page", page.as_str())]).unwrap_or_default();
    format!("/rows?{query}")
}

#[derive(Debug, Serialize)]
struct MessagePage<'a> {
    title: &'a str,
    message: &'a str,
}

/// A page that says what went wrong (a run that is not there, runs that cannot be compared).
pub fn message_page(title: &str, message: &str) -> Result<String, ReportError> {
    report::render_page_with(
        &[BASE],
        "message.html",
        MESSAGE_TEMPLATE,
        &MessagePage { title, message },
    )
}

/// What a name in a link's path keeps as it is: letters, digits and `-._~` (RFC 3986's
/// unreserved characters).
const NAME: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Names in a path, each percent-encoded.
fn path_part(text: &str) -> String {
    text.split('/')
        .map(|name| percent_encoding::utf8_percent_encode(name, NAME).to_string())
        .collect::<Vec<_>>()
        .join("/")
}

/// The link to a file of a run.
pub fn run_href(key: &str, file: &str) -> String {
    format!("/runs/{}/{}", path_part(key), path_part(file))
}

pub fn experiment_href(name: &str) -> String {
    let query = serde_urlencoded::to_string([("name", name)]).unwrap_or_default();
    format!("/experiment?{query}")
}

pub fn compare_href(a: &str, b: &str) -> String {
    let query = serde_urlencoded::to_string([("a", a), ("b", b)]).unwrap_or_default();
    format!("/compare?{query}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_encode_every_name() {
        assert_eq!(
            run_href("my runs/20261127-1", "index.html"),
            "/runs/my%20runs/20261127-1/index.html"
        );
        assert_eq!(experiment_href("a&b"), "/experiment?name=a%26b");
        assert_eq!(compare_href("x/1", "x/2"), "/compare?a=x%2F1&b=x%2F2");
    }

    #[test]
    fn a_query_refuses_a_state_it_does_not_know() {
        let query = RunsQuery {
            state: "done".into(),
            ..RunsQuery::default()
        };
        let err = query.check().unwrap_err();
        assert!(
            err.contains("\"done\"") && err.contains("unfinished"),
            "{err}"
        );
        assert!(RunsQuery::default().check().is_ok());
    }

    #[test]
    fn runs_without_a_value_sort_last_in_either_order() {
        let root = crate::catalog::tests::folder();
        let runs = crate::catalog::Catalog::new(root.path()).runs();
        for order in [Order::Asc, Order::Desc] {
            let query = RunsQuery {
                sort: Some(SortKey::Best),
                order: Some(order),
                ..RunsQuery::default()
            };
            let keys: Vec<&str> = sorted(&runs, &query)
                .iter()
                .map(|r| r.key.as_str())
                .collect();
            assert_eq!(
                keys,
                ["sentiment/done", "sentiment/open", "broken"],
                "{order:?}"
            );
        }
        let unfinished = RunsQuery {
            state: "unfinished".into(),
            ..RunsQuery::default()
        };
        let keys: Vec<&str> = sorted(&runs, &unfinished)
            .iter()
            .map(|r| r.key.as_str())
            .collect();
        assert_eq!(keys, ["sentiment/open"]);
        let words = RunsQuery {
            q: "SENTIMENT done".into(),
            ..RunsQuery::default()
        };
        let keys: Vec<&str> = sorted(&runs, &words)
            .iter()
            .map(|r| r.key.as_str())
            .collect();
        assert_eq!(keys, ["sentiment/done"]);
    }

    #[test]
    fn the_runs_table_is_paged() {
        let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/run/run.json");
        let root = tempfile::tempdir().unwrap();
        for i in 0..=PAGE_ROWS {
            let dir = root.path().join(format!("run-{i:03}"));
            std::fs::create_dir(&dir).unwrap();
            std::fs::copy(&fixture, dir.join("run.json")).unwrap();
        }
        let runs = crate::catalog::Catalog::new(root.path()).runs();
        let page = |number: Option<usize>| {
            let query = RunsQuery {
                sort: Some(SortKey::Run),
                page: number,
                ..RunsQuery::default()
            };
            runs_page(root.path(), &runs, &query).unwrap()
        };
        let first = page(None);
        assert_eq!(
            first
                .matches("type=\"radio\" form=\"pick\" name=\"a\"")
                .count(),
            PAGE_ROWS
        );
        let pager = first.split("class=\"pager\"").nth(1).unwrap_or_default();
        assert!(
            pager.contains("page 1 of 2") && pager.contains("sort=run&amp;page=2"),
            "{pager}"
        );
        // The second page holds the one run left; a page past the last shows the last.
        for number in [2, 9] {
            let last = page(Some(number));
            // Its A and B buttons.
            assert_eq!(
                last.matches("value=\"run-200\"").count(),
                2,
                "page {number}"
            );
            assert!(!last.contains("run-199") && last.contains("page 2 of 2"));
        }
    }

    #[test]
    fn sort_links_flip_the_current_column_and_keep_the_filters() {
        let query = RunsQuery {
            q: "extraction".into(),
            sort: Some(SortKey::Best),
            order: Some(Order::Desc),
            ..RunsQuery::default()
        };
        assert_eq!(
            query.href(|q| q.order = Some(q.sort().1.flip())),
            "/?q=extraction&sort=best&order=asc"
        );
    }
}
