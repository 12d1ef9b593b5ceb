//! A seeded input fuzzer. Valid experiment files, dataset CSV files and run directories are
//! mutated at random (lines dropped, doubled or swapped, values replaced by hostile ones, bytes
//! inserted or cut) and handed to the binary: `validate` and `plan` for the first two, `report`
//! and `compare` for run directories. Whatever the input, the command must end in bounded time
//! without a panic, and an error must name the file it is about and where in it (a line, a row,
//! a record, a field, a column or a byte).
//!
//! The seed is fixed so that CI is repeatable; `PROPTEST_RNG_SEED=N` tries another one and
//! `PROPTEST_CASES=N` more cases (each target has its own default below). A failure is shrunk
//! to a small list of mutations before it is reported.
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

use crate::common::root;

/// The seed CI uses.
const SEED: u64 = 20_261_123;
/// Longest a command may take on any input; the real ones take well under a second.
const LIMIT: Duration = Duration::from_secs(30);

/// Values a careless edit or a hostile file puts where a value belongs.
const HOSTILE: &[&str] = &[
    "",
    "\"",
    "\"\"\"",
    "'",
    "\\",
    "\u{0}",
    "\u{feff}",
    "=",
    "[",
    "]]",
    "{",
    "}",
    ",",
    "\r\n",
    "#",
    "-1",
    "0",
    "1e309",
    "nan",
    "-inf",
    "18446744073709551616",
    "9007199254740993",
    "2.5",
    "true",
    "[]",
    "{}",
    "\"\u{202e}txt.exe\"",
    "[[variants]]",
    "[dataset]",
    "\"{review}\"",
    "\"{unknown}\"",
    "\"{{\"",
    "\"../../../../etc/passwd\"",
    "\"/dev/zero\"",
    "\"ñ 漢字 🙂\"",
];

/// One edit of a file's bytes. Positions are taken modulo the file's lines or bytes.
#[derive(Debug, Clone)]
enum Mutation {
    DropLine(usize),
    DoubleLine(usize),
    SwapLines(usize, usize),
    /// The text after the first `=` or `,` of a line becomes a hostile value.
    ReplaceValue(usize, usize),
    InsertBytes(usize, Vec<u8>),
    /// A long run of one byte: a field or line far larger than any real one.
    InsertRun(usize, u8, usize),
    CutAt(usize),
    SetByte(usize, u8),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let position = 0..10_000usize;
    prop_oneof![
        position.clone().prop_map(Mutation::DropLine),
        position.clone().prop_map(Mutation::DoubleLine),
        (position.clone(), position.clone()).prop_map(|(a, b)| Mutation::SwapLines(a, b)),
        (position.clone(), 0..HOSTILE.len()).prop_map(|(a, b)| Mutation::ReplaceValue(a, b)),
        (position.clone(), prop::collection::vec(any::<u8>(), 1..8))
            .prop_map(|(a, b)| Mutation::InsertBytes(a, b)),
        (
            position.clone(),
            prop_oneof![Just(b'x'), Just(b'"'), Just(b'\n'), Just(b','), Just(0xff)],
            prop_oneof![Just(1_000usize), Just(100_000), Just(3_000_000)]
        )
            .prop_map(|(a, b, c)| Mutation::InsertRun(a, b, c)),
        position.clone().prop_map(Mutation::CutAt),
        (position, any::<u8>()).prop_map(|(a, b)| Mutation::SetByte(a, b)),
    ]
}

fn mutations() -> impl Strategy<Value = Vec<Mutation>> {
    prop::collection::vec(mutation(), 1..5)
}

/// Lines with their ends, so that joining them gives the bytes back.
fn lines(bytes: &[u8]) -> Vec<Vec<u8>> {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect()
}

fn apply(bytes: &[u8], mutation: &Mutation) -> Vec<u8> {
    let mut lines = lines(bytes);
    let bytes = bytes.to_vec();
    match mutation {
        Mutation::DropLine(at) if !lines.is_empty() => {
            lines.remove(at % lines.len());
            lines.concat()
        }
        Mutation::DoubleLine(at) if !lines.is_empty() => {
            let line = lines[at % lines.len()].clone();
            lines.insert(at % lines.len(), line);
            lines.concat()
        }
        Mutation::SwapLines(a, b) if !lines.is_empty() => {
            let n = lines.len();
            lines.swap(a % n, b % n);
            lines.concat()
        }
        Mutation::ReplaceValue(at, value) if !lines.is_empty() => {
            let n = lines.len();
            let line = &mut lines[at % n];
            if let Some(split) = line.iter().position(|&b| b == b'=' || b == b',') {
                let end = if line.ends_with(b"\n") {
                    b"\n".as_slice()
                } else {
                    b""
                };
                line.truncate(split + 1);
                line.extend_from_slice(HOSTILE[*value].as_bytes());
                line.extend_from_slice(end);
            }
            lines.concat()
        }
        Mutation::InsertBytes(at, inserted) => {
            let at = at % (bytes.len() + 1);
            [&bytes[..at], inserted, &bytes[at..]].concat()
        }
        Mutation::InsertRun(at, byte, len) => {
            let at = at % (bytes.len() + 1);
            [&bytes[..at], &vec![*byte; *len], &bytes[at..]].concat()
        }
        Mutation::CutAt(at) => bytes[..at % (bytes.len() + 1)].to_vec(),
        Mutation::SetByte(at, byte) if !bytes.is_empty() => {
            let mut bytes = bytes;
            let n = bytes.len();
            bytes[at % n] = *byte;
            bytes
        }
        _ => bytes,
    }
}

fn mutate(bytes: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    mutations
        .iter()
        .fold(bytes.to_vec(), |bytes, m| apply(&bytes, m))
}

/// The seeded runner: `cases` unless `PROPTEST_CASES` says otherwise, [`SEED`] unless
/// `PROPTEST_RNG_SEED` does, no failure files written into the repository.
fn runner(cases: u32) -> TestRunner {
    let from_env = Config::default();
    TestRunner::new(Config {
        cases: if std::env::var_os("PROPTEST_CASES").is_some() {
            from_env.cases
        } else {
            cases
        },
        rng_seed: match from_env.rng_seed {
            RngSeed::Random => RngSeed::Fixed(SEED),
            fixed => fixed,
        },
        failure_persistence: None,
        max_shrink_iters: 200,
        ..from_env
    })
}

/// Runs `gepa-lab ARGS` in `dir`, killing it past [`LIMIT`].
fn gepa_lab_in(dir: &Path, args: &[&str]) -> Result<Output, TestCaseError> {
    let mut child = crate::common::command()
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| TestCaseError::fail(format!("spawn: {err}")))?;
    let started = Instant::now();
    // Drain the pipes on threads, so that a chatty command cannot block on a full pipe.
    let stdout = child.stdout.take().map(drain);
    let stderr = child.stderr.take().map(drain);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestCaseError::fail(format!(
                "`gepa-lab {}` was still running after {LIMIT:?}",
                args.join(" ")
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let join = |pipe: Option<std::thread::JoinHandle<Vec<u8>>>| {
        pipe.map(|h| h.join().unwrap_or_default())
            .unwrap_or_default()
    };
    Ok(Output {
        status,
        stdout: join(stdout),
        stderr: join(stderr),
    })
}

fn drain(mut pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        bytes
    })
}

/// Words that say where in a file a problem is, or that it is about the file as a whole (a run
/// table that holds no answer has no line to point at).
const LOCATORS: &[&str] = &[
    "line", "row", "record", "field", "column", "byte", "key", "header", "holds no", "is empty",
];

/// The command ended on its own (no panic, no signal); when it failed, what it printed names
/// `file` and a place in it (validate prints its diagnostics on stdout). `what` describes the
/// case for the failure message.
fn check(output: &Output, file: &str, what: &str) -> Result<(), TestCaseError> {
    let stderr = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let Some(code) = output.status.code() else {
        return Err(TestCaseError::fail(format!(
            "{what}: killed by a signal ({:?}): {stderr}",
            output.status
        )));
    };
    prop_assert_ne!(code, 101, "{}: a panic: {}", what, stderr);
    if code != 0 {
        let mentions_file = stderr.contains(file);
        // `file:12:3:` as validate prints it, or a word naming the place.
        let located = LOCATORS.iter().any(|word| stderr.contains(word))
            || regex::Regex::new(&format!(r"{}:\d+", regex::escape(file)))
                .expect("regex")
                .is_match(&stderr);
        prop_assert!(
            mentions_file && located,
            "{}: exit {} without naming {} and a place in it: {}",
            what,
            code,
            file,
            stderr
        );
    }
    Ok(())
}

/// A folder with the valid experiment of the fixtures and its dataset, ready to be damaged.
fn experiment_folder() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir(dir.path().join("data")).expect("data folder");
    let fixtures = root().join("tests/fixtures");
    std::fs::copy(fixtures.join("valid.toml"), dir.path().join("fuzz.toml")).expect("copy");
    std::fs::copy(
        fixtures.join("data/tiny.csv"),
        dir.path().join("data/tiny.csv"),
    )
    .expect("copy");
    dir
}

/// `validate`, then `plan` when the file passed, on the experiment in `dir`.
fn validate_and_plan(dir: &Path, file: &str, what: &str) -> Result<(), TestCaseError> {
    let output = gepa_lab_in(dir, &["validate", "fuzz.toml"])?;
    check(&output, file, what)?;
    if output.status.success() {
        check(&gepa_lab_in(dir, &["plan", "fuzz.toml"])?, file, what)?;
    }
    Ok(())
}

#[test]
fn damaged_experiment_files_get_errors_that_name_the_line() {
    let valid = std::fs::read(root().join("tests/fixtures/valid.toml")).expect("fixture");
    runner(96)
        .run(&mutations(), |mutations| {
            let dir = experiment_folder();
            std::fs::write(dir.path().join("fuzz.toml"), mutate(&valid, &mutations))
                .expect("write");
            validate_and_plan(dir.path(), "fuzz.toml", "experiment file")
        })
        .unwrap();
}

#[test]
fn damaged_datasets_get_errors_that_name_the_row() {
    let valid = std::fs::read(root().join("tests/fixtures/data/tiny.csv")).expect("fixture");
    runner(64)
        .run(&mutations(), |mutations| {
            let dir = experiment_folder();
            std::fs::write(dir.path().join("data/tiny.csv"), mutate(&valid, &mutations))
                .expect("write");
            validate_and_plan(dir.path(), "tiny.csv", "dataset")
        })
        .unwrap();
}

/// The files of a run directory a reader parses.
const RUN_FILES: &[&str] = &["run.json", "history.csv", "replay.csv", "events.jsonl"];

#[test]
fn damaged_run_directories_get_errors_that_name_the_file() {
    let fixture = root().join("tests/fixtures/run");
    runner(64)
        .run(&(0..RUN_FILES.len(), mutations()), |(which, mutations)| {
            let dir = tempfile::tempdir().expect("temp dir");
            let run = dir.path().join("run");
            std::fs::create_dir(&run).expect("run folder");
            for file in RUN_FILES {
                std::fs::copy(fixture.join(file), run.join(file)).expect("copy");
            }
            let file = RUN_FILES[which];
            let valid = std::fs::read(fixture.join(file)).expect("fixture");
            std::fs::write(run.join(file), mutate(&valid, &mutations)).expect("write");
            // Its plan names the experiment by a path relative to the repository.
            let what = format!("run directory, {file}");
            let run = run.to_str().expect("UTF-8 path");
            let fixture = fixture.to_str().expect("UTF-8 path");
            check(&gepa_lab_in(&root(), &["report", run])?, file, &what)?;
            let out = dir.path().join("compare");
            let out = out.to_str().expect("UTF-8 path");
            check(
                &gepa_lab_in(&root(), &["compare", run, fixture, "--out", out])?,
                file,
                &what,
            )
        })
        .unwrap();
}
