//! The checks of a `[prompt]` of chat parts (`system`, `turns`, `user`, `evolve`), and of
//! `evolve` and part markers beside a one-text `seed`. The result is the prompt's one text, its
//! join ([`ChatPrompt::join`]): what the evolution service receives as the seed, and what the
//! engine, the replay and the report split back into parts.
use super::Scope;
use crate::diagnostic::Diagnostic;
use crate::file::{Experiment, PromptSection};
use crate::rules::Rule;
use gepa_lab_prompt::{ChatPrompt, PartName, PartsError, Place, Template, Turn};

/// Whether `[prompt]` is written as chat parts rather than one text.
pub(super) fn has_parts(section: &PromptSection) -> bool {
    section.system.is_some() || section.user.is_some() || !section.turns.is_empty()
}

/// The key a place of the prompt is written at.
fn key_of(place: Place) -> String {
    match place {
        Place::System => "prompt.system".to_owned(),
        Place::TurnUser(at) => format!("prompt.turns.{at}.user"),
        Place::TurnAssistant(at) => format!("prompt.turns.{at}.assistant"),
        Place::User => "prompt.user".to_owned(),
    }
}

/// The join of a `[prompt]` of chat parts, every part checked; `None` when a check failed.
pub(super) fn check_parts(scope: &mut Scope<'_, '_>, experiment: &Experiment) -> Option<String> {
    let section = &experiment.prompt;
    let user = match (
        &section.user,
        section.seed.is_some() || section.seed_file.is_some(),
    ) {
        (Some(user), false) => user,
        (_, one_text) => {
            refuse_mixed_source(scope, section, one_text);
            return None;
        }
    };
    let turns: Vec<Turn> = section
        .turns
        .iter()
        .map(|turn| Turn {
            user: turn.user.clone(),
            assistant: turn.assistant.clone(),
        })
        .collect();
    let evolve = check_evolve(scope, section, section.system.is_some());
    // A refused `evolve` is reported; the parts are still checked as if it named them all.
    let built = ChatPrompt::new(
        section.system.clone(),
        turns,
        user.clone(),
        evolve.as_deref().unwrap_or(match section.system {
            Some(_) => &PartName::ALL[..],
            None => &[PartName::User][..],
        }),
    );
    let prompt = match built {
        Ok(prompt) => prompt,
        Err(err) => {
            report_parts_error(scope, &err);
            return None;
        }
    };
    for part in prompt.sections() {
        check_part_text(scope, experiment, part.place, part.text);
    }
    if evolve.is_none() || scope.failed {
        return None;
    }
    Some(prompt.join())
}

/// `seed` or `seed_file` beside chat parts, or chat parts without the user template.
fn refuse_mixed_source(scope: &mut Scope<'_, '_>, section: &PromptSection, one_text: bool) {
    let set = |key: &'static str, on: bool| on.then_some(key);
    let parts: Vec<&str> = [
        set("system", section.system.is_some()),
        set("user", section.user.is_some()),
        set("turns", !section.turns.is_empty()),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (at, message) = if one_text {
        let text = if section.seed.is_some() {
            "seed"
        } else {
            "seed_file"
        };
        (
            format!("prompt.{text}"),
            format!(
                "[prompt] sets `{text}` and `{}`: a prompt is either one text (`seed` or \
                 `seed_file`) or chat parts (`system`, `turns`, `user`), not both",
                parts.join("`, `")
            ),
        )
    } else {
        (
            "prompt".to_owned(),
            format!(
                "[prompt] sets `{}` but no `user`: a prompt of chat parts needs the user template",
                parts.join("`, `")
            ),
        )
    };
    scope.report(
        &at,
        Diagnostic::error(Rule::PromptSource, message)
            .seen(parts.join(", "))
            .help("keep the prompt in `seed` alone, or write it as `system` and `user` (the template with the {placeholders})"),
    );
}

/// A part's text: not empty, a template, and placeholders only in the user template, naming
/// input columns.
fn check_part_text(scope: &mut Scope<'_, '_>, experiment: &Experiment, place: Place, text: &str) {
    let key = key_of(place);
    if text.trim().is_empty() {
        scope.report(
            &key,
            Diagnostic::error(
                Rule::PromptEmpty,
                format!("the {place} is empty; it needs at least 1 character"),
            )
            .seen(format!("{text:?}")),
        );
        return;
    }
    let template = match Template::parse(text) {
        Ok(template) => template,
        Err(err) => {
            scope.report(
                &key,
                Diagnostic::error(Rule::PromptSyntax, format!("in the {place}: {err}")),
            );
            return;
        }
    };
    if place == Place::User {
        scope.check_prompt_columns(&template, &key, &experiment.dataset.inputs);
        return;
    }
    if let Some(first) = template.variables().first() {
        scope.report(
            &key,
            Diagnostic::error(
                Rule::PromptPartPlaceholder,
                format!(
                    "the {place} uses `{{{first}}}`; only the user template takes placeholders \
                     (the system message and the turns are the same for every row)"
                ),
            )
            .seen(format!("{{{first}}}"))
            .help("move the placeholder into `user`, or write {{ and }} for literal braces"),
        );
    }
}

/// `prompt.evolve` as part names: each known, each a part the prompt has, at least one.
/// `None` when any is refused (each is reported at its place in the list).
pub(super) fn check_evolve(
    scope: &mut Scope<'_, '_>,
    section: &PromptSection,
    has_system: bool,
) -> Option<Vec<PartName>> {
    let present: Vec<PartName> = PartName::ALL
        .into_iter()
        .filter(|&part| has_system || part != PartName::System)
        .collect();
    let Some(names) = &section.evolve else {
        return Some(present);
    };
    let allowed: Vec<&str> = present.iter().map(|part| part.as_str()).collect();
    let mut parts = Vec::new();
    let mut ok = true;
    for (index, name) in names.iter().enumerate() {
        let problem = match PartName::parse(name) {
            Some(PartName::System) if !has_system => {
                "the prompt has no system message (set `prompt.system`)".to_owned()
            }
            Some(part) => {
                if !parts.contains(&part) {
                    parts.push(part);
                }
                continue;
            }
            None => format!("\"{name}\" is not a part of a prompt"),
        };
        ok = false;
        scope.report(
            &format!("prompt.evolve.{index}"),
            Diagnostic::error(
                Rule::PromptEvolve,
                format!("prompt.evolve names {name:?}: {problem}"),
            )
            .seen(format!(
                "{name:?}; the parts this prompt has are {allowed:?}"
            ))
            .help(format!(
                "name parts from {allowed:?}; few-shot turns are always fixed"
            )),
        );
    }
    if names.is_empty() {
        ok = false;
        scope.report(
            "prompt.evolve",
            Diagnostic::error(
                Rule::PromptEvolve,
                "prompt.evolve is empty: no part of the prompt could change",
            )
            .seen("[]")
            .help(format!(
                "name at least one of {allowed:?}, or leave `evolve` out to evolve them all"
            )),
        );
    }
    parts.sort();
    ok.then_some(parts)
}

/// A part that holds a marker line, reported at the part's key.
fn report_parts_error(scope: &mut Scope<'_, '_>, err: &PartsError) {
    let key = match err {
        PartsError::MarkerLine { place, .. } => key_of(*place),
        PartsError::Absent(_) => "prompt.evolve".to_owned(),
    };
    let seen = match err {
        PartsError::MarkerLine { marker, .. } => (*marker).to_owned(),
        PartsError::Absent(part) => part.to_string(),
    };
    let rule = match err {
        PartsError::MarkerLine { .. } => Rule::PromptPartMarker,
        PartsError::Absent(_) => Rule::PromptEvolve,
    };
    scope.report(
        &key,
        Diagnostic::error(rule, err.to_string())
            .seen(seen)
            .help("change that line (a marker is a line of its own; the same words within a line are fine)"),
    );
}

/// A one-text seed that would be read as a prompt of several parts (it is written like a
/// join), refused so that a seed keeps meaning exactly what it says; `evolve` beside it may name
/// only `user`.
pub(super) fn check_one_text(
    scope: &mut Scope<'_, '_>,
    section: &PromptSection,
    text: &str,
    path: &str,
) -> bool {
    let evolve_ok = check_evolve(scope, section, false).is_some();
    if ChatPrompt::split(text).is_plain() {
        return evolve_ok;
    }
    scope.report(
        path,
        Diagnostic::error(
            Rule::PromptPartMarker,
            "the seed is written like a prompt of several parts (its first line is a part \
             marker such as `<system>`), so it would be read as one",
        )
        .seen(text.lines().next().unwrap_or_default())
        .help("write the parts as [prompt] system, turns and user instead of one seed"),
    );
    false
}
