//! JUnit XML of a comparison of prompt files, for a CI job's test panel: one test suite per
//! prompt, one test case per dataset row. A case fails when its score is below the pass score
//! or it has no answer; the failure text holds the answer, the expected output and the feedback
//! (or the error), so a reader sees why without opening the run folder.
use std::fmt::Write;

use crate::prompt::PromptFile;
use crate::store::ReplayRow;

/// The JUnit XML document of `rows` (the `replay.csv` rows of a comparison), suites in the order
/// of `prompts`.
pub fn junit(prompts: &[PromptFile], rows: &[ReplayRow], pass_score: f64) -> String {
    let mut out = String::from(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"gepa-lab compare\">\n",
    );
    for prompt in prompts {
        let mut own: Vec<&ReplayRow> = rows.iter().filter(|r| r.version == prompt.file).collect();
        own.sort_by_key(|r| r.row);
        let failures = own.iter().filter(|r| !passed(r, pass_score)).count();
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{failures}\" errors=\"0\">",
            escape(&prompt.file),
            own.len()
        );
        for row in own {
            let _ = write!(
                out,
                "    <testcase classname=\"{}\" name=\"row {}\" time=\"{:.3}\"",
                escape(&prompt.file),
                row.row,
                row.latency_ms as f64 / 1000.0
            );
            if passed(row, pass_score) {
                out.push_str("/>\n");
                continue;
            }
            let (message, text) = if row.error.is_empty() {
                (
                    format!("score {} is below {pass_score}", row.score),
                    format!(
                        "answer: {}\nexpected: {}\nfeedback: {}",
                        row.output, row.expected, row.feedback
                    ),
                )
            } else {
                (
                    "no answer".to_owned(),
                    format!("error: {}\nexpected: {}", row.error, row.expected),
                )
            };
            let _ = write!(
                out,
                ">\n      <failure message=\"{}\">{}</failure>\n    </testcase>\n",
                escape(&message),
                escape(&text)
            );
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

fn passed(row: &ReplayRow, pass_score: f64) -> bool {
    row.error.is_empty() && row.score >= pass_score
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

    fn row(prompt: &str, row: usize, score: f64, error: &str) -> ReplayRow {
        ReplayRow {
            variant: String::new(),
            version: prompt.into(),
            model: "m".into(),
            answered_by: "m".into(),
            row,
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
    fn each_row_is_a_case_that_fails_below_the_pass_score_with_the_reason() {
        let rows = [
            row("b.txt", 2, 0.0, ""),
            row("a.txt", 1, 1.0, ""),
            row("b.txt", 1, 1.0, ""),
            row("b.txt", 3, 0.0, "503 no node"),
            row("a.txt", 2, 0.5, ""),
        ];
        let xml = junit(&[prompt("a.txt"), prompt("b.txt")], &rows, 1.0);
        assert!(xml.contains("<testsuite name=\"a.txt\" tests=\"2\" failures=\"1\" errors=\"0\">"));
        assert!(xml.contains("<testsuite name=\"b.txt\" tests=\"3\" failures=\"2\" errors=\"0\">"));
        assert!(xml.contains("<testcase classname=\"a.txt\" name=\"row 1\" time=\"1.500\"/>"));
        assert!(
            xml.contains("<failure message=\"score 0.5 is below 1\">"),
            "{xml}"
        );
        assert!(
            xml.contains("answer: &lt;b&gt;negative&lt;/b&gt; &amp; \u{FFFD} &quot;x&quot;\nexpected: positive\nfeedback: expected positive"),
            "{xml}"
        );
        assert!(xml.contains("<failure message=\"no answer\">error: 503 no node"));
        // Suites keep the prompts' order; cases go by row.
        let b = xml.find("name=\"b.txt\" tests").unwrap();
        assert!(xml.find("name=\"a.txt\" tests").unwrap() < b);
        assert!(xml[b..].find("row 1").unwrap() < xml[b..].find("row 2").unwrap());
        // A lower pass score passes the half-right answer.
        let lenient = junit(&[prompt("a.txt")], &rows, 0.5);
        assert!(lenient.contains("tests=\"2\" failures=\"0\""));
    }
}
