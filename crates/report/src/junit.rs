//! JUnit XML of a comparison of prompt files, for a CI job's test panel: one test suite per
//! prompt, one test case per dataset row. A case fails when its score is below the pass score
//! or it has no answer; the failure text holds the answer, the expected output and the feedback
//! (or the error), so a reader sees why without opening the run folder. A row answered several
//! times (`--repeat`) is still one case: its score is the mean of its answered samples, and the
//! failure text lists every answer.
//!
//! A last suite, `comparisons`, holds one case per prompt against the first: it fails when the
//! prompt is significantly worse, on the same verdict (Holm-adjusted beside other prompts) as
//! `--fail-if-worse`, and its text is the comparison's sentence, which says how it was tested.
use std::fmt::Write;

use std::path::Path;

use super::ReportError;
use super::answers::RowAnswers;
use super::answers::{ReplayTable, Texts};
use super::context::ComparisonView;
use super::stats::Verdict;
use gepa_lab_prompt::PromptFile;
use gepa_lab_store::{REPLAY_FILE, ReplayOf, ReplayRow};

/// The JUnit XML document of `rows` (the `replay.csv` rows of a comparison, on one model),
/// suites in the order of `prompts`, then the suite of `comparisons`. Refuses rows that answer
/// one row's sample of a prompt twice.
pub fn junit(
    prompts: &[PromptFile],
    rows: &[ReplayRow],
    pass_score: f64,
    comparisons: &[ComparisonView],
) -> Result<String, ReportError> {
    let table = ReplayTable::of(rows).map_err(|err| err.at(Path::new(REPLAY_FILE)))?;
    let texts = Texts::All(rows);
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"gepa-lab compare\">\n",
    );
    for prompt in prompts {
        let of = ReplayOf::PromptFile(prompt.file.clone());
        // A comparison asks one model: the prompt's rows are those of the model its rows name.
        let own: Vec<(usize, RowAnswers)> = rows
            .iter()
            .find(|r| r.version == of)
            .and_then(|r| table.rows(&r.variant, &of, &r.model))
            .map(|rows| rows.iter().collect())
            .unwrap_or_default();
        let passed = |answers: &RowAnswers| answers.score().is_some_and(|s| s >= pass_score);
        let failures = own.iter().filter(|(_, a)| !passed(a)).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\">",
            escape(&prompt.file),
            own.len()
        );
        for (row, answers) in &own {
            let seconds: u64 = answers
                .samples()
                .filter_map(|(record, _)| texts.get(record))
                .map(|r| r.latency_ms)
                .sum();
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"row {row}\" time=\"{:.3}\"",
                escape(&prompt.file),
                seconds as f64 / 1000.0
            );
            if passed(answers) {
                out.push_str("/>\n");
                continue;
            }
            let (message, text) = failure(answers, &texts, pass_score);
            let _ = write!(
                out,
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                escape(&message),
                escape(&text)
            );
        }
        out.push_str("  </testsuite>\n");
    }
    comparison_suite(&mut out, comparisons);
    out.push_str("</testsuites>\n");
    table.check()?;
    Ok(out)
}

/// The failure of a row's case: its message (the score against the pass score, or no answer)
/// and text (each answer with its feedback, or its error, then the expected output).
fn failure(answers: &RowAnswers, texts: &Texts<'_>, pass_score: f64) -> (String, String) {
    let expected = answers.shown_row(texts).map_or("", |r| r.expected.as_str());
    let each: Vec<String> = answers
        .samples()
        .filter_map(|(record, _)| texts.get(record))
        .map(|r| {
            let sample = if answers.asked() > 1 {
                format!(" {}", r.sample)
            } else {
                String::new()
            };
            if r.error.is_empty() {
                format!(
                    "answer{sample}: {}\nfeedback{sample}: {}",
                    r.output, r.feedback
                )
            } else {
                format!("error{sample}: {}", r.error)
            }
        })
        .collect();
    let text = format!("{}\nexpected: {expected}", each.join("\n"));
    let message = match answers.score() {
        Some(score) if answers.asked() > 1 => format!(
            "mean score {score:.3} of {} answers is below {pass_score}",
            answers.asked()
        ),
        Some(score) => format!("score {score} is below {pass_score}"),
        None => "no answer".to_owned(),
    };
    (message, text)
}

/// The suite of comparisons: one case per prompt against the first, failed when it is
/// significantly worse. Nothing when there is no comparison.
fn comparison_suite(out: &mut String, comparisons: &[ComparisonView]) {
    if comparisons.is_empty() {
        return;
    }
    let worse = comparisons
        .iter()
        .filter(|c| c.verdict == Verdict::Worse)
        .count();
    let _ = writeln!(
        out,
        "  <testsuite name=\"comparisons\" tests=\"{}\" failures=\"{worse}\" errors=\"0\">",
        comparisons.len()
    );
    for c in comparisons {
        let _ = write!(
            out,
            "    <testcase classname=\"comparisons\" name=\"{} against {}\"",
            escape(&c.b),
            escape(&c.a)
        );
        if c.verdict == Verdict::Worse {
            let _ = writeln!(
                out,
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>",
                escape(c.verdict.text()),
                escape(&c.sentence)
            );
        } else {
            let _ = writeln!(
                out,
                ">\n      <system-out>{}</system-out>\n    </testcase>",
                escape(&c.sentence)
            );
        }
    }
    out.push_str("  </testsuite>\n");
}

/// Text as XML character data or an attribute value. Characters XML 1.0 cannot hold at all
/// (most control characters) become U+FFFD, so a model's stray byte never breaks the document.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if c < ' ' || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gepa_lab_store::ReplayOf;

    fn row(prompt: &str, row: usize, score: f64, error: &str) -> ReplayRow {
        ReplayRow {
            variant: String::new(),
            version: ReplayOf::PromptFile(prompt.into()),
            model: "m".into(),
            answered_by: "m".into(),
            row,
            sample: 1,
            inputs: Default::default(),
            expected: "positive".into(),
            output: "<b>negative</b> & \u{1} \"x\"".into(),
            score,
            feedback: "expected positive".into(),
            latency_ms: 1500,
            waited_ms: Some(0),
            prompt_tokens: 1,
            completion_tokens: 1,
            node_id: String::new(),
            error: error.into(),
        }
    }

    fn prompt(file: &str) -> PromptFile {
        PromptFile {
            file: file.into(),
            text: "{review}".into(),
        }
    }

    #[test]
    fn three_prompts_are_one_family_and_the_comparisons_suite_reads_the_adjusted_verdict() {
        // b.txt loses 8 rows to a.txt and wins 1 (exact McNemar p = 0.039: worse, tested
        // alone); c.txt loses 6 and wins 1 (p = 0.125). Two prompts against one reference are
        // two tests: Holm doubles the smaller p to 0.078, so neither is called worse.
        let score = |prompt: &str, row: usize| match prompt {
            "a.txt" => f64::from(row != 39),
            "b.txt" => f64::from(row >= 8),
            _ => f64::from(!(10..16).contains(&row)),
        };
        let rows: Vec<ReplayRow> = ["a.txt", "b.txt", "c.txt"]
            .into_iter()
            .flat_map(|p| (0..40).map(move |r| row(p, r, score(p, r), "")))
            .collect();
        let prompts = [prompt("a.txt"), prompt("b.txt"), prompt("c.txt")];
        let setting = || super::super::PromptSetting {
            dataset_file: "data.csv".into(),
            dataset_sha256: "0".repeat(64),
            model: "m".into(),
            settings: Vec::new(),
            simulated: false,
        };
        let report = super::super::compare_prompts(setting(), &prompts, &rows).unwrap();
        let [b, c] = &report.comparisons[..] else {
            panic!("{:?}", report.comparisons);
        };
        assert_eq!(
            (b.b.as_str(), b.only_a, b.only_b),
            ("b.txt", Some(8), Some(1))
        );
        assert_eq!(b.verdict, Verdict::NotSignificant, "{}", b.sentence);
        assert_eq!(c.verdict, Verdict::NotSignificant, "{}", c.sentence);
        assert_eq!(b.p_text, "0.039 (Holm, 2 comparisons: 0.078)");
        assert!(
            b.sentence
                .contains("exact McNemar p = 0.039 (1 rows only b.txt got right, 8 only a.txt), Holm-adjusted for the 2 comparisons made together p = 0.078: not significant."),
            "{}",
            b.sentence
        );
        let xml = junit(&prompts, &rows, 1.0, &report.comparisons).unwrap();
        assert!(
            xml.contains("<testsuite name=\"comparisons\" tests=\"2\" failures=\"0\""),
            "{xml}"
        );
        assert!(xml.contains("Holm-adjusted for the 2 comparisons"), "{xml}");

        // Alone, b.txt is worse, and its case fails.
        let report = super::super::compare_prompts(setting(), &prompts[..2], &rows).unwrap();
        assert_eq!(report.comparisons[0].verdict, Verdict::Worse);
        let xml = junit(&prompts[..2], &rows, 1.0, &report.comparisons).unwrap();
        assert!(
            xml.contains("<testsuite name=\"comparisons\" tests=\"1\" failures=\"1\"")
                && xml.contains("<failure message=\"worse (significant)\">"),
            "{xml}"
        );
    }

    #[test]
    fn each_row_is_a_case_that_fails_below_the_pass_score_with_the_reason() {
        let rows = [
            row("b.txt", 2, 0.0, ""),
            row("a.txt", 1, 1.0, ""),
            row("b.txt", 1, 1.0, ""),
            row("b.txt", 3, 0.0, "503 no node"),
            row("a.txt", 2, 0.5, ""),
        ];
        let xml = junit(&[prompt("a.txt"), prompt("b.txt")], &rows, 1.0, &[]).unwrap();
        assert!(xml.contains("<testsuite name=\"a.txt\" tests=\"2\" failures=\"1\" errors=\"0\">"));
        assert!(xml.contains("<testsuite name=\"b.txt\" tests=\"3\" failures=\"2\" errors=\"0\">"));
        assert!(xml.contains("<testcase classname=\"a.txt\" name=\"row 1\" time=\"1.500\"/>"));
        assert!(
            xml.contains("<failure message=\"score 0.5 is below 1\">"),
            "{xml}"
        );
        assert!(
            xml.contains("answer: &lt;b&gt;negative&lt;/b&gt; &amp; \u{FFFD} &quot;x&quot;\nfeedback: expected positive\nexpected: positive"),
            "{xml}"
        );
        assert!(xml.contains("<failure message=\"no answer\">error: 503 no node"));
        // Suites keep the prompts' order; cases go by row.
        let b = xml.find("name=\"b.txt\" tests").unwrap();
        assert!(xml.find("name=\"a.txt\" tests").unwrap() < b);
        assert!(xml[b..].find("row 1").unwrap() < xml[b..].find("row 2").unwrap());
        // A lower pass score passes the half-right answer.
        let lenient = junit(&[prompt("a.txt")], &rows, 0.5, &[]).unwrap();
        assert!(lenient.contains("tests=\"2\" failures=\"0\""));
    }

    #[test]
    fn a_row_answered_several_times_is_one_case_scored_by_its_mean() {
        let sample = |row_number: usize, sample: u32, score: f64, error: &str| ReplayRow {
            sample,
            ..row("a.txt", row_number, score, error)
        };
        let rows = [
            sample(1, 1, 1.0, ""),
            sample(1, 2, 1.0, ""),
            sample(1, 3, 0.0, ""),
            sample(2, 1, 1.0, ""),
            sample(2, 2, 0.0, "timed out"),
        ];
        let xml = junit(&[prompt("a.txt")], &rows, 0.6, &[]).unwrap();
        // Row 1: mean 2/3 passes 0.6; row 2: its one answer, 1.0, passes.
        assert!(xml.contains("tests=\"2\" failures=\"0\""), "{xml}");
        let xml = junit(&[prompt("a.txt")], &rows, 1.0, &[]).unwrap();
        assert!(xml.contains("tests=\"2\" failures=\"1\""), "{xml}");
        assert!(
            xml.contains(
                "<failure message=\"mean score 0.667 of 3 answers is below 1\">answer 1: "
            ),
            "{xml}"
        );
        assert!(xml.contains("feedback 3: expected positive\nexpected: positive"));
        // Time is every sample's latency.
        assert!(xml.contains("name=\"row 1\" time=\"4.500\""));
    }
}
