//! Whole runs against the deterministic stand-in task.

use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

// An executor is all these tests need: `#[tokio::test]` here is futures-test's, which polls the
// test on the current thread, so the engine builds and tests without tokio.
use futures_test as tokio;

use super::*;
use crate::config::MergeConfig;
use crate::records::ProposalKind;
use crate::stand_in::{
    STAND_IN_EVALUATION_TOKENS, STAND_IN_REFLECTION_TOKENS, StandIn, fenced_blocks,
    keyword_reflection,
};

const SEED: &str = "Answer {question}.";

/// Feedback rows then Pareto rows, three keywords in each.
const ROWS: [&str; 12] = [
    "alpha", "bravo", "charlie", "alpha", "bravo", "charlie", //
    "alpha", "bravo", "charlie", "alpha", "bravo", "charlie",
];

fn config(budget: u64) -> EngineConfig {
    EngineConfig::new(6, 6, budget)
}

async fn run_quietly(task: &StandIn, config: &EngineConfig) -> Result<Run, EngineError> {
    run(task, SEED, config, |_| {}).await
}

fn spent_calls(run: &Run) -> u64 {
    run.spent().total()
}

#[tokio::test]
async fn reflection_improves_the_seed_and_every_step_is_recorded() {
    let task = StandIn::new(&ROWS);
    let run = run_quietly(&task, &config(200)).await.expect("run");

    assert_eq!(run.stop(), StopReason::Solved);
    assert_eq!(run.best().score, 1.0);
    for keyword in ["alpha", "bravo", "charlie"] {
        assert!(run.best().prompt.contains(keyword), "{}", run.best().prompt);
    }
    let seed = &run.candidates()[0];
    assert_eq!((seed.generation, seed.iteration), (0, 0));
    assert!(seed.parents.is_empty());
    assert_eq!(seed.prompt, SEED);
    assert_eq!(seed.score, 0.0);
    for (generation, candidate) in run.candidates().iter().enumerate().skip(1) {
        assert_eq!(candidate.generation, generation);
        assert_eq!(candidate.parents.len(), 1);
        assert!(candidate.parents[0] < generation);
        let parent = &run.candidates()[candidate.parents[0]];
        assert!(candidate.score > parent.score);
    }
    // Every accepted mutation beat its parent on the same minibatch.
    for record in run.iterations() {
        let IterationRecord::Mutation(mutation) = record else {
            panic!("merge is off");
        };
        assert_eq!(mutation.minibatch.len(), 3);
        assert!(mutation.minibatch.iter().all(|&example| example < 6));
        if let Outcome::Accepted { .. } = mutation.outcome {
            assert!(sum(&mutation.child_scores) > sum(&mutation.parent_scores));
        }
    }
    assert_eq!(spent_calls(&run), task.calls_made());
    assert_eq!(
        run.spent().reflection_calls,
        task.reflections.load(Ordering::SeqCst)
    );
    // Each iteration's cost is what it added to the run's spending; the seed paid the rest.
    let seed_cost = run.candidates()[0].spent;
    let mut before = seed_cost;
    for record in run.iterations() {
        assert_eq!(record.cost(), record.spent().since(before));
        before = record.spent();
    }
    assert_eq!(before, run.spent());
    let tokens = task.evaluations.load(Ordering::SeqCst) * STAND_IN_EVALUATION_TOKENS
        + task.reflections.load(Ordering::SeqCst) * STAND_IN_REFLECTION_TOKENS;
    assert_eq!(run.spent().tokens, tokens);
}

#[tokio::test]
async fn a_known_score_is_never_paid_twice() {
    let rows = [
        "alpha", "bravo", "alpha", "", "alpha", "bravo", "alpha", "bravo", "", "alpha", "bravo", "",
    ];
    let task = StandIn::new(&rows);
    let mut config = config(300);
    config.merge = Some(MergeConfig::default());
    config.stall_iterations = Some(20);
    run_quietly(&task, &config).await.expect("run");
    let calls = task
        .calls
        .lock()
        .map(|calls| calls.clone())
        .unwrap_or_default();
    let distinct: HashSet<&(String, usize)> = calls.iter().collect();
    assert_eq!(distinct.len(), calls.len());
}

#[tokio::test]
async fn a_tie_on_the_minibatch_is_rejected() {
    // The child adds no keyword: same scores as its parent.
    let task = StandIn::new(&ROWS).reflecting(|request| {
        Ok(format!(
            "```\n{} Be careful.\n```",
            fenced_blocks(request)[0]
        ))
    });
    let mut config = config(100);
    config.stall_iterations = Some(2);
    let run = run_quietly(&task, &config).await.expect("run");
    assert_eq!(run.candidates().len(), 1);
    assert_eq!(run.stop(), StopReason::Stalled);
    for record in run.iterations() {
        let IterationRecord::Mutation(mutation) = record else {
            panic!("merge is off");
        };
        assert_eq!(mutation.outcome, Outcome::Rejected);
        assert_eq!(mutation.child_scores, mutation.parent_scores);
        assert_eq!(
            mutation.child_prompt.as_deref(),
            Some("Answer {question}. Be careful.")
        );
    }
}

#[tokio::test]
async fn a_child_that_drops_a_placeholder_gets_the_input_back_as_a_field() {
    let task = StandIn::new(&ROWS)
        .reflecting(|_| Ok("```\nAnswer the question. Mention alpha.\n```".into()));
    let mut config = config(100);
    config.stall_iterations = Some(1);
    let run = run_quietly(&task, &config).await.expect("run");
    let IterationRecord::Mutation(mutation) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(
        mutation.child_prompt.as_deref(),
        Some("Answer the question. Mention alpha.\n\nQuestion: {question}")
    );
    assert!(
        !matches!(mutation.outcome, Outcome::Failed { .. }),
        "{:?}",
        mutation.outcome
    );
    assert_eq!(mutation.child_scores.len(), mutation.minibatch.len());
}

#[tokio::test]
async fn unusable_answers_fail_the_iteration_not_the_run() {
    let answers = [
        (
            "Mention alpha, I think.",
            ProposalFailure::NoFencedBlock {
                answer: "Mention alpha, I think.".into(),
            },
        ),
        ("```\n\n```", ProposalFailure::EmptyInstruction),
        (
            "```\nAnswer {question}.\n```",
            ProposalFailure::Duplicate { generation: 0 },
        ),
    ];
    for (answer, reason) in answers {
        let task = StandIn::new(&ROWS).reflecting(move |_| Ok(answer.to_string()));
        let mut config = config(100);
        config.stall_iterations = Some(1);
        let run = run_quietly(&task, &config).await.expect("run");
        assert_eq!(run.stop(), StopReason::Stalled);
        assert_eq!(
            run.iterations()[0].outcome(),
            &Outcome::Failed { reason },
            "answer {answer:?}"
        );
    }
}

#[tokio::test]
async fn same_seed_same_run() {
    let mut config = config(150);
    config.merge = Some(MergeConfig::default());
    let rows = [
        "alpha", "", "bravo", "charlie", "", "delta", "alpha", "", "bravo", "charlie", "", "delta",
    ];
    let mut runs = Vec::new();
    for seed in [7, 7, 8, 9, 10] {
        config.seed = seed;
        let task = StandIn::new(&rows);
        let mut events = Vec::new();
        let run = run(&task, SEED, &config, |event| events.push(event.clone()))
            .await
            .expect("run");
        let json = serde_json::to_string(&(&run, &events)).expect("records serialise");
        runs.push(json);
    }
    assert_eq!(runs[0], runs[1]);
    let distinct: BTreeSet<&String> = runs.iter().collect();
    assert!(distinct.len() > 2, "the seed should change the run");
}

#[tokio::test]
async fn budget_is_never_exceeded() {
    // Many seeds, budgets and settings, with answers that are now and then unusable and calls
    // that now and then fail, to go through every path that spends.
    let rows = [
        "alpha", "bravo", "charlie", "alpha", "bravo", //
        "alpha", "", "bravo", "charlie", "", "alpha", "delta",
    ];
    // (merge, on task error, fail every nth evaluation)
    let settings = [
        (false, OnTaskError::Fail, None),
        (true, OnTaskError::Fail, None),
        (true, OnTaskError::ScoreZero, Some(13)),
        (true, OnTaskError::Fail, Some(97)),
    ];
    let mut finished = 0;
    let mut merges = 0;
    for seed in 0..12u64 {
        for budget in [5, 6, 7, 9, 13, 20, 31, 47, 80, 130, 210] {
            for (merge, on_task_error, fail_every) in settings {
                let reflections = AtomicU64::new(0);
                let evaluations = AtomicU64::new(0);
                let task = StandIn::new(&rows)
                    .reflecting(move |request| {
                        match reflections.fetch_add(1, Ordering::SeqCst) + seed {
                            n if n % 5 == 4 => Ok("no fence".into()),
                            n if n % 7 == 6 => Ok("```\nuse {made_up}\n```".into()),
                            n if n % 11 == 10 && fail_every.is_some() => {
                                Err(TaskError::new("reflection model overloaded"))
                            }
                            _ => keyword_reflection(request),
                        }
                    })
                    .failing(move |_, _| {
                        let n = evaluations.fetch_add(1, Ordering::SeqCst) + 1;
                        fail_every
                            .is_some_and(|every| n.is_multiple_of(every))
                            .then(|| TaskError::new("task model timed out"))
                    });
                let mut config = EngineConfig::new(5, 7, budget);
                config.seed = seed;
                config.merge = merge.then(MergeConfig::default);
                config.on_task_error = on_task_error;
                // Every call the stand-in sees is then a paid one; retries (paid once) have
                // their own test.
                config.retries = 0;
                config.parallel_calls = 1 + seed as usize % 3;
                let mut last_spent = 0;
                let result = run(&task, SEED, &config, |event| {
                    if let EngineEvent::Progress(progress) = event {
                        assert!(progress.spent.total() >= last_spent);
                        last_spent = progress.spent.total();
                        assert!(last_spent <= budget);
                    }
                })
                .await;
                assert!(task.calls_made() <= budget, "seed {seed} budget {budget}");
                match result {
                    Ok(run) => {
                        assert_eq!(spent_calls(&run), task.calls_made());
                        if run.stop() == StopReason::Budget {
                            // It stopped because the worst case of one more iteration did not
                            // fit, not earlier: 3 + 1 + 3 + 7 calls at most.
                            assert!(budget - spent_calls(&run) < 14, "stopped early");
                        }
                        finished += 1;
                        merges += run
                            .iterations()
                            .iter()
                            .filter(|record| matches!(record, IterationRecord::Merge(_)))
                            .count();
                    }
                    Err(EngineError::BudgetTooSmall { needed, .. }) => {
                        assert!(budget < needed);
                        assert_eq!(task.calls_made(), 0);
                    }
                    Err(other) => panic!("unexpected error {other}"),
                }
            }
        }
    }
    assert!(finished > 350, "only {finished} runs got past the seed");
    assert!(merges > 20, "only {merges} merges were tried");
}

#[tokio::test]
async fn stops_when_the_time_limit_has_passed() {
    let task = StandIn::new(&ROWS);
    let mut config = config(200);
    config.time_limit = Some(Duration::ZERO);
    let run = run_quietly(&task, &config).await.expect("run");
    assert_eq!(run.stop(), StopReason::Time);
    assert!(run.iterations().is_empty());
    assert_eq!(task.calls_made(), 6);
}

#[tokio::test]
async fn stops_at_the_score_threshold() {
    let task = StandIn::new(&ROWS);
    let mut config = config(200);
    config.score_threshold = Some(0.6);
    let run = run_quietly(&task, &config).await.expect("run");
    assert_eq!(run.stop(), StopReason::Threshold);
    // Each keyword is a third of the Pareto set: two keywords reach 0.6.
    assert!((run.best().score - 2.0 / 3.0).abs() < 1e-9);

    config.score_threshold = Some(0.0);
    let run = run_quietly(&StandIn::new(&ROWS), &config)
        .await
        .expect("run");
    assert_eq!(run.stop(), StopReason::Threshold);
    assert!(run.iterations().is_empty());
}

#[tokio::test]
async fn stops_when_nothing_is_accepted_for_n_iterations() {
    let task = StandIn::new(&ROWS).reflecting(|_| Ok("no fence".into()));
    let mut config = config(200);
    config.stall_iterations = Some(4);
    let run = run_quietly(&task, &config).await.expect("run");
    assert_eq!(run.stop(), StopReason::Stalled);
    assert_eq!(run.iterations().len(), 4);
}

#[tokio::test]
async fn spends_the_tail_of_the_budget_on_a_smaller_minibatch_then_stops() {
    let task = StandIn::new(&ROWS);
    // Seed 6; the first iteration costs at most 3 + 1 + 3 + 6 = 13. The 12 left cannot pay for
    // a second one on 3 examples whose parent, the new child, has no known minibatch scores
    // (13 again), but they pay for one on 2 examples (2 + 1 + 2 + 6 = 11).
    let run = run_quietly(&task, &config(6 + 13 + 12)).await.expect("run");
    assert_eq!(run.stop(), StopReason::Budget);
    assert_eq!(run.iterations().len(), 2);
    let IterationRecord::Mutation(first) = &run.iterations()[0] else {
        panic!("a mutation")
    };
    let IterationRecord::Mutation(second) = &run.iterations()[1] else {
        panic!("a mutation")
    };
    assert_eq!(first.minibatch.len(), 3);
    assert_eq!(second.minibatch.len(), 2);
    assert!(spent_calls(&run) <= 31);
    assert_eq!(spent_calls(&run), task.calls_made());
}

#[tokio::test]
async fn stops_when_the_feedback_set_is_solved() {
    // The seed already mentions every feedback keyword, but the Pareto set has one it lacks:
    // reflection has nothing to learn from.
    let rows = ["alpha", "alpha", "alpha", "alpha", "delta", "delta"];
    let task = StandIn::new(&rows);
    let config = EngineConfig::new(3, 3, 100);
    let run = run(&task, "Answer {question}. Mention alpha.", &config, |_| {})
        .await
        .expect("run");
    assert_eq!(run.stop(), StopReason::Solved);
    assert!(
        run.iterations()
            .iter()
            .all(|record| record.outcome() == &Outcome::SkippedPerfect)
    );
    assert_eq!(run.spent().reflection_calls, 0);
    assert_eq!(run.spent().task_calls, 6);
}

#[tokio::test]
async fn a_task_error_stops_the_run_by_default_and_keeps_its_records() {
    let task = StandIn::new(&ROWS).failing(|prompt, example| {
        (prompt.contains("bravo") && example == 8).then(|| TaskError::new("503: no node for model"))
    });
    let run = run_quietly(&task, &config(200)).await.expect("run");
    assert_eq!(run.stop(), StopReason::Failed);
    let failure = run.failure().expect("failure");
    assert_eq!(failure.call, CallKind::Evaluate);
    assert_eq!(failure.example, Some(8));
    assert!(failure.iteration >= 1);
    assert_eq!(failure.error.to_string(), "503: no node for model");
    assert!(!run.candidates().is_empty());
    // The failed call was tried twice (one retry) and paid for once.
    assert_eq!(spent_calls(&run) + 1, task.calls_made());
}

#[tokio::test]
async fn a_call_that_fails_once_is_retried_and_a_run_of_failures_stops_the_run() {
    // Example 8 fails on the first attempt of every prompt, then answers: the run is the one
    // it would have been without the failures, paid the same, with one extra attempt per
    // prompt scored on example 8.
    let attempts = Mutex::new(BTreeSet::new());
    let flaky = StandIn::new(&ROWS).failing(move |prompt, example| {
        (example == 8 && attempts.lock().unwrap().insert(prompt.to_owned()))
            .then(|| TaskError::new("504: generation timed out"))
    });
    let steady = StandIn::new(&ROWS);
    let mut config = config(200);
    config.on_task_error = OnTaskError::ScoreZero;
    let with_retries = run_quietly(&flaky, &config).await.expect("run");
    let without = run_quietly(&steady, &config).await.expect("run");
    assert_eq!(with_retries.candidates(), without.candidates());
    assert_eq!(with_retries.spent(), without.spent());
    let scored_on_8 = flaky
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, example)| *example == 8)
        .map(|(prompt, _)| prompt.clone())
        .collect::<BTreeSet<_>>()
        .len() as u64;
    assert!(scored_on_8 >= 1);
    assert_eq!(flaky.calls_made(), steady.calls_made() + scored_on_8);

    // Every evaluation fails: three in a row (after their retries) stop the run, and the error
    // says so.
    let task = StandIn::new(&ROWS).failing(|_, _| Some(TaskError::new("503: no node")));
    config.parallel_calls = 1;
    match run_quietly(&task, &config).await {
        Err(EngineError::SeedEvaluation { failure, spent }) => {
            assert_eq!(failure.failures_in_a_row, 3);
            assert!(
                failure.to_string().contains("(3 failed calls in a row)"),
                "{failure}"
            );
            assert_eq!(spent.task_calls, 3);
            assert_eq!(task.calls_made(), 6);
        }
        other => panic!("expected the seed evaluation to fail, got {other:?}"),
    }
}

#[tokio::test]
async fn with_score_zero_a_failed_evaluation_scores_0_and_the_run_goes_on() {
    let task = StandIn::new(&ROWS).failing(|prompt, example| {
        (prompt.contains("bravo") && example == 7).then(|| TaskError::new("timeout"))
    });
    let mut config = config(200);
    config.on_task_error = OnTaskError::ScoreZero;
    config.stall_iterations = Some(10);
    let run = run_quietly(&task, &config).await.expect("run");
    assert_ne!(run.stop(), StopReason::Failed);
    let with_bravo = run
        .candidates()
        .iter()
        .find(|candidate| candidate.prompt.contains("bravo"))
        .expect("a candidate with bravo");
    // Example 7 is the second Pareto example, a bravo row the prompt would have solved.
    assert_eq!(with_bravo.pareto_scores[1], 0.0);
}

#[tokio::test]
async fn a_failed_reflection_fails_the_run_or_only_its_iteration() {
    let failing = || StandIn::new(&ROWS).reflecting(|_| Err(TaskError::new("429 quota exhausted")));
    let run = run_quietly(&failing(), &config(100)).await.expect("run");
    assert_eq!(run.stop(), StopReason::Failed);
    assert_eq!(run.failure().map(|f| f.call), Some(CallKind::Reflect));

    let mut config = config(100);
    config.on_task_error = OnTaskError::ScoreZero;
    config.stall_iterations = Some(2);
    let run = run_quietly(&failing(), &config).await.expect("run");
    assert_eq!(run.stop(), StopReason::Stalled);
    assert!(matches!(
        run.iterations()[0].outcome(),
        Outcome::Failed {
            reason: ProposalFailure::ReflectionError { .. }
        }
    ));
}

#[tokio::test]
async fn a_score_outside_0_1_is_a_task_error() {
    struct Broken(StandIn);
    impl Task for Broken {
        async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
            let mut evaluation = self.0.evaluate(prompt, example).await?;
            evaluation.score *= 2.0;
            Ok(evaluation)
        }
        async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
            self.0.reflect(request).await
        }
        fn describe(&self, example: usize) -> ExampleView {
            self.0.describe(example)
        }
        fn example_count(&self) -> usize {
            self.0.example_count()
        }
    }
    let task = Broken(StandIn::new(&ROWS));
    let seed = "Answer {question}. Mention alpha.";
    match run(&task, seed, &config(100), |_| {}).await {
        Err(EngineError::SeedEvaluation { failure, .. }) => {
            assert_eq!(failure.iteration, 0);
            assert!(failure.error.to_string().contains("outside [0, 1]"));
        }
        other => panic!("expected a seed failure, got {other:?}"),
    }
}

#[tokio::test]
async fn refuses_to_start_what_it_cannot_pay_for_or_read() {
    let task = StandIn::new(&ROWS);
    match run_quietly(&task, &config(5)).await {
        Err(EngineError::BudgetTooSmall {
            budget: 5,
            needed: 6,
        }) => {}
        other => panic!("expected BudgetTooSmall, got {other:?}"),
    }
    assert_eq!(task.calls_made(), 0);
    match run_quietly(&task, &EngineConfig::new(6, 7, 100)).await {
        Err(EngineError::Dataset { available: 12, .. }) => {}
        other => panic!("expected Dataset, got {other:?}"),
    }
    match run(&task, "", &config(100), |_| {}).await {
        Err(EngineError::Config {
            field: "seed_prompt",
            ..
        }) => {}
        other => panic!("expected a seed_prompt error, got {other:?}"),
    }
    assert_eq!(task.calls_made(), 0);
}

#[tokio::test]
async fn merges_combine_lineages_that_share_an_ancestor() {
    // Plain rows punish a prompt with two keywords, so single-keyword lineages coexist on the
    // front and a merge has two to combine.
    let rows = [
        "alpha", "bravo", "alpha", "bravo", "alpha", "bravo", //
        "alpha", "bravo", "", "alpha", "bravo", "",
    ];
    let mut merges_accepted = 0;
    for seed in 0..10 {
        let task = StandIn::new(&rows);
        let mut config = config(300);
        config.seed = seed;
        config.stall_iterations = Some(15);
        config.merge = Some(MergeConfig::default());
        let run = run_quietly(&task, &config).await.expect("run");
        let ancestors = |generation: usize| {
            let mut found = BTreeSet::new();
            let mut stack = run.candidates()[generation].parents.clone();
            while let Some(parent) = stack.pop() {
                if found.insert(parent) {
                    stack.extend(run.candidates()[parent].parents.iter().copied());
                }
            }
            found
        };
        for record in run.iterations() {
            let IterationRecord::Merge(merge) = record else {
                continue;
            };
            let [first, second] = merge.parents;
            assert!(!ancestors(first).contains(&second) && !ancestors(second).contains(&first));
            assert!(ancestors(first).contains(&merge.ancestor));
            assert!(ancestors(second).contains(&merge.ancestor));
            let score = |generation: usize| run.candidates()[generation].score;
            assert!(score(merge.ancestor) <= score(first).min(score(second)));
            assert!(
                merge
                    .subsample
                    .iter()
                    .all(|&example| (6..12).contains(&example))
            );
            if let Outcome::Accepted { generation } = merge.outcome {
                assert_eq!(run.candidates()[generation].parents, vec![first, second]);
                assert!(sum(&merge.child_scores) >= sum(&merge.parent_scores[0]));
                merges_accepted += 1;
            }
        }
    }
    assert!(merges_accepted > 0, "no merge was ever accepted");
}

#[tokio::test]
async fn the_observer_sees_the_seed_first_progress_as_it_goes_and_the_end_last() {
    let task = StandIn::new(&ROWS);
    let mut events = Vec::new();
    let run = run(&task, SEED, &config(200), |event| {
        events.push(event.clone())
    })
    .await
    .expect("run");
    let first_candidate = events.iter().find_map(|event| match event {
        EngineEvent::Candidate(candidate) => Some(candidate.generation),
        _ => None,
    });
    assert_eq!(first_candidate, Some(0));
    let Some(EngineEvent::Finished { stop, progress }) = events.last() else {
        panic!("the last event should be Finished");
    };
    assert_eq!(*stop, run.stop());
    assert_eq!(progress.spent, run.spent());
    assert_eq!(progress.best_score, Some(run.best().score));
    assert_eq!(progress.generation, run.candidates().len() - 1);
    let iterations = events
        .iter()
        .filter(|event| matches!(event, EngineEvent::Iteration(_)))
        .count();
    assert_eq!(iterations, run.iterations().len());
    // Events serialise with their kind, for events.jsonl.
    let line = serde_json::to_value(&events[0]).expect("serialise");
    assert_eq!(line["event"], "progress");
    let mutation = events
        .iter()
        .find(|e| matches!(e, EngineEvent::Iteration(_)));
    let line = serde_json::to_value(mutation).expect("serialise");
    assert_eq!(line["kind"], "mutation");
    assert!(line["outcome"]["status"].is_string());
}

#[tokio::test]
async fn the_rules_proposer_shows_one_failure_and_adds_one_checked_rule() {
    // The stand-in scores a prompt 1 on a row when it mentions the row's keyword, and the
    // expected outputs are the keywords: a classification with labels alpha, bravo, charlie.
    let requests = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&requests);
    let task = StandIn::new(&ROWS).reflecting(move |request| {
        let mut seen = seen.lock().unwrap();
        seen.push(request.to_owned());
        let correct = correct_answer(request).to_owned();
        // Every third answer teaches a wrong label, which the engine must refuse.
        Ok(if seen.len().is_multiple_of(3) {
            let wrong = if correct == "alpha" { "bravo" } else { "alpha" };
            format!("- When the question looks like this, answer {wrong}.")
        } else {
            format!("Sure:\n- When the question looks like this, answer <{correct}>.")
        })
    });
    let mut config = config(120);
    config.proposer = Proposer::Rules;
    config.stall_iterations = Some(6);
    let run = run_quietly(&task, &config).await.expect("run");
    assert!(run.candidates().len() > 1, "rules were accepted");
    for candidate in &run.candidates()[1..] {
        let prompt = &candidate.prompt;
        // The seed is kept whole (its input is on its first line, so the rules follow it).
        assert!(
            prompt.starts_with(
                "Answer {question}.\n\nRules:\n- When the question looks like this, answer "
            ),
            "{prompt}"
        );
        assert!(!prompt.contains('<'), "{prompt}");
    }
    let outcomes: Vec<&Outcome> = run.iterations().iter().map(|r| r.outcome()).collect();
    assert!(
        outcomes.iter().any(|o| matches!(
            o,
            Outcome::Failed {
                reason: ProposalFailure::WrongAnswerInRules { .. }
            }
        )),
        "{outcomes:?}"
    );
    for request in requests.lock().unwrap().iter() {
        // One confusion at a time: every failure shown has the same correct answer.
        let shown = request.matches("Wrong answer: ").count();
        assert!(
            (1..=reflection::MAX_FAILURES_SHOWN).contains(&shown),
            "{request}"
        );
        let correct: HashSet<&str> = request
            .split("Correct answer: ")
            .skip(1)
            .filter_map(|rest| rest.lines().next())
            .collect();
        assert_eq!(correct.len(), 1, "{request}");
        assert!(request.contains("Every correct answer is exactly one of: alpha, bravo, charlie."));
        // The rules the parent has are not shown again.
        assert!(!request.contains("Rules:"), "{request}");
    }
}

/// The correct answer a rules request shows first ("" when it shows none).
fn correct_answer(request: &str) -> &str {
    request
        .split("Correct answer: ")
        .nth(1)
        .and_then(|rest| rest.lines().next())
        .unwrap_or_default()
}

/// The first iteration of a rules run with every feedback row in the minibatch and a reflection
/// that always writes the same rule for the correct answer it is shown.
async fn one_rules_iteration(feedback: [&str; 6], answer: fn(&str) -> String) -> MutationRecord {
    let pareto = ["alpha", "", "bravo", "", "charlie", ""];
    let rows: Vec<&str> = feedback.iter().chain(&pareto).copied().collect();
    let task = StandIn::new(&rows).reflecting(move |request| {
        let correct = correct_answer(request);
        Ok(answer(correct))
    });
    // Enough for the first iteration to ask a quoting rule again.
    let mut config = config(40);
    config.proposer = Proposer::Rules;
    config.reflection_minibatch = 6;
    let run = run_quietly(&task, &config).await.expect("run");
    let IterationRecord::Mutation(record) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    record.clone()
}

#[tokio::test]
async fn a_rule_that_gains_on_its_own_rows_by_breaking_others_is_rejected() {
    // The rule for the three alpha rows fixes them and breaks the plain row (which any keyword
    // confuses): +3 -1 on the minibatch, but -1 on the rows it was not written from.
    let record = one_rules_iteration(["alpha", "alpha", "alpha", "", "bravo", "bravo"], |c| {
        format!("- When the question looks like this, answer {c}.")
    })
    .await;
    let alpha_rows: BTreeSet<usize> = record.shown.iter().copied().collect();
    assert_eq!(alpha_rows, BTreeSet::from([0, 1, 2]));
    assert!(sum(&record.child_scores) > sum(&record.parent_scores));
    assert_eq!(record.outcome, Outcome::Rejected);
    let explained = IterationRecord::Mutation(record).explain();
    assert!(
        explained.contains("but 0.00 against 1.00 on the 3 rows its proposal was not written from"),
        "{explained}"
    );
    // Without the plain row to break, the same rule is kept.
    let record = one_rules_iteration(
        ["alpha", "alpha", "alpha", "bravo", "bravo", "charlie"],
        |c| format!("- When the question looks like this, answer {c}."),
    )
    .await;
    assert!(
        matches!(record.outcome, Outcome::Accepted { .. }),
        "{record:?}"
    );
}

#[tokio::test]
async fn a_rule_that_quotes_an_input_is_refused() {
    // The stand-in's inputs are "question <row>": "question 4" is in one input.
    let record = one_rules_iteration(
        ["alpha", "bravo", "charlie", "alpha", "bravo", "charlie"],
        |c| format!("- When the input reads question 4, answer {c}."),
    )
    .await;
    assert_eq!(
        record.outcome,
        Outcome::Failed {
            reason: ProposalFailure::QuotesInputs {
                pair: "question 4".into(),
                inputs: 1
            }
        }
    );
    // Asked again, the stand-in wrote the same rule: the second refusal is the outcome, the
    // first is on record as the reason it was asked.
    assert_eq!(
        record.reworded.as_ref().and_then(|r| r.quoted_words()),
        Some("question 4")
    );
    // The child is kept in the record, to show what was refused, and never run.
    assert!(
        record
            .child_prompt
            .is_some_and(|p| p.contains("question 4"))
    );
    assert!(record.child_scores.is_empty());
}

#[tokio::test]
async fn a_quoting_rule_is_asked_for_again_in_general_words_and_the_new_one_is_judged() {
    let rows = [
        "alpha", "bravo", "charlie", "alpha", "bravo", "charlie", //
        "alpha", "", "bravo", "", "charlie", "",
    ];
    let asked_again = std::sync::Arc::new(Mutex::new(Vec::new()));
    let seen = asked_again.clone();
    let task = StandIn::new(&rows).reflecting(move |request| {
        let correct = correct_answer(request);
        if request.contains("\nYou answered:\n") {
            seen.lock().unwrap().push(request.to_owned());
            Ok(format!(
                "- When the question names {correct}, answer {correct}."
            ))
        } else {
            Ok(format!(
                "- When the input reads question 4, answer {correct}."
            ))
        }
    });
    let mut config = config(40);
    config.proposer = Proposer::Rules;
    config.reflection_minibatch = 6;
    let run = run_quietly(&task, &config).await.expect("run");
    let IterationRecord::Mutation(record) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(
        record.reworded.as_deref(),
        Some(&ProposalFailure::QuotesInputs {
            pair: "question 4".into(),
            inputs: 1
        })
    );
    let child = record.child_prompt.as_deref().expect("a child");
    assert!(!child.contains("question 4"), "{child}");
    assert!(
        !record.child_scores.is_empty(),
        "the reworded child was run"
    );
    // The second request is the first with the refused answer and the words to avoid (later
    // iterations ask again too).
    let requests = asked_again.lock().unwrap();
    assert!(!requests.is_empty());
    assert!(
        requests[0].contains("- When the input reads question 4, answer ")
            && requests[0].contains("That rule repeats \"question 4\"")
            && requests[0].contains("Every correct answer is exactly one of"),
        "{}",
        requests[0]
    );
    // Both calls are paid for, and the report says why there were two.
    assert_eq!(record.cost.reflection_calls, 2);
    let explained = IterationRecord::Mutation(record.clone()).explain();
    assert!(
        explained.contains(
            "a second answer's rule; the first was refused: the child quotes \"question 4\""
        ),
        "{explained}"
    );
}

#[tokio::test]
async fn a_quoting_rule_does_not_cost_the_clean_rule_beside_it() {
    let record = one_rules_iteration(
        ["alpha", "bravo", "charlie", "alpha", "bravo", "charlie"],
        |c| format!("- When the input reads question 4, answer {c}.\n- When unsure, answer {c}."),
    )
    .await;
    let child = record.child_prompt.expect("a child");
    assert!(child.contains("- When unsure, answer "), "{child}");
    assert!(!child.contains("question 4"), "{child}");
    assert!(!record.child_scores.is_empty(), "the child was run");
}

#[tokio::test]
async fn a_rules_request_asked_again_shows_the_rules_it_got_and_gets_another() {
    // The seed names bravo and charlie, so the one feedback row that fails is the alpha row:
    // every mutation of the seed shows that row alone, and its request comes back unchanged
    // until a rule is accepted. The stand-in answers with a wrong label (refused) until it is
    // shown that answer, then with the right one.
    let seed = "Answer {question}: bravo or charlie.";
    let rows = [
        "alpha", "bravo", "charlie", "bravo", "charlie", "bravo", //
        "alpha", "bravo", "charlie", "alpha", "bravo", "charlie",
    ];
    let first = "- When the question is short, answer bravo.";
    let requests = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = requests.clone();
    let task = StandIn::new(&rows).reflecting(move |request| {
        seen.lock().unwrap().push(request.to_owned());
        Ok(if request.contains("already tried") {
            "- When the question is long, answer alpha.".to_owned()
        } else {
            first.to_owned()
        })
    });
    let mut config = config(60);
    config.proposer = Proposer::Rules;
    // Every feedback row in every minibatch, so that every iteration meets the alpha row.
    config.reflection_minibatch = 6;
    let run = run(&task, seed, &config, |_| {}).await.expect("run");
    let requests = requests.lock().unwrap();
    assert!(requests.len() >= 2, "{requests:?}");
    assert!(!requests[0].contains("already tried"), "{}", requests[0]);
    // The second request is the first with the answer it got, and the ask for another rule.
    assert_eq!(
        requests[1],
        format!(
            "{}\n\nThis request was asked once before, and these answers were already \
             tried:\n{first}\nWrite one different rule for the inputs above, not one of \
             those, in the same form.",
            requests[0]
        )
    );
    let outcomes: Vec<&Outcome> = run.iterations().iter().map(|r| r.outcome()).collect();
    assert!(
        matches!(
            outcomes[0],
            Outcome::Failed {
                reason: ProposalFailure::WrongAnswerInRules { .. }
            }
        ),
        "{outcomes:?}"
    );
    assert!(
        matches!(outcomes[1], Outcome::Accepted { .. }),
        "{outcomes:?}"
    );
    assert!(run.candidates()[1].prompt.contains("answer alpha"));
}

#[test]
fn a_request_asked_again_says_how_often_and_shows_its_last_three_distinct_answers() {
    let mut earlier = reflection::Earlier::default();
    assert_eq!(reflection::asked_again("Rows.", &earlier), "Rows.");
    // The same answer twice: one answer shown, but the text changes with the count, so the
    // sampling seed derived from it does too.
    earlier.add("- Rule 1.".into());
    let once = reflection::asked_again("Rows.", &earlier);
    earlier.add("- Rule 1.".into());
    let twice = reflection::asked_again("Rows.", &earlier);
    assert_ne!(once, twice);
    assert!(twice.starts_with("Rows.\n\nThis request was asked twice before, and these answers were already tried:\n- Rule 1.\nWrite"), "{twice}");
    for n in 2..=5 {
        earlier.add(format!("- Rule {n}."));
    }
    let again = reflection::asked_again("Rows.", &earlier);
    assert!(again.contains("asked 6 times before"), "{again}");
    assert!(!again.contains("- Rule 2."), "{again}");
    for n in 3..=5 {
        assert!(again.contains(&format!("\n- Rule {n}.\n")), "{again}");
    }
    // An empty answer is counted, not shown.
    let mut empty = reflection::Earlier::default();
    empty.add(String::new());
    assert_eq!(
        reflection::asked_again("Rows.", &empty),
        "Rows.\n\nThis request was asked once before.\nWrite one rule for the inputs above, in the same form."
    );
}

/// A glossary answer for the label a request asks about: one subject made of the label (kept),
/// the label's bare name and a sentence (dropped), and "question" (kept) then "4", which next to
/// it quotes one input, "question 4" (dropped).
fn glossary_answer(request: &str) -> Result<String, TaskError> {
    let label = request
        .split("of the kind ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .unwrap_or_default();
    Ok(format!(
        "- {label}: {label} matters, {label}, question, 4, this is a whole sentence here, \
         topics, topics"
    ))
}

/// The rules proposer with the glossary on, stopping after one iteration without a child.
fn glossary_config() -> EngineConfig {
    let mut config = config(40);
    config.proposer = Proposer::Rules;
    config.label_glossary = true;
    config.stall_iterations = Some(1);
    config
}

#[tokio::test]
async fn the_first_iteration_of_a_classification_writes_a_label_glossary_judged_on_the_pareto_set()
{
    let requests = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&requests);
    let task = StandIn::new(&ROWS).reflecting(move |request| {
        seen.lock().unwrap().push(request.to_owned());
        glossary_answer(request)
    });
    let config = glossary_config();
    let run = run_quietly(&task, &config).await.expect("run");
    let IterationRecord::Mutation(record) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    // Judged on the Pareto set, written from the feedback rows.
    assert_eq!(record.minibatch, (6..12).collect::<Vec<_>>());
    assert_eq!(record.shown, (0..6).collect::<Vec<_>>());
    assert_eq!(record.parent_scores, vec![0.0; 6]);
    assert_eq!(record.child_scores, vec![1.0; 6]);
    assert_eq!(record.outcome, Outcome::Accepted { generation: 1 });
    assert_eq!(record.written_from, MutationKind::Glossary);
    assert_eq!(run.iterations()[0].kind(), ProposalKind::Glossary);
    assert_eq!(
        run.candidates()[1].prompt,
        "What each answer is about:\n- alpha: alpha matters, question, topics\n- bravo: bravo \
         matters, question, topics\n- charlie: charlie matters, question, topics\n\nAnswer \
         {question}."
    );
    // One reflection per label; the seed's Pareto scores were known, so only the child ran.
    assert_eq!(record.cost.reflection_calls, 3);
    assert_eq!(record.cost.task_calls, 6);
    let requests = requests.lock().unwrap();
    let first = &requests[0];
    assert!(
        first.starts_with("An assistant sorts inputs into these kinds: alpha, bravo, charlie."),
        "{first}"
    );
    // Only the feedback rows of the label asked about.
    assert!(
        first.contains("of the kind alpha:\n- question 0\n- question 3\n"),
        "{first}"
    );
    assert!(!first.contains("question 1"), "{first}");
}

#[tokio::test]
async fn without_the_setting_or_with_two_labels_the_first_iteration_writes_a_rule() {
    let rules = |request: &str| {
        let correct = correct_answer(request);
        Ok(format!(
            "- When the question looks like this, answer {correct}."
        ))
    };
    let first_minibatch = |run: &Run| match &run.iterations()[0] {
        IterationRecord::Mutation(record) => record.minibatch.clone(),
        IterationRecord::Merge(_) => panic!("merge is off"),
    };
    let mut config = config(40);
    config.proposer = Proposer::Rules;
    let run = run_quietly(&StandIn::new(&ROWS).reflecting(rules), &config)
        .await
        .expect("run");
    assert!(first_minibatch(&run).iter().all(|&row| row < 6));
    config.label_glossary = true;
    let two = ["alpha", "bravo", "alpha", "bravo", "alpha", "bravo"].repeat(2);
    let run = run_quietly(&StandIn::new(&two).reflecting(rules), &config)
        .await
        .expect("run");
    assert!(first_minibatch(&run).iter().all(|&row| row < 6));
}

#[tokio::test]
async fn two_labels_that_are_numbers_get_a_glossary_that_names_each_from_its_rows() {
    let requests = std::sync::Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = std::sync::Arc::clone(&requests);
    let name = |label: &str| {
        if label == "0" {
            "money matters"
        } else {
            "sports news"
        }
    };
    let task = StandIn::new(&["0", "1"].repeat(6)).reflecting(move |request| {
        seen.lock().unwrap().push(request.to_owned());
        let label = if request.contains("of the kind 0:") {
            "0"
        } else {
            "1"
        };
        Ok(format!("- {label}: {}", name(label)))
    });
    let run = run_quietly(&task, &glossary_config()).await.expect("run");
    let record = &run.iterations()[0];
    assert_eq!(record.kind(), ProposalKind::Glossary);
    assert_eq!(record.outcome(), &Outcome::Accepted { generation: 1 });
    assert_eq!(
        run.candidates()[1].prompt,
        "What each answer is about:\n- 0: money matters\n- 1: sports news\n\nAnswer {question}."
    );
    // The request asks for a name, not for a list of subjects.
    let first = requests.lock().unwrap()[0].clone();
    assert!(
        first.ends_with(
            "The kinds are numbers, which say nothing. Name the kind 0 in general words: what do \
             all inputs of this kind have in common? Answer with one line in this form:\n- 0: a \
             few general words"
        ),
        "{first}"
    );
    // Both labels must be named: one named alone singles it out.
    let task = StandIn::new(&["0", "1"].repeat(6)).reflecting(|request| {
        Ok(if request.contains("of the kind 0:") {
            "- 0: money matters".to_owned()
        } else {
            "- 1: a few general words".to_owned()
        })
    });
    let run = run_quietly(&task, &glossary_config()).await.expect("run");
    let Outcome::Failed { reason } = run.iterations()[0].outcome() else {
        panic!("{:?}", run.iterations()[0].outcome());
    };
    assert_eq!(
        reason.to_string(),
        "the glossary kept subjects for 1 label(s); it needs 2"
    );
}

#[tokio::test]
async fn a_glossary_no_better_on_the_pareto_set_is_rejected_and_says_where_it_was_judged() {
    // Plain Pareto rows, which any keyword confuses: the glossary names the labels, so the
    // child loses every row the seed had right.
    let rows = [
        "alpha", "bravo", "charlie", "alpha", "bravo", "charlie", "", "", "", "", "", "",
    ];
    let task = StandIn::new(&rows).reflecting(glossary_answer);
    let config = glossary_config();
    let run = run_quietly(&task, &config).await.expect("run");
    let record = &run.iterations()[0];
    assert_eq!(record.kind(), ProposalKind::Glossary);
    assert_eq!(record.outcome(), &Outcome::Rejected);
    assert_eq!(
        record.explain(),
        "rejected: the child scored 0.00 against the parent's 6.00 on 6 Pareto rows (it must \
         score higher)"
    );
    assert_eq!(run.candidates().len(), 1);
}

#[tokio::test]
async fn a_glossary_with_subjects_for_too_few_labels_is_no_proposal() {
    // Only alpha's answer holds a list; the others are prose.
    let task = StandIn::new(&ROWS).reflecting(|request| {
        Ok(if request.contains("of the kind alpha:") {
            "- alpha: alpha matters, topics".to_owned()
        } else {
            "I am not sure.".to_owned()
        })
    });
    let config = glossary_config();
    let run = run_quietly(&task, &config).await.expect("run");
    let record = &run.iterations()[0];
    assert_eq!(record.kind(), ProposalKind::Glossary);
    let Outcome::Failed {
        reason: reason @ ProposalFailure::ThinGlossary { labels: 1, .. },
    } = record.outcome()
    else {
        panic!("{:?}", record.outcome());
    };
    assert_eq!(
        reason.to_string(),
        "the glossary kept subjects for 1 label(s); it needs 3"
    );
    // Nothing ran but the three reflections.
    assert_eq!(record.cost().task_calls, 0);
    assert_eq!(record.cost().reflection_calls, 3);
}

#[tokio::test]
async fn a_classification_prompt_with_its_input_first_is_offered_once_with_its_instruction_first() {
    // "label" is a keyword that the layout's closing line mentions: the rows that need it win.
    let rows = ["label", "bravo", "charlie"].repeat(4);
    let rule = |request: &str| {
        let correct = correct_answer(request);
        Ok(format!("- When it looks like this, answer {correct}."))
    };
    let task = StandIn::new(&rows).reflecting(rule);
    let mut config = config(40);
    config.proposer = Proposer::Rules;
    config.input_last = true;
    config.stall_iterations = Some(1);
    let seed = "Question: {question}\nAnswer bravo.";
    let offered = run(&task, seed, &config, |_| {}).await.expect("run");
    let IterationRecord::Mutation(record) = &offered.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(offered.iterations()[0].kind(), ProposalKind::Layout);
    // Judged on the Pareto set, written from no row.
    assert_eq!(record.minibatch, (6..12).collect::<Vec<_>>());
    assert!(record.shown.is_empty());
    assert_eq!(record.parent_scores, [0.0, 1.0, 0.0].repeat(2));
    assert_eq!(record.child_scores, [1.0, 1.0, 0.0].repeat(2));
    assert_eq!(record.outcome, Outcome::Accepted { generation: 1 });
    assert_eq!(
        offered.candidates()[1].prompt,
        "Answer bravo.\nQuestion: {question}\nAnswer with the label only."
    );
    // No reflection; the parent's Pareto scores were known, so only the child ran.
    assert_eq!(record.cost.reflection_calls, 0);
    assert_eq!(record.cost.task_calls, 6);
    // Offered once: the iterations after it are rules.
    let layouts = offered
        .iterations()
        .iter()
        .filter(|r| r.kind() == ProposalKind::Layout);
    assert_eq!(layouts.count(), 1);
    assert!(offered.iterations().len() > 1, "{:?}", offered.iterations());

    // Not offered without the setting, nor when the input already comes last.
    let first_kind = |run: &Run| run.iterations()[0].kind();
    let mut off = config.clone();
    off.input_last = false;
    let run_off = run(&StandIn::new(&rows).reflecting(rule), seed, &off, |_| {})
        .await
        .expect("run");
    assert_eq!(first_kind(&run_off), ProposalKind::Mutation);
    let last = "Answer bravo.\nQuestion: {question}";
    let run_last = run(&StandIn::new(&rows).reflecting(rule), last, &config, |_| {})
        .await
        .expect("run");
    assert_eq!(first_kind(&run_last), ProposalKind::Mutation);
}

#[tokio::test]
async fn demonstrations_of_each_label_are_offered_and_judged_on_the_pareto_set() {
    let task = StandIn::new(&ROWS);
    let mut config = config(40);
    config.demonstrations = 8;
    config.stall_iterations = Some(1);
    let run = run_quietly(&task, &config).await.expect("run");
    let IterationRecord::Mutation(record) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(record.written_from, MutationKind::Demonstrations);
    assert_eq!(run.iterations()[0].kind(), ProposalKind::Demonstrations);
    // Shown: one feedback row of each label, never a Pareto row.
    assert_eq!(record.shown.len(), 3, "{:?}", record.shown);
    assert!(
        record.shown.iter().all(|&row| row < 6),
        "{:?}",
        record.shown
    );
    let labels: BTreeSet<&str> = record.shown.iter().map(|&row| ROWS[row]).collect();
    assert_eq!(labels.len(), 3, "one of each label: {labels:?}");
    // Judged on the Pareto set, which decides it: no feedback row is needed.
    assert_eq!(record.minibatch, (6..12).collect::<Vec<_>>());
    assert_eq!(record.feedback_rows, 0);
    // Every keyword shown as an answer: the child is right on all six Pareto rows.
    assert_eq!(record.child_scores, vec![1.0; 6]);
    assert_eq!(record.outcome, Outcome::Accepted { generation: 1 });
    let child = &run.candidates()[1].prompt;
    assert!(
        child.starts_with("Examples of inputs with their correct answers:\nAnswer "),
        "{child}"
    );
    assert!(
        child.ends_with("End of examples.\n\nAnswer {question}."),
        "{child}"
    );
    for keyword in ["alpha", "bravo", "charlie"] {
        assert!(child.contains(&format!("Answer: {keyword}\n")), "{child}");
    }
    // No reflection: the seed's Pareto scores were known, so only the child ran.
    assert_eq!(record.cost.reflection_calls, 0);
    assert_eq!(record.cost.task_calls, 6);
}

/// The outcome of a child screened out on `rows` rows its parent all got right and it all lost.
fn screened_out_of_every_row(rows: usize) -> Outcome {
    Outcome::Screened {
        rows,
        parent_sum: rows as f64,
        child_sum: 0.0,
        wins: 0,
        losses: rows,
    }
}

/// A run of 6 feedback rows and 20 Pareto rows of `rows`, offering demonstrations (any task's
/// when `unlabelled`), with `screen` Pareto rows screening them.
async fn a_run_with_demonstrations(rows: &[&str], screen: usize, unlabelled: bool) -> Run {
    let task = StandIn::new(rows);
    let mut config = EngineConfig::new(6, 20, 60);
    config.demonstrations = 8;
    config.unlabelled_demonstrations = unlabelled;
    config.pareto_screen = screen;
    config.stall_iterations = Some(1);
    run_quietly(&task, &config).await.expect("run")
}

/// Feedback rows of two labels; plain Pareto rows, which any prompt that shows a keyword loses.
fn demonstrations_lose() -> Vec<&'static str> {
    let feedback = ["alpha", "bravo", "alpha", "bravo", "alpha", "bravo"];
    feedback.into_iter().chain([""; 20]).collect()
}

#[tokio::test]
async fn demonstrations_that_lose_the_screen_rows_do_not_pay_for_the_rest_of_the_pareto_set() {
    let screened = a_run_with_demonstrations(&demonstrations_lose(), 5, false).await;
    let IterationRecord::Mutation(first) = &screened.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(first.written_from, MutationKind::Demonstrations);
    assert_eq!(first.outcome, screened_out_of_every_row(5));
    assert!(
        first
            .child_prompt
            .as_deref()
            .is_some_and(|p| p.contains("Answer: alpha"))
    );
    assert_eq!(screened.candidates().len(), 1);
    assert_eq!(first.cost.task_calls, 5);
    // Recorded on the 5 Pareto rows it was judged on, with both scores there.
    assert_eq!(first.minibatch.len(), 5);
    assert!(
        first.minibatch.iter().all(|&row| row >= 6),
        "{:?}",
        first.minibatch
    );
    assert_eq!(first.parent_scores, vec![1.0; 5]);
    assert_eq!(first.child_scores, vec![0.0; 5]);

    // Unscreened, the same set pays for all 20 Pareto rows and is rejected there: it loses
    // every one, so no feedback row is asked.
    let unscreened = a_run_with_demonstrations(&demonstrations_lose(), 0, false).await;
    let IterationRecord::Mutation(first) = &unscreened.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(first.written_from, MutationKind::Demonstrations);
    assert_eq!(first.outcome, Outcome::Rejected);
    assert_eq!(first.feedback_rows, 0);
    assert_eq!(first.cost.task_calls, 20);

    // One row lost and none won is what chance gives a set that changes few answers: on a
    // screen of one row the same set goes on to the whole set, which rejects it.
    let one_row = a_run_with_demonstrations(&demonstrations_lose(), 1, false).await;
    let IterationRecord::Mutation(first) = &one_row.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(first.written_from, MutationKind::Demonstrations);
    assert_eq!(first.outcome, Outcome::Rejected);
    assert_eq!(first.cost.task_calls, 20);
}

#[test]
fn a_reflections_child_is_screened_out_on_any_loss_and_a_set_of_demonstrations_on_a_clear_one() {
    let right = [1.0; 10];
    let mut one_lost = right;
    one_lost[3] = 0.0;
    let mut two_lost = one_lost;
    two_lost[7] = 0.0;
    assert!(ScreenRule::NoLower.refuses(&right, &one_lost));
    assert!(!ScreenRule::NotClearlyWorse.refuses(&right, &one_lost));
    // Two lost and none won: p = 0.25, the evidence a set needs to be kept the other way.
    assert!(ScreenRule::NotClearlyWorse.refuses(&right, &two_lost));
    // Lower in sum with as many rows won as lost (partial scores) is not clearly worse.
    let parent = [1.0, 0.0, 1.0, 1.0];
    let child = [0.0, 0.5, 1.0, 1.0];
    assert!(ScreenRule::NoLower.refuses(&parent, &child));
    assert!(!ScreenRule::NotClearlyWorse.refuses(&parent, &child));
    // Neither refuses a child no lower in sum.
    assert!(!ScreenRule::NoLower.refuses(&one_lost, &right));
    assert!(!ScreenRule::NotClearlyWorse.refuses(&one_lost, &right));
}

#[tokio::test]
async fn fresh_sets_of_demonstrations_alternate_one_row_of_each_label_and_at_least_four() {
    // Every set loses the plain Pareto rows, so none is kept and each offer draws a fresh set.
    let task = StandIn::new(&demonstrations_lose());
    let mut config = EngineConfig::new(6, 20, 200);
    config.demonstrations = 8;
    let run = run_quietly(&task, &config).await.expect("run");
    let sizes: Vec<usize> = run
        .iterations()
        .iter()
        .filter_map(|record| match record {
            IterationRecord::Mutation(m) if m.written_from == MutationKind::Demonstrations => {
                Some(m.shown.len())
            }
            _ => None,
        })
        .collect();
    // Two labels: one of each, then two of each.
    assert!(sizes.len() >= 3, "{sizes:?}");
    assert_eq!(sizes[..3], [2, 4, 2], "{sizes:?}");
}

#[tokio::test]
async fn demonstrations_the_pareto_rows_leave_undecided_are_judged_on_the_feedback_rows_they_do_not_show()
 {
    // The set shows one alpha and one bravo row and answers every keyword row right and every
    // plain row wrong. On the Pareto rows: 11 won, 9 lost, p = 0.41, undecided; the 4 feedback
    // rows it does not show are keyword rows, and 15 won against 9 lost passes (p = 0.15).
    let feedback = ["alpha", "bravo", "alpha", "bravo", "alpha", "bravo"];
    let keywords = ["alpha", "bravo"].iter().cycle().take(11).copied();
    let rows: Vec<&str> = feedback
        .into_iter()
        .chain(keywords)
        .chain([""; 9])
        .collect();
    let run = a_run_with_demonstrations(&rows, 0, false).await;
    let IterationRecord::Mutation(first) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    assert_eq!(first.written_from, MutationKind::Demonstrations);
    assert_eq!(first.shown.len(), 2, "{:?}", first.shown);
    let unshown: Vec<usize> = (0..6).filter(|row| !first.shown.contains(row)).collect();
    let judged: Vec<usize> = (6..26).chain(unshown).collect();
    assert_eq!(first.minibatch, judged);
    assert_eq!(first.feedback_rows, 4);
    assert_eq!(
        first.child_scores[20..],
        [1.0; 4],
        "{:?}",
        first.child_scores
    );
    assert_eq!(first.outcome, Outcome::Accepted { generation: 1 });
    // The child on 24 rows, the seed on the 4 feedback rows.
    assert_eq!(first.cost.task_calls, 20 + 4 + 4);
    let text = run.iterations()[0].explain();
    assert!(text.starts_with("accepted"), "{text}");
}

#[tokio::test]
async fn demonstrations_of_a_task_without_labels_are_offered_only_when_asked_for_any_task() {
    // A keyword of its own on every row: no label set.
    let keywords: Vec<String> = (0..26).map(|row| format!("k{row}")).collect();
    let rows: Vec<&str> = keywords.iter().map(String::as_str).collect();
    let asked = a_run_with_demonstrations(&rows, 0, true).await;
    assert_eq!(asked.iterations()[0].kind(), ProposalKind::Demonstrations);
    let classifications_only = a_run_with_demonstrations(&rows, 0, false).await;
    assert!(!classifications_only.iterations().is_empty());
    assert!(
        classifications_only
            .iterations()
            .iter()
            .all(|record| record.kind() != ProposalKind::Demonstrations),
        "{:?}",
        classifications_only.iterations()
    );
    // A classification gets them either way.
    let classification = a_run_with_demonstrations(&demonstrations_lose(), 0, false).await;
    assert_eq!(
        classification.iterations()[0].kind(),
        ProposalKind::Demonstrations
    );
}

/// The minibatches of a rules run on twelve feedback rows of which two fail with the seed,
/// whose every rule teaches a wrong label (refused), so the seed stays the parent; with the
/// parent's known failures swapped in or not.
async fn minibatches_of_a_stuck_run(known_failures_first: bool) -> Vec<(Vec<usize>, Outcome)> {
    let feedback = ["alpha", "", "", "", "", "", "bravo", "", "", "", "", ""];
    let pareto = ["alpha", "", "bravo", "", "charlie", ""];
    let rows: Vec<&str> = feedback.iter().chain(&pareto).copied().collect();
    let task = StandIn::new(&rows)
        .reflecting(|_| Ok("- When the question looks like this, answer charlie.".to_owned()));
    let mut config = EngineConfig::new(12, 6, 40);
    config.proposer = Proposer::Rules;
    config.reflection_minibatch = 4;
    config.known_failures_first = known_failures_first;
    let run = run_quietly(&task, &config).await.expect("run");
    run.iterations()
        .iter()
        .map(|record| {
            let IterationRecord::Mutation(record) = record else {
                panic!("merge is off");
            };
            (record.minibatch.clone(), record.outcome.clone())
        })
        .collect()
}

#[tokio::test]
async fn known_failures_take_the_place_of_known_right_rows_in_a_minibatch() {
    const FAILING: [usize; 2] = [0, 6];
    // The iterations after the one where both failing rows have been answered by the seed.
    let after_both_known = |batches: Vec<(Vec<usize>, Outcome)>| {
        let mut known = BTreeSet::new();
        let mut after = Vec::new();
        for (minibatch, outcome) in batches {
            if FAILING.iter().all(|row| known.contains(row)) {
                after.push((minibatch.clone(), outcome));
            }
            known.extend(minibatch);
        }
        after
    };
    let swapped = after_both_known(minibatches_of_a_stuck_run(true).await);
    assert!(swapped.len() >= 5, "{swapped:?}");
    for (minibatch, outcome) in &swapped {
        assert!(
            FAILING.iter().any(|row| minibatch.contains(row)),
            "{minibatch:?}"
        );
        assert_ne!(*outcome, Outcome::SkippedPerfect);
    }
    // As drawn, some minibatches hold no failure and teach nothing.
    let drawn = after_both_known(minibatches_of_a_stuck_run(false).await);
    assert!(
        drawn
            .iter()
            .any(|(_, outcome)| *outcome == Outcome::SkippedPerfect),
        "{drawn:?}"
    );
}

#[tokio::test]
async fn a_token_limit_recommends_the_best_candidate_within_it() {
    let task = StandIn::new(&ROWS);
    let plain = run_quietly(&task, &config(200)).await.expect("run");
    assert_eq!(plain.best().score, 1.0);
    assert!(plain.recommended().is_none() && plain.frontier().is_empty());

    // The stand-in counts a token per word of the prompt: the seed has 2, each rule adds 2.
    let mut limited = config(200);
    limited.objectives.prompt_tokens = Some(crate::Objective::Limit(6.0));
    let task = StandIn::new(&ROWS);
    let run = run_quietly(&task, &limited).await.expect("run");
    // The search is the score's alone: it still finds the prompt with every keyword.
    let top = run
        .candidates()
        .iter()
        .max_by(|a, b| a.score.total_cmp(&b.score))
        .expect("a candidate");
    assert_eq!(top.score, 1.0);
    assert_eq!(top.costs.map(|c| c.prompt_tokens), Some(8.0));
    let best = run.best();
    let costs = best.costs.expect("the stand-in's answers have costs");
    assert_eq!((costs.prompt_tokens, costs.rows), (6.0, 6));
    assert!((best.score - 4.0 / 6.0).abs() < 1e-12, "{}", best.score);
    assert_eq!(
        run.recommended().map(|c| c.generation),
        Some(best.generation)
    );
    for candidate in run.candidates() {
        if candidate.costs.is_some_and(|c| c.prompt_tokens <= 6.0) {
            assert!(candidate.score <= best.score, "g{}", candidate.generation);
        }
    }
    // The frontier runs from the seed, the cheapest, to the prompt with every keyword.
    let frontier = run.frontier();
    assert_eq!(frontier.first(), Some(&0));
    assert_eq!(frontier.last(), Some(&top.generation));
    assert!(frontier.contains(&best.generation), "{frontier:?}");
}

/// A seed of a system message that evolves and a user template that does not.
fn system_and_fixed_user(evolve: &[PartName]) -> String {
    ChatPrompt::new(
        Some("Answer briefly.".into()),
        Vec::new(),
        SEED.into(),
        evolve,
    )
    .unwrap()
    .join()
}

#[tokio::test]
async fn a_prompt_of_parts_evolves_its_evolvable_part_alone() {
    let task = StandIn::new(&ROWS);
    let seed = system_and_fixed_user(&[PartName::System]);
    let run = run(&task, &seed, &config(200), |_| {}).await.expect("run");

    assert_eq!(run.best().score, 1.0);
    let best = ChatPrompt::split(&run.best().prompt);
    for keyword in ["alpha", "bravo", "charlie"] {
        let system = best.part(PartName::System).unwrap_or_default();
        assert!(system.contains(keyword), "{system}");
    }
    for candidate in run.candidates() {
        let parts = ChatPrompt::split(&candidate.prompt);
        assert_eq!(
            parts.part(PartName::User),
            Some(SEED),
            "{}",
            candidate.prompt
        );
    }
    let mutations: Vec<&MutationRecord> = run
        .iterations()
        .iter()
        .map(|record| match record {
            IterationRecord::Mutation(mutation) => mutation,
            IterationRecord::Merge(_) => panic!("merge is off"),
        })
        .collect();
    assert!(!mutations.is_empty());
    for mutation in mutations {
        assert_eq!(mutation.part, Some(PartName::System));
        if let Some(child) = &mutation.child_prompt {
            assert_eq!(ChatPrompt::split(child).part(PartName::User), Some(SEED));
        }
    }
}

#[tokio::test]
async fn evolvable_parts_take_turns_and_a_plain_prompt_records_none() {
    let task = StandIn::new(&ROWS);
    let seed = system_and_fixed_user(&PartName::ALL);
    let run = run(&task, &seed, &config(200), |_| {}).await.expect("run");
    let parts: Vec<Option<PartName>> = run
        .iterations()
        .iter()
        .filter_map(|record| match record {
            IterationRecord::Mutation(mutation) => Some(mutation.part),
            IterationRecord::Merge(_) => None,
        })
        .collect();
    assert!(parts.len() >= 2, "{parts:?}");
    for (at, part) in parts.iter().enumerate() {
        let expected = [PartName::System, PartName::User][at % 2];
        assert_eq!(*part, Some(expected), "mutation {at}: {parts:?}");
    }
    // Both parts changed somewhere, each child keeping the user template's placeholder.
    let changed: BTreeSet<PartName> = run
        .candidates()
        .iter()
        .skip(1)
        .flat_map(|candidate| {
            ChatPrompt::split(&seed).changed_parts(&ChatPrompt::split(&candidate.prompt))
        })
        .collect();
    assert!(!changed.is_empty(), "some candidate changed a part");
    for candidate in run.candidates() {
        assert!(
            candidate.prompt.contains("{question}"),
            "{}",
            candidate.prompt
        );
    }

    let plain = run_quietly(&StandIn::new(&ROWS), &config(60))
        .await
        .expect("run");
    for record in plain.iterations() {
        if let IterationRecord::Mutation(mutation) = record {
            assert_eq!(mutation.part, None, "a prompt of one part names none");
        }
    }
}

#[tokio::test]
async fn a_prompt_whose_every_part_is_fixed_is_refused_before_any_call() {
    let task = StandIn::new(&ROWS);
    let seed = system_and_fixed_user(&[]);
    let refused = run(&task, &seed, &config(200), |_| {}).await;
    assert!(
        matches!(
            refused,
            Err(EngineError::Config {
                field: "seed_prompt",
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(task.calls_made(), 0);
}

/// A run whose first child wins its minibatch (it mentions `alpha`, which every feedback row
/// asks for) and loses every Pareto row (plain rows, which any keyword confuses); with
/// `screen` Pareto rows screening it first.
async fn a_run_whose_child_loses_on_the_pareto_rows(screen: usize) -> (Run, Vec<(String, usize)>) {
    let feedback = ["alpha"; 6];
    let pareto = [""; 20];
    let rows: Vec<&str> = feedback.iter().chain(&pareto).copied().collect();
    let task = StandIn::new(&rows);
    let mut config = EngineConfig::new(6, 20, 60);
    config.pareto_screen = screen;
    config.stall_iterations = Some(1);
    let run = run_quietly(&task, &config).await.expect("run");
    let calls = task.calls.lock().map(|c| c.clone()).unwrap_or_default();
    (run, calls)
}

#[tokio::test]
async fn a_minibatch_winner_that_loses_its_first_pareto_rows_is_screened_out_before_the_rest() {
    let (run, calls) = a_run_whose_child_loses_on_the_pareto_rows(5).await;
    let IterationRecord::Mutation(first) = &run.iterations()[0] else {
        panic!("merge is off");
    };
    assert!(sum(&first.child_scores) > sum(&first.parent_scores));
    assert_eq!(first.outcome, screened_out_of_every_row(5));
    assert!(first.outcome.to_string().starts_with("screened out"));
    // The child never joined the pool, and ran on 5 of the 20 Pareto rows only.
    assert_eq!(run.candidates().len(), 1);
    let child = first.child_prompt.as_deref().expect("a child ran");
    let on_pareto = calls
        .iter()
        .filter(|(prompt, example)| prompt == child && *example >= 6)
        .count();
    assert_eq!(on_pareto, 5);

    // Without the screen the same child pays for all 20 rows and joins the pool.
    let (unscreened, calls) = a_run_whose_child_loses_on_the_pareto_rows(0).await;
    assert!(matches!(
        unscreened.iterations()[0].outcome(),
        Outcome::Accepted { generation: 1 }
    ));
    let on_pareto = calls
        .iter()
        .filter(|(prompt, example)| prompt == child && *example >= 6)
        .count();
    assert_eq!(on_pareto, 20);
    assert_eq!(
        unscreened.iterations()[0].cost().task_calls,
        first.cost.task_calls + 15
    );
}

#[tokio::test]
async fn a_minibatch_winner_no_worse_on_the_screen_rows_joins_the_pool_as_before() {
    let task = StandIn::new(&ROWS);
    let plain = run_quietly(&task, &config(200)).await.expect("run");
    let mut screened = config(200);
    screened.pareto_screen = 3;
    let task = StandIn::new(&ROWS);
    let run = run_quietly(&task, &screened).await.expect("run");
    // Every child adds a keyword that only helps: none is screened out, and the search is the
    // same (the screen's rows are paid once, as part of the Pareto pass).
    assert!(
        run.iterations()
            .iter()
            .all(|record| !matches!(record.outcome(), Outcome::Screened { .. }))
    );
    let prompts = |run: &Run| -> Vec<(String, f64)> {
        run.candidates()
            .iter()
            .map(|c| (c.prompt.clone(), c.score))
            .collect()
    };
    assert_eq!(prompts(&run), prompts(&plain));
    assert_eq!(run.spent(), plain.spent());
}

/// The engine's labels: by the shared rule on the rows it sees, or, when those hold too few rows
/// of each label, when the seed names every one (as `init`'s does for an intent dataset).
#[test]
fn the_labels_are_the_rows_answers_when_repeated_or_when_the_seed_names_them() {
    let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
    let seed = "Answer with exactly one of: card_arrival, change_pin, top_up.\nText: {text}";
    // Twice each: labels, whatever the seed says.
    let twice = strings(&["b", "a", "b", "a"]);
    assert_eq!(label_set(twice, "Text: {text}"), ["a", "b"]);
    // Once each: labels only when the seed names them all.
    let once = strings(&["top_up", "card_arrival", "change_pin"]);
    assert_eq!(
        label_set(once.clone(), seed),
        ["card_arrival", "change_pin", "top_up"]
    );
    assert!(label_set(once, "Text: {text}\nGive the category.").is_empty());
    let unnamed = strings(&["top_up", "card_arrival", "card"]);
    assert!(label_set(unnamed, seed).is_empty(), "`card` is not named");
    assert!(
        label_set(strings(&["top_up"]), seed).is_empty(),
        "one answer"
    );
}
