//! The evolution half's SQLite state: executions (with the request each was started with), their
//! history, and batch jobs. It implements `LocalEvolution`'s [`ExecutionStore`] hook, so every
//! change of an execution is written as it happens, and loads everything back at start-up.
//!
//! History rows are keyed by (evolutionId, generation) and iteration records by (evolutionId,
//! iteration): writing one again replaces it, so neither is ever silently duplicated. The calls
//! of an execution (its checkpoint) are appended in the order they return, and loaded only for
//! executions that are still `in_progress`, the ones that continue from them.
use async_trait::async_trait;
use rusqlite::params;

use super::db::{Db, DbError};
use gepa_lab_engine::IterationRecord;
use gepa_lab_evolution::wire::{BatchJob, HistoryRecord, PromptState, StartExecution, Status};
use gepa_lab_local::{CallRecord, ExecutionState, ExecutionStore, StoreError, StoredExecution};

/// Executions and batch jobs in the server's database.
#[derive(Clone)]
pub struct SqliteExecutions {
    db: Db,
}

fn store_error(err: DbError) -> StoreError {
    StoreError(Box::new(err))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// The JSON records `statement` selects (key, text) for execution `id`. A record that does not
/// parse (written by another version) is skipped and reported: an iteration's record is for
/// reading, and a call missing from a checkpoint is only paid for again.
fn parsed<T: serde::de::DeserializeOwned>(
    statement: &mut rusqlite::Statement,
    id: &str,
    what: &str,
) -> rusqlite::Result<Vec<T>> {
    let rows = statement
        .query_map(params![id], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, String>(1)?))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(rows
        .into_iter()
        .filter_map(|(key, text)| match serde_json::from_str(&text) {
            Ok(record) => Some(record),
            Err(err) => {
                tracing::error!(evolution_id = %id, key, %err, "stored {what} does not parse; skipped");
                None
            }
        })
        .collect())
}

impl SqliteExecutions {
    pub fn new(db: Db) -> Self {
        Self { db }
    }

    /// Every stored execution, oldest first, with its history. A row whose request no longer
    /// parses is left in the database and reported, not dropped.
    pub async fn load(&self) -> Result<Vec<StoredExecution>, DbError> {
        self.db
            .call(|conn| {
                let mut executions = conn.prepare(
                    "SELECT evolution_id, owner, request, seed, status, current_prompt,
                            current_score, current_generation, error, created_at, budget_used
                     FROM evolution_executions ORDER BY seq",
                )?;
                let mut history = conn.prepare(
                    "SELECT generation, score, prompt, pareto_scores, costs FROM evolution_history
                     WHERE evolution_id = ?1 ORDER BY generation",
                )?;
                let mut iterations = conn.prepare(
                    "SELECT iteration, record FROM evolution_iterations
                     WHERE evolution_id = ?1 ORDER BY iteration",
                )?;
                let mut calls = conn.prepare(
                    "SELECT seq, call FROM evolution_calls WHERE evolution_id = ?1 ORDER BY seq",
                )?;
                let rows = executions.query_map([], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, String>(2)?,
                        row.get::<_, i64>(3)?,
                        row.get::<_, String>(4)?,
                        PromptState {
                            current_prompt: row.get(5)?,
                            current_prompt_score: row.get(6)?,
                            current_generation: row.get(7)?,
                        },
                        row.get::<_, Option<String>>(8)?,
                        row.get::<_, String>(9)?,
                        row.get::<_, Option<i64>>(10)?,
                    ))
                })?;
                let mut loaded = Vec::new();
                for row in rows {
                    let (id, owner, request, seed, status, prompt, error, created_at, budget_used) =
                        row?;
                    let request: StartExecution = match serde_json::from_str(&request) {
                        Ok(request) => request,
                        Err(err) => {
                            tracing::error!(evolution_id = %id, %err, "stored request does not parse; execution not loaded");
                            continue;
                        }
                    };
                    let records = history_of(&mut history, &id)?;
                    let iteration_records: Vec<IterationRecord> =
                        parsed(&mut iterations, &id, "iteration record")?;
                    let status = Status::from(status.as_str());
                    let call_records: Vec<CallRecord> = if status == Status::InProgress {
                        parsed(&mut calls, &id, "call")?
                    } else {
                        Vec::new()
                    };
                    let scored = prompt.current_prompt.is_some()
                        || prompt.current_prompt_score.is_some()
                        || prompt.current_generation.is_some();
                    loaded.push(StoredExecution {
                        evolution_id: id,
                        owner,
                        request,
                        seed: seed as u64,
                        state: ExecutionState {
                            status,
                            prompt: scored.then_some(prompt),
                            error,
                            budget_used: budget_used.and_then(|used| u64::try_from(used).ok()),
                        },
                        created_at,
                        history: records,
                        iterations: iteration_records,
                        calls: call_records,
                    });
                }
                Ok(loaded)
            })
            .await
    }

    /// The batch jobs of a key, newest first. Nothing in `serve` creates batch jobs yet, so this
    /// lists only what an operator put in the table.
    pub async fn batch_jobs(&self, key_id: &str) -> Result<Vec<BatchJob>, DbError> {
        let key_id = key_id.to_owned();
        self.db
            .call(move |conn| {
                let mut statement = conn.prepare(
                    "SELECT status, created_at, file_id, task_count, error_message, result_url
                     FROM batch_jobs WHERE key_id = ?1 ORDER BY created_at DESC",
                )?;
                let jobs = statement
                    .query_map(params![key_id], |row| {
                        Ok(BatchJob {
                            status: row.get(0)?,
                            created_at: row.get(1)?,
                            file_id: row.get(2)?,
                            task_count: row.get::<_, Option<i64>>(3)?.map(|n| n.max(0) as u64),
                            error_message: row.get(4)?,
                            result_url: row.get(5)?,
                        })
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                Ok(jobs)
            })
            .await
    }
}

#[async_trait]
impl ExecutionStore for SqliteExecutions {
    async fn insert(&self, execution: &StoredExecution) -> Result<(), StoreError> {
        let request =
            serde_json::to_string(&execution.request).map_err(|err| StoreError(Box::new(err)))?;
        let execution = execution.clone();
        self.db
            .call(move |conn| {
                let prompt = execution.state.prompt.clone().unwrap_or(PromptState {
                    current_prompt: None,
                    current_prompt_score: None,
                    current_generation: None,
                });
                conn.execute(
                    "INSERT INTO evolution_executions (evolution_id, owner, custom_id, request,
                        seed, status, current_prompt, current_score, current_generation, error,
                        created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
                    params![
                        execution.evolution_id,
                        execution.owner,
                        execution.request.custom_id,
                        request,
                        execution.seed as i64,
                        execution.state.status.as_str(),
                        prompt.current_prompt,
                        prompt.current_prompt_score,
                        prompt.current_generation,
                        execution.state.error,
                        execution.created_at,
                        now(),
                    ],
                )?;
                Ok(())
            })
            .await
            .map_err(store_error)
    }

    async fn save_state(
        &self,
        evolution_id: &str,
        state: &ExecutionState,
    ) -> Result<(), StoreError> {
        let id = evolution_id.to_owned();
        let state = state.clone();
        self.db
            .call(move |conn| {
                let prompt = state.prompt.unwrap_or(PromptState {
                    current_prompt: None,
                    current_prompt_score: None,
                    current_generation: None,
                });
                let changed = conn.execute(
                    "UPDATE evolution_executions SET status = ?2, current_prompt = ?3,
                        current_score = ?4, current_generation = ?5, error = ?6, updated_at = ?7,
                        budget_used = ?8
                     WHERE evolution_id = ?1",
                    params![
                        id,
                        state.status.as_str(),
                        prompt.current_prompt,
                        prompt.current_prompt_score,
                        prompt.current_generation,
                        state.error,
                        now(),
                        state.budget_used.and_then(|used| i64::try_from(used).ok()),
                    ],
                )?;
                if changed == 0 {
                    return Err(rusqlite::Error::QueryReturnedNoRows);
                }
                Ok(())
            })
            .await
            .map_err(store_error)
    }

    async fn add_history(
        &self,
        evolution_id: &str,
        record: &HistoryRecord,
    ) -> Result<(), StoreError> {
        let id = evolution_id.to_owned();
        let record = record.clone();
        let pareto_scores = record
            .pareto_scores
            .as_ref()
            .map(|scores| serde_json::to_string(scores).expect("numbers serialise"));
        let costs = record
            .costs
            .as_ref()
            .map(|costs| serde_json::to_string(costs).expect("numbers serialise"));
        self.db
            .call(move |conn| {
                conn.execute(
                    "INSERT INTO evolution_history
                       (evolution_id, generation, score, prompt, pareto_scores, costs)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                     ON CONFLICT(evolution_id, generation) DO UPDATE SET
                       score = excluded.score, prompt = excluded.prompt,
                       pareto_scores = excluded.pareto_scores, costs = excluded.costs",
                    params![
                        id,
                        record.generation.max(0.0).round() as i64,
                        record.score,
                        record.prompt,
                        pareto_scores,
                        costs,
                    ],
                )?;
                Ok(())
            })
            .await
            .map_err(store_error)
    }

    async fn add_iteration(
        &self,
        evolution_id: &str,
        record: &IterationRecord,
    ) -> Result<(), StoreError> {
        let id = evolution_id.to_owned();
        let iteration = i64::try_from(record.iteration()).unwrap_or(i64::MAX);
        let text = serde_json::to_string(record).map_err(|err| StoreError(Box::new(err)))?;
        self.db
            .call(move |conn| {
                conn.execute(
                    "INSERT INTO evolution_iterations (evolution_id, iteration, record)
                     VALUES (?1, ?2, ?3)
                     ON CONFLICT(evolution_id, iteration) DO UPDATE SET record = excluded.record",
                    params![id, iteration, text],
                )?;
                Ok(())
            })
            .await
            .map_err(store_error)
    }

    async fn add_call(&self, evolution_id: &str, call: &CallRecord) -> Result<(), StoreError> {
        let id = evolution_id.to_owned();
        let text = serde_json::to_string(call).map_err(|err| StoreError(Box::new(err)))?;
        self.db
            .call(move |conn| {
                conn.execute(
                    "INSERT INTO evolution_calls (evolution_id, call) VALUES (?1, ?2)",
                    params![id, text],
                )?;
                Ok(())
            })
            .await
            .map_err(store_error)
    }
}

/// The stored history of one execution, by generation.
fn history_of(
    statement: &mut rusqlite::Statement<'_>,
    evolution_id: &str,
) -> rusqlite::Result<Vec<HistoryRecord>> {
    statement
        .query_map(params![evolution_id], |row| {
            Ok(HistoryRecord {
                generation: row.get::<_, i64>(0)? as f64,
                score: row.get(1)?,
                prompt: row.get(2)?,
                pareto_scores: row
                    .get::<_, Option<String>>(3)?
                    .and_then(|json| serde_json::from_str(&json).ok()),
                costs: row
                    .get::<_, Option<String>>(4)?
                    .and_then(|json| serde_json::from_str(&json).ok()),
            })
        })?
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use gepa_lab_engine::{MutationRecord, Outcome, Spent};
    use gepa_lab_evolution::wire::DatasetItem;
    use gepa_lab_local::CallResult;

    fn execution(id: &str) -> StoredExecution {
        StoredExecution {
            evolution_id: id.into(),
            owner: Some("key-1".into()),
            request: StartExecution {
                strategy: gepa_lab_evolution::wire::Strategy::Rpm,
                model: "gpt-4o".into(),
                dataset_columns: vec!["q".into()],
                budget: 12,
                minibatch_size: 1,
                pareto_size: 1,
                evaluator: r#"{"model":"gpt-4o"}"#.into(),
                dataset: vec![
                    DatasetItem {
                        input: BTreeMap::from([("q".into(), "a".into())]),
                        expected_output: "x".into(),
                    };
                    2
                ],
                prompt: "{q}".into(),
                custom_id: Some("c".into()),
                engine: None,
            },
            seed: i64::MAX as u64,
            state: ExecutionState {
                status: Status::Pending,
                prompt: None,
                error: None,
                budget_used: None,
            },
            created_at: "2026-01-01T00:00:00.000Z".into(),
            history: Vec::new(),
            iterations: Vec::new(),
            calls: Vec::new(),
        }
    }

    fn mutation(iteration: usize, outcome: Outcome) -> IterationRecord {
        IterationRecord::Mutation(MutationRecord {
            iteration,
            parent: 0,
            written_from: Default::default(),
            minibatch: vec![0],
            shown: vec![0],
            feedback_rows: 0,
            parent_scores: vec![0.0],
            part: None,
            child_prompt: Some("{q}!".into()),
            child_scores: vec![1.0],
            reworded: None,
            outcome,
            spent: Spent::default(),
            cost: Spent::default(),
            best: Default::default(),
        })
    }

    fn call(example: usize) -> CallRecord {
        CallRecord::Evaluate {
            prompt: "ab12".into(),
            example,
            result: CallResult::Failed("timed out".into()),
        }
    }

    #[tokio::test]
    async fn iterations_are_kept_once_and_calls_only_for_executions_that_continue() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.sqlite3");
        {
            let store = SqliteExecutions::new(Db::open(&path).unwrap());
            for id in ["running", "done"] {
                store.insert(&execution(id)).await.unwrap();
                store.add_call(id, &call(0)).await.unwrap();
                store.add_call(id, &call(1)).await.unwrap();
                store
                    .add_iteration(id, &mutation(1, Outcome::Rejected))
                    .await
                    .unwrap();
                // A continued execution records its iterations again.
                let accepted = Outcome::Accepted { generation: 1 };
                store
                    .add_iteration(id, &mutation(1, accepted))
                    .await
                    .unwrap();
            }
            let mut state = execution("x").state;
            state.status = Status::InProgress;
            store.save_state("running", &state).await.unwrap();
            state.status = Status::Completed;
            store.save_state("done", &state).await.unwrap();
        }
        let loaded = SqliteExecutions::new(Db::open(&path).unwrap())
            .load()
            .await
            .unwrap();
        let accepted = mutation(1, Outcome::Accepted { generation: 1 });
        assert_eq!(loaded[0].iterations, std::slice::from_ref(&accepted));
        assert_eq!(loaded[0].calls, [call(0), call(1)]);
        assert_eq!(loaded[1].iterations, [accepted]);
        assert!(loaded[1].calls.is_empty());
    }

    #[tokio::test]
    async fn executions_and_history_survive_reopening_in_creation_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("serve.sqlite3");
        {
            let store = SqliteExecutions::new(Db::open(&path).unwrap());
            for id in ["b-second-id-sorts-first", "a-later"] {
                store.insert(&execution(id)).await.unwrap();
            }
            let record = |generation: f64, score: f64| HistoryRecord {
                generation,
                score,
                prompt: format!("p{generation}"),
                // Generation 0 as the public service reports it: no per-row scores.
                pareto_scores: (generation > 0.0).then(|| vec![score, 1.0 - score]),
                costs: None,
            };
            store
                .add_history("b-second-id-sorts-first", &record(1.0, 0.5))
                .await
                .unwrap();
            store
                .add_history("b-second-id-sorts-first", &record(0.0, 0.25))
                .await
                .unwrap();
            // Writing a generation again replaces it.
            store
                .add_history("b-second-id-sorts-first", &record(1.0, 0.75))
                .await
                .unwrap();
            let state = ExecutionState {
                status: Status::Failed,
                prompt: Some(PromptState {
                    current_prompt: Some("p1".into()),
                    current_prompt_score: Some(0.75),
                    current_generation: Some(1.0),
                }),
                error: Some("why".into()),
                budget_used: Some(17),
            };
            store
                .save_state("b-second-id-sorts-first", &state)
                .await
                .unwrap();
            assert!(store.save_state("missing", &state).await.is_err());
        }
        let store = SqliteExecutions::new(Db::open(&path).unwrap());
        let loaded = store.load().await.unwrap();
        assert_eq!(loaded.len(), 2);
        let first = &loaded[0];
        assert_eq!(first.evolution_id, "b-second-id-sorts-first");
        assert_eq!(first.request, execution("x").request);
        assert_eq!(first.seed, i64::MAX as u64);
        assert_eq!(first.state.status, Status::Failed);
        assert_eq!(first.state.error.as_deref(), Some("why"));
        assert_eq!(first.state.budget_used, Some(17));
        assert_eq!(
            first.state.prompt.as_ref().unwrap().current_prompt_score,
            Some(0.75)
        );
        let history: Vec<(f64, f64)> = first
            .history
            .iter()
            .map(|r| (r.generation, r.score))
            .collect();
        assert_eq!(history, [(0.0, 0.25), (1.0, 0.75)]);
        let per_row: Vec<_> = first
            .history
            .iter()
            .map(|r| r.pareto_scores.clone())
            .collect();
        assert_eq!(per_row, [None, Some(vec![0.75, 0.25])]);
        assert_eq!(loaded[1].state.prompt, None);
        assert_eq!(loaded[1].state.status, Status::Pending);
        assert!(store.batch_jobs("key-1").await.unwrap().is_empty());
    }
}
