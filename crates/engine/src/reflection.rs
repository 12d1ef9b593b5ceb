//! The text sent to the reflection model and the parsing of its answer.
//!
//! The mutation request follows the reference implementation's instruction-proposal prompt: the
//! current instruction in a fenced block, the minibatch as Markdown (inputs, the model's output,
//! the expected output, the scorer's feedback), the same guidance on what a new instruction should
//! contain, and the request to answer inside a fenced block. Two additions: the expected output
//! (the reference leaves it to the feedback), and, because our prompts are `{variable}` templates,
//! the placeholders the new instruction must keep.

use std::fmt::Write;

use gepa_lab_prompt::Template;

use super::labels::FEW_LABELS;
use super::records::{ProposalFailure, labels_are_numbers};
use super::task::ExampleView;

/// One minibatch example as the reflection model sees it.
pub(crate) struct Shown<'a> {
    pub(crate) view: &'a ExampleView,
    pub(crate) output: &'a str,
    pub(crate) feedback: &'a str,
}

/// The request of the [`Proposer::Rewrite`](super::Proposer) strategy: the user's template
/// when there is one, else the built-in request below.
pub(crate) fn mutation_request(
    template: Option<&ReflectionTemplate>,
    instruction: &str,
    examples: &[Shown],
    keep: &[String],
) -> String {
    if let Some(template) = template {
        return template.request(instruction, examples, keep);
    }
    let mut text = String::new();
    text.push_str("I gave an assistant the following instruction to perform a task for me:\n```\n");
    text.push_str(instruction);
    text.push_str(
        "\n```\n\nBelow are examples of task inputs the assistant received, the response it gave \
         to each, the expected response, and feedback on how its response could be better:\n```\n",
    );
    text.push_str(&examples_markdown(examples));
    text.push_str(
        "```\n\nYour task is to write a new instruction for the assistant.\n\n\
         Read the inputs carefully: identify their format and infer a detailed description of \
         the task I want the assistant to solve.\n\n\
         Read every response and its feedback. Find all niche and domain-specific facts about \
         the task and put them in the instruction, since the assistant may not have access to \
         them later. If the assistant used a strategy that generalizes, describe that strategy in \
         the instruction as well.\n\n",
    );
    push_placeholder_rule(&mut text, keep);
    text.push_str("Write the new instruction inside a ``` fenced block.");
    text
}

/// The minibatch as Markdown, one `# Example` each: inputs, the model's output, the expected
/// output and the scorer's feedback.
fn examples_markdown(examples: &[Shown]) -> String {
    let mut text = String::new();
    for (number, example) in examples.iter().enumerate() {
        if number > 0 {
            text.push('\n');
        }
        let _ = writeln!(text, "# Example {}\n## Inputs", number + 1);
        for (name, value) in &example.view.inputs {
            let _ = writeln!(text, "### {name}\n{}\n", value.trim());
        }
        let _ = writeln!(text, "## Generated Outputs\n{}\n", example.output.trim());
        let _ = writeln!(
            text,
            "## Expected Output\n{}\n",
            example.view.expected.trim()
        );
        let _ = writeln!(text, "## Feedback\n{}\n", example.feedback.trim());
    }
    text
}

/// A mutation request of the user's own, in the reference implementation's form: any text with
/// [`ReflectionTemplate::INSTRUCTION`] where the current instruction goes and
/// [`ReflectionTemplate::EXAMPLES`] where the minibatch goes (as Markdown, the same as in the
/// built-in request), so a template written for the reference works unchanged. Each placeholder
/// is replaced wherever it appears. The engine reads the new instruction from the answer's fenced
/// block, so the template should ask for one; and when the prompt has `{placeholders}`, one
/// sentence naming them is added at the end, since a child that drops one is refused.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(transparent)]
pub struct ReflectionTemplate {
    text: String,
}

impl ReflectionTemplate {
    /// Where the current instruction goes.
    pub const INSTRUCTION: &'static str = "<curr_instructions>";
    /// Where the minibatch (inputs, outputs, expected outputs and feedback) goes.
    pub const EXAMPLES: &'static str = "<inputs_outputs_feedback>";
    /// The placeholders every template must contain.
    pub const REQUIRED: [&'static str; 2] = [Self::INSTRUCTION, Self::EXAMPLES];

    /// The template, or the required placeholders it lacks.
    pub fn parse(text: &str) -> Result<Self, MissingPlaceholders> {
        let missing: Vec<&'static str> = Self::REQUIRED
            .into_iter()
            .filter(|placeholder| !text.contains(placeholder))
            .collect();
        if missing.is_empty() {
            Ok(Self {
                text: text.to_owned(),
            })
        } else {
            Err(MissingPlaceholders(missing))
        }
    }

    /// Whether the text asks for a ``` fenced block, where the engine looks for the answer.
    pub fn mentions_a_fence(text: &str) -> bool {
        text.contains("```")
    }

    fn request(&self, instruction: &str, examples: &[Shown], keep: &[String]) -> String {
        // One pass over the template, so a placeholder inside the instruction or an example
        // (a prompt about templates) is left as it is.
        let markdown = examples_markdown(examples);
        let mut text = String::with_capacity(self.text.len() + instruction.len() + markdown.len());
        let mut rest = self.text.as_str();
        loop {
            let next = Self::REQUIRED
                .iter()
                .filter_map(|placeholder| rest.find(placeholder).map(|at| (at, *placeholder)))
                .min();
            let Some((at, placeholder)) = next else {
                text.push_str(rest);
                break;
            };
            text.push_str(&rest[..at]);
            text.push_str(if placeholder == Self::INSTRUCTION {
                instruction
            } else {
                markdown.trim_end()
            });
            rest = &rest[at + placeholder.len()..];
        }
        if !keep.is_empty() {
            text.truncate(text.trim_end().len());
            text.push_str("\n\n");
            push_placeholder_rule(&mut text, keep);
            text.truncate(text.trim_end().len());
        }
        text
    }
}

/// The required placeholders a reflection template lacks; it reads "lacks <x>: it must contain
/// ...", for the caller to put after what it names (the file, the request field).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingPlaceholders(pub Vec<&'static str>);

impl std::fmt::Display for MissingPlaceholders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "lacks {}: it must contain {} (the current prompt) and {} (the minibatch's inputs, \
             outputs and feedback)",
            self.0.join(" and "),
            ReflectionTemplate::INSTRUCTION,
            ReflectionTemplate::EXAMPLES
        )
    }
}

/// At most this many failures are shown in one rules request.
pub(crate) const MAX_FAILURES_SHOWN: usize = 3;
/// At most this many rows the parent got right with the wrong answer of the focus are shown
/// beside it, for contrast.
pub(crate) const MAX_CONTRASTS_SHOWN: usize = 2;

/// The minibatch positions one rules request is written from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Focus {
    /// The failures the rule is asked to fix.
    pub(crate) failures: Vec<usize>,
    /// Rows whose correct answer is the failures' wrong one, which the parent answered right:
    /// the rule must not take them too. A 1.5B task model given `When someone is looking for an
    /// album, answer search_creative_work.` took rows of other intents with it, and every child
    /// written that way scored below the seed on the Pareto rows.
    pub(crate) contrasts: Vec<usize>,
}

/// The minibatch positions a rules request is written from.
///
/// With a label set, the failures of the minibatch's most common confusion (the same correct
/// answer, the same wrong one; the confusion met first on a tie), at most
/// [`MAX_FAILURES_SHOWN`]: shown one input, a small model writes a rule about that input's words;
/// shown several that share a confusion, it writes what tells the two answers apart. Shown
/// failures with different correct answers, it pairs rules with the wrong ones. Without a label
/// set (extraction, free text), the first failure, whose feedback the rule answers, and no
/// contrast. Empty when nothing failed.
pub(crate) fn rules_focus(shown: &[Shown], scores: &[f64], labels: &[String]) -> Focus {
    let failures = (0..shown.len()).filter(|&position| scores[position] < 1.0);
    if labels.is_empty() {
        return Focus {
            failures: failures.take(1).collect(),
            contrasts: Vec::new(),
        };
    }
    let confusion = |position: usize| {
        (
            shown[position].view.expected.trim().to_lowercase(),
            one_line(shown[position].output).to_lowercase(),
        )
    };
    let mut groups: Vec<((String, String), Vec<usize>)> = Vec::new();
    for position in failures {
        let key = confusion(position);
        match groups.iter_mut().find(|(known, _)| *known == key) {
            Some((_, members)) => members.push(position),
            None => groups.push((key, vec![position])),
        }
    }
    // `max_by_key` keeps the last of equals; reversed, the first.
    let Some(((_, wrong), mut failures)) = groups
        .into_iter()
        .rev()
        .max_by_key(|(_, members)| members.len())
    else {
        return Focus::default();
    };
    failures.truncate(MAX_FAILURES_SHOWN);
    let contrasts = (0..shown.len())
        .filter(|&position| {
            scores[position] >= 1.0 && shown[position].view.expected.trim().to_lowercase() == wrong
        })
        .take(MAX_CONTRASTS_SHOWN)
        .collect();
    Focus {
        failures,
        contrasts,
    }
}

/// The request of the [`Proposer::Rules`](super::Proposer) strategy: the instruction (without
/// the rules it already has), the answers it got wrong with the correct ones (one confusion, see
/// [`rules_focus`]), and the set of correct answers when the task has a small one; the
/// reflection model writes one general rule in a fixed form. Small models that cannot be trusted
/// to rewrite a whole prompt (they drop its placeholders, echo it, or answer without the fenced
/// block) still write a usable rule, and the engine puts it into the parent itself
/// ([`add_rules`]), so the rest of the prompt is never lost.
///
/// `failures` is not empty, and with a label set every failure has the same correct answer;
/// `contrasts` are rows the parent answered right (see [`Focus::contrasts`]).
pub(crate) fn rules_request(
    instruction: &str,
    failures: &[&Shown],
    contrasts: &[&Shown],
    labels: &[String],
) -> String {
    let mut text = String::new();
    text.push_str("An assistant is given this instruction:\n\"\"\"\n");
    // Shown the rules it already has, a small model copies one of them instead of writing a
    // rule for the failure in front of it.
    text.push_str(without_rules(instruction).trim());
    text.push_str("\n\"\"\"\n\n");
    // A longer list is the instruction's own (`init` writes it there), and the rows the engine
    // sees may not hold every label of it.
    if !labels.is_empty() && labels.len() <= FEW_LABELS {
        let _ = writeln!(
            text,
            "Every correct answer is exactly one of: {}.\n",
            labels.join(", ")
        );
    }
    let several = failures.len() > 1;
    if several {
        let _ = writeln!(
            text,
            "The assistant answered these {} inputs wrongly:",
            failures.len()
        );
    } else {
        text.push_str("The assistant answered this input wrongly:\n");
    }
    for (number, failure) in failures.iter().enumerate() {
        if several {
            let _ = writeln!(text, "\nInput {}:", number + 1);
        }
        for (name, value) in &failure.view.inputs {
            let _ = writeln!(text, "{name}: {}", value.trim());
        }
        let _ = writeln!(text, "Wrong answer: {}", one_line(failure.output));
        let _ = writeln!(text, "Correct answer: {}", failure.view.expected.trim());
    }
    let Some(first) = failures.first() else {
        return text;
    };
    write_contrasts(&mut text, contrasts);
    write_rule_ask(&mut text, several, labels, first);
    text
}

/// `request` asked again, after `answer` was refused for repeating `words`, words that only a
/// few of the inputs contain: the same rule, in words that fit many inputs.
pub(crate) fn reword_request(request: &str, answer: &str, words: &str) -> String {
    let answer = after_thinking(answer).trim();
    format!(
        "{request}\n\nYou answered:\n{answer}\n\nThat rule repeats \"{words}\", words that only a \
         few inputs contain, so it cannot help other inputs. Write the rule again in general \
         words that fit many inputs, without \"{words}\" and without other words taken from the \
         inputs above. Answer with one line in the same form."
    )
}

/// At most this many of a request's earlier answers are shown when it is asked again: the last
/// ones, so that the request stays short however often it comes back.
const EARLIER_ANSWERS_SHOWN: usize = 3;

/// What a request got the times it was asked before.
#[derive(Debug, Default)]
pub(crate) struct Earlier {
    /// Answers received.
    pub(crate) times: usize,
    /// The distinct ones, oldest first, as [`answer_text`] gives them.
    pub(crate) answers: Vec<String>,
}

impl Earlier {
    pub(crate) fn add(&mut self, answer: String) {
        self.times += 1;
        if !answer.is_empty() && !self.answers.contains(&answer) {
            self.answers.push(answer);
        }
    }
}

/// `request` as sent again after `earlier`: the same request would bring the same answer, so
/// the text says how often it was asked (which makes each asking a new text, even when the
/// model answered the same again) and shows the last few distinct answers, and asks for another
/// rule.
pub(crate) fn asked_again(request: &str, earlier: &Earlier) -> String {
    let times = match earlier.times {
        0 => return request.to_owned(),
        1 => "once".to_owned(),
        2 => "twice".to_owned(),
        n => format!("{n} times"),
    };
    let shown = &earlier.answers[earlier.answers.len().saturating_sub(EARLIER_ANSWERS_SHOWN)..];
    let mut text = format!("{request}\n\nThis request was asked {times} before");
    if shown.is_empty() {
        text.push_str(".\nWrite one rule for the inputs above, in the same form.");
        return text;
    }
    text.push_str(", and these answers were already tried:\n");
    for answer in shown {
        let _ = writeln!(text, "{answer}");
    }
    text.push_str(
        "Write one different rule for the inputs above, not one of those, in the same form.",
    );
    text
}

/// An answer as shown back to the reflection model: after any thinking, trimmed.
pub(crate) fn answer_text(answer: &str) -> String {
    after_thinking(answer).trim().to_owned()
}

/// The rows the parent answered right, which the new rule must leave as they are.
fn write_contrasts(text: &mut String, contrasts: &[&Shown]) {
    let Some(contrast) = contrasts.first() else {
        return;
    };
    let _ = writeln!(
        text,
        "\nFor contrast, the assistant rightly answered {} to {}; the rule must not change \
         {}:",
        one_line(&contrast.view.expected),
        if contrasts.len() > 1 {
            "these inputs"
        } else {
            "this input"
        },
        if contrasts.len() > 1 {
            "their answers"
        } else {
            "its answer"
        },
    );
    for (number, contrast) in contrasts.iter().enumerate() {
        if contrasts.len() > 1 {
            let _ = writeln!(text, "\nInput {}:", (b'A' + number as u8) as char);
        }
        for (name, value) in &contrast.view.inputs {
            let _ = writeln!(text, "{name}: {}", value.trim());
        }
    }
}

/// What the reflection model is asked for: one general rule, in the form the engine reads, that
/// names the correct answer of a classification (or, without labels, says what to do instead,
/// with the feedback on the wrong answer).
fn write_rule_ask(text: &mut String, several: bool, labels: &[String], first: &Shown) {
    text.push_str(if several {
        "\nWrite one rule to add to the instruction, so that the assistant answers these inputs \
         and similar inputs correctly. "
    } else {
        "\nWrite one rule to add to the instruction, so that the assistant answers this input \
         and similar inputs correctly. "
    });
    if labels.is_empty() {
        // No label to name (extraction, free text): the feedback says what was wrong, and the
        // rule says what to do instead.
        let feedback = first.feedback.trim();
        if !feedback.is_empty() {
            let _ = writeln!(text, "Feedback on the wrong answer: {}", one_line(feedback));
        }
        text.push_str(
            "Say in general words what it must do differently; do not quote the input or the \
             answer. Answer with one line in this form:\n- When ..., ...",
        );
    } else {
        // A classification's feedback only restates the two answers.
        let _ = write!(
            text,
            "Say in general words what {} shows the correct answer, words that fit many other \
             inputs too; do not quote {}, and do not name people, places or things from {}. \
             Answer with one line in this form:\n- When ..., answer {}.",
            if several {
                "these inputs have in common that"
            } else {
                "in the input"
            },
            if several { "them" } else { "it" },
            if several { "them" } else { "it" },
            one_line(&first.view.expected)
        );
    }
}

/// At most this many feedback rows of one label are shown in its glossary request.
pub(crate) const MAX_GLOSSARY_EXAMPLES: usize = 8;
/// At most this many subjects are kept for one label.
pub(crate) const MAX_SUBJECTS: usize = 8;
/// A subject longer than this many words is a sentence (often a copied input), not a subject.
const MAX_SUBJECT_WORDS: usize = 3;
/// The heading of the glossary [`add_glossary`] puts at the top of a prompt.
pub(crate) const GLOSSARY_HEADING: &str = "What each answer is about:";

/// The request for one label's line of the glossary: the label set, the feedback rows whose
/// correct answer is `label`, and the request to list the subjects such inputs are about in one
/// or two general words each.
///
/// Measured by hand on CLINC-150's ten domains with the embedded 1.5B model as both reflection
/// and task model (100 holdout rows): asked for "what kind of inputs have the answer X", it
/// copied inputs or wrote "inputs that have the answer X"; asked for the shared topic, it wrote
/// vague words ("financial advice") and the glossary gained +0.03; asked for a list of subjects,
/// it wrote lists like "retirement, insurance, pay, salary, paycheck" and the glossary gained
/// +0.11 (a glossary written by hand gained +0.23, so the form matters more than the model).
/// Labels of feeling have no subjects, but a request for "the words that show an input is of
/// the kind X" did no better: on TweetEval emotion its glossary (`- sadness: end, overlooked,
/// sad, miss, ...`) scored 0.700 against the seed's 0.735 on 200 rows (p = 0.31, 2026-11-30).
///
/// Labels that are numbers ([`labels_are_numbers`]) are asked for a name instead: a list of
/// subjects of AG News rows labelled `0` to `3` named only people, places and companies (all
/// dropped), where asked to "name the kind in general words" the 1.5B model wrote "news
/// articles", "sports news", "financial news" and "technology". That glossary on the seed, on 200
/// rows no request showed (2026-11-29): with the 1.5B answering, 0.330 against 0.255 (+0.075,
/// p = 0.003; the seed answers `1` to 199 of them); with the 0.5B, 0.250 against 0.265 (p = 0.66).
pub(crate) fn glossary_request(
    labels: &[String],
    label: &str,
    examples: &[&ExampleView],
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "An assistant sorts inputs into these kinds: {}.\n",
        labels.join(", ")
    );
    let _ = writeln!(text, "These inputs are of the kind {label}:");
    for example in examples {
        let values: Vec<String> = match example.inputs.as_slice() {
            [(_, value)] => vec![one_line(value)],
            inputs => inputs
                .iter()
                .map(|(name, value)| format!("{name}: {}", one_line(value)))
                .collect(),
        };
        let _ = writeln!(text, "- {}", values.join("; "));
    }
    if labels_are_numbers(labels.iter().map(String::as_str)) {
        let _ = write!(
            text,
            "\nThe kinds are numbers, which say nothing. Name the kind {label} in general words: \
             what do all inputs of this kind have in common? Answer with one line in this \
             form:\n- {label}: {NAME_PLACEHOLDER}"
        );
        return text;
    }
    let _ = write!(
        text,
        "\nList the subjects that inputs of the kind {label} are about: one or two general words \
         each, separated by commas, including related subjects that other inputs of this kind \
         could be about. Do not name people, places or companies. Answer with one line in this \
         form:\n- {label}: subject, subject, subject, ..."
    );
    text
}

/// The placeholder of the form a glossary request of numbered labels asks for; an answer that
/// copies it names nothing.
const NAME_PLACEHOLDER: &str = "a few general words";

/// The subjects of a glossary answer: its first list line (with or without the "- label:" head,
/// and one subject alone when it has that head), split at commas, each trimmed of punctuation.
/// Dropped: any label's name (a 1.5B model lists the other labels as subjects of one), a
/// subject with a capital letter (a name of a person, place or company, which the request
/// forbids), sentences (copied inputs), "..." and repeats (the model now and then repeats one
/// subject until its token limit). At most [`MAX_SUBJECTS`].
pub(crate) fn parse_subjects(answer: &str, labels: &[String]) -> Vec<String> {
    let body = after_thinking(answer).lines().find_map(|line| {
        let line = line.trim();
        let listed = line.starts_with(['-', '*']);
        let line = line.trim_start_matches(['-', '*']).trim();
        match line.split_once(':') {
            Some((head, body)) if head.split_whitespace().count() <= 3 => Some(body),
            _ if listed || line.contains(',') => Some(line),
            _ => None,
        }
    });
    let Some(body) = body else {
        return Vec::new();
    };
    let words_of = |text: &str| text.to_lowercase().replace(['_', '-'], " ");
    let label_names: Vec<String> = labels.iter().map(|label| words_of(label)).collect();
    let mut subjects: Vec<String> = Vec::new();
    for item in body.split(',') {
        let item = item
            .trim()
            .trim_matches(|c: char| !c.is_alphanumeric())
            .to_string();
        if item.is_empty()
            || item.chars().any(char::is_uppercase)
            || item.split_whitespace().count() > MAX_SUBJECT_WORDS
            || item == "subject"
            || item == NAME_PLACEHOLDER
            || label_names.contains(&words_of(&item))
            || subjects.contains(&item)
        {
            continue;
        }
        subjects.push(item);
        if subjects.len() == MAX_SUBJECTS {
            break;
        }
    }
    subjects
}

/// `prompt` with a glossary at its top, one "- label: subject, subject" line per entry, so the
/// model reads what each answer is about before the input (and the rows share that prefix).
pub(crate) fn add_glossary(prompt: &str, entries: &[(String, Vec<String>)]) -> String {
    let mut text = String::from(GLOSSARY_HEADING);
    text.push('\n');
    for (label, subjects) in entries {
        let _ = writeln!(text, "- {label}: {}", subjects.join(", "));
    }
    text.push('\n');
    text.push_str(prompt);
    text
}

/// The line [`input_last`] ends a prompt with.
const LABEL_ONLY: &str = "Answer with the label only.";

/// `prompt` with the instruction first and the input last: its lines after the last input line
/// (the task and the answers allowed) move up to just before the first input line, and the
/// prompt ends with "Answer with the label only.". `None` when no instruction follows the input.
///
/// `init` writes the input first (`Query: {query}` and then the task), as a person often does,
/// when the labels are few ([`FEW_LABELS`]). Measured with `compare
/// --prompts` on all 240 rows of the public SNIPS intents sample with the 1.5B task model: 0.800
/// with init's seed, 0.900 with this layout (+0.100, 95% CI +0.046 to +0.158, McNemar
/// p < 0.001). By hand on other datasets it lost (CLINC-150's ten domains with the 1.5B, SMS
/// with the 0.5B), so the engine offers it as a child judged on the Pareto set, never imposes
/// it. `init` writes a longer list of labels in this layout from the start.
pub fn input_last(prompt: &str) -> Option<String> {
    let lines: Vec<&str> = prompt.trim_end().lines().collect();
    let first_input = lines.iter().position(|line| has_placeholder(line))?;
    let last_input = lines.iter().rposition(|line| has_placeholder(line))?;
    let instruction: Vec<&str> = lines[last_input + 1..]
        .iter()
        .filter(|line| is_own_instruction(line))
        .copied()
        .collect();
    if instruction.is_empty() {
        return None;
    }
    let mut out: Vec<&str> = lines[..first_input].to_vec();
    out.extend(instruction);
    out.extend(&lines[first_input..=last_input]);
    out.push(LABEL_ONLY);
    Some(out.join("\n"))
}

/// A line of the prompt's own instruction: not blank, and not the engine's closing line
/// ([`LABEL_ONLY`], which [`input_last`] writes after the input).
fn is_own_instruction(line: &str) -> bool {
    let line = line.trim();
    !line.is_empty() && line != LABEL_ONLY
}

/// The heading of the list of rules that [`add_rules`] keeps in a prompt.
const RULES_HEADING: &str = "Rules:";

/// The lines the engine itself writes into prompts, as opposed to what the reflection model
/// writes: they quote no input (see `InputPairs::with_own_wording`).
pub(crate) const OWN_WORDING: [&str; 3] = [GLOSSARY_HEADING, LABEL_ONLY, RULES_HEADING];

/// The rules in a reflection answer: its "- ", "* ", "1. " or bare "When " lines, stripped of
/// the marker and of the form's brackets, without duplicates; a line that runs several "- When"
/// rules together is split. (An answer cut off by its token limit reaches the engine without its
/// unfinished last line; the adapter drops it.)
///
/// With a label set, a rule that names a label must name `correct`, the answer of the example it
/// was written for: a small model now and then copies the wrong answer into its rule, and such a
/// rule would teach the mistake. A rule that names no label gets `correct` as its answer clause
/// ([`with_answer`]).
pub(crate) fn parse_rules(
    answer: &str,
    labels: &[String],
    correct: &str,
) -> Result<Vec<String>, ProposalFailure> {
    let mut rules: Vec<String> = Vec::new();
    let mut wrong = 0;
    for line in after_thinking(answer).lines() {
        let line = line.trim();
        let body = if let Some(rest) = line.strip_prefix("- ").or(line.strip_prefix("* ")) {
            rest
        } else if let Some((number, rest)) = line.split_once(". ")
            && !number.is_empty()
            && number.chars().all(|c| c.is_ascii_digit())
        {
            rest
        } else if line.starts_with("When ") {
            line
        } else {
            continue;
        };
        for (i, part) in body.split(" - When ").enumerate() {
            let rule = if i == 0 {
                part.to_string()
            } else {
                format!("When {part}")
            };
            let rule = rule.replace(['<', '>'], "");
            let rule = rule.trim().trim_matches('"').trim();
            if rule.is_empty() || rule.contains("...") {
                continue;
            }
            let rule = match last_label(rule, labels) {
                Some(label) if !label.eq_ignore_ascii_case(correct.trim()) => {
                    wrong += 1;
                    continue;
                }
                None if !labels.is_empty() && !correct.trim().is_empty() => {
                    with_answer(rule, correct)
                }
                _ => rule.to_string(),
            };
            let rule = rule.as_str();
            if !rules.iter().any(|known| known.eq_ignore_ascii_case(rule)) {
                rules.push(rule.to_string());
            }
        }
    }
    match (rules.is_empty(), wrong) {
        (false, _) => Ok(rules),
        (true, 0) => Err(ProposalFailure::NoRules {
            answer: answer.to_string(),
        }),
        (true, _) => Err(ProposalFailure::WrongAnswerInRules {
            answer: answer.to_string(),
        }),
    }
}

/// `rule` with the answer clause the request asked for ("..., answer LABEL."), for a rule that
/// names no label: "When the text expresses disappointment." tells the task model what to notice
/// but not what to answer; the engine knows which answer the rule was written for.
fn with_answer(rule: &str, correct: &str) -> String {
    let condition = rule.trim_end_matches(['.', ',', ';', ':', ' ']);
    format!("{condition}, answer {}.", correct.trim())
}

/// The label named last in `rule` (as a whole word, any case): the answer it tells to give.
///
/// A label may hold another: `clickbait` is inside `not_clickbait` and `not clickbait`. `_` and
/// `-` join words, and of two labels that end at the same place the longer one is named.
fn last_label<'l>(rule: &str, labels: &'l [String]) -> Option<&'l str> {
    let lower = rule.to_lowercase();
    let joins = |c: char| c.is_alphanumeric() || c == '_' || c == '-';
    labels
        .iter()
        .filter_map(|label| {
            let needle = label.to_lowercase();
            lower
                .match_indices(needle.as_str())
                .filter(|(at, _)| {
                    let before = lower[..*at].chars().next_back();
                    let after = lower[at + needle.len()..].chars().next();
                    !before.is_some_and(joins) && !after.is_some_and(joins)
                })
                .map(|(at, _)| at + needle.len())
                .last()
                .map(|end| (end, needle.len(), label.as_str()))
        })
        .max_by_key(|&(end, length, _)| (end, length))
        .map(|(_, _, label)| label)
}

/// `prompt` with `rules` added to its list of rules: after the last rule of an existing
/// "Rules:" list, else as a new list right after the last line that holds a `{variable}` when
/// an instruction follows the input (as `init` writes it, with or without a line above the input
/// naming the task, a glossary or worked examples), so that the instruction after the input
/// stays the last thing the task model reads; else right before the first line that holds a
/// `{variable}` (so that the rules come before the input, as instructions usually do: the
/// layout child's closing "Answer with the label only." does not count as an instruction
/// after it); else at the end. Rules the prompt already states are not repeated. `None` when
/// nothing is new.
///
/// Why not at the end: a rule ends with one label (`..., answer hate.`), and small models lean
/// towards the answers they read last (the recency bias of Zhao et al., "Calibrate Before Use",
/// 2021). Measured here before the engine wrote rules: a fitting rule for one SNIPS intent, the
/// 1.5B model answering 100 rows, scored 0.51 at the end of the prompt and 0.83 between the input
/// and the answer line (the seed: 0.78); in round 13 of the quality benchmark the 0.5B model
/// answered `hate` to nearly every row once a rule ending in `answer hate.` closed the prompt.
pub(crate) fn add_rules(prompt: &str, rules: &[String]) -> Option<String> {
    let items: Vec<String> = rules
        .iter()
        .filter(|rule| !prompt.contains(rule.as_str()))
        .map(|rule| format!("- {rule}"))
        .collect();
    if items.is_empty() {
        return None;
    }
    let mut lines: Vec<String> = prompt.trim_end().lines().map(str::to_owned).collect();
    let heading = lines.iter().position(|line| line.trim() == RULES_HEADING);
    let first_input = lines.iter().position(|line| has_placeholder(line));
    let last_input = lines.iter().rposition(|line| has_placeholder(line));
    // Where a new list goes: right after the input when an instruction of the prompt's own
    // follows it (the engine's closing line is not one), else before the input; `None`: at the
    // end.
    let new_list_at = match (first_input, last_input) {
        (_, Some(last)) if lines[last + 1..].iter().any(|l| is_own_instruction(l)) => {
            Some(last + 1)
        }
        (Some(first), _) if first > 0 => Some(first),
        _ => None,
    };
    match (heading, new_list_at) {
        (Some(heading), _) => {
            let end = heading
                + 1
                + lines[heading + 1..]
                    .iter()
                    .take_while(|line| line.trim_start().starts_with("- "))
                    .count();
            lines.splice(end..end, items);
        }
        (None, Some(at)) => {
            lines.splice(
                at..at,
                std::iter::once(RULES_HEADING.to_owned()).chain(items),
            );
        }
        (None, None) => {
            lines.extend([String::new(), RULES_HEADING.to_owned()]);
            lines.extend(items);
        }
    }
    Some(lines.join("\n"))
}

/// `prompt` without its "Rules:" list (the heading and its "- " lines).
fn without_rules(prompt: &str) -> String {
    let mut out = Vec::new();
    let mut in_rules = false;
    for line in prompt.lines() {
        if line.trim() == RULES_HEADING {
            in_rules = true;
            continue;
        }
        if in_rules && line.trim_start().starts_with("- ") {
            continue;
        }
        in_rules = false;
        out.push(line);
    }
    out.join("\n")
}

/// The line holds a `{variable}` placeholder (a line that is not a template on its own, such as
/// half of a brace pair split over two lines, does not count).
pub(crate) fn has_placeholder(line: &str) -> bool {
    Template::parse(line).is_ok_and(|template| !template.variables().is_empty())
}

/// What a reasoning model answered after its `<think>` section.
fn after_thinking(answer: &str) -> &str {
    match answer.rfind("</think>") {
        Some(end) => &answer[end + "</think>".len()..],
        None => answer,
    }
}

fn one_line(text: &str) -> String {
    let joined = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if joined.is_empty() {
        "(no answer)".into()
    } else {
        joined
    }
}

/// One of the two candidates being merged.
pub(crate) struct Revision<'a> {
    pub(crate) prompt: &'a str,
    pub(crate) score: f64,
    /// Pareto examples on which it beats the other revision.
    pub(crate) wins: usize,
}

/// The reference merges multi-component programs by taking each component from whichever
/// descendant changed it. A gepa-lab candidate is a single prompt, where that rule could only copy
/// one parent, so the reflection model does the crossover: it sees the common ancestor and both
/// descendants and writes one prompt that keeps what each changed for the better.
pub(crate) fn merge_request(
    ancestor: &str,
    revisions: [Revision; 2],
    examples: usize,
    keep: &[String],
) -> String {
    let mut text = String::new();
    text.push_str(
        "I am improving an instruction for an assistant. Starting from this instruction:\n```\n",
    );
    text.push_str(ancestor);
    text.push_str(
        "\n```\n\ntwo different revisions were written, and each does better than the original \
         on some of my test examples.\n\n",
    );
    for (label, revision) in ["A", "B"].iter().zip(&revisions) {
        let _ = writeln!(
            text,
            "Revision {label} (mean score {:.3} on {examples} test examples, better than the other \
             revision on {} of them):\n```\n{}\n```\n",
            revision.score, revision.wins, revision.prompt
        );
    }
    text.push_str(
        "Write one new instruction that keeps what makes each revision better than the \
         original: combine the facts, rules and strategies each added, and where they conflict, \
         follow the revision with the higher score.\n\n",
    );
    push_placeholder_rule(&mut text, keep);
    text.push_str("Write the new instruction inside a ``` fenced block.");
    text
}

fn push_placeholder_rule(text: &mut String, keep: &[String]) {
    if keep.is_empty() {
        return;
    }
    let names: Vec<String> = keep.iter().map(|name| format!("{{{name}}}")).collect();
    let _ = write!(
        text,
        "The instruction is a template: before it reaches the assistant, {} {} replaced with each \
         example's input. Keep every one of them in the new instruction, written exactly like \
         that.\n\n",
        names.join(", "),
        if names.len() == 1 { "is" } else { "are" },
    );
}

/// The new instruction inside the answer's fenced block.
///
/// Only fences at the start of a line count, so an inline mention ("put it in ``` blocks") is
/// not mistaken for one. With several fences, the instruction runs from the first to the last, so
/// an instruction that itself contains a fenced example stays whole. A word right after the
/// opening fence (a language tag) is dropped; a reasoning model's `<think>` section is ignored. A
/// fence opened and never closed is refused: that is how a truncated answer looks.
pub(crate) fn extract_instruction(answer: &str) -> Result<String, ProposalFailure> {
    let text = after_thinking(answer);
    let fences = line_start_fences(text);
    let body = match (fences.first(), fences.last()) {
        (Some(&first), Some(&last)) if first != last => &text[first + 3..last],
        (Some(&only), _) => {
            let rest = &text[only + 3..];
            // A block that opens and closes on its own line has its closing fence inline.
            match rest.trim_end().strip_suffix("```") {
                Some(body) => body,
                // Most often an answer cut off by its token limit: the instruction may end
                // mid-sentence, so it is not adopted.
                None => {
                    return Err(ProposalFailure::UnclosedFence {
                        answer: answer.to_string(),
                    });
                }
            }
        }
        _ => {
            return Err(ProposalFailure::NoFencedBlock {
                answer: answer.to_string(),
            });
        }
    };
    let body = match body.split_once('\n') {
        Some((tag, rest)) if !tag.contains(char::is_whitespace) => rest,
        _ => body,
    };
    let instruction = body.trim();
    if instruction.is_empty() {
        return Err(ProposalFailure::EmptyInstruction);
    }
    Ok(instruction.to_string())
}

/// Byte offsets of the ``` that start a line, after optional spaces or tabs.
fn line_start_fences(text: &str) -> Vec<usize> {
    let mut fences = Vec::new();
    let mut line_start = 0;
    for line in text.split_inclusive('\n') {
        let indented = line.trim_start_matches([' ', '\t']);
        if indented.starts_with("```") {
            fences.push(line_start + line.len() - indented.len());
        }
        line_start += line.len();
    }
    fences
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(answer: &str) -> Result<String, ProposalFailure> {
        extract_instruction(answer)
    }

    #[test]
    fn plain_block() {
        assert_eq!(
            parsed("Here it is:\n```\nAnswer {question}.\n```\nGood luck."),
            Ok("Answer {question}.".into())
        );
    }

    #[test]
    fn language_tag_is_dropped_but_a_sentence_on_the_fence_line_is_kept() {
        assert_eq!(parsed("```text\nBe brief.\n```"), Ok("Be brief.".into()));
        assert_eq!(
            parsed("```markdown\nBe brief.\n```"),
            Ok("Be brief.".into())
        );
        assert_eq!(
            parsed("```You are a grader.\nBe brief.\n```"),
            Ok("You are a grader.\nBe brief.".into())
        );
    }

    #[test]
    fn a_fence_never_closed_is_a_truncated_answer_and_refused() {
        let cut_off = "New instruction:\n```\nBe brief.\nCite your sour";
        assert_eq!(
            parsed(cut_off),
            Err(ProposalFailure::UnclosedFence {
                answer: cut_off.into()
            })
        );
    }

    #[test]
    fn block_on_one_line() {
        assert_eq!(
            parsed("```Be brief and exact.```"),
            Ok("Be brief and exact.".into())
        );
    }

    #[test]
    fn no_fence_is_a_failed_proposal_not_a_guess() {
        assert_eq!(
            parsed("Be brief."),
            Err(ProposalFailure::NoFencedBlock {
                answer: "Be brief.".into()
            })
        );
        assert!(matches!(
            parsed(""),
            Err(ProposalFailure::NoFencedBlock { .. })
        ));
    }

    #[test]
    fn inline_backticks_are_not_fences() {
        assert!(matches!(
            parsed("I would put it in ``` blocks but I will not."),
            Err(ProposalFailure::NoFencedBlock { .. })
        ));
        assert_eq!(
            parsed("Put it in ``` blocks:\n```\nBe brief.\n```"),
            Ok("Be brief.".into())
        );
    }

    #[test]
    fn nested_example_block_stays_inside_the_instruction() {
        let answer = "```\nReply with JSON like:\n```json\n{\"a\": 1}\n```\nNothing else.\n```";
        assert_eq!(
            parsed(answer),
            Ok("Reply with JSON like:\n```json\n{\"a\": 1}\n```\nNothing else.".into())
        );
    }

    #[test]
    fn indented_fences_count() {
        assert_eq!(parsed("  ```\n  Be brief.\n  ```"), Ok("Be brief.".into()));
    }

    #[test]
    fn empty_block_fails() {
        assert_eq!(parsed("```\n\n```"), Err(ProposalFailure::EmptyInstruction));
        assert_eq!(parsed("``````"), Err(ProposalFailure::EmptyInstruction));
        assert!(matches!(
            parsed("```"),
            Err(ProposalFailure::UnclosedFence { .. })
        ));
    }

    #[test]
    fn reasoning_before_the_answer_is_ignored() {
        let answer = "<think>Maybe ```\ndraft\n``` no.</think>\n```\nBe brief.\n```";
        assert_eq!(parsed(answer), Ok("Be brief.".into()));
    }

    #[test]
    fn request_shows_instruction_examples_and_placeholders() {
        let view = ExampleView {
            inputs: vec![("question".into(), "What is 2+2?".into())],
            expected: "4".into(),
        };
        let text = mutation_request(
            None,
            "Answer {question}.",
            &[Shown {
                view: &view,
                output: "5",
                feedback: "Wrong: expected 4.",
            }],
            &["question".into()],
        );
        assert!(text.starts_with("I gave an assistant the following instruction to perform a task for me:\n```\nAnswer {question}.\n```\n"));
        assert!(text.contains(
            "# Example 1\n## Inputs\n### question\nWhat is 2+2?\n\n## Generated Outputs\n5\n\n\
             ## Expected Output\n4\n\n## Feedback\nWrong: expected 4.\n\n```"
        ));
        assert!(text.contains("{question} is replaced with each example's input"));
        assert!(text.ends_with("Write the new instruction inside a ``` fenced block."));
    }

    #[test]
    fn a_template_needs_both_placeholders_and_says_which_it_lacks() {
        assert_eq!(
            ReflectionTemplate::parse("Improve this: <curr_instructions>"),
            Err(MissingPlaceholders(vec!["<inputs_outputs_feedback>"]))
        );
        assert_eq!(
            ReflectionTemplate::parse("<curr_instruction> <inputs_outputs_feedbacks>"),
            Err(MissingPlaceholders(vec![
                "<curr_instructions>",
                "<inputs_outputs_feedback>"
            ])),
            "a near miss is not the placeholder"
        );
        assert!(ReflectionTemplate::parse("<inputs_outputs_feedback><curr_instructions>").is_ok());
    }

    #[test]
    fn a_template_is_filled_in_one_pass_and_the_placeholder_rule_added() {
        let view = ExampleView {
            inputs: vec![("question".into(), "Is <curr_instructions> a tag?".into())],
            expected: "yes".into(),
        };
        let shown = [Shown {
            view: &view,
            output: "no",
            feedback: "Wrong.",
        }];
        let template = ReflectionTemplate::parse(
            "Instruction:\n```\n<curr_instructions>\n```\nCases:\n```\n<inputs_outputs_feedback>\n```\n\
             Again: <curr_instructions>\nAnswer in a ``` block.\n",
        )
        .unwrap();
        let text = mutation_request(
            Some(&template),
            "Answer {question}.",
            &shown,
            &["question".into()],
        );
        assert_eq!(
            text,
            "Instruction:\n```\nAnswer {question}.\n```\nCases:\n```\n# Example 1\n## Inputs\n\
             ### question\nIs <curr_instructions> a tag?\n\n## Generated Outputs\nno\n\n\
             ## Expected Output\nyes\n\n## Feedback\nWrong.\n```\nAgain: Answer {question}.\n\
             Answer in a ``` block.\n\nThe instruction is a template: before it reaches the \
             assistant, {question} is replaced with each example's input. Keep every one of them \
             in the new instruction, written exactly like that."
        );
        // Without placeholders to keep, the template is all there is.
        let plain = mutation_request(Some(&template), "Answer.", &shown, &[]);
        assert!(
            plain.ends_with("Again: Answer.\nAnswer in a ``` block.\n"),
            "{plain}"
        );
    }

    #[test]
    fn merge_request_shows_ancestor_and_both_revisions() {
        let text = merge_request(
            "Answer {question}.",
            [
                Revision {
                    prompt: "Answer {question}. Use units.",
                    score: 0.6,
                    wins: 3,
                },
                Revision {
                    prompt: "Answer {question}. Be brief.",
                    score: 0.5,
                    wins: 2,
                },
            ],
            10,
            &["question".into()],
        );
        assert!(text.contains("```\nAnswer {question}.\n```"));
        assert!(text.contains("Revision A (mean score 0.600 on 10 test examples, better than the other revision on 3 of them):\n```\nAnswer {question}. Use units.\n```"));
        assert!(text.contains("Revision B (mean score 0.500"));
        assert!(text.ends_with("Write the new instruction inside a ``` fenced block."));
    }

    fn shown<'a>(view: &'a ExampleView, output: &'a str) -> Shown<'a> {
        Shown {
            view,
            output,
            feedback: "",
        }
    }

    #[test]
    fn rules_request_shows_failures_and_the_label_set() {
        let view = ExampleView {
            inputs: vec![("review".into(), "Oh great, it broke.".into())],
            expected: "negative".into(),
        };
        let text = rules_request(
            "Classify {review}.",
            &[&shown(&view, "Positive\n")],
            &[],
            &["negative".into(), "positive".into()],
        );
        assert!(text.contains("\"\"\"\nClassify {review}.\n\"\"\""));
        assert!(text.contains("Every correct answer is exactly one of: negative, positive."));
        assert!(text.contains(
            "this input wrongly:\nreview: Oh great, it broke.\nWrong answer: Positive\nCorrect answer: negative\n"
        ));
        assert!(text.ends_with("in this form:\n- When ..., answer negative."));
        // A longer list is left to the instruction, which names them; the rule names one.
        let mut many: Vec<String> = (0..FEW_LABELS).map(|i| format!("label_{i}")).collect();
        many.push("negative".into());
        let text = rules_request("Classify {review}.", &[&shown(&view, "x")], &[], &many);
        assert!(!text.contains("Every correct answer"), "{text}");
        assert!(text.ends_with("in this form:\n- When ..., answer negative."));
        // Without a label set (extraction, free text) the rule says what to do instead.
        let view = ExampleView {
            inputs: vec![("text".into(), "Mail Ana by March 3".into())],
            expected: "{\"date\":null}".into(),
        };
        let text = rules_request(
            "Extract {text}.",
            &[&Shown {
                view: &view,
                output: "{\"date\":\"2025-03-03\"}",
                feedback: "date: expected null",
            }],
            &[],
            &[],
        );
        assert!(text.contains("Feedback on the wrong answer: date: expected null"));
        assert!(text.ends_with("in this form:\n- When ..., ..."));
    }

    #[test]
    fn several_failures_of_one_confusion_are_shown_numbered() {
        let views: Vec<ExampleView> = ["The lid cracked.", "Returned it."]
            .iter()
            .map(|review| ExampleView {
                inputs: vec![("review".into(), (*review).into())],
                expected: "negative".into(),
            })
            .collect();
        let failures: Vec<Shown> = views.iter().map(|v| shown(v, "positive")).collect();
        let refs: Vec<&Shown> = failures.iter().collect();
        let contrast = ExampleView {
            inputs: vec![("review".into(), "Love it.".into())],
            expected: "positive".into(),
        };
        let text = rules_request(
            "Classify {review}.",
            &refs,
            &[&shown(&contrast, "positive")],
            &["negative".into(), "positive".into()],
        );
        assert!(text.contains(
            "these 2 inputs wrongly:\n\nInput 1:\nreview: The lid cracked.\nWrong answer: positive\n\
             Correct answer: negative\n\nInput 2:\nreview: Returned it.\n"
        ));
        assert!(text.contains(
            "\nFor contrast, the assistant rightly answered positive to this input; the rule must \
             not change its answer:\nreview: Love it.\n"
        ));
        assert!(text.contains("what these inputs have in common that shows the correct answer"));
        assert!(text.ends_with("in this form:\n- When ..., answer negative."));
    }

    #[test]
    fn the_focus_is_the_most_common_confusion_of_the_minibatch() {
        let labels: Vec<String> = vec!["joy".into(), "anger".into(), "sadness".into()];
        let views: Vec<ExampleView> = ["sadness", "anger", "sadness", "joy", "sadness", "anger"]
            .iter()
            .map(|expected| ExampleView {
                inputs: vec![("text".into(), "...".into())],
                expected: (*expected).into(),
            })
            .collect();
        // Answers: the model says "joy" to nearly everything.
        let answers = ["joy", "joy", "Joy\n", "joy", "joy ", "sadness"];
        let minibatch: Vec<Shown> = views
            .iter()
            .zip(answers)
            .map(|(v, a)| shown(v, a))
            .collect();
        let scores = [0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
        // sadness answered joy (rows 0, 2, 4) outnumbers anger answered joy (row 1); row 3 is
        // a joy the parent got right, the contrast.
        let focus = rules_focus(&minibatch, &scores, &labels);
        assert_eq!((focus.failures, focus.contrasts), (vec![0, 2, 4], vec![3]));
        // On a tie the confusion met first wins (anger answered joy, with row 3 for contrast);
        // at most MAX_FAILURES_SHOWN are kept. Row 5's answer was sadness: rows 0, 2 and 4,
        // expected sadness and right here, are its contrasts, at most MAX_CONTRASTS_SHOWN.
        let scores = [1.0, 0.0, 1.0, 1.0, 1.0, 0.0];
        let focus = rules_focus(&minibatch, &scores, &labels);
        assert_eq!((focus.failures, focus.contrasts), (vec![1], vec![3]));
        let focus = rules_focus(&minibatch, &[1.0, 1.0, 1.0, 1.0, 1.0, 0.0], &labels);
        assert_eq!((focus.failures, focus.contrasts), (vec![5], vec![0, 2]));
        let many: Vec<Shown> = (0..5).map(|_| shown(&views[0], "joy")).collect();
        assert_eq!(
            rules_focus(&many, &[0.0; 5], &labels).failures.len(),
            MAX_FAILURES_SHOWN
        );
        // Without labels, the first failure and no contrast; with none, nothing.
        let focus = rules_focus(&minibatch, &[1.0, 1.0, 0.0, 0.0, 1.0, 1.0], &[]);
        assert_eq!((focus.failures, focus.contrasts), (vec![2], vec![]));
        assert_eq!(
            rules_focus(&minibatch, &[1.0; 6], &labels),
            Focus::default()
        );
    }

    #[test]
    fn rules_are_the_list_lines_of_the_answer() {
        let answer = "Here are the rules:\n- Sarcasm is negative.\n* Delivery does not count.\n\
                      2. \"Returns mean negative.\"\n- Sarcasm is negative.\nThat is all.";
        assert_eq!(
            parse_rules(answer, &[], "").unwrap(),
            vec![
                "Sarcasm is negative.",
                "Delivery does not count.",
                "Returns mean negative."
            ]
        );
        assert!(matches!(
            parse_rules("No list here.", &[], ""),
            Err(ProposalFailure::NoRules { .. })
        ));
        // The form's brackets are dropped, its unfilled "..." refused, a bare "When" line kept.
        assert_eq!(
            parse_rules(
                "- When <a parcel is lost>, answer <shipping>.\n- When ..., answer shipping.\n\
                 When it crashes, answer technical.",
                &[],
                ""
            )
            .unwrap(),
            vec![
                "When a parcel is lost, answer shipping.",
                "When it crashes, answer technical."
            ]
        );
    }

    #[test]
    fn rules_run_together_are_split_and_rules_teaching_a_wrong_answer_dropped() {
        let labels: Vec<String> = ["billing", "shipping", "technical"]
            .map(String::from)
            .to_vec();
        let answer = "- When the export fails, answer billing. - When a parcel is lost, answer \
                      Shipping.\n- When the app crashes, answer technical.";
        assert_eq!(
            parse_rules(answer, &labels, "shipping").unwrap(),
            vec!["When a parcel is lost, answer Shipping."]
        );
        // The label named last is the answer the rule gives.
        assert_eq!(
            last_label(
                "When it is billing-related but about shipping, answer shipping.",
                &labels
            ),
            Some("shipping")
        );
        assert_eq!(last_label("When unsure, ask.", &labels), None);
        // A label inside another is not the one named.
        for labels in [
            ["clickbait", "not_clickbait"],
            ["clickbait", "not clickbait"],
        ] {
            let labels = labels.map(String::from).to_vec();
            let negative = format!("When it states a plain fact, answer {}.", labels[1]);
            assert_eq!(last_label(&negative, &labels), Some(labels[1].as_str()));
            assert_eq!(
                last_label("When it teases, answer clickbait.", &labels),
                Some("clickbait")
            );
        }
        assert!(matches!(
            parse_rules("- When it fails, answer billing.", &labels, "technical"),
            Err(ProposalFailure::WrongAnswerInRules { .. })
        ));
    }

    #[test]
    fn a_rule_naming_no_label_gets_the_answer_it_was_written_for() {
        let labels: Vec<String> = ["negative", "positive"].map(String::from).to_vec();
        // An answer of the embedded 1.5B model on SST-2, written for a row whose answer is
        // `negative`: the condition without the answer the request asked for.
        let answer = "- When the text expresses disappointment or dissatisfaction with the \
                      subject being described.";
        assert_eq!(
            parse_rules(answer, &labels, "negative").unwrap(),
            vec![
                "When the text expresses disappointment or dissatisfaction with the subject \
                 being described, answer negative."
            ]
        );
        // Without a label set there is no answer to add.
        assert_eq!(
            parse_rules("- When unsure, ask.", &[], "").unwrap(),
            vec!["When unsure, ask."]
        );
    }

    #[test]
    fn subjects_are_read_from_the_answers_a_small_model_gives() {
        // Answers of the embedded 1.5B model to glossary requests on CLINC-150's domains.
        let labels: Vec<String> = ["credit_cards", "home", "meta", "travel", "work"]
            .map(String::from)
            .to_vec();
        assert_eq!(
            parse_subjects(
                "- work: retirement, insurance, pay, salary, paycheck.",
                &labels
            ),
            ["retirement", "insurance", "pay", "salary", "paycheck"]
        );
        // Its own spelling of a label as the head; no label's name is a subject.
        assert_eq!(
            parse_subjects(
                "- credit cards: building, score, credit cards, home",
                &labels
            ),
            ["building", "score"]
        );
        // No head, and one subject repeated to the token limit.
        let looping = format!("- eggs, cooking, food, nutrition{}", ", cooking".repeat(30));
        assert_eq!(
            parse_subjects(&looping, &labels),
            ["eggs", "cooking", "food", "nutrition"]
        );
        // One subject alone; names of places or things dropped.
        assert_eq!(parse_subjects("- meta: voice", &labels), ["voice"]);
        assert_eq!(
            parse_subjects("- travel: luggage, flight, Oklahoma City, Alexa", &labels),
            ["luggage", "flight"]
        );
        // At most MAX_SUBJECTS, and sentences (copied inputs) dropped.
        let many = "- x: a, b, c, how is my order doing right now, d, e, f, g, h, i, j";
        assert_eq!(
            parse_subjects(many, &labels),
            ["a", "b", "c", "d", "e", "f", "g", "h"]
        );
        // Prose without a list: nothing to add.
        assert!(parse_subjects("Sure. Here is what I think.", &labels).is_empty());
    }

    #[test]
    fn the_glossary_request_shows_one_label_and_the_glossary_goes_on_top() {
        let labels: Vec<String> = ["home", "meta", "work"].map(String::from).to_vec();
        let one = ExampleView {
            inputs: vec![("query".into(), "when is  my\npay day".into())],
            expected: "work".into(),
        };
        let two = ExampleView {
            inputs: vec![
                ("title".into(), "Pay".into()),
                ("body".into(), "Raise?".into()),
            ],
            expected: "work".into(),
        };
        let request = glossary_request(&labels, "work", &[&one, &two]);
        assert!(request.starts_with(
            "An assistant sorts inputs into these kinds: home, meta, work.\n\nThese inputs are of \
             the kind work:\n- when is my pay day\n- title: Pay; body: Raise?\n"
        ));
        assert!(request.ends_with("- work: subject, subject, subject, ..."));
        let entries = vec![
            (
                "home".to_string(),
                vec!["lists".to_string(), "lights".to_string()],
            ),
            ("work".to_string(), vec!["pay".to_string()]),
        ];
        assert_eq!(
            add_glossary("Query: {query}\nAnswer.", &entries),
            "What each answer is about:\n- home: lists, lights\n- work: pay\n\nQuery: {query}\nAnswer."
        );
    }

    #[test]
    fn input_last_moves_the_instruction_above_the_input() {
        let seed = "Query: {query}\nAnswer with exactly one of: a, b. Give only the answer.";
        assert_eq!(
            input_last(seed).unwrap(),
            "Answer with exactly one of: a, b. Give only the answer.\nQuery: {query}\n\
             Answer with the label only."
        );
        // What stands above the input (a glossary) stays there; rules at the end move up with
        // the instruction, and new rules then go between the instruction and the input.
        let grown = "What each answer is about:\n- a: x\n\nQuery: {query}\nAnswer a or b.\n\n\
                     Rules:\n- Be brief.";
        let moved = input_last(grown).unwrap();
        assert_eq!(
            moved,
            "What each answer is about:\n- a: x\n\nAnswer a or b.\nRules:\n- Be brief.\n\
             Query: {query}\nAnswer with the label only."
        );
        assert_eq!(
            add_rules(&moved, &["Be kind.".into()]).unwrap(),
            "What each answer is about:\n- a: x\n\nAnswer a or b.\nRules:\n- Be brief.\n\
             - Be kind.\nQuery: {query}\nAnswer with the label only."
        );
        // Several input lines move together; nothing after the input, nothing to move.
        assert_eq!(
            input_last("Title: {title}\nBody: {body}\nAnswer.").unwrap(),
            "Answer.\nTitle: {title}\nBody: {body}\nAnswer with the label only."
        );
        assert_eq!(input_last("Classify.\nText: {text}"), None);
        // The engine's closing line after the input is not moved up with the instruction.
        assert_eq!(
            input_last("Text: {text}\nAnswer a or b.\nAnswer with the label only.").unwrap(),
            "Answer a or b.\nText: {text}\nAnswer with the label only."
        );
        assert_eq!(
            input_last(&input_last(seed).unwrap()),
            None,
            "once is enough"
        );
        assert_eq!(input_last("No input here."), None);
    }

    #[test]
    fn rules_go_between_the_input_and_the_instruction_then_extend_their_list() {
        // A line above the input (the task, a glossary, examples) does not move them above it.
        let seed = "Classify the review.\nReview: {review}\nAnswer with one word.";
        let once = add_rules(seed, &["Sarcasm is negative.".into()]).unwrap();
        assert_eq!(
            once,
            "Classify the review.\nReview: {review}\nRules:\n- Sarcasm is negative.\nAnswer with one word."
        );
        let twice = add_rules(
            &once,
            &[
                "Sarcasm is negative.".into(),
                "Returns are negative.".into(),
            ],
        )
        .unwrap();
        assert_eq!(
            twice,
            "Classify the review.\nReview: {review}\nRules:\n- Sarcasm is negative.\n- Returns are negative.\nAnswer with one word."
        );
        assert_eq!(add_rules(&twice, &["Returns are negative.".into()]), None);
        assert_eq!(without_rules(&twice), seed);
        let view = ExampleView {
            inputs: vec![("review".into(), "Fine.".into())],
            expected: "positive".into(),
        };
        assert!(!rules_request(&twice, &[&shown(&view, "negative")], &[], &[]).contains("Sarcasm"));
        // The input first: the rules go after it, and the instruction stays last; with
        // nothing after the input, or no input at all, they go at the end.
        let input_first = "Text: {text}\nAnswer with exactly one of: hate, not_hate.";
        let once = add_rules(input_first, &["When X, answer hate.".into()]).unwrap();
        assert_eq!(
            once,
            "Text: {text}\nRules:\n- When X, answer hate.\nAnswer with exactly one of: hate, not_hate."
        );
        assert_eq!(
            add_rules(&once, &["When Y, answer not_hate.".into()]).unwrap(),
            "Text: {text}\nRules:\n- When X, answer hate.\n- When Y, answer not_hate.\n\
             Answer with exactly one of: hate, not_hate."
        );
        assert_eq!(
            add_rules("Title: {title}\nBody: {body}\n\nLabel?", &["Z.".into()]).unwrap(),
            "Title: {title}\nBody: {body}\nRules:\n- Z.\n\nLabel?"
        );
        assert_eq!(
            add_rules("{review} - sentiment?", &["Be brief.".into()]).unwrap(),
            "{review} - sentiment?\n\nRules:\n- Be brief."
        );
        assert_eq!(
            add_rules("No input.", &["Be brief.".into()]).unwrap(),
            "No input.\n\nRules:\n- Be brief."
        );
        assert_eq!(
            add_rules("Literal {{braces}}.\nText: {text}", &["X.".into()]).unwrap(),
            "Literal {{braces}}.\nRules:\n- X.\nText: {text}"
        );
        // The layout child's closing line is the engine's, not an instruction: the rules go
        // between the instruction and the input.
        assert_eq!(
            add_rules(
                "Answer with exactly one of: a, b.\nText: {text}\nAnswer with the label only.",
                &["When X, answer a.".into()]
            )
            .unwrap(),
            "Answer with exactly one of: a, b.\nRules:\n- When X, answer a.\nText: {text}\n\
             Answer with the label only."
        );
    }
}
