//! Few-shot demonstrations: labelled feedback rows shown in the prompt as worked examples.
//!
//! For small task models, examples of the task with their correct answers are the strongest
//! known lever (the few-shot optimizers of DSPy, MIPROv2's bootstrapped demonstrations); a rule
//! or a rewrite describes the task, a demonstration shows it. They are examples by design, not
//! memorization: they are taken only from the feedback rows, never from the Pareto rows that
//! judge them or the holdout rows that test them, they stand in a block of their own with a
//! heading that says what they are, and the guard against quoting inputs reads the prompt
//! without that block ([`without_demonstrations`]).
//!
//! A demonstration is written in the prompt's own input format: the prompt's input lines (from
//! its first line with a placeholder to its last) filled with the row's values, then
//! `Answer: <expected>`. The block goes just above the first input line.

use std::fmt::Write;

use gepa_lab_prompt::Template;
use rand::Rng;
use rand::seq::IndexedRandom;

use super::reflection::has_placeholder;
use super::task::ExampleView;

/// The first line of the block.
pub(crate) const HEADING: &str = "Examples of inputs with their correct answers:";
/// The last line of the block.
pub(crate) const END: &str = "End of examples.";
/// Demonstrations of a task without a label set (extraction, free text).
pub(crate) const UNLABELLED_COUNT: usize = 3;

/// A first set of a classification that shows more than one row of each label
/// ([`SetSize::AtLeastFour`]) shows at least this many rows: two of each of two or three labels.
pub(crate) const MIN_LABELLED_SET: usize = 4;

/// How many rows of each label a first set of a classification shows.
///
/// Which size a small model learns from depends on the task, so the engine offers both and
/// the Pareto rows decide. Measured with `compare --prompts` on 160 rows no example came from,
/// init's seed against the same seed with one, two and four examples of each label
/// (2026-11-29): SST-2 with the 0.5B model 0.700, then 0.644, 0.812 (+0.113, p < 0.001) and
/// 0.750; TweetEval irony with the 1.5B 0.688, 0.656, 0.725, 0.719; MPQA with the 1.5B 0.831,
/// 0.875, 0.875, 0.850. In the engine on clickbait with the 1.5B, sets of one of each were kept
/// twice (30 to 33 to 35 of 40 Pareto rows, round 18) and the first set of two of each lost 8
/// of 40 rows (round 19a).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SetSize {
    /// One row of each label.
    OneOfEach,
    /// As many of each label as make [`MIN_LABELLED_SET`] rows in all: two each of two or
    /// three labels, one each of four or more (the same as [`SetSize::OneOfEach`] there).
    AtLeastFour,
}

impl SetSize {
    /// Rows of each of `labels` labels, where a set may show `most` rows in all.
    fn per_label(self, labels: usize, most: usize) -> usize {
        match self {
            Self::OneOfEach => 1,
            Self::AtLeastFour => MIN_LABELLED_SET.div_ceil(labels).min(most / labels).max(1),
        }
    }
}

/// The feedback rows a first set of demonstrations shows, at most `most` of them: with a label
/// set, the same number of rows of each label (`size`; the labels most common among the
/// feedback rows first), so that no answer is shown more than another; without, random rows
/// among those whose answers are longer than the median's. Rows whose inputs are longer than
/// the median feedback row are passed over where a shorter one will do, so that the prompt
/// stays short.
pub(crate) fn choose(
    views: &[ExampleView],
    labels: &[String],
    most: usize,
    size: SetSize,
    rng: &mut impl Rng,
) -> Vec<usize> {
    let short = short_rows(views);
    if labels.is_empty() {
        // An example with an empty or short answer shows little of the task (measured on
        // CoNLL-2003 entities: short rows were those with no entity, and three answers of empty
        // lists taught the model to answer empty lists); so the rows with answers longer than
        // the median's, the shorter inputs among them where there are any.
        let rich = rich_rows(views);
        let both: Vec<usize> = rich.iter().copied().filter(|r| short.contains(r)).collect();
        let mut pool = if both.is_empty() { rich } else { both };
        let mut chosen = Vec::new();
        while chosen.len() < most.min(UNLABELLED_COUNT) && !pool.is_empty() {
            let at = rng.random_range(0..pool.len());
            chosen.push(pool.swap_remove(at));
        }
        chosen.sort_unstable();
        return chosen;
    }
    let mut by_frequency: Vec<(&String, usize)> = labels
        .iter()
        .map(|label| {
            let count = views.iter().filter(|v| v.expected.trim() == label).count();
            (label, count)
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    by_frequency.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let shown_labels = by_frequency.len().min(most);
    if shown_labels == 0 {
        return Vec::new();
    }
    let per_label = size.per_label(shown_labels, most);
    let mut chosen = Vec::new();
    for (label, _) in by_frequency.iter().take(shown_labels) {
        for _ in 0..per_label {
            if let Some(row) = pick_of_label(views, &short, label, &chosen, rng) {
                chosen.push(row);
            }
        }
    }
    chosen.sort_unstable();
    chosen
}

/// `current` with one demonstration swapped for another feedback row of the same answer (any
/// row without a label set) that it does not show yet; `None` when there is none to swap in.
pub(crate) fn swap_one(
    views: &[ExampleView],
    labels: &[String],
    current: &[usize],
    rng: &mut impl Rng,
) -> Option<Vec<usize>> {
    let short = short_rows(views);
    let mut order: Vec<usize> = (0..current.len()).collect();
    // Try each position in a random order until one has a replacement.
    for i in (1..order.len()).rev() {
        order.swap(i, rng.random_range(0..=i));
    }
    for position in order {
        let out = current[position];
        let replacement = if labels.is_empty() {
            let pool: Vec<usize> = (0..views.len())
                .filter(|row| !current.contains(row))
                .collect();
            pool.choose(rng).copied()
        } else {
            pick_of_label(views, &short, views[out].expected.trim(), current, rng)
        };
        if let Some(row) = replacement {
            let mut next = current.to_vec();
            next[position] = row;
            next.sort_unstable();
            return Some(next);
        }
    }
    None
}

/// A random row whose answer is `label`, not in `taken`: a short one when there is one.
fn pick_of_label(
    views: &[ExampleView],
    short: &[usize],
    label: &str,
    taken: &[usize],
    rng: &mut impl Rng,
) -> Option<usize> {
    let of_label = |rows: &mut dyn Iterator<Item = usize>| -> Vec<usize> {
        rows.filter(|&row| views[row].expected.trim() == label && !taken.contains(&row))
            .collect()
    };
    let shorter = of_label(&mut short.iter().copied());
    let any = of_label(&mut (0..views.len()));
    let pool = if shorter.is_empty() { any } else { shorter };
    pool.choose(rng).copied()
}

/// The rows whose expected answers are longer than the median row's (as long, when none is):
/// where most answers are empty, the rows that are not.
fn rich_rows(views: &[ExampleView]) -> Vec<usize> {
    let length = |row: usize| views[row].expected.trim().len();
    let mut lengths: Vec<usize> = (0..views.len()).map(length).collect();
    lengths.sort_unstable();
    let Some(&median) = lengths.get(lengths.len() / 2) else {
        return Vec::new();
    };
    let longer: Vec<usize> = (0..views.len()).filter(|&r| length(r) > median).collect();
    if longer.is_empty() {
        (0..views.len()).filter(|&r| length(r) >= median).collect()
    } else {
        longer
    }
}

/// The rows whose inputs are no longer than the median row's.
fn short_rows(views: &[ExampleView]) -> Vec<usize> {
    let length = |view: &ExampleView| -> usize { view.inputs.iter().map(|(_, v)| v.len()).sum() };
    let mut lengths: Vec<usize> = views.iter().map(length).collect();
    lengths.sort_unstable();
    let Some(&median) = lengths.get(lengths.len() / 2) else {
        return Vec::new();
    };
    (0..views.len())
        .filter(|&row| length(&views[row]) <= median)
        .collect()
}

/// `prompt` with `demos` as its demonstrations (any it had are replaced), or `None` when the
/// prompt has no input line to write them in.
pub(crate) fn add_demonstrations(prompt: &str, demos: &[&ExampleView]) -> Option<String> {
    let prompt = without_demonstrations(prompt);
    let lines: Vec<&str> = prompt.lines().collect();
    let first_input = lines.iter().position(|line| has_placeholder(line))?;
    let last_input = lines.iter().rposition(|line| has_placeholder(line))?;
    let input_block = lines[first_input..=last_input].join("\n");
    let template = Template::parse(&input_block).ok()?;
    let mut block = String::new();
    let _ = writeln!(block, "{HEADING}");
    for demo in demos {
        let filled = template
            .render(|name| {
                demo.inputs
                    .iter()
                    .find(|(input, _)| input == name)
                    .map(|(_, value)| value.trim())
            })
            .ok()?;
        let _ = writeln!(block, "{}", literal(&filled));
        let _ = writeln!(block, "Answer: {}\n", literal(demo.expected.trim()));
    }
    let _ = writeln!(block, "{END}");
    let mut out: Vec<String> = lines[..first_input].iter().map(|l| l.to_string()).collect();
    out.push(block.trim_end().to_owned());
    out.push(String::new());
    out.extend(lines[first_input..].iter().map(|l| l.to_string()));
    Some(out.join("\n"))
}

/// `prompt` without its block of demonstrations (unchanged when it has none).
pub(crate) fn without_demonstrations(prompt: &str) -> String {
    let lines: Vec<&str> = prompt.lines().collect();
    let Some(start) = lines.iter().position(|line| line.trim() == HEADING) else {
        return prompt.to_owned();
    };
    let Some(end) = lines[start..].iter().position(|line| line.trim() == END) else {
        return prompt.to_owned();
    };
    let mut end = start + end + 1;
    // The blank line the block leaves before the input goes with it.
    if lines.get(end).is_some_and(|line| line.trim().is_empty()) {
        end += 1;
    }
    let mut out: Vec<&str> = lines[..start].to_vec();
    out.extend(&lines[end..]);
    let mut text = out.join("\n");
    if prompt.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// How many demonstrations `prompt` shows.
pub(crate) fn count(prompt: &str) -> usize {
    if without_demonstrations(prompt) == prompt {
        return 0;
    }
    prompt
        .lines()
        .skip_while(|line| line.trim() != HEADING)
        .take_while(|line| line.trim() != END)
        .filter(|line| line.starts_with("Answer: "))
        .count()
}

/// `text` as literal template text: braces doubled.
fn literal(text: &str) -> String {
    text.replace('{', "{{").replace('}', "}}")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    fn view(input: &str, expected: &str) -> ExampleView {
        ExampleView {
            inputs: vec![("query".into(), input.into())],
            expected: expected.into(),
        }
    }

    #[test]
    fn demonstrations_are_written_in_the_prompts_input_format_above_the_input() {
        let seed = "Query: {query}\nAnswer with exactly one of: a, b. Give only the answer.";
        let first = view("set {an} alarm", "a");
        let second = view("play jazz", "b");
        let child = add_demonstrations(seed, &[&first, &second]).unwrap();
        assert_eq!(
            child,
            "Examples of inputs with their correct answers:\nQuery: set {{an}} alarm\n\
             Answer: a\n\nQuery: play jazz\nAnswer: b\n\nEnd of examples.\n\n\
             Query: {query}\nAnswer with exactly one of: a, b. Give only the answer."
        );
        // The child is a template with the seed's placeholder and literal braces.
        let template = Template::parse(&child).unwrap();
        assert_eq!(template.variables(), ["query"]);
        assert_eq!(without_demonstrations(&child), seed);
        assert_eq!(count(&child), 2);
        assert_eq!(count(seed), 0);
        // New demonstrations replace the old ones.
        let again = add_demonstrations(&child, &[&second]).unwrap();
        assert_eq!(count(&again), 1);
        assert_eq!(without_demonstrations(&again), seed);
        // A prompt without an input line has nowhere to show them.
        assert_eq!(add_demonstrations("Answer a or b.", &[&first]), None);
    }

    /// The labels each chosen row shows, counted.
    fn shown_labels<'v>(views: &'v [ExampleView], chosen: &[usize]) -> BTreeMap<&'v str, usize> {
        let mut counts = BTreeMap::new();
        for &row in chosen {
            *counts.entry(views[row].expected.as_str()).or_default() += 1;
        }
        counts
    }

    #[test]
    fn a_first_set_shows_each_label_as_often_the_commonest_first_and_prefers_short_rows() {
        let views = vec![
            view("a very long query about alarms and more words", "alarm"),
            view("wake me", "alarm"),
            view("alarm 7!", "alarm"),
            view("play jazz", "music"),
            view("rain?", "weather"),
            view("play a song", "music"),
            view("sunny?", "weather"),
            view("cold?", "weather"),
            view("more jazz", "music"),
        ];
        let labels: Vec<String> = ["alarm", "music", "weather"].map(String::from).to_vec();
        let each = |n: usize| BTreeMap::from([("alarm", n), ("music", n), ("weather", n)]);
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let one = choose(&views, &labels, 8, SetSize::OneOfEach, &mut rng);
            assert_eq!(shown_labels(&views, &one), each(1), "{one:?}");
            // Three labels: two of each, at least four rows in all.
            let more = choose(&views, &labels, 8, SetSize::AtLeastFour, &mut rng);
            assert_eq!(shown_labels(&views, &more), each(2), "{more:?}");
            for chosen in [&one, &more] {
                assert!(
                    !chosen.contains(&0),
                    "the long row is passed over: {chosen:?}"
                );
            }
            // A budget of three shows one of each; of two, the commonest labels only (alarm,
            // music and weather have three rows each, so the names break the tie).
            let three = choose(&views, &labels, 3, SetSize::AtLeastFour, &mut rng);
            assert_eq!(shown_labels(&views, &three), each(1), "{three:?}");
            let two = choose(&views, &labels, 2, SetSize::AtLeastFour, &mut rng);
            assert_eq!(
                shown_labels(&views, &two),
                BTreeMap::from([("alarm", 1), ("music", 1)]),
                "{two:?}"
            );
        }
        // Four labels or more: one of each either way.
        let mut four = views.clone();
        four.push(view("call mum", "phone"));
        let labels: Vec<String> = ["alarm", "music", "phone", "weather"]
            .map(String::from)
            .to_vec();
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let chosen = choose(&four, &labels, 8, SetSize::AtLeastFour, &mut rng);
        assert_eq!(shown_labels(&four, &chosen).len(), 4);
        assert!(shown_labels(&four, &chosen).values().all(|&n| n == 1));
    }

    #[test]
    fn without_labels_the_rows_with_fuller_answers_are_shown() {
        let empty = r#"{"persons": []}"#;
        let views = vec![
            view("Total 730.0", empty),
            view("Sorghum unq", empty),
            view("Ana met Bo in Oslo", r#"{"persons": ["Ana", "Bo"]}"#),
            view("Cy spoke", r#"{"persons": ["Cy"]}"#),
            view("14-1 Draw", empty),
        ];
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let chosen = choose(&views, &[], 8, SetSize::AtLeastFour, &mut rng);
            assert!(!chosen.is_empty());
            for row in &chosen {
                assert_ne!(views[*row].expected, empty, "{chosen:?}");
            }
        }
    }

    #[test]
    fn a_swap_keeps_the_answer_and_changes_one_row() {
        let views = vec![
            view("wake me", "alarm"),
            view("alarm at 7", "alarm"),
            view("play jazz", "music"),
        ];
        let labels: Vec<String> = ["alarm", "music"].map(String::from).to_vec();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let swapped = swap_one(&views, &labels, &[0, 2], &mut rng).unwrap();
        assert_eq!(
            swapped,
            [1, 2],
            "only the alarm row has another of its kind"
        );
        assert_eq!(swap_one(&views[..1], &labels[..1], &[0], &mut rng), None);
        let unlabelled = swap_one(&views, &[], &[0, 2], &mut rng).unwrap();
        assert_eq!(unlabelled.len(), 2);
        assert!(unlabelled.contains(&1));
    }
}
