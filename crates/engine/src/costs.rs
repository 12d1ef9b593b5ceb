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

    /// The first objective out of its range, as (cost, value, rule).
    pub fn out_of_range(&self) -> Option<(CostKind, f64, &'static str)> {
        self.iter().find_map(|(kind, objective)| match objective {
            Objective::Limit(limit) if !(limit > 0.0 && limit <= kind.max_limit()) => Some((
                kind,
                limit,
                "a limit is a number above 0, at most 1000000 tokens or 3600000 ms",
            )),
            Objective::Weight(weight) if !(weight > 0.0 && weight <= MAX_WEIGHT) => {
                Some((kind, weight, "a weight is a number above 0 and at most 1"))
            }
            _ => None,
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
