//! Repeated answers (`[replay] repeat`, `compare --repeat`): one row answered several times by
//! the same prompt on the same model. The row, not the answer, is the unit of every statistic:
//! a row's score is the mean of its answered samples, so a row weighs the same however many of
//! its answers arrived, and intervals and paired tests count rows (a cluster-by-row analysis:
//! the answers to one row are not independent of each other). How often a row's answers agree
//! is reported beside the scores. With one answer per row all of this reduces to that answer.
use std::collections::BTreeMap;

use serde::Serialize;

use gepa_lab_store::ReplayRow;

use super::answers::{Answer, Rows, Texts};
use super::stats::Pairs;

/// The answers one version gave to one row on one model, in sample order.
#[derive(Debug, Clone)]
pub struct RowAnswers {
    samples: Samples,
}

/// A row's answers: nearly always one, so that one needs no allocation.
#[derive(Debug, Clone)]
enum Samples {
    One(Answer),
    Many(Vec<Answer>),
}

impl RowAnswers {
    pub(super) fn one(answer: Answer) -> Self {
        Self {
            samples: Samples::One(answer),
        }
    }

    /// Adds the next sample.
    pub(super) fn push(&mut self, answer: Answer) {
        match &mut self.samples {
            Samples::One(first) => self.samples = Samples::Many(vec![*first, answer]),
            Samples::Many(all) => all.push(answer),
        }
    }

    fn all(&self) -> &[Answer] {
        match &self.samples {
            Samples::One(answer) => std::slice::from_ref(answer),
            Samples::Many(all) => all,
        }
    }

    /// Every sample's record in `replay.csv` with its answer, in sample order.
    pub fn samples(&self) -> impl Iterator<Item = (u32, &Answer)> {
        self.all().iter().map(|answer| (answer.record, answer))
    }

    /// Answered samples: those without an error.
    pub fn answered(&self) -> impl Iterator<Item = (u32, &Answer)> {
        self.samples().filter(|(_, a)| a.answered)
    }

    /// The row's score: the mean of its answered samples; none when every one failed.
    pub fn score(&self) -> Option<f64> {
        let (sum, n) = self
            .answered()
            .fold((0.0, 0usize), |(sum, n), (_, a)| (sum + a.score, n + 1));
        (n > 0).then(|| sum / n as f64)
    }

    /// The record of the sample whose inputs, expected output, model and error a table shows:
    /// the first answered one, else the first.
    pub fn shown(&self) -> u32 {
        self.first().record
    }

    /// The shown sample's answer (see [`Self::shown`]).
    pub fn first(&self) -> &Answer {
        self.answered()
            .next()
            .map_or(&self.all()[0], |(_, answer)| answer)
    }

    /// The record whose answer a table shows: the row's one answer, or with repeats its most
    /// common one (ties to the one given first), since the score beside it is the mean of all
    /// of them.
    pub fn output_record(&self) -> u32 {
        if self.all().len() < 2 {
            return self.shown();
        }
        self.distinct()
            .first()
            .map_or(self.shown(), |&(record, _)| record)
    }

    /// The answer a table shows (see [`Self::output_record`]); trimmed with repeats, where
    /// answers are compared trimmed. Empty when `texts` lacks the record.
    pub fn output<'t>(&self, texts: &'t Texts<'_>) -> &'t str {
        let output = texts
            .get(self.output_record())
            .map_or("", |r| r.output.as_str());
        if self.all().len() < 2 {
            output
        } else {
            output.trim()
        }
    }

    /// The shown sample's whole record, when `texts` holds it.
    pub fn shown_row<'t>(&self, texts: &'t Texts<'_>) -> Option<&'t ReplayRow> {
        texts.get(self.shown())
    }

    /// The scorer's feedback on the row's one answer; empty with repeats, where each answer
    /// has its own and the summary lists them.
    pub fn feedback<'t>(&self, texts: &'t Texts<'_>) -> &'t str {
        match self.shown_row(texts) {
            Some(row) if self.all().len() < 2 => &row.feedback,
            _ => "",
        }
    }

    /// Samples asked for this row.
    pub fn asked(&self) -> usize {
        self.all().len()
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
        let mut scores = self.answered().map(|(_, a)| a.score);
        let first = scores.next()?;
        let mut count = 1;
        let mut same = true;
        for score in scores {
            count += 1;
            same &= score == first;
        }
        (count >= 2).then_some(same)
    }

    /// Each distinct answer, as the record that first gave it, and how many samples gave it,
    /// most common first (ties by first seen).
    fn distinct(&self) -> Vec<(u32, usize)> {
        let mut counts: Vec<(u32, u64, usize)> = Vec::new();
        for (record, answer) in self.answered() {
            match counts
                .iter_mut()
                .find(|(_, seen, _)| *seen == answer.output)
            {
                Some((_, _, n)) => *n += 1,
                None => counts.push((record, answer.output, 1)),
            }
        }
        // Stable: equal counts keep the order they were first seen in.
        counts.sort_by_key(|&(_, _, n)| std::cmp::Reverse(n));
        counts
            .into_iter()
            .map(|(record, _, n)| (record, n))
            .collect()
    }

    /// One line on the repeats of this row, for the row tables: how many answers, which ones,
    /// how many failed. None for a row answered once.
    pub fn summary(&self, texts: &Texts<'_>) -> Option<String> {
        if self.all().len() < 2 {
            return None;
        }
        const SHOWN: usize = 3;
        const LONGEST: usize = 40;
        let answers = self.distinct();
        let answered: usize = answers.iter().map(|(_, n)| n).sum();
        let mut text = format!(
            "{answered} of {} answers: {} distinct",
            self.all().len(),
            answers.len()
        );
        if !answers.is_empty() {
            let each: Vec<String> = answers
                .iter()
                .take(SHOWN)
                .map(|&(record, n)| {
                    let answer = texts.get(record).map_or("", |r| r.output.trim());
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
    use crate::answers::ReplayTable;
    use gepa_lab_store::{ReplayOf, Version};

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
