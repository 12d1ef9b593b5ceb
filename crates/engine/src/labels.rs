//! When the expected values of a task are the labels of a classification. One rule, applied by
//! `init` to the whole dataset (to write a seed that lists the labels and an exact-match
//! scorer), by the engine to the rows it sees (to show its reflection model the labels, and to
//! offer the children of a classification), and by the report to the holdout rows (for the
//! majority baseline): at most [`MAX_LABELS`] distinct values, none empty or longer than
//! [`LABEL_CHARS`] characters, each on two rows or more on average.

/// At most this many distinct expected values make a label set. Intent datasets have tens of
/// labels (banking77: 77; CLINC150: 150 and one for "out of scope"): until 2026-11-30 the limit
/// was 12, and `init` wrote a 77-label dataset as free text, with a seed that did not name the
/// labels (`Give the category.`), which both embedded models answered with words of their own
/// (`financial`, `finance`) and the 1.5B scored 0 of 20 at the probe. A seed that lists 200
/// labels of 30 characters is about 2,000 tokens, which the embedded model's context holds.
pub const MAX_LABELS: usize = 200;

/// The longest label, in characters: longer values are sentences, not labels. Names of intents
/// run long (banking77's longest, `balance_not_updated_after_cheque_or_cash_deposit`, has 48).
pub const LABEL_CHARS: usize = 64;

/// At most this many labels make a short list. The engine writes a label glossary for a short
/// list only (it asks once per label, and with more each label has a row or two among the
/// engine's rows), and `init` writes a short list after the input, as a person often does, and a
/// longer one above it, in the form of the engine's layout child ([`input_last`]). On 200
/// banking77 rows (77 labels) with the 1.5B model answering, the list after the input scored
/// 0.200 and the model answered its first label to 95 rows; above the input, 0.405 (47 rows won,
/// 6 lost, exact McNemar p < 0.001), and each answer took 12 s instead of 104 s, since every row
/// shares the list as a prefix that the model evaluates once (2026-11-30).
///
/// [`input_last`]: crate::input_last
pub const FEW_LABELS: usize = 12;

/// Whether `distinct`, the distinct expected values of `rows` rows, are the labels of a
/// classification: at most [`MAX_LABELS`] of them, none empty or longer than [`LABEL_CHARS`]
/// characters, and at least two rows per value on average (short answers that are each given
/// once, such as the names a question asks for, are not labels).
pub fn is_label_set<S: AsRef<str>>(distinct: &[S], rows: usize) -> bool {
    distinct.len() * 2 <= rows && could_be_labels(distinct)
}

/// Whether `distinct` could be the labels of a classification, however few rows hold them: 1 to
/// [`MAX_LABELS`] values, none empty or longer than [`LABEL_CHARS`] characters.
pub(crate) fn could_be_labels<S: AsRef<str>>(distinct: &[S]) -> bool {
    !distinct.is_empty()
        && distinct.len() <= MAX_LABELS
        && distinct.iter().all(|label| {
            let label = label.as_ref();
            !label.is_empty() && label.chars().count() <= LABEL_CHARS
        })
}

/// Whether `text` names `label` (ignoring case) as a whole: not as part of a longer word or
/// name (`card` is not named by `card_arrival`), nor as a `{placeholder}`.
pub(crate) fn names_label(text: &str, label: &str) -> bool {
    let text = text.to_lowercase();
    let label = label.to_lowercase();
    let part_of_a_name = |c: char| c.is_alphanumeric() || matches!(c, '_' | '{' | '}');
    text.match_indices(&label).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + label.len()..].chars().next();
        !before.is_some_and(part_of_a_name) && !after.is_some_and(part_of_a_name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(count: usize) -> Vec<String> {
        (0..count).map(|i| format!("intent_{i}")).collect()
    }

    #[test]
    fn a_label_is_named_as_a_whole() {
        let seed = "Answer with exactly one of: card_arrival, Refund, not-hate.\nText: {text}";
        assert!(names_label(seed, "card_arrival"));
        assert!(names_label(seed, "refund"), "case is ignored");
        assert!(names_label(seed, "hate"), "a hyphen ends a word");
        assert!(!names_label(seed, "card"), "part of a name");
        assert!(!names_label(seed, "arrival"));
        assert!(
            !names_label("Answer a or b: {message}", "message"),
            "a placeholder"
        );
        assert!(names_label(seed, "exactly one"));
    }

    #[test]
    fn a_label_set_is_few_short_values_used_twice_on_average() {
        assert!(is_label_set(&["spam", "ham"], 4));
        assert!(
            !is_label_set(&["spam", "ham"], 3),
            "used less than twice on average"
        );
        assert!(
            is_label_set(&labels(77), 480),
            "banking77's intents in 480 rows"
        );
        assert!(is_label_set(&labels(MAX_LABELS), 2 * MAX_LABELS));
        assert!(!is_label_set(&labels(MAX_LABELS + 1), 10_000));
        let long = "x".repeat(LABEL_CHARS + 1);
        assert!(is_label_set(&[&long[1..], "y"], 10));
        assert!(
            !is_label_set(&[long.as_str(), "y"], 10),
            "a sentence is not a label"
        );
        assert!(
            !is_label_set(&["", "y"], 10),
            "an empty value is not a label"
        );
        assert!(!is_label_set::<&str>(&[], 10));
    }
}
