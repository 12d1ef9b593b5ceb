//! A deterministic stand-in for the task model, scorer and reflection model, for the engine's
//! tests.
//!
//! Each row has a keyword; a prompt scores 1 on the row when it mentions the keyword, and the
//! feedback names the keyword it missed. Rows without a keyword ("plain") score 1 only while the
//! prompt mentions no keyword, so the seed keeps a row of its own and lineages that added
//! different keywords coexist on the front (which gives merges something to do). The default reflection appends the first keyword the feedback asks for; a merge request is
//! answered with revision A plus the keywords only revision B has.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use super::costs::AnswerCost;
use super::task::TaskError;
use super::task::{Evaluation, ExampleView, Reflection, Task};

type Reflect = Box<dyn Fn(&str) -> Result<String, TaskError> + Send + Sync>;
type Fails = Box<dyn Fn(&str, usize) -> Option<TaskError> + Send + Sync>;

pub(crate) struct StandIn {
    keywords: Vec<String>,
    all_keywords: Vec<String>,
    reflect: Reflect,
    fails: Fails,
    pub(crate) evaluations: AtomicU64,
    pub(crate) reflections: AtomicU64,
    /// Every (prompt, example) evaluated, in call order.
    pub(crate) calls: Mutex<Vec<(String, usize)>>,
}

impl StandIn {
    /// One row per keyword; "" makes a plain row.
    pub(crate) fn new(keywords: &[&str]) -> Self {
        let mut all_keywords: Vec<String> = Vec::new();
        for keyword in keywords.iter().filter(|k| !k.is_empty()) {
            if !all_keywords.iter().any(|k| k == keyword) {
                all_keywords.push(keyword.to_string());
            }
        }
        Self {
            keywords: keywords.iter().map(|k| k.to_string()).collect(),
            all_keywords,
            reflect: Box::new(keyword_reflection),
            fails: Box::new(|_, _| None),
            evaluations: AtomicU64::new(0),
            reflections: AtomicU64::new(0),
            calls: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn reflecting(
        mut self,
        reflect: impl Fn(&str) -> Result<String, TaskError> + Send + Sync + 'static,
    ) -> Self {
        self.reflect = Box::new(reflect);
        self
    }

    pub(crate) fn failing(
        mut self,
        fails: impl Fn(&str, usize) -> Option<TaskError> + Send + Sync + 'static,
    ) -> Self {
        self.fails = Box::new(fails);
        self
    }

    pub(crate) fn calls_made(&self) -> u64 {
        self.evaluations.load(Ordering::SeqCst) + self.reflections.load(Ordering::SeqCst)
    }

    fn score(&self, prompt: &str, example: usize) -> Evaluation {
        let keyword = &self.keywords[example];
        if keyword.is_empty() {
            let mentioned = self
                .all_keywords
                .iter()
                .filter(|k| prompt.contains(k.as_str()))
                .count();
            return if mentioned == 0 {
                evaluation("plain answer", 1.0, "Correct.")
            } else {
                evaluation("confused answer", 0.0, "Keywords confuse this question.")
            };
        }
        if prompt.contains(keyword.as_str()) {
            evaluation(keyword, 1.0, "Correct.")
        } else {
            evaluation(
                "no idea",
                0.0,
                &format!("Wrong. The answer must mention {keyword}."),
            )
        }
    }
}

fn evaluation(output: &str, score: f64, feedback: &str) -> Evaluation {
    Evaluation {
        output: output.into(),
        score,
        feedback: feedback.into(),
        tokens: STAND_IN_EVALUATION_TOKENS,
        cost: None,
    }
}

/// What the stand-in says an answer cost: a token per word of the prompt and one for the answer.
pub(crate) fn cost_of(prompt: &str) -> AnswerCost {
    AnswerCost {
        prompt_tokens: prompt.split_whitespace().count() as u64,
        answer_tokens: 1,
        latency_ms: None,
    }
}

/// Tokens the stand-in says each call used, so that token tallies can be checked.
pub(crate) const STAND_IN_EVALUATION_TOKENS: u64 = 10;
pub(crate) const STAND_IN_REFLECTION_TOKENS: u64 = 100;

/// The contents of the ```-fenced blocks of `text`, in order.
pub(crate) fn fenced_blocks(text: &str) -> Vec<&str> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```\n") {
        let body = &rest[open + 4..];
        let Some(close) = body.find("\n```") else {
            break;
        };
        blocks.push(&body[..close]);
        rest = &body[close + 4..];
    }
    blocks
}

pub(crate) fn keyword_reflection(request: &str) -> Result<String, TaskError> {
    let blocks = fenced_blocks(request);
    if request.contains("Revision A") {
        let (Some(first), Some(second)) = (blocks.get(1), blocks.get(2)) else {
            return Err(TaskError::new("stand-in: unreadable merge request"));
        };
        let mut merged = first.to_string();
        for mention in second.split(" Mention ").skip(1) {
            if !first.contains(mention) {
                merged.push_str(" Mention ");
                merged.push_str(mention);
            }
        }
        return Ok(format!("```\n{merged}\n```"));
    }
    let Some(instruction) = blocks.first() else {
        return Err(TaskError::new("stand-in: unreadable request"));
    };
    let wanted = request
        .split("must mention ")
        .nth(1)
        .and_then(|rest| rest.split('.').next());
    Ok(match wanted {
        Some(keyword) => format!("Improved:\n```\n{instruction} Mention {keyword}.\n```"),
        None => format!("```\n{instruction}\n```"),
    })
}

impl Task for StandIn {
    async fn evaluate(&self, prompt: &str, example: usize) -> Result<Evaluation, TaskError> {
        self.evaluations.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut calls) = self.calls.lock() {
            calls.push((prompt.to_string(), example));
        }
        match (self.fails)(prompt, example) {
            Some(error) => Err(error),
            None => Ok(Evaluation {
                cost: Some(cost_of(prompt)),
                ..self.score(prompt, example)
            }),
        }
    }

    async fn reflect(&self, request: &str) -> Result<Reflection, TaskError> {
        self.reflections.fetch_add(1, Ordering::SeqCst);
        (self.reflect)(request).map(|answer| Reflection {
            answer,
            tokens: STAND_IN_REFLECTION_TOKENS,
        })
    }

    fn describe(&self, example: usize) -> ExampleView {
        let expected = match self.keywords[example].as_str() {
            "" => "anything".to_string(),
            keyword => keyword.to_string(),
        };
        ExampleView {
            inputs: vec![("question".into(), format!("question {example}"))],
            expected,
        }
    }

    fn example_count(&self) -> usize {
        self.keywords.len()
    }
}
