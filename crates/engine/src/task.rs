//! The engine's only window on the outside world.

use std::future::Future;

use serde::{Deserialize, Serialize};

use super::error::TaskError;

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
