//! "How the search went": each execution's iterations (`iterations.jsonl`) as the report shows
//! them: the lineage of its candidates, every proposal with its outcome, and the counts above
//! them. The outcome's words come from [`IterationRecord::explain`], the one description the
//! terminal shares; this module only decides what is counted and linked.
//!
//! Which Pareto rows each candidate wins comes from the per-row scores in `history.csv`, which
//! `serve` and the local engine report and the public service does not; without them the lineage
//! carries each candidate's mean Pareto score alone.
use std::collections::BTreeMap;

use serde::Serialize;

use gepa_lab_engine::{IterationRecord, Outcome, ProposalKind};
use gepa_lab_store::{ITERATIONS_FILE, Version};

use super::load::{Execution, IterationLog};

/// What the section says of an execution whose backend did not report its iterations.
pub const NOT_REPORTED: &str =
    "The service did not report its iterations; only accepted candidates are known.";

/// How one execution's search went.
#[derive(Debug, Clone, Serialize)]
pub struct SearchView {
    pub execution: String,
    /// Why the search is not shown, in one sentence; none when its iterations are on record.
    pub missing: Option<String>,
    /// The counts above the table; none when the search is not shown.
    pub summary: Option<SearchSummary>,
    /// Every candidate, by generation: the seed (g0) and each accepted proposal.
    pub lineage: Vec<LineageNode>,
    /// Every iteration on record, by iteration.
    pub proposals: Vec<ProposalView>,
    /// Records that contradict each other, in words; what they claim is left out of the lineage.
    pub notes: Vec<String>,
    /// The Pareto rows the candidates' wins were counted on; none when no candidate's per-row
    /// scores are on record.
    pub pareto: Option<ParetoTally>,
}

/// What the wins in the lineage rest on.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParetoTally {
    /// Pareto rows compared.
    pub rows: usize,
    /// Candidates whose per-row scores are on record (those without are left out).
    pub candidates: usize,
    /// Rows every candidate scores the same on: nobody wins them.
    pub tied: usize,
}

/// The Pareto rows a candidate wins, by data row: rows where no other candidate scores higher, leaving out
/// rows on which every candidate scores the same. (The engine's parent selection, in
/// `engine::pool`, counts those rows too and then drops dominated candidates; a candidate that
/// wins no row here is, as a rule, dominated there.)
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParetoWins {
    pub rows: Vec<WonRow>,
}

impl ParetoWins {
    /// How many of the rows no other candidate ties.
    pub fn alone(&self) -> usize {
        self.rows.iter().filter(|won| won.alone).count()
    }
}

/// One won Pareto row, numbered as the dataset file's data rows are (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WonRow {
    pub row: usize,
    /// No other candidate ties it there.
    pub alone: bool,
}

/// A candidate in the lineage.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LineageNode {
    pub generation: usize,
    /// `g<generation>`, as tables spell it.
    pub label: String,
    /// Its mean Pareto score from `history.csv`; none when the history lacks the generation.
    pub score: Option<f64>,
    /// The candidates it was made from: one for a mutation, two for a merge, none for the seed
    /// and for a candidate whose accepting iteration is not on record.
    pub parents: Vec<usize>,
    pub merge: bool,
    /// The iteration that proposed it.
    pub iteration: Option<usize>,
    /// The report's best version of the execution (g0 when that is the seed).
    pub is_best: bool,
    /// The Pareto rows it wins; none when its per-row scores are not on record.
    pub wins: Option<ParetoWins>,
}

/// One iteration: what was proposed, from what, and what became of it.
#[derive(Debug, Clone, Serialize)]
pub struct ProposalView {
    pub iteration: usize,
    pub kind: ProposalKind,
    /// The candidates it was made from, as labels.
    pub parents: Vec<String>,
    /// Rows both prompts ran on: the minibatch of a mutation, the Pareto subsample of a merge.
    pub rows: usize,
    /// Each parent's score sum on those rows (two for a merge).
    pub parent_scores: Vec<f64>,
    /// The child's score sum on them; none when the child was not run.
    pub child_score: Option<f64>,
    /// `accepted`, `rejected`, `skipped` or `failed`: the class the summary counts it in.
    pub status: OutcomeClass,
    /// [`Outcome::label`]: the class, or for a failure its reason.
    pub outcome: String,
    /// The generation it became, as a label, when accepted.
    pub accepted_as: Option<String>,
    /// [`IterationRecord::explain`].
    pub reason: String,
    /// Calls (task and reflection) and tokens the iteration spent.
    pub calls: u64,
    pub tokens: u64,
    /// The proposed prompt, when the reflection answer held one.
    pub prompt: Option<String>,
}

/// How an iteration ended, as the summary counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OutcomeClass {
    Accepted,
    Rejected,
    Skipped,
    /// No usable child came out of the reflection.
    Failed,
}

impl OutcomeClass {
    /// The one rule that sorts outcomes into the summary's classes.
    pub fn of(outcome: &Outcome) -> Self {
        match outcome {
            Outcome::Accepted { .. } => Self::Accepted,
            // Refused on its first Pareto rows: a rejection that cost less.
            Outcome::Rejected | Outcome::Screened { .. } => Self::Rejected,
            Outcome::SkippedPerfect => Self::Skipped,
            Outcome::Failed { .. } => Self::Failed,
        }
    }
}

/// The counts above the table of proposals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchSummary {
    pub iterations: usize,
    pub merges: usize,
    pub accepted: usize,
    pub rejected: usize,
    pub skipped: usize,
    /// Failed proposals by reason ([`Outcome::label`]), most frequent first, then by name.
    pub failed: Vec<ReasonCount>,
    /// Calls and tokens spent in the iterations (not in scoring the seed).
    pub calls: u64,
    pub tokens: u64,
    /// All of the above in one sentence.
    pub sentence: String,
}

/// How many proposals failed for one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReasonCount {
    pub reason: String,
    pub count: usize,
}

/// The search view of one execution. `best` is the label of the report's best version of it;
/// `pareto_rows` are the dataset's data rows of the Pareto set, in the order sent (the plan's).
pub fn view(
    execution: &Execution,
    log: &IterationLog,
    best: Option<Version>,
    pareto_rows: &[usize],
) -> SearchView {
    let missing = match log {
        IterationLog::Missing => Some(NOT_REPORTED.to_owned()),
        IterationLog::Unreadable(_) => Some(format!(
            "{ITERATIONS_FILE} could not be read, so the search is not shown (see the notes)."
        )),
        IterationLog::Read { .. } if execution.iterations.is_empty() => Some(format!(
            "No iteration of this execution is in {ITERATIONS_FILE}; only accepted candidates \
             are known."
        )),
        IterationLog::Read { .. } => None,
    };
    if missing.is_some() {
        return SearchView {
            execution: execution.label.clone(),
            missing,
            summary: None,
            lineage: Vec::new(),
            proposals: Vec::new(),
            notes: Vec::new(),
            pareto: None,
        };
    }
    let mut notes = Vec::new();
    let mut lineage = lineage(execution, best, &mut notes);
    let pareto = pareto_wins(execution, pareto_rows, &mut lineage, &mut notes);
    SearchView {
        execution: execution.label.clone(),
        missing: None,
        summary: Some(summary(&execution.iterations)),
        lineage,
        proposals: execution.iterations.iter().map(proposal).collect(),
        notes,
        pareto,
    }
}

/// Fills in the Pareto rows each candidate of `lineage` wins, from the per-row scores of the
/// history. A candidate whose scores do not cover the Pareto set exactly is left out, with a
/// note. Wins are counted among the candidates with scores on record.
fn pareto_wins(
    execution: &Execution,
    pareto_rows: &[usize],
    lineage: &mut [LineageNode],
    notes: &mut Vec<String>,
) -> Option<ParetoTally> {
    let mut scored: Vec<(usize, &[f64])> = Vec::new();
    for row in &execution.generations {
        let Some(scores) = row.pareto_scores.as_deref() else {
            continue;
        };
        if scores.len() != pareto_rows.len() {
            notes.push(format!(
                "{} has scores for {} Pareto rows, but the Pareto set has {}; its wins are not \
                 counted.",
                label(row.generation as usize),
                scores.len(),
                pareto_rows.len()
            ));
            continue;
        }
        scored.push((row.generation as usize, scores));
    }
    if scored.is_empty() {
        return None;
    }
    let mut wins: BTreeMap<usize, ParetoWins> = scored
        .iter()
        .map(|&(generation, _)| (generation, ParetoWins { rows: Vec::new() }))
        .collect();
    let mut tied = 0;
    for (index, &row) in pareto_rows.iter().enumerate() {
        let top = scored
            .iter()
            .map(|(_, scores)| scores[index])
            .fold(f64::NEG_INFINITY, f64::max);
        let winners: Vec<usize> = scored
            .iter()
            .filter(|(_, scores)| scores[index] == top)
            .map(|&(generation, _)| generation)
            .collect();
        if winners.len() == scored.len() {
            tied += 1;
            continue;
        }
        let alone = winners.len() == 1;
        for generation in winners {
            let won = wins
                .get_mut(&generation)
                .expect("every scored candidate has an entry");
            won.rows.push(WonRow { row, alone });
        }
    }
    for node in lineage.iter_mut() {
        node.wins = wins.remove(&node.generation).map(|mut won| {
            // The Pareto set is in the order sent (shuffled); a reader looks rows up by number.
            won.rows.sort_by_key(|w| w.row);
            won
        });
    }
    Some(ParetoTally {
        rows: pareto_rows.len(),
        candidates: scored.len(),
        tied,
    })
}

/// A candidate as files and tables spell it: `g3`.
pub(super) fn label(generation: usize) -> String {
    match u32::try_from(generation) {
        Ok(generation) => Version::Generation(generation).to_string(),
        Err(_) => format!("g{generation}"),
    }
}

/// Every candidate the history or the iterations name, with the links of the iterations that
/// accepted them. A link that cannot be right (a second iteration accepting the same generation,
/// a parent that is not an earlier generation) is left out and named in `notes`.
fn lineage(
    execution: &Execution,
    best: Option<Version>,
    notes: &mut Vec<String>,
) -> Vec<LineageNode> {
    let node = |generation: usize| LineageNode {
        generation,
        label: label(generation),
        score: None,
        parents: Vec::new(),
        merge: false,
        iteration: None,
        is_best: false,
        wins: None,
    };
    let mut nodes: BTreeMap<usize, LineageNode> = BTreeMap::new();
    for row in &execution.generations {
        let generation = row.generation as usize;
        nodes
            .entry(generation)
            .or_insert_with(|| node(generation))
            .score = Some(row.score);
    }
    for record in &execution.iterations {
        let Outcome::Accepted { generation } = *record.outcome() else {
            continue;
        };
        let parents = record.parents();
        let child = nodes.entry(generation).or_insert_with(|| node(generation));
        if let Some(earlier) = child.iteration {
            notes.push(format!(
                "Iterations {earlier} and {} both accepted {}; the lineage shows the first.",
                record.iteration(),
                child.label
            ));
            continue;
        }
        child.iteration = Some(record.iteration());
        if let Some(bad) = parents.iter().find(|&&parent| parent >= generation) {
            notes.push(format!(
                "Iteration {} made {} from {}, which is not an earlier generation; the link is \
                 left out.",
                record.iteration(),
                child.label,
                label(*bad)
            ));
            continue;
        }
        child.merge = matches!(record, IterationRecord::Merge(_));
        child.parents = parents.clone();
        for parent in parents {
            nodes.entry(parent).or_insert_with(|| node(parent));
        }
    }
    // The seed is the best version when no evolved prompt beat it; it is generation 0.
    let best = best.map(|version| version.generation().unwrap_or(0) as usize);
    nodes
        .into_values()
        .map(|mut node| {
            node.is_best = best == Some(node.generation);
            node
        })
        .collect()
}

fn proposal(record: &IterationRecord) -> ProposalView {
    let sum = |scores: &[f64]| scores.iter().sum::<f64>();
    let (rows, parent_scores, child_scores) = match record {
        IterationRecord::Mutation(m) => (
            m.minibatch.len(),
            vec![sum(&m.parent_scores)],
            &m.child_scores,
        ),
        IterationRecord::Merge(m) => (
            m.subsample.len(),
            m.parent_scores.iter().map(|s| sum(s)).collect(),
            &m.child_scores,
        ),
    };
    let outcome = record.outcome();
    let cost = record.cost();
    ProposalView {
        iteration: record.iteration(),
        kind: record.kind(),
        parents: record.parents().into_iter().map(label).collect(),
        rows,
        parent_scores,
        child_score: (!child_scores.is_empty()).then(|| sum(child_scores)),
        status: OutcomeClass::of(outcome),
        outcome: outcome.label().to_owned(),
        accepted_as: match outcome {
            Outcome::Accepted { generation } => Some(label(*generation)),
            _ => None,
        },
        reason: record.explain(),
        calls: cost.total(),
        tokens: cost.tokens,
        prompt: record.child_prompt().map(str::to_owned),
    }
}

/// Counts the iterations by class, failures by reason, and what they spent.
fn summary(records: &[IterationRecord]) -> SearchSummary {
    let count = |class| {
        records
            .iter()
            .filter(|r| OutcomeClass::of(r.outcome()) == class)
            .count()
    };
    let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
    for record in records {
        if OutcomeClass::of(record.outcome()) == OutcomeClass::Failed {
            *reasons.entry(record.outcome().label()).or_default() += 1;
        }
    }
    let mut failed: Vec<ReasonCount> = reasons
        .into_iter()
        .map(|(reason, count)| ReasonCount {
            reason: reason.to_owned(),
            count,
        })
        .collect();
    // Stable: equal counts stay in name order.
    failed.sort_by_key(|r| std::cmp::Reverse(r.count));
    let mut summary = SearchSummary {
        iterations: records.len(),
        merges: records
            .iter()
            .filter(|r| matches!(r, IterationRecord::Merge(_)))
            .count(),
        accepted: count(OutcomeClass::Accepted),
        rejected: count(OutcomeClass::Rejected),
        skipped: count(OutcomeClass::Skipped),
        failed,
        calls: records.iter().map(|r| r.cost().total()).sum(),
        tokens: records.iter().map(|r| r.cost().tokens).sum(),
        sentence: String::new(),
    };
    summary.sentence = sentence(&summary);
    summary
}

/// "12 iterations (2 merges): 5 accepted, 4 rejected, 2 skipped, 1 failed (1 duplicate); 96
/// calls and 40312 tokens spent in them."
fn sentence(s: &SearchSummary) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut text = plural(s.iterations as u64, "iteration", "iterations");
    if s.merges > 0 {
        text.push_str(&format!(
            " ({})",
            plural(s.merges as u64, "merge", "merges")
        ));
    }
    let failed: usize = s.failed.iter().map(|r| r.count).sum();
    text.push_str(&format!(
        ": {} accepted, {} rejected, {} skipped, {failed} failed",
        s.accepted, s.rejected, s.skipped
    ));
    if failed > 0 {
        let reasons: Vec<String> = s
            .failed
            .iter()
            .map(|r| format!("{} {}", r.count, r.reason))
            .collect();
        text.push_str(&format!(" ({})", reasons.join(", ")));
    }
    let calls = plural(s.calls, "call", "calls");
    if s.tokens > 0 {
        text.push_str(&format!("; {calls} and {} tokens spent in them", s.tokens));
    } else {
        text.push_str(&format!("; {calls} spent in them"));
    }
    text.push('.');
    text
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use gepa_lab_engine::{Best, MergeRecord, MutationRecord, ProposalFailure, Spent};
    use gepa_lab_store::HistoryRow;

    use crate::load::PromptVersion;

    fn spent(task_calls: u64, reflection_calls: u64, tokens: u64) -> Spent {
        Spent {
            task_calls,
            reflection_calls,
            tokens,
        }
    }

    /// A mutation of `parent` on two minibatch rows; the child is run unless it failed or was
    /// skipped. Costs 5 calls (4 task, 1 reflection) and 100 tokens.
    pub fn mutation(iteration: usize, parent: usize, outcome: Outcome) -> IterationRecord {
        let run = matches!(outcome, Outcome::Accepted { .. } | Outcome::Rejected);
        IterationRecord::Mutation(MutationRecord {
            iteration,
            parent,
            written_from: Default::default(),
            minibatch: vec![3, 7],
            shown: vec![3, 7],
            feedback_rows: 0,
            parent_scores: vec![0.0, 1.0],
            part: None,
            child_prompt: (!matches!(outcome, Outcome::SkippedPerfect))
                .then(|| format!("child of g{parent} <b>")),
            child_scores: if run { vec![1.0, 1.0] } else { Vec::new() },
            reworded: None,
            outcome,
            spent: spent(
                4 * iteration as u64,
                iteration as u64,
                100 * iteration as u64,
            ),
            cost: spent(4, 1, 100),
            best: Best::default(),
        })
    }

    /// A merge of `a` and `b` on three Pareto rows, costing 4 calls and no tokens counted.
    pub fn merge(iteration: usize, a: usize, b: usize, outcome: Outcome) -> IterationRecord {
        IterationRecord::Merge(MergeRecord {
            iteration,
            parents: [a, b],
            ancestor: 0,
            subsample: vec![11, 12, 13],
            parent_scores: [vec![1.0, 0.0, 0.0], vec![0.0, 1.0, 1.0]],
            child_prompt: Some(format!("merge of g{a} and g{b}")),
            child_scores: vec![1.0, 1.0, 1.0],
            outcome,
            spent: Spent::default(),
            cost: spent(3, 1, 0),
            best: Best::default(),
        })
    }

    pub fn failed(reason: ProposalFailure) -> Outcome {
        Outcome::Failed { reason }
    }

    /// An execution whose history has generations `0..generations` (scores 0.5, 0.6, ...) and
    /// whose iterations are `iterations`.
    pub fn execution(generations: u32, iterations: Vec<IterationRecord>) -> Execution {
        Execution {
            index: 0,
            variant: "v".into(),
            label: "v".into(),
            seed: "seed prompt".into(),
            generations: (0..generations)
                .map(|generation| HistoryRow {
                    variant: "v".into(),
                    evolution_id: "e".into(),
                    generation,
                    score: 0.5 + f64::from(generation) / 10.0,
                    prompt: format!("prompt {generation}"),
                    budget_used: None,
                    costs: None,
                    pareto_scores: None,
                })
                .collect(),
            versions: vec![PromptVersion {
                version: Version::Seed,
                label: "seed".into(),
                prompt: "seed prompt".into(),
                validation_score: Some(0.5),
                replayed: true,
            }],
            models: vec!["m".into()],
            best: None,
            objectives: None,
            iterations,
        }
    }

    const READ: IterationLog = IterationLog::Read { ignored: 0 };

    #[test]
    fn the_summary_counts_each_outcome_and_each_failure_reason() {
        let records = vec![
            mutation(1, 0, Outcome::Accepted { generation: 1 }),
            mutation(2, 1, Outcome::Rejected),
            mutation(3, 1, Outcome::SkippedPerfect),
            mutation(4, 0, failed(ProposalFailure::Duplicate { generation: 1 })),
            mutation(
                5,
                1,
                failed(ProposalFailure::NoFencedBlock {
                    answer: "no block".into(),
                }),
            ),
            mutation(6, 0, failed(ProposalFailure::Duplicate { generation: 0 })),
            merge(7, 0, 1, Outcome::Accepted { generation: 2 }),
        ];
        let summary = summary(&records);
        assert_eq!(
            summary,
            SearchSummary {
                iterations: 7,
                merges: 1,
                accepted: 2,
                rejected: 1,
                skipped: 1,
                failed: vec![
                    ReasonCount {
                        reason: "duplicate".into(),
                        count: 2
                    },
                    ReasonCount {
                        reason: "no_fenced_block".into(),
                        count: 1
                    },
                ],
                calls: 6 * 5 + 4,
                tokens: 600,
                sentence: "7 iterations (1 merge): 2 accepted, 1 rejected, 1 skipped, 3 failed \
                           (2 duplicate, 1 no_fenced_block); 34 calls and 600 tokens spent in \
                           them."
                    .into(),
            }
        );
        let quiet = super::summary(&[merge(1, 0, 0, Outcome::Rejected)]);
        assert_eq!(
            quiet.sentence,
            "1 iteration (1 merge): 0 accepted, 1 rejected, 0 skipped, 0 failed; 4 calls spent in \
             them."
        );
    }

    #[test]
    fn each_proposal_shows_its_rows_scores_outcome_and_cost() {
        let execution = execution(
            3,
            vec![
                mutation(1, 0, Outcome::Accepted { generation: 1 }),
                mutation(2, 1, failed(ProposalFailure::EmptyInstruction)),
                merge(3, 0, 1, Outcome::Rejected),
            ],
        );
        let view = view(&execution, &READ, None, &[]);
        assert_eq!(view.missing, None);
        let [accepted, empty, merge] = &view.proposals[..] else {
            panic!("{:?}", view.proposals)
        };
        assert_eq!(
            (
                accepted.iteration,
                accepted.kind.as_str(),
                &accepted.parents
            ),
            (1, "mutation", &vec!["g0".to_owned()])
        );
        assert_eq!(accepted.rows, 2);
        assert_eq!(accepted.parent_scores, vec![1.0]);
        assert_eq!(accepted.child_score, Some(2.0));
        assert_eq!(accepted.status, OutcomeClass::Accepted);
        assert_eq!(accepted.accepted_as.as_deref(), Some("g1"));
        assert_eq!(accepted.reason, "accepted as g1");
        assert_eq!((accepted.calls, accepted.tokens), (5, 100));
        assert_eq!(accepted.prompt.as_deref(), Some("child of g0 <b>"));

        assert_eq!(empty.status, OutcomeClass::Failed);
        assert_eq!(empty.outcome, "empty_instruction");
        assert_eq!(empty.child_score, None, "the child never ran");
        assert_eq!(empty.reason, "no child: the fenced block is empty");

        assert_eq!(merge.kind, ProposalKind::Merge);
        assert_eq!(merge.parents, vec!["g0".to_owned(), "g1".to_owned()]);
        assert_eq!(merge.rows, 3);
        assert_eq!(merge.parent_scores, vec![1.0, 2.0]);
        assert_eq!(merge.child_score, Some(3.0));
        assert_eq!(merge.accepted_as, None);
        // The engine's own words, scores included.
        assert_eq!(merge.reason, execution.iterations[2].explain());
        assert!(
            merge
                .reason
                .contains("3.00 against the better parent's 2.00")
        );
    }

    #[test]
    fn the_lineage_links_each_accepted_candidate_to_its_parents_and_marks_merges_and_the_best() {
        let execution = execution(
            4,
            vec![
                mutation(1, 0, Outcome::Accepted { generation: 1 }),
                mutation(2, 1, Outcome::Rejected),
                mutation(3, 0, Outcome::Accepted { generation: 2 }),
                merge(4, 1, 2, Outcome::Accepted { generation: 3 }),
            ],
        );
        let view = view(&execution, &READ, Some(Version::Generation(3)), &[]);
        let links: Vec<_> = view
            .lineage
            .iter()
            .map(|n| {
                (
                    n.label.as_str(),
                    n.parents.clone(),
                    n.merge,
                    n.iteration,
                    n.is_best,
                )
            })
            .collect();
        assert_eq!(
            links,
            vec![
                ("g0", vec![], false, None, false),
                ("g1", vec![0], false, Some(1), false),
                ("g2", vec![0], false, Some(3), false),
                ("g3", vec![1, 2], true, Some(4), true),
            ]
        );
        assert_eq!(view.lineage[3].score, Some(0.8), "from history.csv");
        assert!(view.notes.is_empty(), "{:?}", view.notes);

        // The seed as the best version is g0.
        let seed_best = super::view(&execution, &READ, Some(Version::Seed), &[]);
        let best: Vec<&str> = seed_best
            .lineage
            .iter()
            .filter(|n| n.is_best)
            .map(|n| n.label.as_str())
            .collect();
        assert_eq!(best, vec!["g0"]);
    }

    #[test]
    fn a_candidate_wins_the_pareto_rows_no_one_beats_it_on_unless_all_tie() {
        let mut execution = execution(
            5,
            vec![
                mutation(1, 0, Outcome::Accepted { generation: 1 }),
                mutation(2, 0, Outcome::Accepted { generation: 2 }),
                mutation(3, 1, Outcome::Accepted { generation: 3 }),
                mutation(4, 1, Outcome::Accepted { generation: 4 }),
            ],
        );
        let per_row: [Option<Vec<f64>>; 5] = [
            Some(vec![1.0, 0.0, 0.0, 1.0, 0.5]),
            Some(vec![1.0, 1.0, 0.0, 1.0, 0.5]),
            Some(vec![0.0, 1.0, 1.0, 1.0, 0.5]),
            // As the public service reports it: not known.
            None,
            // Does not cover the Pareto set.
            Some(vec![1.0]),
        ];
        for (row, scores) in execution.generations.iter_mut().zip(per_row) {
            row.pareto_scores = scores;
        }
        // The Pareto set as sent: shuffled, so its first row is data row 12.
        let view = view(&execution, &READ, None, &[12, 11, 13, 14, 15]);
        let won = |generation: usize| {
            view.lineage[generation].wins.as_ref().map(|wins| {
                let rows: Vec<(usize, bool)> = wins.rows.iter().map(|w| (w.row, w.alone)).collect();
                (rows, wins.alone())
            })
        };
        assert_eq!(won(0), Some((vec![(12, false)], 0)));
        assert_eq!(
            won(1),
            Some((vec![(11, false), (12, false)], 0)),
            "by data row"
        );
        assert_eq!(won(2), Some((vec![(11, false), (13, true)], 1)));
        assert_eq!(won(3), None);
        assert_eq!(won(4), None);
        assert_eq!(
            view.pareto,
            Some(ParetoTally {
                rows: 5,
                candidates: 3,
                tied: 2
            }),
            "rows 14 and 15 are scored alike by all three"
        );
        assert_eq!(
            view.notes,
            vec![
                "g4 has scores for 1 Pareto rows, but the Pareto set has 5; its wins are not \
                 counted."
                    .to_owned()
            ]
        );
        let unscored = super::tests::execution(2, vec![mutation(1, 0, Outcome::Rejected)]);
        let without = super::view(&unscored, &READ, None, &[1]);
        assert!(without.missing.is_none());
        assert_eq!(without.pareto, None);
        assert!(without.lineage.iter().all(|node| node.wins.is_none()));
    }

    #[test]
    fn contradicting_records_are_left_out_of_the_lineage_with_a_note() {
        let execution = execution(
            2,
            vec![
                mutation(1, 0, Outcome::Accepted { generation: 1 }),
                mutation(2, 0, Outcome::Accepted { generation: 1 }),
                // Not in the history, and made from a later generation.
                mutation(3, 5, Outcome::Accepted { generation: 4 }),
            ],
        );
        let view = view(&execution, &READ, None, &[]);
        let labels: Vec<&str> = view.lineage.iter().map(|n| n.label.as_str()).collect();
        assert_eq!(labels, vec!["g0", "g1", "g4"]);
        assert_eq!(view.lineage[2].parents, Vec::<usize>::new());
        assert_eq!(view.lineage[2].score, None);
        assert_eq!(
            view.notes,
            vec![
                "Iterations 1 and 2 both accepted g1; the lineage shows the first.".to_owned(),
                "Iteration 3 made g4 from g5, which is not an earlier generation; the link is \
                 left out."
                    .to_owned(),
            ]
        );
        assert_eq!(
            view.proposals.len(),
            3,
            "the table still lists every record"
        );
    }

    #[test]
    fn without_iteration_records_the_section_says_why_in_one_sentence() {
        let none = execution(3, Vec::new());
        let missing = view(&none, &IterationLog::Missing, None, &[]);
        assert_eq!(missing.missing.as_deref(), Some(NOT_REPORTED));
        assert!(missing.summary.is_none() && missing.lineage.is_empty());

        let empty = view(&none, &READ, None, &[]);
        assert_eq!(
            empty.missing.as_deref(),
            Some(
                "No iteration of this execution is in iterations.jsonl; only accepted candidates \
                 are known."
            )
        );

        let some = execution(2, vec![mutation(1, 0, Outcome::Rejected)]);
        let unreadable = view(&some, &IterationLog::Unreadable("line 2".into()), None, &[]);
        assert_eq!(
            unreadable.missing.as_deref(),
            Some("iterations.jsonl could not be read, so the search is not shown (see the notes).")
        );
        assert!(unreadable.proposals.is_empty());
    }
}
