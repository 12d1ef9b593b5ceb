//! Prompt versions of an execution, and the one rule that ranks prompts.
//!
//! Every place that picks a best prompt (the runner choosing which evolved prompts to replay, the
//! report naming the best version and the headline execution, `compare`, the `--fail-under` gate
//! and the terminal summary) goes through [`rank_by_score`] or [`best_by_score`], so that they can
//! never disagree.
use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use super::HistoryRow;
use gepa_lab_engine::{IterationRecord, SeedEvidence};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A prompt version of one execution: its seed, or a generation of its history. Spelled `seed`
/// and `g<generation>` in files and tables. Orders the seed first, then by generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Version {
    Seed,
    Generation(u32),
}

impl Version {
    pub fn is_seed(self) -> bool {
        self == Self::Seed
    }

    pub fn generation(self) -> Option<u32> {
        match self {
            Self::Seed => None,
            Self::Generation(generation) => Some(generation),
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Seed => f.write_str("seed"),
            Self::Generation(generation) => write!(f, "g{generation}"),
        }
    }
}

impl FromStr for Version {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if text == "seed" {
            return Ok(Self::Seed);
        }
        text.strip_prefix('g')
            .filter(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|digits| digits.parse().ok())
            .map(Self::Generation)
            .ok_or_else(|| format!("version {text:?} is neither \"seed\" nor g<generation>"))
    }
}

impl Serialize for Version {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Version {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// What a replay row answers for: a prompt version of one of a run's executions, or, in a
/// comparison of prompt files (`compare --prompts`), a prompt file as the user named it. Written
/// as text, the version's (`seed`, `g<generation>`) or the file's name; read back, text that is
/// a version is one (a run directory holds versions only, and `report` refuses anything else).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ReplayOf {
    Version(Version),
    PromptFile(String),
}

impl ReplayOf {
    /// The version, for a row of a run.
    pub fn version(&self) -> Option<Version> {
        match self {
            Self::Version(version) => Some(*version),
            Self::PromptFile(_) => None,
        }
    }

    /// Whether the row answers for the prompt file `name`.
    pub fn is_file(&self, name: &str) -> bool {
        matches!(self, Self::PromptFile(file) if file == name)
    }
}

impl fmt::Display for ReplayOf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Version(version) => version.fmt(f),
            Self::PromptFile(name) => f.write_str(name),
        }
    }
}

impl Serialize for ReplayOf {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Text that is a version is one; any other text is a prompt file's name.
impl FromStr for ReplayOf {
    type Err = std::convert::Infallible;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Ok(match text.parse() {
            Ok(version) => Self::Version(version),
            Err(_) => Self::PromptFile(text.to_owned()),
        })
    }
}

impl<'de> Deserialize<'de> for ReplayOf {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The ranking rule, written once: a higher score first; a known score before an unknown one;
/// equal scores keep the order they were given in. Callers list candidates seed first, then by
/// generation, then by execution, so a tie goes to the earlier one.
///
/// The score is the evolution's own (on its Pareto rows), never the holdout's: a best chosen by
/// holdout score would bias the holdout comparison towards it.
fn rank(a: Option<f64>, b: Option<f64>) -> Ordering {
    match (a, b) {
        (Some(a), Some(b)) => b.total_cmp(&a),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => Ordering::Equal,
    }
}

/// Whether generation `generation` of an execution's `history` may be named best: the seed
/// always; an evolved prompt when the rows it wins against the seed, on the Pareto rows and the
/// feedback rows its `iterations` record fairly, pass the sign test the engine asks of a child
/// judged on the Pareto rows; any generation when the rows are unknown (a service that reports
/// means only). The engine's rule ([`gepa_lab_engine::may_be_best`], where the reason is), on
/// the run directory's records.
pub fn may_be_best(
    history: &[&HistoryRow],
    iterations: &[IterationRecord],
    generation: u32,
) -> bool {
    gepa_lab_engine::may_be_best(generation as usize, pareto_scores(history), iterations)
}

/// Generation `generation`'s evidence over the seed, as [`may_be_best`] weighs it
/// ([`gepa_lab_engine::evidence_over_seed`]); `None` for the seed or unknown rows.
pub fn evidence_over_seed(
    history: &[&HistoryRow],
    iterations: &[IterationRecord],
    generation: u32,
) -> Option<SeedEvidence> {
    gepa_lab_engine::evidence_over_seed(generation as usize, pareto_scores(history), iterations)
}

/// A generation's Pareto scores in `history`, when it reports them.
fn pareto_scores<'h>(history: &'h [&HistoryRow]) -> impl Fn(usize) -> Option<&'h [f64]> {
    move |generation| {
        history
            .iter()
            .find(|row| row.generation as usize == generation)
            .and_then(|row| row.pareto_scores.as_deref())
    }
}

/// Sorts `items` best first by the ranking rule.
pub fn rank_by_score<T>(items: &mut [T], score: impl Fn(&T) -> Option<f64>) {
    items.sort_by(|a, b| rank(score(a), score(b)));
}

/// The best of `items` by the ranking rule; a candidate whose score is unknown is never best.
pub fn best_by_score<T>(
    items: impl IntoIterator<Item = T>,
    score: impl Fn(&T) -> Option<f64>,
) -> Option<T> {
    items
        .into_iter()
        .filter(|item| score(item).is_some())
        .min_by(|a, b| rank(score(a), score(b)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_seed_or_a_generation() {
        assert_eq!("seed".parse(), Ok(Version::Seed));
        assert_eq!("g0".parse(), Ok(Version::Generation(0)));
        assert_eq!("g12".parse(), Ok(Version::Generation(12)));
        for bad in ["", "g", "g-1", "g1.5", "G1", "seed2", "g+1", "g99999999999"] {
            let err = bad.parse::<Version>().unwrap_err();
            assert!(err.contains("neither"), "{bad}: {err}");
        }
        for version in [Version::Seed, Version::Generation(7)] {
            assert_eq!(version.to_string().parse(), Ok(version));
        }
        assert!(Version::Seed < Version::Generation(0));
        assert!(Version::Generation(2) < Version::Generation(10));
    }

    #[test]
    fn a_replay_row_answers_for_a_version_or_a_prompt_file_written_as_text() {
        let row = |text: &str| -> ReplayOf { serde_json::from_str(&format!("{text:?}")).unwrap() };
        assert_eq!(row("g3"), ReplayOf::Version(Version::Generation(3)));
        assert_eq!(row("seed").version(), Some(Version::Seed));
        assert_eq!(row("b.txt"), ReplayOf::PromptFile("b.txt".into()));
        assert!(row("b.txt").is_file("b.txt") && !row("g3").is_file("g3"));
        for of in [
            ReplayOf::Version(Version::Generation(12)),
            ReplayOf::PromptFile("x y".into()),
        ] {
            assert_eq!(row(&of.to_string()), of);
        }
    }

    #[test]
    fn the_highest_score_wins_and_a_tie_goes_to_the_earlier() {
        let items = [
            ("seed", Some(0.5)),
            ("g1", Some(0.75)),
            ("g2", None),
            ("g3", Some(0.75)),
            ("g4", Some(0.25)),
        ];
        assert_eq!(best_by_score(items, |i| i.1).unwrap().0, "g1");
        let mut ranked = items;
        rank_by_score(&mut ranked, |i| i.1);
        let order: Vec<&str> = ranked.iter().map(|i| i.0).collect();
        assert_eq!(order, ["g1", "g3", "seed", "g4", "g2"]);
    }

    #[test]
    fn the_seed_wins_a_tie_and_an_unscored_candidate_is_never_best() {
        let items = [("seed", Some(0.5)), ("g1", Some(0.5))];
        assert_eq!(best_by_score(items, |i| i.1).unwrap().0, "seed");
        let items = [("seed", None), ("g1", Some(0.1))];
        assert_eq!(best_by_score(items, |i| i.1).unwrap().0, "g1");
        assert_eq!(best_by_score([("seed", None::<f64>)], |i| i.1), None);
    }
}
