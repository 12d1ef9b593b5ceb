//! The engine's [`Task`] over inference models: how `LocalEvolution` runs a prompt on a dataset
//! item, scores the answer, and asks for a reflection.
//!
//! A prompt is a `{variable}` template filled with the item's inputs and sent as one user message
//! to the task model; a prompt of several parts (`prompt::ChatTemplate`) is sent as chat messages
//! instead: the system message, the few-shot turns, then the filled user template; the answer is scored against the item's expected output
//! by the scorer the evaluator's metric maps to ([`scorer_for_metric`]). Reflection requests go as
//! they are to the reflection model. Every evolution model id (`gpt-4o-mini`, ...) runs on the
//! one configured task model: the local engine has no fleet of hosted models to choose from.
//!
//! A prompt that does not render (bad braces, a placeholder no input fills) is scored 0 with the
//! reason as feedback, without a model call: the reflection model can repair it, where failing
//! the call would end the whole run over one bad candidate.
use std::sync::Arc;

use gepa_lab_engine::{AnswerCost, Evaluation, ExampleView, Reflection, Task, TaskError};
use gepa_lab_evolution::wire::DatasetItem;
use gepa_lab_inference::{ChatMessage, ChatRequest, ChatResponse, Inference, sampling_seed};
use gepa_lab_prompt::{ChatTemplate, Message, Role};
use gepa_lab_score::{Scorer, ScorerSpec};

/// Which models answer and how.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelSettings {
    /// The model every task call uses, whatever evolution model the request named.
    pub task_model: String,
    /// The model that reads feedback and proposes new prompts.
    pub reflection_model: String,
    /// For task calls; `None` leaves it to the inference service's default.
    pub temperature: Option<f64>,
    /// For task calls; `None` derives a cap from the dataset's expected outputs
    /// ([`max_tokens_for`]).
    pub max_tokens: Option<u32>,
    pub reflection_temperature: Option<f64>,
    pub reflection_max_tokens: Option<u32>,
}

impl ModelSettings {
    /// Both roles on `model`; task calls at temperature 0 so a prompt's score is about the prompt,
    /// reflection at the service's default so proposals vary.
    pub fn new(model: impl Into<String>) -> Self {
        let model = model.into();
        Self {
            task_model: model.clone(),
            reflection_model: model,
            temperature: Some(0.0),
            max_tokens: None,
            reflection_temperature: None,
            reflection_max_tokens: None,
        }
    }
}

/// The scorer for an evaluator's `metric`, and a note when the mapping is a guess.
///
/// | metric | scorer |
/// |---|---|
/// | `exact_match` | `exact_match` |
/// | `accuracy` | `exact_match_ci` (a correct label, whatever its case) |
/// | anything else, or none | `exact_match_ci`, with a note |
///
/// The service's metrics are not specified beyond their names; `coherence` in particular needs a
/// judge the local engine does not run.
pub fn scorer_for_metric(metric: Option<&str>) -> (ScorerSpec, Option<String>) {
    match metric {
        Some("exact_match") => (ScorerSpec::ExactMatch, None),
        Some("accuracy") => (ScorerSpec::ExactMatchCi, None),
        Some(other) => (
            ScorerSpec::ExactMatchCi,
            Some(format!(
                "the local engine has no scorer for metric {other:?}; answers are scored with exact_match_ci"
            )),
        ),
        None => (
            ScorerSpec::ExactMatchCi,
            Some("the evaluator names no metric; answers are scored with exact_match_ci".into()),
        ),
    }
}

/// The metric named in an evaluator JSON string, if it names one.
pub fn evaluator_metric(evaluator: &str) -> Option<String> {
    serde_json::from_str::<serde_json::Value>(evaluator)
        .ok()?
        .get("metric")?
        .as_str()
        .map(str::to_owned)
}

/// Slack over the longest expected output, for the words a model puts around an answer.
const ANSWER_SLACK_TOKENS: u32 = 16;

/// A `max_tokens` cap for task calls when none is set: the longest expected output in bytes
/// (a token is at least one byte, so no expected answer is ever cut) plus some slack, within
/// the service's default. Without a cap a small model that starts explaining runs on to the
/// default of 2,048 tokens, minutes per call on a CPU, for an answer that is scored wrong anyway.
pub fn max_tokens_for(items: &[DatasetItem]) -> u32 {
    let longest = items
        .iter()
        .map(|item| item.expected_output.len())
        .max()
        .unwrap_or(0);
    u32::try_from(longest)
        .unwrap_or(u32::MAX)
        .saturating_add(ANSWER_SLACK_TOKENS)
        .min(gepa_lab_inference::wire::DEFAULT_MAX_TOKENS)
}

/// An answer cut off by its token limit without its unfinished last line, so that the engine
/// never adopts half a sentence (a rule, or the last line of an instruction whose closing fence
/// is then missing, which the engine refuses).
fn complete_lines(answer: &str, truncated: bool) -> &str {
    match answer.rfind('\n') {
        Some(end) if truncated => &answer[..end],
        None if truncated => "",
        _ => answer,
    }
}

/// The tokens an answer used, as its model counted them: the total, else prompt plus completion.
fn tokens_of(answer: &ChatResponse) -> u64 {
    answer.usage.as_ref().map_or(0, |usage| {
        if usage.total_tokens > 0 {
            usage.total_tokens
        } else {
            usage.prompt_tokens.saturating_add(usage.completion_tokens)
        }
    })
}

/// What an answer cost, when its model counted its tokens: the prompt and completion tokens it
/// reported, and the latency its backend measured (the HTTP client's, the embedded model's own
/// time; `None` from a backend that measures none, so a run on the stand-in model repeats).
fn cost_of(answer: &ChatResponse) -> Option<AnswerCost> {
    let usage = answer.usage.as_ref()?;
    Some(AnswerCost {
        prompt_tokens: usage.prompt_tokens,
        answer_tokens: usage.completion_tokens,
        latency_ms: answer
            .latency
            .map(|latency| u64::try_from(latency.as_millis()).unwrap_or(u64::MAX)),
    })
}

/// One execution's dataset, models and scorer.
pub struct InferenceTask {
    task_model: Arc<dyn Inference>,
    reflection_model: Arc<dyn Inference>,
    settings: ModelSettings,
    columns: Vec<String>,
    items: Vec<DatasetItem>,
    scorer: Scorer,
    /// The engine's seed: each call's sampling seed is derived from it and the request's text
    /// ([`sampling_seed`]), so a model that samples repeats its answers in a run of the same seed.
    seed: u64,
}

impl InferenceTask {
    pub fn new(
        task_model: Arc<dyn Inference>,
        reflection_model: Arc<dyn Inference>,
        settings: ModelSettings,
        columns: Vec<String>,
        items: Vec<DatasetItem>,
        scorer: &ScorerSpec,
    ) -> Result<Self, TaskError> {
        // Only a file-backed scorer (json_schema) can fail to build; its path is resolved in the
        // plan, as replay builds it too.
        let scorer = Scorer::new(scorer, std::path::Path::new(".")).map_err(TaskError::new)?;
        let mut settings = settings;
        settings.max_tokens = settings.max_tokens.or(Some(max_tokens_for(&items)));
        Ok(Self {
            task_model,
            reflection_model,
            settings,
            columns,
            items,
            scorer,
            seed: 0,
        })
    }

    /// Derives every call's sampling seed from `seed` (the engine's).
    pub fn with_seed(self, seed: u64) -> Self {
        Self { seed, ..self }
    }

    /// The sampling seed of a call whose message is `text`, by `role` (task or reflection).
    fn seed_for(&self, role: &str, text: &str) -> u64 {
        sampling_seed(&[&self.seed.to_le_bytes(), role.as_bytes(), text.as_bytes()])
    }

    fn unscored(reason: String) -> Evaluation {
        Evaluation {
            output: String::new(),
            score: 0.0,
            feedback: format!("{reason}; the prompt was not sent to the model"),
            tokens: 0,
            cost: None,
        }
    }
}

/// A rendered part of a prompt as the chat message it is sent as.
pub fn chat_message(message: Message) -> ChatMessage {
    match message.role {
        Role::System => ChatMessage::system(message.text),
        Role::User => ChatMessage::user(message.text),
        Role::Assistant => ChatMessage::assistant(message.text),
    }
}

impl Task for InferenceTask {
    async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
        let item = self
            .items
            .get(example)
            .ok_or_else(|| TaskError::new(format!("the dataset has no item {example}")))?;
        let template = match ChatTemplate::parse(prompt) {
            Ok(template) => template,
            Err(err) => {
                return Ok(Self::unscored(format!(
                    "the prompt is not a template: {err}"
                )));
            }
        };
        let messages = match template.render(|name| item.input.get(name).map(String::as_str)) {
            Ok(messages) => messages,
            Err(err) => return Ok(Self::unscored(err.to_string())),
        };
        // A prompt of one part seeds as its text alone did before parts existed.
        let texts: Vec<&str> = messages.iter().map(|m| m.text.as_str()).collect();
        let seed = self.seed_for("task", &texts.join("\n"));
        let mut request = ChatRequest::new(
            self.settings.task_model.clone(),
            messages.into_iter().map(chat_message).collect(),
        );
        request.seed = Some(seed);
        request.temperature = self.settings.temperature;
        request.max_tokens = self.settings.max_tokens;
        let answer = self
            .task_model
            .chat(&request)
            .await
            .map_err(TaskError::new)?;
        let output = answer.content().to_owned();
        let score = self
            .scorer
            .score(None, &output, &item.expected_output)
            .map_err(TaskError::new)?;
        Ok(Evaluation {
            output,
            score: score.value,
            feedback: score.feedback,
            tokens: tokens_of(&answer),
            cost: cost_of(&answer),
        })
    }

    async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
        let mut chat = ChatRequest::new(
            self.settings.reflection_model.clone(),
            vec![ChatMessage::user(request)],
        );
        chat.seed = Some(self.seed_for("reflection", request));
        chat.temperature = self.settings.reflection_temperature;
        chat.max_tokens = self.settings.reflection_max_tokens;
        let answer = self
            .reflection_model
            .chat(&chat)
            .await
            .map_err(TaskError::new)?;
        Ok(Reflection {
            answer: complete_lines(answer.content(), answer.truncated()).to_owned(),
            tokens: tokens_of(&answer),
        })
    }

    fn describe(&self, example: usize) -> ExampleView {
        let Some(item) = self.items.get(example) else {
            return ExampleView {
                inputs: Vec::new(),
                expected: String::new(),
            };
        };
        ExampleView {
            inputs: self
                .columns
                .iter()
                .map(|name| {
                    let value = item.input.get(name).cloned().unwrap_or_default();
                    (name.clone(), value)
                })
                .collect(),
            expected: item.expected_output.clone(),
        }
    }

    fn example_count(&self) -> usize {
        self.items.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use gepa_lab_inference::wire::Model;
    use gepa_lab_inference::{ChatResponse, ChunkStream, InferenceError, SimModel};

    /// Answers every request with a fixed text and remembers what it was asked.
    struct Fixed {
        answer: String,
        asked: Mutex<Vec<ChatRequest>>,
    }

    impl Fixed {
        fn new(answer: &str) -> Arc<Self> {
            Arc::new(Self {
                answer: answer.into(),
                asked: Mutex::new(Vec::new()),
            })
        }

        fn asked(&self) -> Vec<ChatRequest> {
            self.asked.lock().unwrap().clone()
        }
    }

    #[async_trait]
    impl Inference for Fixed {
        async fn models(&self) -> Result<Vec<Model>, InferenceError> {
            Ok(Vec::new())
        }
        async fn chat(&self, request: &ChatRequest) -> Result<ChatResponse, InferenceError> {
            self.asked.lock().unwrap().push(request.clone());
            let mut response: ChatResponse = serde_json::from_value(serde_json::json!({
                "choices": [{"message": {"content": self.answer}}]
            }))
            .unwrap();
            response.model = request.model.clone();
            Ok(response)
        }
        async fn chat_stream(&self, _: &ChatRequest) -> Result<ChunkStream, InferenceError> {
            unreachable!("the adapter never streams")
        }
    }

    fn items() -> Vec<DatasetItem> {
        vec![DatasetItem {
            input: BTreeMap::from([
                ("title".to_owned(), "Broken kettle".to_owned()),
                ("body".to_owned(), "It leaks.".to_owned()),
            ]),
            expected_output: "Negative".to_owned(),
        }]
    }

    fn task(model: Arc<dyn Inference>, metric: &str) -> InferenceTask {
        let (scorer, _) = scorer_for_metric(Some(metric));
        let mut settings = ModelSettings::new("local-model");
        settings.reflection_model = "local-reflector".into();
        settings.max_tokens = Some(16);
        InferenceTask::new(
            Arc::clone(&model),
            model,
            settings,
            vec!["title".into(), "body".into()],
            items(),
            &scorer,
        )
        .unwrap()
    }

    #[test]
    fn metrics_map_to_scorers_with_a_note_for_guesses() {
        assert_eq!(
            scorer_for_metric(Some("exact_match")),
            (ScorerSpec::ExactMatch, None)
        );
        assert_eq!(
            scorer_for_metric(Some("accuracy")),
            (ScorerSpec::ExactMatchCi, None)
        );
        let (spec, note) = scorer_for_metric(Some("coherence"));
        assert_eq!(spec, ScorerSpec::ExactMatchCi);
        assert!(note.unwrap().contains("\"coherence\""));
        assert!(scorer_for_metric(None).1.is_some());
        assert_eq!(
            evaluator_metric(r#"{"model":"m","metric":"accuracy"}"#).as_deref(),
            Some("accuracy")
        );
        assert_eq!(evaluator_metric(r#"{"model":"m"}"#), None);
        assert_eq!(evaluator_metric("not json"), None);
    }

    #[tokio::test]
    async fn renders_the_item_sends_it_to_the_task_model_and_scores_the_answer() {
        let model = Fixed::new(" negative ");
        let accuracy = task(model.clone(), "accuracy");
        let evaluation = accuracy
            .evaluate("Title: {title}\nBody: {body}\nLabel?", 0)
            .await
            .unwrap();
        assert_eq!(evaluation.score, 1.0);
        let asked = model.asked();
        assert_eq!(asked.len(), 1);
        assert_eq!(asked[0].model, "local-model");
        assert_eq!(asked[0].temperature, Some(0.0));
        assert_eq!(asked[0].max_tokens, Some(16));
        assert_eq!(
            asked[0].messages[0].text(),
            "Title: Broken kettle\nBody: It leaks.\nLabel?"
        );
        // exact_match keeps case: "negative" is not "Negative".
        let exact = task(model.clone(), "exact_match");
        let evaluation = exact.evaluate("{title}", 0).await.unwrap();
        assert_eq!(evaluation.score, 0.0);
        assert!(evaluation.feedback.contains("Negative"), "{evaluation:?}");
    }

    #[tokio::test]
    async fn a_prompt_of_parts_is_sent_as_chat_messages() {
        use gepa_lab_inference::Role as ChatRole;
        let model = Fixed::new("Negative");
        let task = task(model.clone(), "accuracy");
        let prompt = gepa_lab_prompt::ChatPrompt::new(
            Some("You label reviews.".into()),
            vec![gepa_lab_prompt::Turn {
                user: "Title: Nice mug".into(),
                assistant: "Positive".into(),
            }],
            "Title: {title}\nBody: {body}".into(),
            &[gepa_lab_prompt::PartName::System],
        )
        .unwrap()
        .join();
        let evaluation = task.evaluate(&prompt, 0).await.unwrap();
        assert_eq!(evaluation.score, 1.0);
        let asked = model.asked();
        let sent: Vec<(ChatRole, String)> = asked[0]
            .messages
            .iter()
            .map(|message| (message.role, message.text()))
            .collect();
        assert_eq!(
            sent,
            [
                (ChatRole::System, "You label reviews.".to_owned()),
                (ChatRole::User, "Title: Nice mug".to_owned()),
                (ChatRole::Assistant, "Positive".to_owned()),
                (
                    ChatRole::User,
                    "Title: Broken kettle\nBody: It leaks.".to_owned()
                ),
            ]
        );
    }

    #[tokio::test]
    async fn a_prompt_that_does_not_render_scores_zero_without_a_call() {
        let model = Fixed::new("Negative");
        let task = task(model.clone(), "accuracy");
        for prompt in ["{missing}", "{title", "a } b"] {
            let evaluation = task.evaluate(prompt, 0).await.unwrap();
            assert_eq!(evaluation.score, 0.0, "{prompt}");
            assert!(
                evaluation.feedback.contains("not sent to the model"),
                "{evaluation:?}"
            );
        }
        assert!(model.asked().is_empty());
        assert!(task.evaluate("{title}", 7).await.is_err());
    }

    #[tokio::test]
    async fn reflection_goes_to_the_reflection_model_as_is() {
        let model = Fixed::new("```\nnew\n```");
        let task = task(model.clone(), "accuracy");
        let answer = task.reflect("improve this").await.unwrap();
        assert_eq!(answer.answer, "```\nnew\n```");
        let asked = model.asked();
        assert_eq!(asked[0].model, "local-reflector");
        assert_eq!(asked[0].messages[0].text(), "improve this");
    }

    #[test]
    fn a_truncated_answer_loses_its_unfinished_last_line() {
        assert_eq!(complete_lines("- One.\n- Two is cu", true), "- One.");
        assert_eq!(complete_lines("- One.\n- Two.", false), "- One.\n- Two.");
        assert_eq!(complete_lines("cut", true), "");
    }

    #[test]
    fn examples_show_inputs_in_column_order() {
        let task = task(Fixed::new(""), "accuracy");
        let view = task.describe(0);
        assert_eq!(
            view.inputs,
            vec![
                ("title".to_owned(), "Broken kettle".to_owned()),
                ("body".to_owned(), "It leaks.".to_owned())
            ]
        );
        assert_eq!(view.expected, "Negative");
        assert_eq!(task.example_count(), 1);
        assert!(task.describe(9).inputs.is_empty());
    }

    #[tokio::test]
    async fn without_a_cap_task_calls_get_one_from_the_longest_expected_output() {
        let model = Fixed::new("negative");
        let (scorer, _) = scorer_for_metric(Some("accuracy"));
        let mut items = items();
        items.push(DatasetItem {
            input: BTreeMap::new(),
            expected_output: "x".repeat(40),
        });
        let task = InferenceTask::new(
            model.clone(),
            model.clone(),
            ModelSettings::new("m"),
            vec!["title".into()],
            items.clone(),
            &scorer,
        )
        .unwrap();
        task.evaluate("{title}", 0).await.unwrap();
        assert_eq!(model.asked()[0].max_tokens, Some(40 + ANSWER_SLACK_TOKENS));
        items[1].expected_output = "x".repeat(100_000);
        assert_eq!(
            max_tokens_for(&items),
            gepa_lab_inference::wire::DEFAULT_MAX_TOKENS
        );
        assert_eq!(max_tokens_for(&[]), ANSWER_SLACK_TOKENS);
    }

    #[tokio::test]
    async fn a_model_failure_is_a_task_error() {
        let sim: Arc<dyn Inference> = Arc::new(SimModel::new("model=other".parse().unwrap()));
        let task = task(sim, "accuracy");
        let err = task.evaluate("{title}", 0).await.unwrap_err();
        assert!(err.to_string().contains("503"), "{err}");
    }
}
