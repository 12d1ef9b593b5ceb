//! Repeated answers (`[replay] repeat`, `compare --repeat`): one row answered several times by
//! the same prompt on the same model. The row, not the answer, is the unit of every statistic:
//! a row's score is the mean of its answered samples, so a row weighs the same however many of
//! its answers arrived, and intervals and paired tests count rows (a cluster-by-row analysis:
//! the answers to one row are not independent of each other). How often a row's answers agree
//! is reported beside the scores. With one answer per row all of this reduces to that answer.
use std::collections::BTreeMap;

use serde::Serialize;

use crate::store::ReplayRow;

/// The answers one version gave to one row on one model, in sample order.
#[derive(Debug, Clone)]
pub struct RowAnswers<'a> {
    samples: Vec<&'a ReplayRow>,
}

impl<'a> RowAnswers<'a> {
    /// Answered samples: those without an error.
    pub fn answered(&self) -> impl Iterator<Item = &'a ReplayRow> + '_ {
        self.samples.iter().copied().filter(|r| r.error.is_empty())
    }

    /// The row's score: the mean of its answered samples; none when every one failed.
    pub fn score(&self) -> Option<f64> {
        let scores: Vec<f64> = self.answered().map(|r| r.score).collect();
        (!scores.is_empty()).then(|| scores.iter().sum::<f64>() / scores.len() as f64)
    }

    /// The sample whose inputs, expected output, model and error a table shows: the first
    /// answered one, else the first.
    pub fn shown(&self) -> &'a ReplayRow {
        self.answered().next().unwrap_or(self.samples[0])
    }

    /// The answer a table shows: the row's one answer, or with repeats its most common one
    /// (ties to the one given first), since the score beside it is the mean of all of them.
    pub fn output(&self) -> &'a str {
        if self.samples.len() < 2 {
            return &self.shown().output;
        }
        self.distinct()
            .first()
            .map_or(&self.shown().output, |(answer, _)| answer)
    }

    /// The scorer's feedback on the row's one answer; empty with repeats, where each answer
    /// has its own and the summary lists them.
    pub fn feedback(&self) -> &'a str {
        if self.samples.len() < 2 {
            &self.shown().feedback
        } else {
            ""
        }
    }

    /// Samples asked for this row.
    pub fn asked(&self) -> usize {
        self.samples.len()
    }

    /// Every sample, answered or not, in sample order.
    pub fn samples(&self) -> &[&'a ReplayRow] {
        &self.samples
    }

    /// The share of answered samples that gave the most common answer (answers compared after
    /// trimming white space); none with fewer than two answered samples.
    pub fn agreement(&self) -> Option<f64> {
        let answers = self.distinct();
        let total: usize = answers.iter().map(|(_, n)| n).sum();
        (total >= 2).then(|| answers[0].1 as f64 / total as f64)
    }

    /// Whether every answered sample got the same score; none with fewer than two answered.
    /// Answers that differ only where the scorer does not look (case, say) agree here.
    pub fn same_score(&self) -> Option<bool> {
        let mut scores = self.answered().map(|r| r.score);
        let first = scores.next()?;
        let mut count = 1;
        let mut same = true;
        for score in scores {
            count += 1;
            same &= score == first;
        }
        (count >= 2).then_some(same)
    }

    /// Each distinct answer and how many samples gave it, most common first (ties by first
    /// seen).
    fn distinct(&self) -> Vec<(&'a str, usize)> {
        let mut counts: Vec<(&'a str, usize)> = Vec::new();
        for row in self.answered() {
            let answer = row.output.trim();
            match counts.iter_mut().find(|(seen, _)| *seen == answer) {
                Some((_, n)) => *n += 1,
                None => counts.push((answer, 1)),
            }
        }
        // Stable: equal counts keep the order they were first seen in.
        counts.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        counts
    }

    /// One line on the repeats of this row, for the row tables: how many answers, which ones,
    /// how many failed. None for a row answered once.
    pub fn summary(&self) -> Option<String> {
        if self.samples.len() < 2 {
            return None;
        }
        const SHOWN: usize = 3;
        const LONGEST: usize = 40;
        let answers = self.distinct();
        let answered: usize = answers.iter().map(|(_, n)| n).sum();
        let mut text = format!(
            "{answered} of {} answers: {} distinct",
            self.samples.len(),
            answers.len()
        );
        if !answers.is_empty() {
            let each: Vec<String> = answers
                .iter()
                .take(SHOWN)
                .map(|(answer, n)| {
                    let short: String = answer.chars().take(LONGEST).collect();
                    let cut = if short.len() < answer.len() {
                        "…"
                    } else {
                        ""
                    };
                    format!("\u{201c}{short}{cut}\u{201d} ×{n}")
                })
                .collect();
            text.push_str(&format!(" ({}", each.join(", ")));
            if answers.len() > SHOWN {
                text.push_str(&format!(", {} more", answers.len() - SHOWN));
            }
            text.push(')');
        }
        Some(text)
    }
}

/// The answers of one version on one model, grouped by row (in row order, samples in sample
/// order).
pub fn by_row<'a>(
    rows: impl IntoIterator<Item = &'a ReplayRow>,
) -> BTreeMap<usize, RowAnswers<'a>> {
    let mut grouped: BTreeMap<usize, RowAnswers<'a>> = BTreeMap::new();
    for row in rows {
        grouped
            .entry(row.row)
            .or_insert_with(|| RowAnswers {
                samples: Vec::new(),
            })
            .samples
            .push(row);
    }
    for answers in grouped.values_mut() {
        answers.samples.sort_by_key(|r| r.sample);
    }
    grouped
}

/// Each row's score (see [`RowAnswers::score`]), for the rows with at least one answer.
pub fn row_scores(rows: &BTreeMap<usize, RowAnswers<'_>>) -> BTreeMap<usize, f64> {
    rows.iter()
        .filter_map(|(row, answers)| Some((*row, answers.score()?)))
        .collect()
}

/// The scores of `a` and `b` on the rows both have a score for, in row order.
pub fn paired(
    a: &BTreeMap<usize, RowAnswers<'_>>,
    b: &BTreeMap<usize, RowAnswers<'_>>,
) -> (Vec<f64>, Vec<f64>) {
    a.iter()
        .filter_map(|(row, a)| Some((a.score()?, b.get(row)?.score()?)))
        .unzip()
}

/// How often the repeated answers of one version agree, over its rows with two or more answers.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    /// Rows with at least two answers, which the other fields rest on.
    pub rows: usize,
    /// Rows whose answers were all the same text (white space at the ends aside).
    pub unanimous: usize,
    /// Rows whose answers all got the same score.
    pub same_score: usize,
    /// The mean, over those rows, of the share of answers that gave the row's most common one.
    pub mean_share: f64,
}

impl Agreement {
    /// Over the given rows; none when no row has two answers.
    pub fn of<'a, 'b: 'a>(rows: impl IntoIterator<Item = &'a RowAnswers<'b>>) -> Option<Self> {
        let (shares, same_score): (Vec<f64>, Vec<bool>) = rows
            .into_iter()
            .filter_map(|row| Some((row.agreement()?, row.same_score()?)))
            .unzip();
        (!shares.is_empty()).then(|| Agreement {
            rows: shares.len(),
            unanimous: shares.iter().filter(|&&share| share == 1.0).count(),
            same_score: same_score.iter().filter(|&&same| same).count(),
            mean_share: shares.iter().sum::<f64>() / shares.len() as f64,
        })
    }

    /// How the answers agree, in one clause.
    pub fn text(&self) -> String {
        format!(
            "all answers agree on {} of {} rows and all scores on {} (mean share of a row's most \
             common answer {:.2})",
            self.unanimous, self.rows, self.same_score, self.mean_share
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ReplayOf, Version};

    fn answer(row: usize, sample: u32, output: &str, score: f64, error: &str) -> ReplayRow {
        ReplayRow {
            variant: String::new(),
            version: ReplayOf::Version(Version::Seed),
            model: "m".into(),
            answered_by: "m".into(),
            row,
            sample,
            inputs: BTreeMap::new(),
            expected: "yes".into(),
            output: output.into(),
            score,
            feedback: String::new(),
            latency_ms: 1,
            waited_ms: Some(0),
            prompt_tokens: 1,
            completion_tokens: 1,
            node_id: String::new(),
            error: error.into(),
        }
    }

    #[test]
    fn a_rows_score_is_the_mean_of_its_answered_samples_and_rows_weigh_the_same() {
        let rows = [
            answer(1, 1, "yes", 1.0, ""),
            answer(1, 2, "no", 0.0, ""),
            answer(1, 3, "yes", 1.0, ""),
            answer(2, 2, "", 0.0, "timed out"),
            answer(2, 1, "no", 0.0, ""),
            answer(3, 1, "", 0.0, "timed out"),
        ];
        let scores = row_scores(&by_row(&rows));
        // Row 1: 2 of 3; row 2: its one answered sample; row 3 has no answer and no score.
        assert_eq!(scores.len(), 2);
        assert!((scores[&1] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(scores[&2], 0.0);
        // Over rows, (2/3 + 0) / 2 = 1/3; over answers it would be 2 of 4 = 0.5.
        let mean: f64 = scores.values().sum::<f64>() / scores.len() as f64;
        assert!((mean - 1.0 / 3.0).abs() < 1e-12);
        let grouped = by_row(&rows);
        assert_eq!(
            grouped[&2].shown().output,
            "no",
            "the answered sample is shown"
        );
        assert_eq!(grouped[&2].asked(), 2);
        assert_eq!(grouped[&1].output(), "yes", "the most common answer");
        assert_eq!(grouped[&1].feedback(), "", "each answer has its own");
    }

    #[test]
    fn agreement_counts_rows_with_two_or_more_answers() {
        let rows = [
            answer(1, 1, "yes", 1.0, ""),
            answer(1, 2, " yes\n", 1.0, ""),
            answer(2, 1, "yes", 1.0, ""),
            answer(2, 2, "no", 0.0, ""),
            answer(2, 3, "no", 0.0, ""),
            answer(2, 4, "maybe", 0.0, ""),
            answer(3, 1, "yes", 1.0, ""),
            answer(3, 2, "", 0.0, "failed"),
        ];
        let grouped = by_row(&rows);
        assert_eq!(
            grouped[&1].agreement(),
            Some(1.0),
            "white space is not a difference"
        );
        assert_eq!(grouped[&2].agreement(), Some(0.5));
        assert_eq!(
            grouped[&3].agreement(),
            None,
            "one answered sample agrees with nothing"
        );
        let agreement = Agreement::of(grouped.values()).unwrap();
        assert_eq!(agreement.rows, 2);
        assert_eq!(agreement.unanimous, 1);
        assert_eq!(agreement.same_score, 1, "row 2 scored 1, 0, 0, 0");
        assert!((agreement.mean_share - 0.75).abs() < 1e-12);
        assert_eq!(
            grouped[&2].summary().unwrap(),
            "4 of 4 answers: 3 distinct (\u{201c}no\u{201d} ×2, \u{201c}yes\u{201d} ×1, \u{201c}maybe\u{201d} ×1)"
        );
        assert_eq!(
            grouped[&3].summary().unwrap(),
            "1 of 2 answers: 1 distinct (\u{201c}yes\u{201d} ×1)"
        );
    }

    #[test]
    fn single_answers_have_no_agreement_and_no_summary() {
        let rows = [answer(1, 1, "yes", 1.0, ""), answer(2, 1, "no", 0.0, "")];
        let grouped = by_row(&rows);
        assert_eq!(Agreement::of(grouped.values()), None);
        assert_eq!(grouped[&1].summary(), None);
        assert_eq!(
            row_scores(&by_row(&rows))
                .values()
                .copied()
                .collect::<Vec<_>>(),
            [1.0, 0.0]
        );
    }
}
