//! "Did you mean …?": the closest known name to a misspelt one.

/// The candidate closest to `seen`, if it is close enough to be a likely typo: a Jaro–Winkler
/// similarity of at least 0.8, one edit away (a letter added, dropped, changed, or two swapped:
/// short words such as `rnu` score low on Jaro–Winkler), or a case-insensitive match. A name
/// longer than [`MAX_TYPO_CHARS`] is no typo of a known one and gets none: both measures take
/// time in the product of the lengths (a damaged file's 3-million-character key took 12 s).
pub fn closest<'a>(seen: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    if seen.chars().nth(MAX_TYPO_CHARS).is_some() {
        return None;
    }
    let lowered = seen.to_lowercase();
    candidates
        .into_iter()
        .map(|candidate| {
            let candidate_lowered = candidate.to_lowercase();
            let similarity = if candidate_lowered == lowered {
                1.0
            } else if lowered.chars().count() >= 3
                && strsim::osa_distance(&lowered, &candidate_lowered) == 1
            {
                0.95
            } else {
                strsim::jaro_winkler(&lowered, &candidate_lowered)
            };
            (similarity, candidate)
        })
        .filter(|(similarity, _)| *similarity >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

/// The longest name [`closest`] looks for a match of.
pub const MAX_TYPO_CHARS: usize = 256;

#[cfg(test)]
mod tests {
    use super::{MAX_TYPO_CHARS, closest};

    #[test]
    fn suggests_near_names_only() {
        let keys = ["minibatch", "pareto", "holdout", "shuffle_seed"];
        assert_eq!(closest("minibach", keys), Some("minibatch"));
        assert_eq!(closest("Pareto", keys), Some("pareto"));
        assert_eq!(closest("shuffle", keys), Some("shuffle_seed"));
        assert_eq!(closest("temperature", keys), None);
        let commands = ["run", "report", "plan", "serve"];
        assert_eq!(closest("rnu", commands), Some("run"));
        assert_eq!(closest("paln", commands), Some("plan"));
        assert_eq!(closest("xyz", commands), None);
        let long = format!("minibatch{}", "x".repeat(MAX_TYPO_CHARS));
        assert_eq!(closest(&long, keys), None);
    }
}
