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

/// The feedback rows a first set of demonstrations shows, at most `most` of them: with a label
/// set, one row of each label (the labels most common among the feedback rows first), so that
/// no answer is shown more than another; without, random rows among those whose answers are
/// longer than the median's. Rows whose inputs are longer than the median feedback row are
/// passed over where a shorter one will do, so that the prompt stays short.
pub(crate) fn choose(
    views: &[ExampleView],
    labels: &[String],
    most: usize,
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
    let mut chosen: Vec<usize> = by_frequency
        .iter()
        .take(most)
        .filter_map(|(label, _)| pick_of_label(views, &short, label, &[], rng))
        .collect();
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

    #[test]
    fn a_first_set_shows_each_label_once_the_commonest_first_and_prefers_short_rows() {
        let views = vec![
            view("a very long query about alarms and more words", "alarm"),
            view("wake me", "alarm"),
            view("play jazz", "music"),
            view("rain?", "weather"),
            view("play a song", "music"),
        ];
        let labels: Vec<String> = ["alarm", "music", "weather"].map(String::from).to_vec();
        for seed in 0..20 {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            let chosen = choose(&views, &labels, 8, &mut rng);
            let answers: Vec<&str> = chosen.iter().map(|&r| views[r].expected.as_str()).collect();
            assert_eq!(chosen.len(), 3, "{chosen:?}");
            for label in &labels {
                assert_eq!(answers.iter().filter(|a| **a == label).count(), 1);
            }
            assert!(
                !chosen.contains(&0),
                "the long row is passed over: {chosen:?}"
            );
            // Two at most: the commonest labels, alarm and music.
            let two = choose(&views, &labels, 2, &mut rng);
            assert!(
                two.iter().all(|&r| views[r].expected != "weather"),
                "{two:?}"
            );
        }
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
            let chosen = choose(&views, &[], 8, &mut rng);
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
