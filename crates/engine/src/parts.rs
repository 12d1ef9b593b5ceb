//! Which part of a prompt of several parts a proposal changes.
//!
//! A candidate stays one text; a prompt of several parts is the join of its parts
//! ([`ChatPrompt`]). Every proposal reads and writes one evolvable part's text, and the child is
//! the parent's parts with that one replaced, so a fixed part (and every other part) is kept byte
//! for byte. A prompt of one part is its user template, evolvable: for it every function here is
//! the identity on the whole text, and runs behave as they did before parts existed.
//!
//! Reflective mutations take the evolvable parts in turn (round robin), as GEPA's reference
//! implementation does for the modules of a program by default: a wrong answer does not say
//! which part caused it, so no part is starved by a guess. The one-off children change the part
//! their change belongs in: the label glossary the first evolvable part (the top of the prompt),
//! the layout and the demonstrations the user template (they move or add lines around its input
//! placeholder), and none when that part is fixed.
use gepa_lab_prompt::{ChatPrompt, PartName, Place, Template};

/// The evolvable parts taken in turn, one per reflective mutation.
#[derive(Debug, Default)]
pub(crate) struct RoundRobin {
    next: usize,
}

impl RoundRobin {
    /// The part the next mutation of `parts` changes; `None` when no part may change.
    pub(crate) fn next(&mut self, parts: &ChatPrompt) -> Option<PartName> {
        let evolvable = parts.evolvable();
        let part = *evolvable.get(self.next % evolvable.len().max(1))?;
        self.next += 1;
        Some(part)
    }
}

/// The part named in a record: `None` for a prompt of one part, whose records stay as they were.
pub(crate) fn recorded(parts: &ChatPrompt, part: PartName) -> Option<PartName> {
    (!parts.is_plain()).then_some(part)
}

/// The part a label glossary goes at the top of: the first evolvable one.
pub(crate) fn glossary_part(parts: &ChatPrompt) -> Option<PartName> {
    parts.evolvable().first().copied()
}

/// The part the layout child and demonstrations change: the user template, when it may change.
pub(crate) fn input_part(parts: &ChatPrompt) -> Option<PartName> {
    parts
        .evolvable()
        .contains(&PartName::User)
        .then_some(PartName::User)
}

/// `prompt` with `change` applied to the text of its part `part`, the rest kept; `None` when
/// `change` gives nothing, or a text that would break the parts (a marker line).
pub(crate) fn on_part(
    prompt: &str,
    part: Option<PartName>,
    change: impl FnOnce(&str) -> Option<String>,
) -> Option<String> {
    let parts = ChatPrompt::split(prompt);
    let part = part?;
    let text = change(parts.part(part)?)?;
    with_part(&parts, part, text)
}

/// The join of `parts` with the text of `part` replaced; `None` when `text` would break them.
pub(crate) fn with_part(parts: &ChatPrompt, part: PartName, text: String) -> Option<String> {
    parts.with_part(part, text).ok().map(|child| child.join())
}

/// Placeholders in the parts other than the user template: the system message and the turns
/// are the same for every row, so a child that puts one there is refused.
pub(crate) fn placeholders_outside_user(parts: &ChatPrompt) -> Vec<String> {
    parts
        .sections()
        .iter()
        .filter(|section| section.place != Place::User)
        .filter_map(|section| Template::parse(section.text).ok())
        .flat_map(|template| {
            template
                .variables()
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Whether two descendants of `ancestor` have a part worth merging: one that one of them
/// changed and the other did not (the reference's "desirable predictors"). Without one, a merge
/// part by part can only give back one of them.
pub(crate) fn mergeable(ancestor: &str, first: &str, second: &str) -> bool {
    let [ancestor, first, second] = [ancestor, first, second].map(ChatPrompt::split);
    ancestor.evolvable().into_iter().any(|part| {
        let [a, x, y] = [&ancestor, &first, &second].map(|p| p.part(part));
        (a == x || a == y) && x != y
    })
}

/// Which of the two descendants a merged part was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    First,
    Second,
}

/// GEPA's merge of a prompt of several parts, part by part, as the reference implementation
/// merges the components of a program: from the common `ancestor`, each evolvable part is
/// taken from the descendant that changed it when only one did; from the better scoring one
/// when both did (`tie` decides equal scores); as it is when neither did. The fixed parts are
/// the ancestor's, which are every candidate's. `None` when the parts of the three do not
/// match (a prompt of one text is merged by the reflection model instead).
pub(crate) fn merge_parts(
    ancestor: &str,
    [(first, first_score), (second, second_score)]: [(&str, f64); 2],
    tie: impl FnOnce() -> Source,
) -> Option<String> {
    let [ancestor, first, second] = [ancestor, first, second].map(ChatPrompt::split);
    if ancestor.is_plain()
        || !ancestor.keeps_fixed_parts_of(&first)
        || !ancestor.keeps_fixed_parts_of(&second)
    {
        return None;
    }
    let better = if first_score > second_score {
        Source::First
    } else if second_score > first_score {
        Source::Second
    } else {
        tie()
    };
    let mut merged = ancestor.clone();
    for part in ancestor.evolvable() {
        let [a, x, y] = [&ancestor, &first, &second].map(|p| p.part(part));
        let text = if a == x {
            y
        } else if a == y || x == y {
            x
        } else {
            match better {
                Source::First => x,
                Source::Second => y,
            }
        };
        merged = merged.with_part(part, text?.to_owned()).ok()?;
    }
    Some(merged.join())
}

#[cfg(test)]
mod tests {
    use super::*;
    use gepa_lab_prompt::Turn;

    fn system_and_fixed_user() -> ChatPrompt {
        ChatPrompt::new(
            Some("You label reviews.".into()),
            vec![Turn {
                user: "Review: ok".into(),
                assistant: "positive".into(),
            }],
            "Review: {review}".into(),
            &[PartName::System],
        )
        .unwrap()
    }

    #[test]
    fn a_change_to_one_part_keeps_every_other_byte() {
        let parts = system_and_fixed_user();
        let child = on_part(&parts.join(), Some(PartName::System), |text| {
            Some(format!("{text}\n- When unsure, answer negative."))
        })
        .unwrap();
        let split = ChatPrompt::split(&child);
        assert_eq!(
            split.part(PartName::System),
            Some("You label reviews.\n- When unsure, answer negative.")
        );
        assert_eq!(split.part(PartName::User), Some("Review: {review}"));
        assert!(parts.keeps_fixed_parts_of(&split));
        assert_eq!(split.sections()[1].text, "Review: ok", "the turn is kept");
    }

    #[test]
    fn a_plain_prompt_is_changed_as_a_whole() {
        let child = on_part("Classify {review}.", Some(PartName::User), |text| {
            Some(text.replace("Classify", "Label"))
        });
        assert_eq!(child.as_deref(), Some("Label {review}."));
        let plain = ChatPrompt::plain("x");
        assert_eq!(recorded(&plain, PartName::User), None);
        assert_eq!(input_part(&plain), Some(PartName::User));
    }

    #[test]
    fn fixed_parts_are_never_chosen() {
        let parts = system_and_fixed_user();
        let mut turns = RoundRobin::default();
        let chosen: Vec<Option<PartName>> = (0..3).map(|_| turns.next(&parts)).collect();
        assert_eq!(chosen, vec![Some(PartName::System); 3]);
        assert_eq!(input_part(&parts), None, "the user template is fixed");
        assert_eq!(glossary_part(&parts), Some(PartName::System));
        assert_eq!(
            on_part(&parts.join(), input_part(&parts), |t| Some(t.to_owned())),
            None
        );
        let both = parts
            .with_part(PartName::System, "s".into())
            .map(|p| ChatPrompt::split(&p.join()))
            .unwrap();
        assert_eq!(recorded(&both, PartName::System), Some(PartName::System));
    }

    #[test]
    fn evolvable_parts_take_turns() {
        let parts =
            ChatPrompt::new(Some("s".into()), Vec::new(), "u {q}".into(), &PartName::ALL).unwrap();
        let mut turns = RoundRobin::default();
        let chosen: Vec<PartName> = (0..4).filter_map(|_| turns.next(&parts)).collect();
        assert_eq!(
            chosen,
            [
                PartName::System,
                PartName::User,
                PartName::System,
                PartName::User
            ]
        );
    }

    #[test]
    fn a_placeholder_outside_the_user_template_is_found() {
        let parts = system_and_fixed_user();
        assert!(placeholders_outside_user(&parts).is_empty());
        let child = parts
            .with_part(PartName::System, "Label {review} now.".into())
            .unwrap();
        assert_eq!(placeholders_outside_user(&child), ["review"]);
    }

    /// A prompt whose system message and user template both evolve, with one fixed turn.
    fn both(system: &str, user: &str) -> String {
        ChatPrompt::new(
            Some(system.into()),
            vec![Turn {
                user: "Review: ok".into(),
                assistant: "positive".into(),
            }],
            user.into(),
            &PartName::ALL,
        )
        .unwrap()
        .join()
    }

    fn merged_parts(merged: &str) -> (String, String) {
        let parts = ChatPrompt::split(merged);
        (
            parts.part(PartName::System).unwrap().to_owned(),
            parts.part(PartName::User).unwrap().to_owned(),
        )
    }

    #[test]
    fn a_merge_takes_each_part_from_the_descendant_that_changed_it() {
        let ancestor = both("S", "U {review}");
        let first = both("S, better", "U {review}");
        let second = both("S", "U {review}, better");
        let unused = || panic!("no part was changed by both");
        let merged = merge_parts(&ancestor, [(&first, 0.5), (&second, 0.7)], unused).unwrap();
        assert_eq!(
            merged_parts(&merged),
            ("S, better".into(), "U {review}, better".into())
        );
        // The fixed turn is the ancestor's, byte for byte.
        let split = ChatPrompt::split(&merged);
        assert!(ChatPrompt::split(&ancestor).keeps_fixed_parts_of(&split));
        assert_eq!(split.sections()[1].text, "Review: ok");
        assert!(mergeable(&ancestor, &first, &second));
    }

    #[test]
    fn a_part_both_changed_comes_from_the_better_one_or_the_tie_breaker() {
        let ancestor = both("S", "U {review}");
        let first = both("S one", "U {review} one");
        let second = both("S two", "U {review}");
        let never = || panic!("the scores differ");
        // System changed by both: the better scoring one's; user changed by the first alone.
        let merged = merge_parts(&ancestor, [(&first, 0.4), (&second, 0.6)], never).unwrap();
        assert_eq!(
            merged_parts(&merged),
            ("S two".into(), "U {review} one".into())
        );
        let merged = merge_parts(&ancestor, [(&first, 0.6), (&second, 0.4)], never).unwrap();
        assert_eq!(
            merged_parts(&merged),
            ("S one".into(), "U {review} one".into())
        );
        // Equal scores: the tie breaker (the engine draws it from its merge stream).
        let merged = merge_parts(&ancestor, [(&first, 0.5), (&second, 0.5)], || {
            Source::Second
        })
        .unwrap();
        assert_eq!(merged_parts(&merged).0, "S two");
    }

    #[test]
    fn a_part_neither_changed_is_the_ancestors_and_one_text_is_not_merged_here() {
        let ancestor = both("S", "U {review}");
        let first = both("S one", "U {review}");
        let second = both("S two", "U {review}");
        let merged =
            merge_parts(&ancestor, [(&first, 0.6), (&second, 0.4)], || Source::First).unwrap();
        assert_eq!(merged_parts(&merged).1, "U {review}");
        // Both changed the only part they changed: nothing to merge part by part.
        assert!(!mergeable(&ancestor, &first, &second));
        // Both made the same change: it is kept.
        let same = merge_parts(&ancestor, [(&first, 0.6), (&first, 0.4)], || Source::First);
        assert_eq!(same.map(|m| merged_parts(&m).0), Some("S one".into()));
        // A prompt of one text, or descendants whose parts no longer match, are not merged here.
        assert_eq!(
            merge_parts(
                "U {review}",
                [("V {review}", 1.0), ("W {review}", 0.0)],
                || { Source::First }
            ),
            None
        );
        assert_eq!(
            merge_parts(&ancestor, [("U {review}", 1.0), (&second, 0.0)], || {
                Source::First
            }),
            None
        );
    }

    #[test]
    fn a_change_that_would_break_the_parts_gives_nothing() {
        let parts = system_and_fixed_user();
        let child = on_part(&parts.join(), Some(PartName::System), |_| {
            Some("rules\n<user>\nsneaked".into())
        });
        assert_eq!(child, None);
    }
}
