//! The numbers a finished run is judged by: the mean holdout score of each prompt version on
//! each replay model, and which version is best. The report renders these at length; `run` prints
//! them as a table and gates `--fail-under` on the best one.
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::store::{ReplayRow, RunManifest};

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
    pub simulated: bool,
    pub scores: Vec<VersionScore>,
}

pub fn summary(manifest: &RunManifest, replay: &[ReplayRow]) -> Summary {
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
        simulated: manifest.simulated,
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

    /// A plain-text table for the terminal.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if self.simulated {
            out.push_str("SIMULATED: answers came from the test stand-in model, not a real one\n");
        }
        let width = self
            .scores
            .iter()
            .map(|s| s.label().len())
            .max()
            .unwrap_or(7)
            .max(7);
        let _ = writeln!(
            out,
            "{:<width$}  {:>6}  {:>8}  {:>6}",
            "version", "mean", "answered", "errors"
        );
        for score in &self.scores {
            let _ = writeln!(
                out,
                "{:<width$}  {:>6.3}  {:>8}  {:>6}",
                score.label(),
                score.mean,
                score.answered,
                score.errors
            );
        }
        out
    }
}
