//! The summary a terminal shows after `report` or `run`: a warning line for simulated runs, the
//! headline sentence, and one aligned table of seed-against-best comparisons. Plain text, no
//! colour codes, so it reads the same in a CI log.
use super::context::ReportContext;
use super::format::number;

/// Columns padded to their widest cell; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        let mut out = String::new();
        for (i, (cell, width)) in cells.iter().zip(&widths).enumerate() {
            out.push_str(cell);
            if i < last {
                out.push_str(&" ".repeat(width - cell.chars().count() + 2));
            }
        }
        out.trim_end().to_owned()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

pub fn summary(context: &ReportContext) -> String {
    let mut out = String::new();
    if context.simulated {
        out.push_str(
            "SIMULATED RUN: every answer came from the test stand-in model, not a real model.\n",
        );
    }
    out.push_str(&format!(
        "{} (run {})\n",
        context.experiment.name, context.experiment.run_id
    ));
    match &context.headline {
        Some(headline) => out.push_str(&format!("{}\n\n", headline.sentence)),
        None => {
            if context.seed_is_best {
                out.push_str(&format!(
                    "The seed is the best version: {}",
                    context.seed_is_best_because
                ));
            } else {
                out.push_str("No comparison of the seed with an evolved prompt is possible");
            }
            match &context.best {
                Some(seed) => out.push_str(&format!(
                    "; the seed ({}) scored {} on the holdout rows of {}.\n\n",
                    seed.execution,
                    number(seed.mean, 3),
                    seed.model
                )),
                None => out.push_str(".\n\n"),
            }
        }
    }
    let rows: Vec<Vec<String>> = context
        .comparisons
        .iter()
        .map(|c| {
            vec![
                c.execution.clone(),
                c.model.clone(),
                c.b.clone(),
                c.rows.to_string(),
                number(Some(c.mean_a), 3),
                number(Some(c.mean_b), 3),
                c.difference_text(),
                c.p_text.clone(),
                c.verdict_text.clone(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        out.push_str(&table(
            &[
                "execution",
                "model",
                "best version",
                "rows",
                "seed",
                "best",
                "difference (95% CI)",
                "p",
                "verdict",
            ],
            &rows,
        ));
    }
    for execution in &context.executions {
        if let Some(baseline) = &execution.baseline {
            out.push_str(&format!(
                "majority baseline, {}: {}\n",
                execution.label, baseline.sentence
            ));
        }
    }
    for note in &context.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up() {
        let text = table(
            &["a", "bb"],
            &[
                vec!["long cell".into(), "x".into()],
                vec!["y".into(), "z".into()],
            ],
        );
        assert_eq!(text, "a          bb\nlong cell  x\ny          z\n");
    }
}
