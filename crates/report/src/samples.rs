//! Repeated answers (`[replay] repeat`, `compare --repeat`): one row answered several times by
//! the same prompt on the same model. The row, not the answer, is the unit of every statistic:
//! a row's score is the mean of its answered samples, so a row weighs the same however many of
//! its answers arrived, and intervals and paired tests count rows (a cluster-by-row analysis:
//! the answers to one row are not independent of each other). How often a row's answers agree
//! is reported beside the scores. With one answer per row all of this reduces to that answer.
use std::collections::BTreeMap;

use serde::Serialize;

use super::answers::{RowAnswers, Rows};
use super::stats::Pairs;

/// Each row's score (see [`RowAnswers::score`]), for the rows with at least one answer.
pub fn row_scores(rows: Rows<'_>) -> BTreeMap<usize, f64> {
    rows.iter()
        .filter_map(|(row, answers)| Some((row, answers.score()?)))
        .collect()
}

/// The scores of `a` and `b` on the rows both have a score for, added in row order.
pub fn paired(a: Rows<'_>, b: Rows<'_>) -> Pairs {
    let mut pairs = Pairs::default();
    for (_, answers_a, answers_b) in both(a, b) {
        if let (Some(a), Some(b)) = (answers_a.score(), answers_b.score()) {
            pairs.push(a, b);
        }
    }
    pairs
}

/// The rows both `a` and `b` have answers for, in row order, with both sets of answers (scored
/// or not): one merge walk over the two sorted lists.
pub fn both<'a>(
    a: Rows<'a>,
    b: Rows<'a>,
) -> impl Iterator<Item = (usize, RowAnswers, RowAnswers)> + 'a {
    let mut b_rows = b.iter().peekable();
    a.iter().filter_map(move |(row, answers_a)| {
        while b_rows.next_if(|(other, _)| *other < row).is_some() {}
        let (_, answers_b) = b_rows.next_if(|(other, _)| *other == row)?;
        Some((row, answers_a, answers_b))
    })
}

/// How often the repeated answers of one version agree, over its rows with two or more answers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
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
    pub fn of(rows: impl IntoIterator<Item = RowAnswers>) -> Option<Self> {
        let mut agreement = Self::default();
        for row in rows {
            agreement.add(&row);
        }
        agreement.finish()
    }

    /// Counts one more row, when it has two answers or more.
    pub fn add(&mut self, row: &RowAnswers) {
        let (Some(share), Some(same_score)) = (row.agreement(), row.same_score()) else {
            return;
        };
        self.rows += 1;
        self.unanimous += usize::from(share == 1.0);
        self.same_score += usize::from(same_score);
        // The sum of the shares until `finish` divides it.
        self.mean_share += share;
    }

    /// The agreement over the rows added; none when no row had two answers.
    pub fn finish(mut self) -> Option<Self> {
        (self.rows > 0).then(|| {
            self.mean_share /= self.rows as f64;
            self
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
    use crate::answers::{ReplayTable, Texts};
    use gepa_lab_store::{ReplayOf, ReplayRow, Version};

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

    /// The seed's answers of `rows`, by row.
    fn seed_rows(table: &ReplayTable) -> Rows<'_> {
        table
            .rows("", &ReplayOf::Version(Version::Seed), "m")
            .unwrap()
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
        let table = ReplayTable::of(&rows).unwrap();
        let texts = Texts::All(&rows);
        let scores = row_scores(seed_rows(&table));
        // Row 1: 2 of 3; row 2: its one answered sample; row 3 has no answer and no score.
        assert_eq!(scores.len(), 2);
        assert!((scores[&1] - 2.0 / 3.0).abs() < 1e-12);
        assert_eq!(scores[&2], 0.0);
        // Over rows, (2/3 + 0) / 2 = 1/3; over answers it would be 2 of 4 = 0.5.
        let mean: f64 = scores.values().sum::<f64>() / scores.len() as f64;
        assert!((mean - 1.0 / 3.0).abs() < 1e-12);
        let grouped = seed_rows(&table);
        let (one, two) = (grouped.get(1).unwrap(), grouped.get(2).unwrap());
        assert_eq!(
            two.shown_row(&texts).unwrap().output,
            "no",
            "the answered sample is shown"
        );
        assert_eq!(two.asked(), 2);
        assert_eq!(one.output(&texts), "yes", "the most common answer");
        assert_eq!(one.feedback(&texts), "", "each answer has its own");
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
        let table = ReplayTable::of(&rows).unwrap();
        let texts = Texts::All(&rows);
        let grouped = seed_rows(&table);
        let row = |n: usize| grouped.get(n).unwrap();
        assert_eq!(
            row(1).agreement(),
            Some(1.0),
            "white space is not a difference"
        );
        assert_eq!(row(2).agreement(), Some(0.5));
        assert_eq!(
            row(3).agreement(),
            None,
            "one answered sample agrees with nothing"
        );
        let agreement = Agreement::of(grouped.values()).unwrap();
        assert_eq!(agreement.rows, 2);
        assert_eq!(agreement.unanimous, 1);
        assert_eq!(agreement.same_score, 1, "row 2 scored 1, 0, 0, 0");
        assert!((agreement.mean_share - 0.75).abs() < 1e-12);
        assert_eq!(
            row(2).summary(&texts).unwrap(),
            "4 of 4 answers: 3 distinct (\u{201c}no\u{201d} ×2, \u{201c}yes\u{201d} ×1, \u{201c}maybe\u{201d} ×1)"
        );
        assert_eq!(
            row(3).summary(&texts).unwrap(),
            "1 of 2 answers: 1 distinct (\u{201c}yes\u{201d} ×1)"
        );
    }

    #[test]
    fn single_answers_have_no_agreement_and_no_summary() {
        let rows = [answer(1, 1, "yes", 1.0, ""), answer(2, 1, "no", 0.0, "")];
        let table = ReplayTable::of(&rows).unwrap();
        let grouped = seed_rows(&table);
        assert_eq!(Agreement::of(grouped.values()), None);
        assert_eq!(grouped.get(1).unwrap().summary(&Texts::All(&rows)), None);
        assert_eq!(
            row_scores(grouped).values().copied().collect::<Vec<_>>(),
            [1.0, 0.0]
        );
    }

    #[test]
    fn pairs_are_the_rows_both_scored_in_row_order() {
        let mut rows = vec![
            answer(1, 1, "yes", 1.0, ""),
            answer(2, 1, "", 0.0, "failed"),
            answer(4, 1, "no", 0.0, ""),
            answer(5, 1, "no", 0.5, ""),
        ];
        for (row, score) in [(5, 1.0), (2, 1.0), (3, 1.0), (1, 0.0)] {
            rows.push(ReplayRow {
                version: ReplayOf::Version(Version::Generation(1)),
                ..answer(row, 1, "x", score, "")
            });
        }
        let table = ReplayTable::of(&rows).unwrap();
        let g1 = table
            .rows("", &ReplayOf::Version(Version::Generation(1)), "m")
            .unwrap();
        // Row 2 failed for the seed, row 3 only g1 answered, row 4 only the seed.
        let pairs = paired(seed_rows(&table), g1).compare();
        assert_eq!(
            (pairs.rows, pairs.mean_a, pairs.mean_b),
            (2, 0.75, 0.5),
            "seed 1.0 and 0.5 against g1 0.0 and 1.0"
        );
    }
}
