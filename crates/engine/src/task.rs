//! The engine's only window on the outside world.

use std::error::Error;
use std::future::Future;
use std::sync::Arc;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use thiserror::Error;

use super::costs::AnswerCost;

/// What the engine needs from the outside world. An adapter renders the prompt with the example's
/// row, calls the task model and scores the answer; `reflect` sends text to the reflection model.
///
/// Examples are indexes into the task's dataset: `0..minibatch` is the feedback set and
/// `minibatch..minibatch + pareto` the Pareto set. Each call to `evaluate` or `reflect` is one
/// paid request; within a run the engine never evaluates the same prompt on the same example
/// twice.
pub trait Task: Send + Sync {
    /// Run `prompt` (a `{variable}` template) on example `example` and score the answer.
    fn evaluate(
        &self,
        prompt: &str,
        example: usize,
    ) -> impl Future<Output = Result<Evaluation, TaskError>> + Send;

    /// Ask the reflection model; the engine builds `request` and parses the answer.
    fn reflect(&self, request: &str) -> impl Future<Output = Result<Reflection, TaskError>> + Send;

    /// The inputs and expected output of an example, shown to the reflection model. The input
    /// names are also the template variables a new prompt must keep.
    fn describe(&self, example: usize) -> ExampleView;

    /// How many examples the dataset holds; the engine refuses to start if the feedback and
    /// Pareto sets do not fit.
    fn example_count(&self) -> usize;
}

/// One scored run of a prompt on one example.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evaluation {
    /// The task model's answer.
    pub output: String,
    /// The scorer's score, in `[0, 1]`; 1 is perfect. Anything else is treated as a task error.
    pub score: f64,
    /// The scorer's explanation, shown to the reflection model.
    pub feedback: String,
    /// Tokens the model call used (prompt and completion), when the model said; 0 when no call
    /// was made or the model did not count.
    #[serde(default)]
    pub tokens: u64,
    /// What the answer cost, when a model answered and counted its tokens (see
    /// [`AnswerCost`]); `None` when no call was made or the model did not count. The engine
    /// keeps each candidate's mean over its Pareto rows ([`CandidateRecord::costs`]).
    ///
    /// [`CandidateRecord::costs`]: super::CandidateRecord
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<AnswerCost>,
}

/// The reflection model's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reflection {
    pub answer: String,
    /// Tokens the call used (prompt and completion), when the model said.
    #[serde(default)]
    pub tokens: u64,
}

impl Reflection {
    /// An answer whose token count is not known.
    pub fn new(answer: impl Into<String>) -> Self {
        Self {
            answer: answer.into(),
            tokens: 0,
        }
    }
}

/// An example as the reflection model sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExampleView {
    /// Input variables in column order: (name, value).
    pub inputs: Vec<(String, String)>,
    /// The expected output.
    pub expected: String,
}

/// A failed model call or scoring, as the adapter reports it.
///
/// It wraps the adapter's own error (for example the `http` layer's `ApiError`) so a caller can
/// downcast it through [`TaskError::inner`]; it is cheap to clone because the same failure is
/// kept in the run's records and sent to the observer.
#[derive(Debug, Clone, Error)]
#[error(transparent)]
pub struct TaskError(Arc<dyn Error + Send + Sync>);

impl TaskError {
    /// Wrap any error, or a message (`&str` and `String` convert too).
    pub fn new(error: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self(Arc::from(error.into()))
    }

    /// The adapter's original error.
    pub fn inner(&self) -> &(dyn Error + Send + Sync + 'static) {
        &*self.0
    }
}

// Records holding a task error compare equal when the errors say the same thing, which is what
// a serialised record keeps of them.
impl PartialEq for TaskError {
    fn eq(&self, other: &Self) -> bool {
        self.to_string() == other.to_string()
    }
}

impl Serialize for TaskError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A recorded error comes back as its message: what serialising it kept.
impl<'de> Deserialize<'de> for TaskError {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer).map(TaskError::new)
    }
}
