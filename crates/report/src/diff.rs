//! Word diffs of a prompt version against the seed, as segments the templates mark up; for a
//! prompt of several parts, a diff per part as well. The diff
//! itself is `similar`'s (Myers on words, whitespace kept), not ours.
use gepa_lab_prompt::ChatPrompt;
use serde::Serialize;
use similar::{ChangeTag, TextDiff};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SegmentKind {
    Same,
    Added,
    Removed,
}

/// A run of text that is the same in both prompts, only in the new one, or only in the seed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub kind: SegmentKind,
    pub text: String,
}

/// Words added and removed, for a one-line summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct DiffStats {
    pub added_words: usize,
    pub removed_words: usize,
}

/// One part of a prompt of several parts against the same part of the other prompt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartDiff {
    /// The part in words: `system message`, `turn 1 (user)`, `user template`.
    pub part: String,
    /// A part the evolution may not change.
    pub fixed: bool,
    pub segments: Vec<Segment>,
    pub stats: DiffStats,
}

/// A word diff per part when `old` and `new` are prompts of several parts with the same parts
/// (see `gepa_lab_prompt::ChatPrompt`); empty for prompts of one text, or parts that no longer
/// match (a service that lost the part markers), which keep the whole text's diff alone.
pub fn part_diffs(old: &str, new: &str) -> Vec<PartDiff> {
    let (old, new) = (ChatPrompt::split(old), ChatPrompt::split(new));
    let (before, after) = (old.sections(), new.sections());
    let same_parts =
        before.len() == after.len() && before.iter().zip(&after).all(|(a, b)| a.place == b.place);
    if (old.is_plain() && new.is_plain()) || !same_parts {
        return Vec::new();
    }
    before
        .iter()
        .zip(&after)
        .map(|(a, b)| {
            let (segments, stats) = word_diff(a.text, b.text);
            PartDiff {
                part: b.place.to_string(),
                fixed: b.fixed,
                segments,
                stats,
            }
        })
        .collect()
}

/// The word diff from `old` to `new`, arranged for reading: each changed passage shows all its
/// removed text, then all its added text, and a lone word left in common between two changes
/// (typically "the" or "a") is folded into the change rather than splitting it in two.
pub fn word_diff(old: &str, new: &str) -> (Vec<Segment>, DiffStats) {
    let diff = TextDiff::from_words(old, new);
    let mut stats = DiffStats::default();
    let mut changes: Vec<(ChangeTag, &str)> = Vec::new();
    for change in diff.iter_all_changes() {
        let is_word = !change.value().trim().is_empty();
        match change.tag() {
            ChangeTag::Insert if is_word => stats.added_words += 1,
            ChangeTag::Delete if is_word => stats.removed_words += 1,
            _ => {}
        }
        changes.push((change.tag(), change.value()));
    }

    // Runs of equal tokens, and the changes between them.
    let mut runs: Vec<(bool, Vec<(ChangeTag, &str)>)> = Vec::new();
    for (tag, text) in changes {
        let equal = tag == ChangeTag::Equal;
        match runs.last_mut() {
            Some((was_equal, items)) if *was_equal == equal => items.push((tag, text)),
            _ => runs.push((equal, vec![(tag, text)])),
        }
    }
    let mut segments: Vec<Segment> = Vec::new();
    let mut removed = String::new();
    let mut added = String::new();
    let last = runs.len().saturating_sub(1);
    for (index, (equal, items)) in runs.iter().enumerate() {
        let words = items.iter().filter(|(_, t)| !t.trim().is_empty()).count();
        let between_changes = index > 0 && index < last;
        if *equal && !(between_changes && words <= 1) {
            flush(&mut segments, &mut removed, &mut added);
            push(&mut segments, SegmentKind::Same, &concat(items));
            continue;
        }
        for (tag, text) in items {
            match tag {
                ChangeTag::Delete => removed.push_str(text),
                ChangeTag::Insert => added.push_str(text),
                ChangeTag::Equal => {
                    removed.push_str(text);
                    added.push_str(text);
                }
            }
        }
    }
    flush(&mut segments, &mut removed, &mut added);
    (segments, stats)
}

fn concat(items: &[(ChangeTag, &str)]) -> String {
    items.iter().map(|(_, text)| *text).collect()
}

fn flush(segments: &mut Vec<Segment>, removed: &mut String, added: &mut String) {
    push(segments, SegmentKind::Removed, &std::mem::take(removed));
    push(segments, SegmentKind::Added, &std::mem::take(added));
}

fn push(segments: &mut Vec<Segment>, kind: SegmentKind, text: &str) {
    if text.is_empty() {
        return;
    }
    match segments.last_mut() {
        Some(last) if last.kind == kind => last.text.push_str(text),
        _ => segments.push(Segment {
            kind,
            text: text.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gepa_lab_prompt::PartName;

    #[test]
    fn a_prompt_of_parts_is_diffed_part_by_part_with_fixed_parts_marked() {
        let prompt = |system: &str| {
            ChatPrompt::new(
                Some(system.into()),
                Vec::new(),
                "Review: {review}".into(),
                &[PartName::System],
            )
            .unwrap()
            .join()
        };
        let diffs = part_diffs(&prompt("Label reviews."), &prompt("Label product reviews."));
        let summary: Vec<(&str, bool, usize, usize)> = diffs
            .iter()
            .map(|d| {
                let DiffStats {
                    added_words,
                    removed_words,
                } = d.stats;
                (d.part.as_str(), d.fixed, added_words, removed_words)
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("system message", false, 1, 0),
                ("user template", true, 0, 0)
            ]
        );
        // Prompts of one text, or parts that no longer match, keep the whole text's diff alone.
        assert!(part_diffs("Label {review}.", "Label the {review}.").is_empty());
        assert!(part_diffs(&prompt("Label reviews."), "Label {review}.").is_empty());
    }

    #[test]
    fn marks_added_and_removed_words() {
        let (segments, stats) = word_diff(
            "Classify the review.\nAnswer with one word.",
            "Classify the review as positive or negative.\nAnswer with one word.",
        );
        let rebuilt_new: String = segments
            .iter()
            .filter(|s| s.kind != SegmentKind::Removed)
            .map(|s| s.text.as_str())
            .collect();
        let rebuilt_old: String = segments
            .iter()
            .filter(|s| s.kind != SegmentKind::Added)
            .map(|s| s.text.as_str())
            .collect();
        assert_eq!(
            rebuilt_new,
            "Classify the review as positive or negative.\nAnswer with one word."
        );
        assert_eq!(rebuilt_old, "Classify the review.\nAnswer with one word.");
        assert!(stats.added_words >= 4, "{stats:?}");
        assert!(
            segments
                .iter()
                .all(|s| s.kind != SegmentKind::Removed || !s.text.trim().is_empty()),
            "{segments:?}"
        );
        assert_eq!(word_diff("same", "same").1, DiffStats::default());
    }

    #[test]
    fn a_lone_common_word_does_not_split_a_change() {
        let (segments, _) = word_diff(
            "Classify the sentiment of this",
            "You label the reviews for this",
        );
        let kinds: Vec<SegmentKind> = segments.iter().map(|s| s.kind).collect();
        assert_eq!(
            kinds,
            [SegmentKind::Removed, SegmentKind::Added, SegmentKind::Same],
            "{segments:?}"
        );
        assert_eq!(segments[0].text, "Classify the sentiment of");
        assert_eq!(segments[1].text, "You label the reviews for");
    }
}
