//! A short measurement for `init --dataset`: how well each installed model answers a seed prompt
//! on a few rows, and which one an experiment should use.
//!
//! A model that answers one label to nearly every row leaves a prompt nothing to improve: on a
//! public intent dataset the default 0.5B model answered the seed right on 27 of 60 rows and the
//! 1.5B model on 51. The probe asks each model the seed on rows the experiment will show the
//! engine (feedback and Pareto rows), never its holdout rows, so that choosing a model by it
//! does not peek at the rows the final comparison rests on.

use std::collections::{HashMap, VecDeque};
#[cfg(test)]
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{self, StreamExt};

use super::RunError;
use gepa_lab_dataset::Row;
use gepa_lab_experiment::Plan;
use gepa_lab_inference::{ChatRequest, Inference};
use gepa_lab_prompt::ChatTemplate;
use gepa_lab_score::Scorer;

/// A larger (slower) model is chosen over a smaller one only when it scores higher by at least
/// this share of the probe rows, in percent (2 rows of 20): a difference of one row is noise, and
/// the larger model costs two to three times the time of every answer.
pub const MARGIN_PERCENT: f64 = 10.0;

/// Rows the probe asks each model first, chosen among the feedback and Pareto rows by
/// [`each_answer_in_turn`].
pub const PROBE_ROWS: usize = 20;

/// Rows it asks each model next, when the first round leaves the models closer than the margin
/// ([`undecided`]), chosen the same way among the rows not asked yet.
///
/// Twenty rows cannot tell two models 25 points apart from two of a kind: on an AG News sample
/// of 480 rows the 0.5B model scored 10 of 20 and the 1.5B 11, so the 0.5B was kept, and it
/// scored 0.482 on the holdout where the 1.5B had scored 0.731 on the 240-row sample's. A second
/// round costs about a minute on short inputs when the models are close (on texts of some 450
/// tokens, several), and nothing when one is clearly ahead.
pub const MORE_PROBE_ROWS: usize = 20;

/// The margin on `rows` probe rows: [`MARGIN_PERCENT`] of them.
pub fn margin(rows: usize) -> f64 {
    rows as f64 * MARGIN_PERCENT / 100.0
}

/// Feedback and Pareto rows the probe chooses its rows among (the first ones): a bound on what it
/// reads, and enough to find the rare labels of an uneven dataset.
const CANDIDATE_ROWS: usize = 200;

/// At most `n` of `rows`, taking each expected answer in turn (compared by [`answer_key`], in
/// order of first appearance) until the rows of an answer run out, returned in file order.
///
/// On uneven data the first rows cannot tell a model that reads its input from one that answers
/// the commonest label whatever the input: on a public SMS sample where 88% of the messages are
/// `ham`, a model answering `ham` to everything scores about 18 of the first 20 rows and looks
/// as good as one that reads. Taking each label in turn, that model scores about half, and a
/// model that reads stands out. Where every expected answer is different (JSON, free text),
/// these are simply the first `n` rows.
pub fn each_answer_in_turn(rows: Vec<Row>, n: usize) -> Vec<Row> {
    let mut groups: Vec<(String, VecDeque<Row>)> = Vec::new();
    for row in rows {
        let key = answer_key(&row.expected);
        match groups.iter_mut().find(|(known, _)| *known == key) {
            Some((_, group)) => group.push_back(row),
            None => groups.push((key, VecDeque::from([row]))),
        }
    }
    let mut chosen = Vec::new();
    while chosen.len() < n && groups.iter().any(|(_, group)| !group.is_empty()) {
        for (_, group) in &mut groups {
            if chosen.len() < n {
                chosen.extend(group.pop_front());
            }
        }
    }
    chosen.sort_by_key(|row| row.index);
    chosen
}

/// The form in which the probe compares two answers, expected or given: trimmed, in lowercase.
fn answer_key(answer: &str) -> String {
    answer.trim().to_lowercase()
}

/// What the probe of a plan asks each model: its first execution's seed on [`PROBE_ROWS`] of its
/// feedback and Pareto rows (never holdout rows; each expected answer in turn), then, if the
/// first round is [`undecided`], on [`MORE_PROBE_ROWS`] more, scored by its replay scorer,
/// within its replay's token limit.
pub struct ProbeJob {
    pub seed: ChatTemplate,
    pub rows: Vec<Row>,
    /// The second round's rows: none of `rows`; empty when the plan has no more.
    pub more_rows: Vec<Row>,
    pub scorer: Scorer,
    pub max_tokens: u32,
}

impl ProbeJob {
    /// The probe of `plan`, or `None` when its first execution has no replay to choose a model
    /// for.
    pub fn of(plan: &Plan) -> Result<Option<Self>, RunError> {
        let Some(execution) = plan.executions.first() else {
            return Ok(None);
        };
        let Some(replay) = &execution.replay else {
            return Ok(None);
        };
        let data = &execution.dataset;
        // The plan numbers rows from 1; `read_rows` from 0.
        let indices: Vec<usize> = data
            .minibatch_rows
            .iter()
            .chain(&data.pareto_rows)
            .take(CANDIDATE_ROWS)
            .map(|row| row - 1)
            .collect();
        let columns = super::planned_columns(data)?;
        let candidates = gepa_lab_dataset::read_rows(&data.file, &columns, &indices)?;
        let base = plan.file.parent().unwrap_or(std::path::Path::new("."));
        let rows = each_answer_in_turn(candidates.clone(), PROBE_ROWS);
        let rest: Vec<Row> = candidates
            .into_iter()
            .filter(|row| rows.iter().all(|asked| asked.index != row.index))
            .collect();
        Ok(Some(Self {
            seed: ChatTemplate::parse(&execution.start.prompt)?,
            rows,
            more_rows: each_answer_in_turn(rest, MORE_PROBE_ROWS),
            scorer: Scorer::new(&replay.scorer, base)?,
            max_tokens: replay.max_tokens.unwrap_or(64),
        }))
    }

    /// The probe's first round, to run on each model.
    pub fn probe(&self) -> Probe<'_> {
        self.on(&self.rows)
    }

    /// Its second round; none when the plan has no rows left for one.
    pub fn more(&self) -> Option<Probe<'_>> {
        (!self.more_rows.is_empty()).then(|| self.on(&self.more_rows))
    }

    fn on<'a>(&'a self, rows: &'a [Row]) -> Probe<'a> {
        Probe {
            seed: &self.seed,
            rows,
            scorer: &self.scorer,
            max_tokens: self.max_tokens,
        }
    }
}

/// How one model did on the probe rows.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProbe {
    pub model: String,
    /// Rows asked.
    pub rows: usize,
    /// Rows that got an answer; a row whose call failed scores 0 in `total`.
    pub answered: usize,
    /// Sum of the scores over `rows`.
    pub total: f64,
    /// Each answer given (trimmed, lowercase), in the order first given, and the rows that got it.
    pub answers: Vec<(String, usize)>,
    pub seconds: f64,
}

impl ModelProbe {
    /// The most common answer (the first in answer order on a tie) and the rows that got it.
    pub fn top_answer(&self) -> Option<(&str, usize)> {
        // `max_by_key` keeps the last of equals; reversed, the first.
        self.answers
            .iter()
            .rev()
            .max_by_key(|(_, count)| *count)
            .map(|(answer, count)| (answer.as_str(), *count))
    }

    /// It gave one answer to nearly every row (see [`gepa_lab_score::ONE_ANSWER_PERCENT`]).
    pub fn answers_one_way(&self) -> bool {
        self.top_answer()
            .is_some_and(|(_, count)| gepa_lab_score::answers_one_way(count, self.answered))
    }

    /// This probe and `more`, a later round of the same model, as one.
    pub fn merged(mut self, more: ModelProbe) -> ModelProbe {
        for (answer, count) in more.answers {
            match self.answers.iter_mut().find(|(known, _)| *known == answer) {
                Some((_, known)) => *known += count,
                None => self.answers.push((answer, count)),
            }
        }
        self.rows += more.rows;
        self.answered += more.answered;
        self.total += more.total;
        self.seconds += more.seconds;
        self
    }

    pub fn mean(&self) -> f64 {
        if self.rows == 0 {
            0.0
        } else {
            self.total / self.rows as f64
        }
    }
}

/// What the probe asks: the seed prompt, rendered with each row, at temperature 0.
pub struct Probe<'a> {
    pub seed: &'a ChatTemplate,
    pub rows: &'a [Row],
    pub scorer: &'a Scorer,
    pub max_tokens: u32,
}

impl Probe<'_> {
    /// Asks `model` for every row (two at a time), scores the answers and sums them up.
    pub async fn run(&self, inference: &Arc<dyn Inference>, model: &str) -> ModelProbe {
        let started = Instant::now();
        let answers: Vec<Option<(String, f64)>> = stream::iter(self.rows)
            .map(|row| self.answer(inference, model, row))
            .buffered(2)
            .collect()
            .await;
        let mut given: Vec<(String, usize)> = Vec::new();
        let mut total = 0.0;
        let mut answered = 0;
        for (output, score) in answers.into_iter().flatten() {
            answered += 1;
            total += score;
            let key = answer_key(&output);
            match given.iter_mut().find(|(known, _)| *known == key) {
                Some((_, count)) => *count += 1,
                None => given.push((key, 1)),
            }
        }
        ModelProbe {
            model: model.to_owned(),
            rows: self.rows.len(),
            answered,
            total,
            answers: given,
            seconds: started.elapsed().as_secs_f64(),
        }
    }

    /// The answer and its score, `None` when the call or the scorer failed.
    async fn answer(
        &self,
        inference: &Arc<dyn Inference>,
        model: &str,
        row: &Row,
    ) -> Option<(String, f64)> {
        let values: HashMap<&str, &str> = row
            .inputs
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        let messages = self.seed.render(|name| values.get(name).copied()).ok()?;
        let mut request = ChatRequest::new(model, super::replay::chat_messages(messages));
        request.temperature = Some(0.0);
        request.max_tokens = Some(self.max_tokens);
        let response = inference.chat(&request).await.ok()?;
        let output = response.content().to_owned();
        let score = self
            .scorer
            .score(Some(row.index + 1), &output, &row.expected)
            .ok()?;
        Some((output, score.value))
    }
}

/// Whether `probes` (one round, smallest model first) leave the choice to noise: a later model
/// scores within the [`margin`] of the first, above or below it. Then a second round decides on
/// all the rows asked.
pub fn undecided(probes: &[ModelProbe]) -> bool {
    let Some(first) = probes.first() else {
        return false;
    };
    let margin = margin(first.rows);
    probes[1..]
        .iter()
        .any(|probe| (probe.total - first.total).abs() < margin)
}

/// The model to use among `probes`, listed smallest (fastest) first: the first one, unless a
/// later one scores at least the [`margin`] higher than the one chosen so far, or
/// the one chosen so far gives one answer to nearly every row and the later one does not.
///
/// A model that answers one label whatever the input cannot be taught by a prompt: on the
/// public clickbait sample the 0.5B model answered `not_clickbait` to every row, which scores
/// what that label's share is, and gave the same answer to every child of 37 iterations of
/// general rules ("When the headline uses provocative or attention-grabbing language, answer
/// clickbait."). A model whose answers follow its input, even a worse one, can be.
pub fn choose(probes: &[ModelProbe]) -> Option<&ModelProbe> {
    let mut chosen = probes.first()?;
    for probe in &probes[1..] {
        let reads_where_chosen_does_not = chosen.answers_one_way() && !probe.answers_one_way();
        if probe.total >= chosen.total + margin(chosen.rows) || reads_where_chosen_does_not {
            chosen = probe;
        }
    }
    Some(chosen)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use async_trait::async_trait;

    use super::*;
    use gepa_lab_inference::{ChatResponse, ChunkStream, InferenceError, Model};
    use gepa_lab_score::ScorerSpec;

    /// Answers "Spam" to a prompt that mentions "win", "ham" otherwise, and fails on "boom".
    struct Keyword;

    #[async_trait]
    impl Inference for Keyword {
        async fn models(&self) -> Result<Vec<Model>, InferenceError> {
            Ok(Vec::new())
        }
        async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
            let prompt = request.messages[0].text();
            if prompt.contains("boom") {
                return Err(InferenceError::Stream("no answer".into()));
            }
            let answer = if prompt.contains("win") {
                "Spam"
            } else {
                "ham"
            };
            Ok(serde_json::from_value(serde_json::json!({
                "choices": [{"message": {"content": answer}}]
            }))
            .unwrap())
        }
        async fn chat_stream(&self, _: &ChatRequest) -> Result<ChunkStream, InferenceError> {
            unreachable!("the probe never streams")
        }
    }

    #[tokio::test]
    async fn the_probe_scores_each_row_and_counts_the_answers() {
        let row = |index: usize, text: &str, expected: &str| Row {
            index,
            line: index as u64 + 2,
            inputs: BTreeMap::from([("text".to_owned(), text.to_owned())]),
            expected: expected.to_owned(),
        };
        let rows = [
            row(0, "win a prize", "spam"),
            row(1, "see you at six", "ham"),
            row(2, "lunch?", "spam"),
            row(3, "boom", "ham"),
        ];
        let seed = ChatTemplate::parse("Spam or ham? {text}").unwrap();
        let scorer = Scorer::new(&ScorerSpec::ExactMatchCi, Path::new(".")).unwrap();
        let probe = Probe {
            seed: &seed,
            rows: &rows,
            scorer: &scorer,
            max_tokens: 8,
        };
        let inference: Arc<dyn Inference> = Arc::new(Keyword);
        let result = probe.run(&inference, "local").await;
        assert_eq!((result.rows, result.answered), (4, 3));
        // Right on rows 0 and 1; wrong on row 2; row 3 failed and counts 0.
        assert_eq!(result.total, 2.0);
        assert_eq!(result.mean(), 0.5);
        assert_eq!(result.top_answer(), Some(("ham", 2)));
    }

    fn labelled(index: usize, expected: &str) -> Row {
        Row {
            index,
            line: index as u64 + 2,
            inputs: BTreeMap::new(),
            expected: expected.to_owned(),
        }
    }

    #[test]
    fn the_probe_takes_each_expected_answer_in_turn() {
        // Uneven labels: eight `ham` before the first `spam`, as in an SMS sample.
        let expected = [
            "ham", "ham", "ham", "ham", "ham", "ham", "ham", "ham", "Spam ", "ham", "spam", "ham",
            "other",
        ];
        let rows = || {
            expected
                .iter()
                .enumerate()
                .map(|(index, label)| labelled(index, label))
                .collect::<Vec<_>>()
        };
        let indices = |n| -> Vec<usize> {
            each_answer_in_turn(rows(), n)
                .iter()
                .map(|row| row.index)
                .collect()
        };
        // One of each label first (`Spam ` and `spam` are one answer), in file order.
        assert_eq!(indices(3), [0, 8, 12]);
        // Then the second of each, while a label has rows left.
        assert_eq!(indices(5), [0, 1, 8, 10, 12]);
        assert_eq!(indices(6), [0, 1, 2, 8, 10, 12]);
        // Asked for more than there are: every row once.
        assert_eq!(indices(20), (0..13).collect::<Vec<_>>());
        // Every answer different (JSON, free text): the first rows.
        let distinct: Vec<Row> = (0..6)
            .map(|i| labelled(i, &format!("{{\"n\": {i}}}")))
            .collect();
        let first: Vec<usize> = each_answer_in_turn(distinct, 4)
            .iter()
            .map(|row| row.index)
            .collect();
        assert_eq!(first, [0, 1, 2, 3]);
    }

    fn probe(model: &str, total: f64) -> ModelProbe {
        ModelProbe {
            model: model.into(),
            rows: 20,
            answered: 20,
            total,
            answers: Vec::new(),
            seconds: 1.0,
        }
    }

    #[test]
    fn a_larger_model_is_chosen_only_for_a_clear_gain() {
        let small = probe("local", 9.0);
        assert_eq!(
            choose(&[small.clone(), probe("local:big", 17.0)])
                .unwrap()
                .model,
            "local:big"
        );
        assert_eq!(
            choose(&[small.clone(), probe("local:big", 10.5)])
                .unwrap()
                .model,
            "local"
        );
        // Exactly the margin is enough; a worse larger model never is.
        assert_eq!(
            choose(&[small.clone(), probe("local:big", 11.0)])
                .unwrap()
                .model,
            "local:big"
        );
        assert_eq!(
            choose(&[small.clone(), probe("local:big", 3.0)])
                .unwrap()
                .model,
            "local"
        );
        // Each step is measured against the model chosen so far, not the one before it.
        let three = [small, probe("local:mid", 10.0), probe("local:big", 11.5)];
        assert_eq!(choose(&three).unwrap().model, "local:big");
        assert!(choose(&[]).is_none());
    }

    #[test]
    fn a_model_that_answers_one_way_gives_way_to_one_that_reads_its_input() {
        let one_way = |model: &str, total: f64| ModelProbe {
            answers: vec![("clickbait".into(), 1), ("not_clickbait".into(), 19)],
            ..probe(model, total)
        };
        let reads = |model: &str, total: f64| ModelProbe {
            answers: vec![("clickbait".into(), 12), ("not_clickbait".into(), 8)],
            ..probe(model, total)
        };
        assert!(one_way("local", 11.0).answers_one_way());
        assert!(!reads("local", 11.0).answers_one_way());
        // Lower, but reading its input: chosen.
        let chosen = |probes: &[ModelProbe]| choose(probes).map(|p| p.model.clone());
        let big = Some("local:big".to_owned());
        let small = Some("local".to_owned());
        assert_eq!(
            chosen(&[one_way("local", 11.0), reads("local:big", 7.0)]),
            big
        );
        // Both one way: the larger needs its margin.
        assert_eq!(
            chosen(&[one_way("local", 11.0), one_way("local:big", 12.0)]),
            small
        );
        // A smaller model that reads its input is not given up for a one-way larger one.
        assert_eq!(
            chosen(&[reads("local", 9.0), one_way("local:big", 10.0)]),
            small
        );
    }

    #[test]
    fn models_closer_than_the_margin_are_asked_again_and_decided_on_every_row() {
        // 10 against 11 of 20: within 2 rows either way, so undecided; 3 apart is not.
        let first = [probe("local", 10.0), probe("local:big", 11.0)];
        assert!(undecided(&first));
        assert!(undecided(&[probe("local", 11.0), probe("local:big", 10.0)]));
        assert!(!undecided(&[
            probe("local", 10.0),
            probe("local:big", 12.0)
        ]));
        assert!(!undecided(&[
            probe("local", 13.0),
            probe("local:big", 10.0)
        ]));
        assert!(
            !undecided(&[probe("local", 10.0)]),
            "nothing to choose between"
        );
        // A second round: the larger model is 6 rows ahead on 40, past the margin of 4.
        let second = [
            ModelProbe {
                answers: vec![("world".into(), 9), ("business".into(), 11)],
                ..probe("local", 5.0)
            },
            probe("local:big", 10.0),
        ];
        let both: Vec<ModelProbe> = first
            .into_iter()
            .zip(second)
            .map(|(first, more)| {
                ModelProbe {
                    answers: vec![("business".into(), 14), ("sports".into(), 6)],
                    ..first
                }
                .merged(more)
            })
            .collect();
        assert_eq!(
            (
                both[0].rows,
                both[0].answered,
                both[0].total,
                both[0].seconds
            ),
            (40, 40, 15.0, 2.0)
        );
        assert_eq!(
            both[0].answers,
            [
                ("business".to_owned(), 25),
                ("sports".to_owned(), 6),
                ("world".to_owned(), 9)
            ]
        );
        assert_eq!(both[0].top_answer(), Some(("business", 25)));
        assert_eq!(margin(40), 4.0);
        assert_eq!(choose(&both).unwrap().model, "local:big");
    }
}
