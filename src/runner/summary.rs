//! The number a CI gate needs from a finished run: the mean holdout score of each prompt version
//! on each replay model, and which version is best. `run --fail-under` checks it; the report
//! (`crate::report`) renders the full tables and statistics.
use std::collections::BTreeMap;

use crate::store::ReplayRow;

/// Mean score of one (variant, version, model) over the holdout rows that have an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct VersionScore {
    pub variant: String,
    pub version: String,
    pub model: String,
    pub mean: f64,
    pub answered: usize,
    pub errors: usize,
}

impl VersionScore {
    pub fn label(&self) -> String {
        match self.variant.as_str() {
            "" => format!("{} on {}", self.version, self.model),
            variant => format!("{variant}/{} on {}", self.version, self.model),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct Summary {
    pub scores: Vec<VersionScore>,
}

pub fn summary(replay: &[ReplayRow]) -> Summary {
    let mut groups: BTreeMap<(String, String, String), (f64, usize, usize)> = BTreeMap::new();
    for row in replay {
        let entry = groups
            .entry((row.variant.clone(), row.version.clone(), row.model.clone()))
            .or_default();
        if row.error.is_empty() {
            entry.0 += row.score;
            entry.1 += 1;
        } else {
            entry.2 += 1;
        }
    }
    Summary {
        scores: groups
            .into_iter()
            .map(
                |((variant, version, model), (sum, answered, errors))| VersionScore {
                    variant,
                    version,
                    model,
                    mean: if answered == 0 {
                        0.0
                    } else {
                        sum / answered as f64
                    },
                    answered,
                    errors,
                },
            )
            .collect(),
    }
}

impl Summary {
    /// The best-scoring version (an evolved one over the seed on a tie); rows that errored do
    /// not count for or against it, but a version with no answer at all cannot be best.
    pub fn best(&self) -> Option<&VersionScore> {
        self.scores
            .iter()
            .filter(|score| score.answered > 0)
            .max_by(|a, b| {
                a.mean
                    .total_cmp(&b.mean)
                    .then((a.version != "seed").cmp(&(b.version != "seed")))
            })
    }
}
