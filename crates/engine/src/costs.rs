//! What an answer and a candidate cost (prompt tokens, answer tokens, latency), and the
//! objectives a run sets on those costs: hard limits and weights. Plain data and the rules
//! that read one candidate's costs; choosing among candidates is `objectives`'.

use serde::{Deserialize, Serialize};

/// A cost of an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CostKind {
    /// Tokens of the request: the rendered prompt, as the model counted them.
    PromptTokens,
    /// Tokens of the answer (the model's completion tokens).
    AnswerTokens,
    /// Milliseconds the model took to answer, as the backend measured it.
    LatencyMs,
}

impl CostKind {
    /// Every cost, in the order objectives are listed, read and charted.
    pub const ALL: [Self; 3] = [Self::PromptTokens, Self::AnswerTokens, Self::LatencyMs];

    /// The name an experiment file, a record and a chart give it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PromptTokens => "prompt_tokens",
            Self::AnswerTokens => "answer_tokens",
            Self::LatencyMs => "latency_ms",
        }
    }

    /// The cost in words, for a chart's axis or a table's heading.
    pub fn label(self) -> &'static str {
        match self {
            Self::PromptTokens => "prompt tokens per answer",
            Self::AnswerTokens => "answer tokens per answer",
            Self::LatencyMs => "latency per answer (ms)",
        }
    }

    /// The largest limit a file may set: a million tokens, or an hour.
    pub fn max_limit(self) -> f64 {
        match self {
            Self::PromptTokens | Self::AnswerTokens => 1_000_000.0,
            Self::LatencyMs => 3_600_000.0,
        }
    }
}

impl std::fmt::Display for CostKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one answer cost. Present on an [`Evaluation`](super::Evaluation) when a model answered
/// and counted its tokens; `latency_ms` is `None` when the backend measured no time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnswerCost {
    pub prompt_tokens: u64,
    pub answer_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

/// A candidate's mean cost per answer over the `rows` Pareto rows whose answer has a cost.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub prompt_tokens: f64,
    pub answer_tokens: f64,
    /// `None` unless every one of the `rows` answers had a measured latency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<f64>,
    /// The Pareto rows the means rest on.
    pub rows: usize,
}

impl Costs {
    /// The means of `answers`; `None` when there is none.
    pub fn mean<'a>(answers: impl IntoIterator<Item = &'a AnswerCost>) -> Option<Self> {
        let (mut prompt, mut answer, mut latency, mut rows) = (0u64, 0u64, Some(0u64), 0usize);
        for cost in answers {
            prompt = prompt.saturating_add(cost.prompt_tokens);
            answer = answer.saturating_add(cost.answer_tokens);
            latency = latency
                .zip(cost.latency_ms)
                .map(|(a, b)| a.saturating_add(b));
            rows += 1;
        }
        (rows > 0).then(|| {
            let n = rows as f64;
            Self {
                prompt_tokens: prompt as f64 / n,
                answer_tokens: answer as f64 / n,
                latency_ms: latency.map(|total| total as f64 / n),
                rows,
            }
        })
    }

    /// The mean of one cost, when it is known.
    pub fn get(&self, kind: CostKind) -> Option<f64> {
        match kind {
            CostKind::PromptTokens => Some(self.prompt_tokens),
            CostKind::AnswerTokens => Some(self.answer_tokens),
            CostKind::LatencyMs => self.latency_ms,
        }
    }
}

/// What the run does with one cost: never recommend a candidate above a `Limit` (mean per
/// answer), or give up `Weight` of score per unit of it when choosing the recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    Limit(f64),
    Weight(f64),
}

/// The largest weight: a score of 1 per token or millisecond already outweighs every score.
pub const MAX_WEIGHT: f64 = 1.0;

/// A rule of `[objectives]` (the ids `validate` and `serve` name).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjectiveRule {
    /// `objectives-one-of`: a cost sets exactly one of `limit` and `weight`, and the table
    /// names at least one cost.
    OneOf,
    /// `objectives-limit`: a limit is above 0 and at most [`CostKind::max_limit`].
    Limit,
    /// `objectives-weight`: a weight is above 0 and at most [`MAX_WEIGHT`].
    Weight,
}

impl ObjectiveRule {
    pub fn id(self) -> &'static str {
        match self {
            Self::OneOf => "objectives-one-of",
            Self::Limit => "objectives-limit",
            Self::Weight => "objectives-weight",
        }
    }

    /// The rule in a few words, for an engine config error.
    pub fn summary(self) -> &'static str {
        match self {
            Self::OneOf => "an objective sets exactly one of a limit and a weight",
            Self::Limit => "a limit is a number above 0, at most 1000000 tokens or 3600000 ms",
            Self::Weight => "a weight is a number above 0 and at most 1",
        }
    }
}

/// An objective that breaks a rule: the key as the experiment file names it
/// (`objectives.prompt_tokens.limit`), what it must be, and the value seen.
#[derive(Debug, Clone, PartialEq)]
pub struct ObjectiveProblem {
    pub rule: ObjectiveRule,
    pub key: String,
    pub requirement: String,
    pub seen: String,
}

impl std::fmt::Display for ObjectiveProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.key, self.requirement)
    }
}

impl Objective {
    /// One cost's objective from the `limit` and `weight` a file or a request sets: exactly one
    /// of them, in its range.
    pub fn from_parts(
        kind: CostKind,
        limit: Option<f64>,
        weight: Option<f64>,
    ) -> Result<Self, ObjectiveProblem> {
        match (limit, weight) {
            (Some(limit), None) => Self::Limit(limit).check(kind),
            (None, Some(weight)) => Self::Weight(weight).check(kind),
            (limit, _) => {
                let seen = if limit.is_some() {
                    "both limit and weight"
                } else {
                    "neither limit nor weight"
                };
                Err(ObjectiveProblem {
                    rule: ObjectiveRule::OneOf,
                    key: format!("objectives.{kind}"),
                    requirement: format!(
                        "sets {seen}: give it a hard limit or a weight, exactly one of them"
                    ),
                    seen: seen.to_owned(),
                })
            }
        }
    }

    /// This objective, when its number is in its range for `kind`.
    pub fn check(self, kind: CostKind) -> Result<Self, ObjectiveProblem> {
        let (rule, name, value, max) = match self {
            Self::Limit(limit) => (ObjectiveRule::Limit, "limit", limit, kind.max_limit()),
            Self::Weight(weight) => (ObjectiveRule::Weight, "weight", weight, MAX_WEIGHT),
        };
        if value.is_finite() && value > 0.0 && value <= max {
            return Ok(self);
        }
        Err(ObjectiveProblem {
            rule,
            key: format!("objectives.{kind}.{name}"),
            requirement: format!("must be a number above 0 and at most {max}"),
            seen: value.to_string(),
        })
    }
}

/// The objectives of a run, one per cost at most; none is the engine's behaviour without them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Objectives {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<Objective>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answer_tokens: Option<Objective>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<Objective>,
}

impl Objectives {
    pub fn get(&self, kind: CostKind) -> Option<Objective> {
        match kind {
            CostKind::PromptTokens => self.prompt_tokens,
            CostKind::AnswerTokens => self.answer_tokens,
            CostKind::LatencyMs => self.latency_ms,
        }
    }

    pub fn set(&mut self, kind: CostKind, objective: Objective) {
        let slot = match kind {
            CostKind::PromptTokens => &mut self.prompt_tokens,
            CostKind::AnswerTokens => &mut self.answer_tokens,
            CostKind::LatencyMs => &mut self.latency_ms,
        };
        *slot = Some(objective);
    }

    /// Each objective set, in [`CostKind::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = (CostKind, Objective)> + '_ {
        CostKind::ALL
            .into_iter()
            .filter_map(|kind| self.get(kind).map(|objective| (kind, objective)))
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    /// The cost the frontier is drawn on and "cheapest" means: the first objective set, in
    /// [`CostKind::ALL`]'s order (prompt tokens, answer tokens, latency).
    pub fn axis(&self) -> Option<CostKind> {
        self.iter().next().map(|(kind, _)| kind)
    }

    /// The rules these objectives break: each one out of its range, or none set at all. The
    /// one implementation of `[objectives]`' rules: `validate` reports these at the file's
    /// keys, `serve` answers them with a 400, the engine refuses a config that has any.
    pub fn problems(&self) -> Vec<ObjectiveProblem> {
        if self.is_empty() {
            return vec![ObjectiveProblem {
                rule: ObjectiveRule::OneOf,
                key: "objectives".to_owned(),
                requirement: "must name a cost: give prompt_tokens, answer_tokens or latency_ms \
                              a limit or a weight, or remove the table"
                    .to_owned(),
                seen: "an empty table".to_owned(),
            }];
        }
        self.iter()
            .filter_map(|(kind, objective)| objective.check(kind).err())
            .collect()
    }

    /// The first rule these objectives break, as (cost, value, rule).
    pub fn out_of_range(&self) -> Option<(CostKind, f64, &'static str)> {
        self.iter()
            .find_map(|(kind, objective)| match objective.check(kind) {
                Ok(_) => None,
                Err(problem) => {
                    let value = match objective {
                        Objective::Limit(value) | Objective::Weight(value) => value,
                    };
                    Some((kind, value, problem.rule.summary()))
                }
            })
    }

    /// Whether `costs` are within every limit. A cost that is not known is not within its
    /// limit: it cannot be shown to be.
    pub fn within_limits(&self, costs: Option<&Costs>) -> bool {
        self.iter().all(|(kind, objective)| match objective {
            Objective::Limit(limit) => costs
                .and_then(|costs| costs.get(kind))
                .is_some_and(|cost| cost <= limit),
            Objective::Weight(_) => true,
        })
    }

    /// The score less each weighted cost (the score itself without weights), for a candidate
    /// within every limit; `None` for one over a limit or with a weighted cost not known.
    pub fn trade_off(&self, score: f64, costs: Option<&Costs>) -> Option<f64> {
        if !self.within_limits(costs) {
            return None;
        }
        self.iter()
            .try_fold(score, |value, (kind, objective)| match objective {
                Objective::Weight(weight) => Some(value - weight * costs?.get(kind)?),
                Objective::Limit(_) => Some(value),
            })
    }
}
