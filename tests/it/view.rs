//! `gepa-lab view` over two real runs of one experiment against serve's stand-in model: the
//! runs table and its filters, a run that appears without a restart, the experiment's history,
//! a side by side that says what `gepa-lab compare` says, each run's report served as it is, and
//! the pages in headless Chromium (Debian's package), with screenshots to look at.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::common::{Serve, command, raw, root};
use crate::run::{KEY, assert_succeeded, edited_experiment, run_command};

/// A running `gepa-lab view`, killed when dropped.
struct Viewer {
    child: Child,
    url: String,
}

impl Viewer {
    fn start(folder: &Path) -> Viewer {
        let mut child = command()
            .args(["view", "--bind", "127.0.0.1:0"])
            .arg(folder)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn gepa-lab view");
        let mut first = String::new();
        BufReader::new(child.stdout.take().expect("piped stdout"))
            .read_line(&mut first)
            .expect("read view's first line");
        let Some(url) = first.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            panic!("view did not start: first line {first:?}");
        };
        Viewer {
            url: url.trim_end_matches('/').to_owned(),
            child,
        }
    }

    /// GETs `path`: the status and the body.
    fn get(&self, path: &str) -> (u16, String) {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async {
            let response = raw()
                .get(format!("{}{path}", self.url))
                .send()
                .await
                .expect("the viewer answers");
            let status = response.status().as_u16();
            (status, response.text().await.expect("a body"))
        })
    }
}

impl Drop for Viewer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// HTML text as a reader sees it: the entities minijinja escapes turned back.
fn unescape(html: &str) -> String {
    html.replace("&#x27;", "'")
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&#x2f;", "/")
        .replace("&amp;", "&")
}

/// The run directories under `out/two-variants`, oldest first, as the viewer names them.
fn run_keys(out: &Path) -> Vec<(String, PathBuf)> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(out.join("two-variants"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    dirs.into_iter()
        .map(|dir| {
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            (format!("two-variants/{name}"), dir)
        })
        .collect()
}

/// Headless Chromium, when it is installed; under CI its absence fails the test (`.ci/run`
/// installs it), elsewhere the browser checks are skipped with the reason printed.
fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|dir| dir.join("chromium"))
            .find(|file| file.is_file())
    });
    if found.is_none() {
        let message = "chromium is not installed (scripts/setup-test-tools.sh installs Debian's \
                       package)";
        assert!(std::env::var_os("CI").is_none(), "{message}");
        eprintln!("skipped: the browser checks of `gepa-lab view`: {message}");
    }
    found
}

/// Loads `url` in headless Chromium: the DOM after loading, and the console messages; writes a
/// screenshot to `shot`.
fn browse(chromium: &Path, url: &str, shot: &Path) -> (String, String) {
    let profile = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        Command::new(chromium)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
                "--enable-logging=stderr",
                "--v=0",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(url)
            .output()
            .expect("run chromium")
    };
    let dom = run(&["--dump-dom"]);
    let shot_arg = format!("--screenshot={}", shot.display());
    let shot_run = run(&["--window-size=1400,1600", &shot_arg]);
    assert!(shot.is_file(), "no screenshot of {url}");
    let console: String = String::from_utf8_lossy(&dom.stderr)
        .lines()
        .chain(String::from_utf8_lossy(&shot_run.stderr).lines())
        .filter(|line| line.contains("CONSOLE"))
        .map(|line| format!("{line}\n"))
        .collect();
    (String::from_utf8_lossy(&dom.stdout).into_owned(), console)
}

#[test]
fn the_viewer_shows_two_runs_their_trend_and_a_side_by_side() {
    let serve = Serve::start(&["sim:seed=4"], &[&format!("{KEY}:6000")]);
    let out = tempfile::tempdir().unwrap();
    let files = [
        edited_experiment(out.path(), "first.toml", &[]),
        edited_experiment(
            out.path(),
            "second.toml",
            &[("Answer with one of", "Reply with exactly one of")],
        ),
    ];
    for file in &files {
        let output = run_command(&serve, out.path(), &[file.to_str().unwrap()])
            .output()
            .expect("run");
        assert_succeeded(&output);
    }
    let runs = run_keys(out.path());
    assert_eq!(runs.len(), 2);
    let viewer = Viewer::start(out.path());

    // The runs table: both runs, each with its verdict and state.
    let (status, page) = viewer.get("/");
    assert_eq!(status, 200);
    for (key, _) in &runs {
        let id = key.rsplit('/').next().unwrap();
        assert!(page.contains(id), "{id} is not in the runs table");
    }
    assert!(page.contains("2 of 2 run directories"), "{page}");
    assert_eq!(page.matches(">finished</td>").count(), 2);
    // Filters and sorts are links; a filter the table does not have is refused by name.
    let (status, page) = viewer.get("/?q=no-such-words");
    assert_eq!(status, 200);
    assert!(page.contains("No run matches"));
    let (status, page) = viewer.get("/?state=done");
    assert_eq!(status, 400);
    assert!(
        page.contains("&quot;done&quot;") && page.contains("unfinished"),
        "{page}"
    );
    let (status, page) = viewer.get("/?experiment=two-variants&sort=best&order=asc");
    assert_eq!(status, 200);
    assert!(page.contains("best ▲"));

    // A run that appears while the viewer runs is in the next page.
    let copy = out.path().join("two-variants/zz-copied-run");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&runs[0].1).unwrap() {
        let entry = entry.unwrap();
        if entry.path().is_file() {
            std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
        }
    }
    let (_, page) = viewer.get("/");
    assert!(page.contains("3 of 3 run directories"));
    std::fs::remove_dir_all(&copy).unwrap();

    // The experiment's history: a chart of both runs, the changed file marked.
    let (status, page) = viewer.get("/experiment?name=two-variants");
    assert_eq!(status, 200);
    assert!(
        page.contains("<svg") && page.contains("file changed"),
        "{page}"
    );
    assert_eq!(viewer.get("/experiment?name=nothing").0, 404);

    // Side by side: the same comparison `gepa-lab compare` prints.
    let compare = command()
        .args(["compare", "--json"])
        .args(runs.iter().map(|(_, dir)| dir))
        .output()
        .unwrap();
    assert_succeeded(&compare);
    let expected: serde_json::Value = serde_json::from_slice(&compare.stdout).unwrap();
    let sentence = expected["comparisons"][0]["sentence"].as_str().unwrap();
    let query = format!("/compare?a={}&b={}", runs[0].0, runs[1].0);
    let (status, page) = viewer.get(&query);
    assert_eq!(status, 200, "{page}");
    let page = unescape(&page);
    assert!(page.contains(sentence), "{sentence:?} is not on the page");
    assert!(
        page.contains("Reply") && page.contains("<ins>"),
        "no prompt diff"
    );
    // Any two versions: a run's seed against its best.
    let (status, page) = viewer.get(&format!(
        "/compare?a={}|small|seed&b={}",
        runs[0].0, runs[0].0
    ));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("small · seed"));
    let (status, page) = viewer.get(&format!(
        "/compare?a={}|small|g99&b={}",
        runs[0].0, runs[0].0
    ));
    assert_eq!(status, 422);
    assert!(page.contains("g99"), "{page}");
    assert_eq!(viewer.get("/compare?a=nope&b=nope").0, 404);

    // Each run's report, as it is on disk; nothing else of the run directory.
    let (status, page) = viewer.get(&format!("/runs/{}/index.html", runs[1].0));
    assert_eq!(status, 200);
    assert_eq!(
        page,
        std::fs::read_to_string(runs[1].1.join("index.html")).unwrap()
    );
    for file in [
        "cache.jsonl",
        "run.json",
        "charts/%2e%2e/run.json",
        "../../etc/passwd",
    ] {
        let (status, _) = viewer.get(&format!("/runs/{}/{file}", runs[1].0));
        assert_eq!(status, 404, "{file} was served");
    }

    // A run's answers, a page of replay.csv at a time: every record of the run, then none.
    let records = std::fs::read_to_string(runs[1].1.join("replay.csv"))
        .unwrap()
        .lines()
        .count()
        - 1;
    let (status, page) = viewer.get(&format!("/rows?run={}", runs[1].0));
    assert_eq!(status, 200);
    assert!(
        page.contains(&format!("records 1 to {records} · page 1")),
        "{page}"
    );
    let (status, page) = viewer.get(&format!("/rows?run={}&page=2", runs[1].0));
    assert_eq!(status, 200);
    assert!(page.contains("No record on page 2"));
    assert_eq!(
        viewer.get(&format!("/rows?run={}&page=0", runs[1].0)).0,
        400
    );
    assert_eq!(viewer.get("/rows?run=nope").0, 404);

    // In a real browser: every page renders, with no console message, and a screenshot of each.
    let Some(chromium) = chromium() else { return };
    let shots = root().join("target/view-check");
    std::fs::create_dir_all(&shots).unwrap();
    for (name, path, shown) in [
        ("runs", "/".to_owned(), "2 of 2 run directories"),
        (
            "experiment",
            "/experiment?name=two-variants".to_owned(),
            "Holdout score by run",
        ),
        ("compare", query.clone(), "Rows that differ"),
        (
            "answers",
            format!("/rows?run={}", runs[1].0),
            "records 1 to",
        ),
    ] {
        let (dom, console) = browse(
            &chromium,
            &format!("{}{path}", viewer.url),
            &shots.join(format!("{name}.png")),
        );
        assert!(
            dom.contains(shown),
            "{name}: {shown:?} is not in the rendered page"
        );
        assert!(console.is_empty(), "{name}: console messages:\n{console}");
    }
}

/// A run of a prompt of several parts: the runs table offers each of its versions, the side by
/// side of the seed and an evolved version diffs each part (the turn and the user template
/// marked fixed), and the run's report, served as it is, diffs each version's parts too.
#[test]
fn the_viewer_shows_a_prompt_of_several_parts_part_by_part() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let upstream = crate::checkpoint::upstream(&runtime, "model=local,seed=2,latency_ms=1");
    let out = tempfile::tempdir().unwrap();
    let output = crate::prompt_parts::start(&upstream.url, out.path())
        .output()
        .expect("gepa-lab runs");
    assert_succeeded(&output);
    let dir = crate::checkpoint::only_run(out.path(), "prompt-parts");
    let key = format!(
        "prompt-parts/{}",
        dir.file_name().unwrap().to_string_lossy()
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("results.json")).unwrap()).unwrap();
    let versions = results["versions"].as_array().expect("versions");
    let execution = versions[0]["execution"].as_str().unwrap();
    let evolved = versions
        .iter()
        .find(|v| v["is_seed"] == false)
        .and_then(|v| v["label"].as_str())
        .expect("an evolved version was replayed");
    let viewer = Viewer::start(out.path());

    // The runs table: the run, and each replayed version to pick.
    let (status, page) = viewer.get("/");
    assert_eq!(status, 200);
    let page = unescape(&page);
    for version in ["seed", evolved] {
        let pick = format!("{key}|{execution}|{version}");
        assert!(page.contains(&pick), "{pick} is not offered: {page}");
    }

    // Side by side: the seed in full, the evolved version diffed part by part.
    let (status, page) = viewer.get(&format!(
        "/compare?a={key}|{execution}|seed&b={key}|{execution}|{evolved}"
    ));
    assert_eq!(status, 200, "{page}");
    let page = unescape(&page);
    for part in [
        "system message, against the first's",
        "turn 1 (user) <span class=\"tag\">fixed</span>",
        "turn 1 (assistant) <span class=\"tag\">fixed</span>",
        "user template <span class=\"tag\">fixed</span>",
    ] {
        assert!(page.contains(part), "{part:?} is not on the page: {page}");
    }
    assert!(
        !page.contains("system message <span class=\"tag\">fixed</span>"),
        "the system message evolves"
    );
    assert!(
        page.contains("<system>") && page.contains(crate::prompt_parts::TURN_USER),
        "the seed in full: {page}"
    );

    // The run's report: each evolved version's parts against the seed's.
    let (status, page) = viewer.get(&format!("/runs/{key}/index.html"));
    assert_eq!(status, 200);
    let page = unescape(&page);
    assert!(
        page.contains("system message, against the seed's")
            && page.contains("user template <span class=\"tag\">fixed</span>, against the seed's"),
        "{page}"
    );
}
