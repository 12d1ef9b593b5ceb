//! Keeping proposed prompts renderable.
//!
//! The adapter renders a prompt as a `{variable}` template with an example's inputs. A child that
//! drops a placeholder the seed uses would silently stop showing the model that input: the input
//! is appended to it as a `Name: {name}` line, the way GEPA's reference (DSPy) always shows
//! inputs as fields after the instruction, since small reflection models often rewrite the
//! instruction well but leave the input out. A child that invents a placeholder would fail to
//! render on every example; it is rejected before any call is paid for it.

use std::collections::BTreeSet;

use super::records::ProposalFailure;

pub(crate) struct Placeholders {
    // Input names the seed uses as `{name}`, in the dataset's column order.
    required: Vec<String>,
    // Names a child may use: every input name, plus anything the seed already had in braces.
    allowed: BTreeSet<String>,
}

impl Placeholders {
    /// `inputs` are the dataset's input names, in column order.
    pub(crate) fn new(seed: &str, inputs: &[String]) -> Self {
        let required = inputs
            .iter()
            .filter(|name| seed.contains(&format!("{{{name}}}")))
            .cloned()
            .collect();
        let mut allowed: BTreeSet<String> = inputs.iter().cloned().collect();
        allowed.extend(braced_names(seed));
        Self { required, allowed }
    }

    /// The placeholders every new prompt must keep, shown to the reflection model.
    pub(crate) fn required(&self) -> &[String] {
        &self.required
    }

    /// `prompt` with a `Name: {name}` line appended for each required input it left out.
    pub(crate) fn complete(&self, prompt: &str) -> String {
        let mut out = prompt.trim_end().to_owned();
        let mut separated = false;
        for name in &self.required {
            let placeholder = format!("{{{name}}}");
            if out.contains(&placeholder) {
                continue;
            }
            if !separated {
                out.push('\n');
                separated = true;
            }
            out.push_str(&format!("\n{}: {placeholder}", label(name)));
        }
        out
    }

    pub(crate) fn check(&self, prompt: &str) -> Result<(), ProposalFailure> {
        let missing: Vec<String> = self
            .required
            .iter()
            .filter(|name| !prompt.contains(&format!("{{{name}}}")))
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(ProposalFailure::MissingPlaceholders { missing });
        }
        let unknown: Vec<String> = braced_names(prompt)
            .into_iter()
            .filter(|name| !self.allowed.contains(name))
            .collect();
        if !unknown.is_empty() {
            return Err(ProposalFailure::UnknownPlaceholders { unknown });
        }
        Ok(())
    }
}

/// An input's name as a field label: `review_text` → `Review text`.
fn label(name: &str) -> String {
    let spaced = name.replace('_', " ");
    let mut chars = spaced.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => spaced,
    }
}

/// Names written as `{identifier}`. Braces around anything else (JSON, prose) are not
/// placeholders.
fn braced_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find(['{', '}']) else {
            break;
        };
        let candidate = &rest[..close];
        let is_identifier = candidate
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && candidate
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_');
        if rest[close..].starts_with('}') && is_identifier {
            names.insert(candidate.to_string());
        }
    }
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placeholders(seed: &str) -> Placeholders {
        Placeholders::new(seed, &["question".to_string(), "context".to_string()])
    }

    #[test]
    fn requires_only_the_inputs_the_seed_uses() {
        let placeholders = placeholders("Answer {question} briefly.");
        assert_eq!(placeholders.required(), ["question"]);
        assert_eq!(placeholders.check("Think, then answer {question}."), Ok(()));
        assert_eq!(
            placeholders.check("Use {context} and {question}."),
            Ok(()),
            "an input the seed left out may be added"
        );
    }

    #[test]
    fn a_dropped_input_is_appended_as_a_field() {
        let placeholders = placeholders("Given {context}, answer {question}.");
        assert_eq!(
            placeholders.complete("Answer well, using {context}.\n"),
            "Answer well, using {context}.\n\nQuestion: {question}"
        );
        assert_eq!(
            placeholders.complete("Answer {question} from {context}."),
            "Answer {question} from {context}.",
            "a child that kept its inputs is unchanged"
        );
        let completed = placeholders.complete("Be brief.");
        assert_eq!(
            completed,
            "Be brief.\n\nQuestion: {question}\nContext: {context}"
        );
        assert_eq!(placeholders.check(&completed), Ok(()));
        assert_eq!(label("review_text"), "Review text");
    }

    #[test]
    fn a_child_that_drops_a_placeholder_is_rejected() {
        let placeholders = placeholders("Given {context}, answer {question}.");
        assert_eq!(
            placeholders.check("Answer the question."),
            Err(ProposalFailure::MissingPlaceholders {
                missing: vec!["question".into(), "context".into()]
            })
        );
    }

    #[test]
    fn a_child_that_invents_a_placeholder_is_rejected_but_json_is_not_a_placeholder() {
        let placeholders = placeholders("Answer {question}. Reply as {\"answer\": \"...\"}.");
        assert_eq!(
            placeholders.check("Answer {question} with {answer_format}."),
            Err(ProposalFailure::UnknownPlaceholders {
                unknown: vec!["answer_format".into()]
            })
        );
        assert_eq!(
            placeholders.check("Answer {question}. Reply as {\"answer\": \"x\"} or {}."),
            Ok(())
        );
    }

    #[test]
    fn braces_the_seed_already_had_stay_allowed() {
        let placeholders = placeholders("Answer {question} in {style}.");
        assert_eq!(placeholders.required(), ["question"]);
        assert_eq!(
            placeholders.check("Answer {question} in {style}, briefly."),
            Ok(())
        );
    }

    #[test]
    fn finds_identifiers_in_braces_only() {
        let names = braced_names("{a} {{b}} {c d} {_e1} {1f} {g");
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            vec!["_e1".to_string(), "a".into(), "b".into()]
        );
    }
}
