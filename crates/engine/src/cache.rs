//! Every evaluation the run has paid for, keyed by prompt text and example, so a known score is
//! never paid twice: a parent drawn again on examples it has seen, a merged prompt's subsample
//! inside its full Pareto evaluation, a proposal identical to an earlier rejected one.

use std::collections::HashMap;
use std::sync::Arc;

use super::task::Evaluation;

#[derive(Default)]
pub(crate) struct EvaluationCache {
    // Prompts are interned so the per-evaluation key is two integers, not a long string.
    prompts: HashMap<Arc<str>, usize>,
    evaluations: HashMap<(usize, usize), Evaluation>,
}

/// A prompt known to the cache.
#[derive(Debug, Clone)]
pub(crate) struct PromptId {
    id: usize,
    text: Arc<str>,
}

// Interning makes the id a complete stand-in for the text.
impl PartialEq for PromptId {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl PromptId {
    pub(crate) fn text(&self) -> &str {
        &self.text
    }
}

impl EvaluationCache {
    pub(crate) fn intern(&mut self, prompt: &str) -> PromptId {
        if let Some((text, &id)) = self.prompts.get_key_value(prompt) {
            return PromptId {
                id,
                text: Arc::clone(text),
            };
        }
        let text: Arc<str> = Arc::from(prompt);
        let id = self.prompts.len();
        self.prompts.insert(Arc::clone(&text), id);
        PromptId { id, text }
    }

    pub(crate) fn get(&self, prompt: &PromptId, example: usize) -> Option<&Evaluation> {
        self.evaluations.get(&(prompt.id, example))
    }

    pub(crate) fn insert(&mut self, prompt: &PromptId, example: usize, evaluation: Evaluation) {
        self.evaluations.insert((prompt.id, example), evaluation);
    }

    /// How many of `examples` have not been evaluated with `prompt`.
    pub(crate) fn uncached(&self, prompt: &PromptId, examples: &[usize]) -> usize {
        examples
            .iter()
            .filter(|&&example| self.get(prompt, example).is_none())
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_text_same_entry() {
        let mut cache = EvaluationCache::default();
        let first = cache.intern("Answer {question}.");
        let evaluation = Evaluation {
            output: "4".into(),
            score: 1.0,
            feedback: String::new(),
            tokens: 0,
            cost: None,
        };
        cache.insert(&first, 3, evaluation.clone());
        let again = cache.intern(&String::from("Answer {question}."));
        assert_eq!(cache.get(&again, 3), Some(&evaluation));
        assert_eq!(cache.uncached(&again, &[3, 4, 5]), 2);
        assert_eq!(first, again);
        let other = cache.intern("Answer {question} briefly.");
        assert_eq!(cache.get(&other, 3), None);
        assert_ne!(first, other);
    }
}
