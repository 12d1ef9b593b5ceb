//! Call accounting. As the evolution API says, every inference request costs one unit: each
//! `evaluate` and each `reflect`. Budget is money, so the engine never pays past its limit.

use serde::Serialize;

/// Calls paid so far, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Spent {
    /// `Task::evaluate` calls (the paper's "metric calls").
    pub task_calls: u64,
    /// `Task::reflect` calls.
    pub reflection_calls: u64,
}

impl Spent {
    /// Units of budget used.
    pub fn total(&self) -> u64 {
        self.task_calls + self.reflection_calls
    }
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
                reflection_calls: 1
            }
        );
        assert_eq!(budget.remaining(), 0);
    }
}
