//! The CI gates of `run` and `compare`: `--fail-under` (every score checked is at least the
//! threshold) and `--fail-if-worse` (no prompt is significantly worse than the first). One rule
//! each, whoever asks; the outcome is whether it passed and the line that says why.
use super::compare::CompareReport;
use super::stats::Verdict;

/// Whether a gate passed, and the line that says so.
#[derive(Debug, Clone, PartialEq)]
pub struct GateOutcome {
    pub passed: bool,
    pub line: String,
}

/// `--fail-under threshold` over `scored`, each a name and its mean holdout score (`None`: it
/// has none): passed when there is something to check and every score is at least the
/// threshold. The line gives every score, or those below it.
pub fn fail_under(threshold: f64, scored: &[(String, Option<f64>)]) -> GateOutcome {
    if scored.is_empty() {
        return GateOutcome {
            passed: false,
            line: format!("--fail-under {threshold}: missed (no holdout score to check)"),
        };
    }
    let low: Vec<String> = scored
        .iter()
        .filter(|(_, mean)| mean.is_none_or(|mean| mean < threshold))
        .map(|(name, mean)| match mean {
            Some(mean) => format!("{name} scored {mean:.3}"),
            None => format!("{name} has no score"),
        })
        .collect();
    if low.is_empty() {
        let each: Vec<String> = scored
            .iter()
            .map(|(name, mean)| format!("{name} {:.3}", mean.unwrap_or_default()))
            .collect();
        GateOutcome {
            passed: true,
            line: format!("--fail-under {threshold}: passed ({})", each.join(", ")),
        }
    } else {
        GateOutcome {
            passed: false,
            line: format!("--fail-under {threshold}: missed ({})", low.join(", ")),
        }
    }
}

/// `--fail-if-worse`: passed when no prompt of `comparison` is significantly worse than the
/// first, on the comparison's own (Holm-adjusted) verdicts.
pub fn fail_if_worse(comparison: &CompareReport) -> GateOutcome {
    let worse: Vec<String> = comparison
        .comparisons
        .iter()
        .filter(|c| c.verdict == Verdict::Worse)
        .map(|c| format!("{}: {}", c.b, c.sentence))
        .collect();
    if worse.is_empty() {
        GateOutcome {
            passed: true,
            line: "--fail-if-worse: passed (no prompt is significantly worse than the first)"
                .into(),
        }
    } else {
        GateOutcome {
            passed: false,
            line: format!("--fail-if-worse: missed ({})", worse.join(" ")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scored(items: &[(&str, Option<f64>)]) -> Vec<(String, Option<f64>)> {
        items.iter().map(|(n, m)| ((*n).to_owned(), *m)).collect()
    }

    #[test]
    fn every_score_must_reach_the_threshold_and_the_threshold_itself_passes() {
        let passed = fail_under(0.5, &scored(&[("a", Some(0.5)), ("b", Some(0.75))]));
        assert!(passed.passed);
        assert_eq!(passed.line, "--fail-under 0.5: passed (a 0.500, b 0.750)");
        let missed = fail_under(
            0.5,
            &scored(&[("a", Some(0.5)), ("b", Some(0.25)), ("c", None)]),
        );
        assert!(!missed.passed);
        assert_eq!(
            missed.line,
            "--fail-under 0.5: missed (b scored 0.250, c has no score)"
        );
        let nothing = fail_under(0.0, &[]);
        assert!(!nothing.passed, "nothing to check is no pass");
        assert!(
            nothing.line.contains("no holdout score"),
            "{}",
            nothing.line
        );
    }
}
