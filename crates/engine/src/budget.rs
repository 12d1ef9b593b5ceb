//! Call accounting. As the evolution API says, every inference request costs one unit: each
//! `evaluate` and each `reflect`. Budget is money, so the engine never pays past its limit.

use serde::{Deserialize, Serialize};

/// Calls paid so far, by kind, and the tokens they used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Spent {
    /// `Task::evaluate` calls (the paper's "metric calls").
    pub task_calls: u64,
    /// `Task::reflect` calls.
    pub reflection_calls: u64,
    /// Tokens of those calls, as the models reported them (0 for a model that does not count).
    /// Not part of the budget, which counts calls.
    #[serde(default)]
    pub tokens: u64,
}

impl Spent {
    /// Units of budget used.
    pub fn total(&self) -> u64 {
        self.task_calls + self.reflection_calls
    }

    /// What was spent after `earlier`, a snapshot taken before this one.
    pub fn since(&self, earlier: Spent) -> Spent {
        Spent {
            task_calls: self.task_calls.saturating_sub(earlier.task_calls),
            reflection_calls: self
                .reflection_calls
                .saturating_sub(earlier.reflection_calls),
            tokens: self.tokens.saturating_sub(earlier.tokens),
        }
    }
}

/// Whether `budget` pays for scoring the seed on `pareto` examples, one call each: the engine
/// starts nothing with less, and `validate` warns of it.
pub fn seed_affordable(pareto: u64, budget: u64) -> bool {
    budget >= pareto
}

/// How many reflections `budget` pays for at least: the seed costs one call per Pareto example,
/// and a mutation at most its parent and child on a reflection minibatch of
/// `min(reflection_minibatch, minibatch)` feedback examples, one reflection, and the child on
/// the Pareto set (when it is accepted). Rejected children cost less, so a run usually reflects
/// more often than this; `validate` warns when even this floor is low.
pub fn reflections_assured(
    minibatch: u64,
    pareto: u64,
    budget: u64,
    reflection_minibatch: u64,
) -> u64 {
    let shown = reflection_minibatch.min(minibatch);
    let mutation = shown
        .saturating_mul(2)
        .saturating_add(1)
        .saturating_add(pareto);
    budget.saturating_sub(pareto) / mutation.max(1)
}

/// Paying would go past the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Exhausted;

/// The limit and what has been paid from it.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    limit: u64,
    spent: Spent,
}

impl Budget {
    pub(crate) fn new(limit: u64) -> Self {
        Self {
            limit,
            spent: Spent::default(),
        }
    }

    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    pub(crate) fn spent(&self) -> Spent {
        self.spent
    }

    pub(crate) fn remaining(&self) -> u64 {
        self.limit.saturating_sub(self.spent.total())
    }

    // The engine checks each iteration's worst case before starting it, so a refusal here means
    // that check is wrong; refusing, rather than overspending, keeps the promise anyway.
    pub(crate) fn pay_task_calls(&mut self, calls: u64) -> Result<(), Exhausted> {
        if calls > self.remaining() {
            return Err(Exhausted);
        }
        self.spent.task_calls += calls;
        Ok(())
    }

    /// Tallies the tokens of calls already paid for.
    pub(crate) fn add_tokens(&mut self, tokens: u64) {
        self.spent.tokens = self.spent.tokens.saturating_add(tokens);
    }

    pub(crate) fn pay_reflection(&mut self) -> Result<(), Exhausted> {
        if self.remaining() == 0 {
            return Err(Exhausted);
        }
        self.spent.reflection_calls += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflections_assured_counts_whole_worst_case_mutations_after_the_seed() {
        // The case from the field: 15 for the seed, then 3 + 1 + 3 + 15 = 22 per mutation.
        assert_eq!(reflections_assured(5, 15, 40, 3), 1);
        assert_eq!(reflections_assured(5, 15, 59, 3), 2);
        // A feedback set smaller than the reflection minibatch shows all of it.
        assert_eq!(reflections_assured(2, 4, 4 + 3 * 9, 3), 3);
        assert_eq!(reflections_assured(5, 15, 10, 3), 0);
        assert_eq!(reflections_assured(u64::MAX, u64::MAX, u64::MAX, 3), 0);
    }

    #[test]
    fn counts_kinds_separately_and_refuses_to_overspend() {
        let mut budget = Budget::new(5);
        assert_eq!(budget.pay_task_calls(3), Ok(()));
        assert_eq!(budget.pay_reflection(), Ok(()));
        assert_eq!(budget.pay_task_calls(2), Err(Exhausted));
        assert_eq!(budget.pay_task_calls(1), Ok(()));
        assert_eq!(budget.pay_reflection(), Err(Exhausted));
        assert_eq!(
            budget.spent(),
            Spent {
                task_calls: 4,
                reflection_calls: 1,
                tokens: 0,
            }
        );
        assert_eq!(budget.remaining(), 0);
    }
}
