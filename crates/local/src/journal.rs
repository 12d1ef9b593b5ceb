//! An execution's checkpoint: the result of every paid call, recorded the moment it arrives.
//!
//! The engine is deterministic: given its settings, its seed and the same answers to the same
//! calls, it makes the same choices, the same records and the same history. So the state after
//! any call (pool, per-row Pareto scores, evaluation cache, random streams, budget spent,
//! iteration records) is fully defined by the calls' results, and the checkpoint keeps only
//! those. To continue an interrupted execution, [`JournaledTask`] runs the engine again from the
//! start with the recorded results: every call the journal holds is answered from it, without a
//! model call, and the first call it does not hold goes to the model. What the interruption
//! costs is the calls that were in flight at that moment, nothing else.
//!
//! This is finer than a snapshot after each iteration, which would pay again for every call of
//! the iteration that was interrupted, and it cannot drift from the engine: there is no second
//! description of its state to keep in step with it. Replaying a journal is the engine's own
//! work without the models: microseconds per call.
//!
//! Calls are keyed by what they ask (the SHA-256 of the prompt and the example, or of the
//! reflection request), and the answers to the same question are replayed in the order they
//! came. A failed attempt is recorded too, so a call the engine retried is replayed as it went.
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::call::{CallRecord, CallResult};
use super::store::ExecutionStore;
use gepa_lab_engine::{Evaluation, ExampleView, Reflection, Task, TaskError};

fn digest(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// Recorded results not yet replayed, by question, in the order they came.
#[derive(Default)]
struct Recorded {
    evaluations: HashMap<(String, usize), VecDeque<CallResult<Evaluation>>>,
    reflections: HashMap<String, VecDeque<CallResult<Reflection>>>,
}

impl Recorded {
    fn new(calls: Vec<CallRecord>) -> Self {
        let mut recorded = Self::default();
        for call in calls {
            match call {
                CallRecord::Evaluate {
                    prompt,
                    example,
                    result,
                } => recorded
                    .evaluations
                    .entry((prompt, example))
                    .or_default()
                    .push_back(result),
                CallRecord::Reflect { request, result } => recorded
                    .reflections
                    .entry(request)
                    .or_default()
                    .push_back(result),
            }
        }
        recorded
    }
}

/// Where a [`JournaledTask`] records each call: an execution in a store.
pub struct Sink {
    pub store: Arc<dyn ExecutionStore>,
    pub evolution_id: String,
}

/// Calls answered from the journal and calls sent to the models.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replay {
    pub replayed: u64,
    pub made: u64,
}

/// A [`Task`] that answers from a journal while it has the answer, and records every call it
/// makes before handing the result to the engine.
pub struct JournaledTask<T> {
    inner: T,
    recorded: Mutex<Recorded>,
    sink: Option<Sink>,
    replayed: AtomicU64,
    made: AtomicU64,
}

impl<T: Task> JournaledTask<T> {
    /// `calls`: the journal so far (empty for a new execution); `sink`: where new calls go.
    pub fn new(inner: T, calls: Vec<CallRecord>, sink: Option<Sink>) -> Self {
        Self {
            inner,
            recorded: Mutex::new(Recorded::new(calls)),
            sink,
            replayed: AtomicU64::new(0),
            made: AtomicU64::new(0),
        }
    }

    pub fn replay(&self) -> Replay {
        Replay {
            replayed: self.replayed.load(Ordering::SeqCst),
            made: self.made.load(Ordering::SeqCst),
        }
    }

    fn recorded(&self) -> std::sync::MutexGuard<'_, Recorded> {
        // Every change under this lock is a single map update.
        self.recorded
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The recorded result `known` when the journal held one; otherwise makes `call` and
    /// records its result (as `record` spells it) before handing it on. A call that cannot be
    /// recorded was still paid for and its answer is still good: the run goes on, and a resume
    /// would pay for it again.
    async fn answer<V: Clone>(
        &self,
        known: Option<CallResult<V>>,
        call: impl Future<Output = Result<V, TaskError>>,
        record: impl FnOnce(CallResult<V>) -> CallRecord,
    ) -> Result<V, TaskError> {
        if let Some(result) = known {
            self.replayed.fetch_add(1, Ordering::SeqCst);
            return result.into_result();
        }
        self.made.fetch_add(1, Ordering::SeqCst);
        let result = call.await;
        if let Some(sink) = &self.sink {
            let call = record(CallResult::of(&result));
            if let Err(err) = sink.store.add_call(&sink.evolution_id, &call).await {
                tracing::error!(
                    evolution_id = %sink.evolution_id, %err,
                    "a call's result was not recorded; a resume would pay for it again"
                );
            }
        }
        result
    }
}

impl<T: Task> Task for JournaledTask<T> {
    async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
        let key = (digest(prompt), example);
        let known = self
            .recorded()
            .evaluations
            .get_mut(&key)
            .and_then(VecDeque::pop_front);
        let call = self.inner.evaluate(prompt, example);
        self.answer(known, call, |result| CallRecord::Evaluate {
            prompt: key.0,
            example,
            result,
        })
        .await
    }

    async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
        let key = digest(request);
        let known = self
            .recorded()
            .reflections
            .get_mut(&key)
            .and_then(VecDeque::pop_front);
        let call = self.inner.reflect(request);
        self.answer(known, call, |result| CallRecord::Reflect {
            request: key,
            result,
        })
        .await
    }

    fn describe(&self, example: usize) -> ExampleView {
        self.inner.describe(example)
    }

    fn example_count(&self) -> usize {
        self.inner.example_count()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Fails its first call to each question, then answers; counts what reaches it.
    #[derive(Default)]
    struct Flaky {
        calls: AtomicUsize,
    }

    impl Task for Flaky {
        async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
            if self.calls.fetch_add(1, Ordering::SeqCst).is_multiple_of(2) {
                return Err(TaskError::new("timed out"));
            }
            Ok(Evaluation {
                output: format!("{prompt} on {example}"),
                score: 1.0,
                feedback: String::new(),
                tokens: 7,
                cost: None,
            })
        }
        async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(Reflection::new(format!("about {request}")))
        }
        fn describe(&self, _: usize) -> ExampleView {
            ExampleView {
                inputs: Vec::new(),
                expected: String::new(),
            }
        }
        fn example_count(&self) -> usize {
            1
        }
    }

    /// Keeps the calls it is told of.
    #[derive(Default)]
    struct Calls(Mutex<Vec<CallRecord>>);

    #[async_trait::async_trait]
    impl ExecutionStore for Calls {
        async fn insert(&self, _: &super::super::StoredExecution) -> Result<(), StoreError> {
            Ok(())
        }
        async fn save_state(
            &self,
            _: &str,
            _: &super::super::ExecutionState,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        async fn add_history(
            &self,
            _: &str,
            _: &gepa_lab_evolution::wire::HistoryRecord,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        async fn add_iteration(
            &self,
            _: &str,
            _: &gepa_lab_engine::IterationRecord,
        ) -> Result<(), StoreError> {
            Ok(())
        }
        async fn add_call(&self, _: &str, call: &CallRecord) -> Result<(), StoreError> {
            self.0.lock().unwrap().push(call.clone());
            Ok(())
        }
    }

    use gepa_lab_evolution::StoreError;

    #[tokio::test]
    async fn answers_are_replayed_in_the_order_they_came_failures_included() {
        let store = Arc::new(Calls::default());
        let sink = Sink {
            store: store.clone(),
            evolution_id: "e".into(),
        };
        let live = JournaledTask::new(Flaky::default(), Vec::new(), Some(sink));
        let first = live.evaluate("p", 0).await;
        let retried = live.evaluate("p", 0).await;
        let reflected = live.reflect("r").await.unwrap();
        assert!(first.is_err());
        assert_eq!(
            live.replay(),
            Replay {
                replayed: 0,
                made: 3
            }
        );
        let journal = store.0.lock().unwrap().clone();
        assert_eq!(journal.len(), 3);

        // A serialised journal, read back, answers the same questions the same way, in order,
        // without a call; the next question goes to the task.
        let text: Vec<String> = journal
            .iter()
            .map(|call| serde_json::to_string(call).unwrap())
            .collect();
        let read: Vec<CallRecord> = text
            .iter()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        let task = Flaky::default();
        let again = JournaledTask::new(task, read, None);
        let replayed_first = again.evaluate("p", 0).await.unwrap_err();
        assert_eq!(replayed_first.to_string(), "timed out");
        assert_eq!(again.evaluate("p", 0).await.unwrap(), retried.unwrap());
        assert_eq!(again.reflect("r").await.unwrap(), reflected);
        assert_eq!(again.inner.calls.load(Ordering::SeqCst), 0);
        assert!(again.evaluate("p", 0).await.is_err());
        assert_eq!(
            again.replay(),
            Replay {
                replayed: 3,
                made: 1
            }
        );
    }
}
