//! `gepa-lab init --dataset CSV`: a first experiment that validates as written, for the
//! project's datasets and for a file with an id column and free-text answers; and its refusals.
use std::path::Path;
use std::process::Output;

use crate::common::root;

/// `init` without its model probe: with two embedded models installed it would ask both the
/// seed on 20 rows (a minute or more); these tests are about the file it writes.
fn gepa_lab(cwd: &Path, args: &[&str]) -> Output {
    let args: Vec<&str> = match args {
        ["init", rest @ ..] => ["init", "--no-probe"].iter().chain(rest).copied().collect(),
        _ => args.to_vec(),
    };
    crate::common::command()
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("the gepa-lab binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn init_writes_an_experiment_that_validates_for_each_dataset() {
    let temp = tempfile::tempdir().unwrap();
    // A classification's split is stratified by its labels; an extraction's answers are not labels.
    for (dataset, expected, scorer, stratified) in [
        ("sentiment", "label", "exact_match_ci", true),
        ("support_tickets", "queue", "exact_match_ci", true),
        ("extraction", "expected_json", "json_match", false),
    ] {
        let csv = root().join(format!("datasets/{dataset}.csv"));
        let out = temp.path().join(format!("experiments/{dataset}.toml"));
        let output = gepa_lab(
            temp.path(),
            &[
                "init",
                "--dataset",
                csv.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert!(output.status.success(), "{}", text(&output.stderr));
        assert!(text(&output.stdout).contains("It validates"));
        let toml = std::fs::read_to_string(&out).unwrap();
        assert!(
            toml.contains(&format!("expected = \"{expected}\"")),
            "{toml}"
        );
        assert!(toml.contains(&format!("scorer = \"{scorer}\"")), "{toml}");
        assert_eq!(toml.contains("\nstratify = true\n"), stratified, "{toml}");
        // No warning either: `validate` prints nothing but its summary.
        let validate = gepa_lab(temp.path(), &["validate", out.to_str().unwrap()]);
        assert!(validate.status.success(), "{}", text(&validate.stderr));
        assert!(
            !text(&validate.stderr).contains("warning"),
            "{}",
            text(&validate.stderr)
        );
    }
    let tickets =
        std::fs::read_to_string(temp.path().join("experiments/support_tickets.toml")).unwrap();
    assert!(
        tickets.contains("Subject: {subject}\nBody: {body}\nAnswer with exactly one of: account, billing, feedback, shipping, technical."),
        "{tickets}"
    );
}

#[test]
fn init_guesses_the_columns_leaves_ids_out_and_refuses_what_it_cannot_do() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let mut csv = String::from("ticket_id,question,context,answer\n");
    for i in 0..30 {
        csv.push_str(&format!("{i},What is item {i}?,\"Item {i} is a \"\"thing\"\", number {i}.\",A thing numbered {i}\n"));
    }
    std::fs::write(dir.join("qa.csv"), csv).unwrap();
    let output = gepa_lab(dir, &["init", "--dataset", "qa.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains("expected answer; left out ticket_id (an id))"),
        "{}",
        text(&output.stdout)
    );
    let toml = std::fs::read_to_string(dir.join("qa.toml")).unwrap();
    assert!(
        toml.contains("inputs = [\"question\", \"context\"]"),
        "{toml}"
    );
    assert!(
        toml.contains("# Left out of the inputs (they look like ids): ticket_id."),
        "{toml}"
    );
    assert!(
        toml.contains("expected = \"answer\"") && toml.contains("scorer = \"f1\""),
        "{toml}"
    );
    assert!(
        toml.contains("file = \"qa.csv\""),
        "relative to the experiment file: {toml}"
    );

    assert!(
        !text(&output.stderr).contains("no column is named like the expected answer"),
        "{}",
        text(&output.stderr)
    );

    // MSR paraphrase's header: the label first, two ids, and no column named like an answer.
    let mut csv = String::from("Quality,#1 ID,#2 ID,#1 String,#2 String\n");
    for i in 0..30 {
        csv.push_str(&format!(
            "{},{i}1,{i}2,Words {i} here,Other words {i}\n",
            i % 2
        ));
    }
    std::fs::write(dir.join("msr.csv"), csv).unwrap();
    let output = gepa_lab(dir, &["init", "--dataset", "msr.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stdout).contains(
            "inputs Quality, #1 String; expected #2 String; left out #1 ID (an id), #2 ID (an id))"
        ),
        "{}",
        text(&output.stdout)
    );
    assert!(
        text(&output.stderr).contains(
            "the last one, \"#2 String\", is taken as it; if the answer is in another column, \
             run init again with `--expected COLUMN`"
        ),
        "{}",
        text(&output.stderr)
    );
    let named = gepa_lab(
        dir,
        &[
            "init",
            "--dataset",
            "msr.csv",
            "--expected",
            "Quality",
            "--out",
            "q.toml",
        ],
    );
    assert!(named.status.success(), "{}", text(&named.stderr));
    assert!(
        !text(&named.stderr).contains("no column is named like"),
        "{}",
        text(&named.stderr)
    );

    // An existing file is kept unless --force.
    let again = gepa_lab(dir, &["init", "--dataset", "qa.csv"]);
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("qa.toml exists; pass --force"));
    assert!(
        gepa_lab(dir, &["init", "--dataset", "qa.csv", "--force"])
            .status
            .success()
    );

    // A named expected column that is not there; a file too short to split.
    let wrong = gepa_lab(
        dir,
        &[
            "init",
            "--dataset",
            "qa.csv",
            "--expected",
            "anwser",
            "--out",
            "x.toml",
        ],
    );
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        text(&wrong.stderr).contains(
            "--expected \"anwser\" is not a column (columns: ticket_id, question, context, answer)"
        ),
        "{}",
        text(&wrong.stderr)
    );
    std::fs::write(dir.join("tiny.csv"), "q,a\n1,2\n3,4\n").unwrap();
    let tiny = gepa_lab(dir, &["init", "--dataset", "tiny.csv"]);
    assert_eq!(tiny.status.code(), Some(1));
    assert!(
        text(&tiny.stderr).contains("tiny.csv: 2 data rows; an experiment needs at least 6"),
        "{}",
        text(&tiny.stderr)
    );
    assert!(!dir.join("tiny.toml").exists(), "nothing written");
    // A quote left open takes the rest of the file into one field of row 2: named as the
    // validator names it, with the line and the likely cause.
    std::fs::write(dir.join("open.csv"), "q,a\n1,2\n\"3,4\n5,6\n7,8\n").unwrap();
    let open = gepa_lab(dir, &["init", "--dataset", "open.csv"]);
    assert_eq!(open.status.code(), Some(1));
    assert!(
        text(&open.stderr).contains(
            "open.csv: row 2 (line 3) has 1 field but the header has 2; its quoted text runs \
             over 4 lines: is a quote (\") left open?"
        ),
        "{}",
        text(&open.stderr)
    );
    assert!(!dir.join("open.toml").exists(), "nothing written");
    // The same file with Windows line ends names the same row at the same line.
    std::fs::write(
        dir.join("open_crlf.csv"),
        "q,a\r\n1,2\r\n\"3,4\r\n5,6\r\n7,8\r\n",
    )
    .unwrap();
    let crlf = gepa_lab(dir, &["init", "--dataset", "open_crlf.csv"]);
    assert!(
        text(&crlf.stderr).contains("open_crlf.csv: row 2 (line 3) has 1 field"),
        "{}",
        text(&crlf.stderr)
    );
    let missing = gepa_lab(dir, &["init", "--dataset", "nope.csv"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(
        text(&missing.stderr).contains("nope.csv"),
        "{}",
        text(&missing.stderr)
    );
}

#[test]
fn init_asks_on_the_terminal_what_numeric_labels_stand_for() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let mut numbers = String::from("comment,class\n");
    let mut words = String::from("comment,class\n");
    for i in 0..40 {
        numbers.push_str(&format!("comment number {i},{}\n", i % 2));
        words.push_str(&format!("comment number {i},{}\n", ["ham", "spam"][i % 2]));
    }
    std::fs::write(dir.join("numbers.csv"), numbers).unwrap();
    std::fs::write(dir.join("words.csv"), words).unwrap();
    let output = gepa_lab(dir, &["init", "--dataset", "numbers.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        text(&output.stderr).contains("note: the labels are numbers (0, 1): before `run`, say in the seed what each stands for"),
        "{}",
        text(&output.stderr)
    );
    let output = gepa_lab(dir, &["init", "--dataset", "words.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        !text(&output.stderr).contains("labels are numbers"),
        "{}",
        text(&output.stderr)
    );
}

/// An intent dataset has tens of labels: `init` lists them all in the seed and scores by exact
/// match, as for a few. Until the limit was 200 (it was 12), a file of 77 labels was written as
/// free text with a seed that did not name them, and the models answered words of their own.
#[test]
fn init_lists_the_labels_of_a_classification_with_many() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let intents: Vec<String> = (0..77).map(|i| format!("intent_{i:02}")).collect();
    let mut csv = String::from("text,category\n");
    for round in 0..3 {
        for intent in &intents {
            csv.push_str(&format!(
                "a message of kind {intent} number {round},{intent}\n"
            ));
        }
    }
    std::fs::write(dir.join("intents.csv"), csv).unwrap();
    let output = gepa_lab(dir, &["init", "--dataset", "intents.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let toml = std::fs::read_to_string(dir.join("intents.toml")).unwrap();
    // Above the input, in the form of the engine's layout child, under the line naming the
    // answer by its column.
    let seed = format!(
        "seed = \"\"\"Give the category of this text.\n\
         Answer with exactly one of: {}. Give only the answer.\nText: {{text}}\n\
         Answer with the label only.\"\"\"",
        intents.join(", ")
    );
    assert!(toml.contains(&seed), "{toml}");
    assert!(
        toml.contains("# A list this long stands above the input"),
        "{toml}"
    );
    assert!(toml.contains("scorer = \"exact_match_ci\""), "{toml}");
    assert!(
        toml.contains("has 77 distinct values, so this is a classification"),
        "{toml}"
    );

    // The same labels each on one row are short answers, not labels: free text.
    let mut once = String::from("text,category\n");
    for intent in &intents {
        once.push_str(&format!("a message of kind {intent},{intent}\n"));
    }
    std::fs::write(dir.join("once.csv"), once).unwrap();
    let output = gepa_lab(dir, &["init", "--dataset", "once.csv"]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let toml = std::fs::read_to_string(dir.join("once.toml")).unwrap();
    assert!(toml.contains("scorer = \"f1\""), "{toml}");
}
