//! The text sent to the reflection model and the parsing of its answer.
//!
//! The mutation request follows the reference implementation's instruction-proposal prompt: the
//! current instruction in a fenced block, the minibatch as Markdown (inputs, the model's output,
//! the expected output, the scorer's feedback), the same guidance on what a new instruction should
//! contain, and the request to answer inside a fenced block. Two additions: the expected output
//! (the reference leaves it to the feedback), and, because our prompts are `{variable}` templates,
//! the placeholders the new instruction must keep.

use std::fmt::Write;

use super::records::ProposalFailure;
use super::task::ExampleView;

/// One minibatch example as the reflection model sees it.
pub(crate) struct Shown<'a> {
    pub(crate) view: &'a ExampleView,
    pub(crate) output: &'a str,
    pub(crate) feedback: &'a str,
}

pub(crate) fn mutation_request(instruction: &str, examples: &[Shown], keep: &[String]) -> String {
    let mut text = String::new();
    text.push_str("I gave an assistant the following instruction to perform a task for me:\n```\n");
    text.push_str(instruction);
    text.push_str(
        "\n```\n\nBelow are examples of task inputs the assistant received, the response it gave \
         to each, the expected response, and feedback on how its response could be better:\n```\n",
    );
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
/// opening fence (a language tag) is dropped; a missing closing fence is tolerated; a reasoning
/// model's `<think>` section is ignored.
pub(crate) fn extract_instruction(answer: &str) -> Result<String, ProposalFailure> {
    let text = match answer.rfind("</think>") {
        Some(end) => &answer[end + "</think>".len()..],
        None => answer,
    };
    let fences = line_start_fences(text);
    let body = match (fences.first(), fences.last()) {
        (Some(&first), Some(&last)) if first != last => &text[first + 3..last],
        (Some(&only), _) => {
            let rest = &text[only + 3..];
            // A block that opens and closes on its own line has its closing fence inline.
            rest.trim_end().strip_suffix("```").unwrap_or(rest)
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
    fn missing_closing_fence_takes_the_rest() {
        assert_eq!(
            parsed("New instruction:\n```\nBe brief.\nCite sources."),
            Ok("Be brief.\nCite sources.".into())
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
        assert_eq!(parsed("```"), Err(ProposalFailure::EmptyInstruction));
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
}
