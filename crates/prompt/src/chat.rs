//! Prompts of several parts: a system message, fixed few-shot turns and the user template, each
//! part marked evolvable or fixed, and the one text that carries them.
//!
//! Everything that stores, sends or compares a prompt (the engine's candidates, the evolution
//! service's one seed string, the run record, `compare`'s prompt files) keeps a text. A prompt of
//! several parts is written as one text by [`ChatPrompt::join`]: each part under a marker line
//! (`<system>`, `<turn user>`, `<turn assistant>`, `<user>`; `fixed` after the name of a part that
//! may not change: `<system fixed>`, `<user fixed>`), parts separated by a blank line.
//! [`ChatPrompt::split`] reads it back: for every prompt `p` built by [`ChatPrompt::new`],
//! `split(join(p)) == p`, and for every text `t`, `join(split(t)) == t`. A text that is not such a
//! join (every prompt of one part, every prompt written before parts existed) is the user
//! template alone, evolvable: its join is the text itself, so nothing changes for it.
//!
//! This module knows nothing of datasets or models: [`ChatTemplate`] renders the parts with a
//! row's values as [`Message`]s that the caller turns into chat messages.
use std::fmt;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{MissingVariable, Template, TemplateError};

/// A part of a prompt that may evolve: the system message or the user template. Few-shot turns
/// are always fixed, so they have no name here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PartName {
    System,
    User,
}

impl PartName {
    /// Every part name, in the order the parts stand in a prompt.
    pub const ALL: [PartName; 2] = [PartName::System, PartName::User];

    /// The name as written in `prompt.evolve` and in the records: `system`, `user`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
        }
    }

    /// The part named `name` (`system` or `user`), if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|part| part.as_str() == name)
    }
}

impl fmt::Display for PartName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One fixed few-shot exchange: what the user said and what the assistant answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub user: String,
    pub assistant: String,
}

/// Who says a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    System,
    User,
    Assistant,
}

/// One rendered chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub role: Role,
    pub text: String,
}

/// Where a part stands, for people: the report's per-part diff and error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    System,
    /// The user side of the few-shot turn at this index (from 0).
    TurnUser(usize),
    /// The assistant side of the few-shot turn at this index (from 0).
    TurnAssistant(usize),
    User,
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::System => f.write_str("system message"),
            Self::TurnUser(at) => write!(f, "turn {} (user)", at + 1),
            Self::TurnAssistant(at) => write!(f, "turn {} (assistant)", at + 1),
            Self::User => f.write_str("user template"),
        }
    }
}

/// One part of a prompt with its place, its text and whether it may evolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Section<'a> {
    pub place: Place,
    pub text: &'a str,
    pub fixed: bool,
}

/// Why a prompt of several parts cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PartsError {
    /// A part holds a line that is one of the marker lines, which would split it in two.
    #[error(
        "line {line} of the {place} is `{marker}`, the line that begins a part of the prompt; a part may not hold it"
    )]
    MarkerLine {
        place: Place,
        line: usize,
        marker: &'static str,
    },
    /// `evolve` names a part the prompt does not have.
    #[error("the prompt has no {0} part to evolve")]
    Absent(PartName),
}

const SYSTEM: &str = "<system>";
const SYSTEM_FIXED: &str = "<system fixed>";
const TURN_USER: &str = "<turn user>";
const TURN_ASSISTANT: &str = "<turn assistant>";
const USER: &str = "<user>";
const USER_FIXED: &str = "<user fixed>";
/// Every marker line.
pub const MARKERS: [&str; 6] = [
    SYSTEM,
    SYSTEM_FIXED,
    TURN_USER,
    TURN_ASSISTANT,
    USER,
    USER_FIXED,
];
/// Between one part's text and the next part's marker line.
const SEPARATOR: &str = "\n\n";

/// A prompt as chat parts: an optional system message, fixed few-shot turns, the user template,
/// and which of the system message and the user template may evolve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatPrompt {
    system: Option<String>,
    turns: Vec<Turn>,
    user: String,
    system_fixed: bool,
    user_fixed: bool,
}

impl ChatPrompt {
    /// A prompt of parts; `evolve` lists the parts that may change (the others are fixed). Every
    /// part is checked for marker lines, so that the join splits back into the same parts.
    pub fn new(
        system: Option<String>,
        turns: Vec<Turn>,
        user: String,
        evolve: &[PartName],
    ) -> Result<Self, PartsError> {
        if system.is_none() && evolve.contains(&PartName::System) {
            return Err(PartsError::Absent(PartName::System));
        }
        let prompt = Self {
            system_fixed: !evolve.contains(&PartName::System),
            user_fixed: !evolve.contains(&PartName::User),
            system,
            turns,
            user,
        };
        for section in prompt.sections() {
            check_markers(section.place, section.text)?;
        }
        Ok(prompt)
    }

    /// A prompt of one part: the user template, evolvable. Its join is `text` itself.
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            system: None,
            turns: Vec::new(),
            user: text.into(),
            system_fixed: true,
            user_fixed: false,
        }
    }

    /// Whether this is a prompt of one evolvable part, which joins to its text with no marker.
    pub fn is_plain(&self) -> bool {
        self.system.is_none() && self.turns.is_empty() && !self.user_fixed
    }

    /// The one text of the prompt (see the module's documentation).
    pub fn join(&self) -> String {
        if self.is_plain() {
            return self.user.clone();
        }
        let mut out = String::new();
        let mut push = |marker: &str, text: &str| {
            if !out.is_empty() {
                out.push_str(SEPARATOR);
            }
            out.push_str(marker);
            out.push('\n');
            out.push_str(text);
        };
        if let Some(system) = &self.system {
            push(
                if self.system_fixed {
                    SYSTEM_FIXED
                } else {
                    SYSTEM
                },
                system,
            );
        }
        for turn in &self.turns {
            push(TURN_USER, &turn.user);
            push(TURN_ASSISTANT, &turn.assistant);
        }
        push(if self.user_fixed { USER_FIXED } else { USER }, &self.user);
        out
    }

    /// The parts `text` holds: those of a join, else `text` as the user template alone.
    pub fn split(text: &str) -> Self {
        parse_join(text)
            .filter(|prompt| !prompt.is_plain())
            .unwrap_or_else(|| Self::plain(text))
    }

    /// The parts that may evolve, in prompt order.
    pub fn evolvable(&self) -> Vec<PartName> {
        let mut parts = Vec::new();
        if self.system.is_some() && !self.system_fixed {
            parts.push(PartName::System);
        }
        if !self.user_fixed {
            parts.push(PartName::User);
        }
        parts
    }

    /// The text of a part; `None` for a system message the prompt does not have.
    pub fn part(&self, name: PartName) -> Option<&str> {
        match name {
            PartName::System => self.system.as_deref(),
            PartName::User => Some(&self.user),
        }
    }

    /// This prompt with the text of part `name` replaced; the other parts are kept byte for
    /// byte. Refused when the new text holds a marker line, or the prompt has no such part.
    pub fn with_part(&self, name: PartName, text: String) -> Result<Self, PartsError> {
        let place = match name {
            PartName::System if self.system.is_none() => {
                return Err(PartsError::Absent(name));
            }
            PartName::System => Place::System,
            PartName::User => Place::User,
        };
        check_markers(place, &text)?;
        let mut out = self.clone();
        match name {
            PartName::System => out.system = Some(text),
            PartName::User => out.user = text,
        }
        Ok(out)
    }

    /// Whether `other` has the same parts in the same places, each fixed part with the same text:
    /// what a child of this prompt must keep.
    pub fn keeps_fixed_parts_of(&self, other: &ChatPrompt) -> bool {
        let (mine, theirs) = (self.sections(), other.sections());
        mine.len() == theirs.len()
            && mine.iter().zip(&theirs).all(|(a, b)| {
                a.place == b.place && a.fixed == b.fixed && (!a.fixed || a.text == b.text)
            })
    }

    /// The parts that differ between this prompt and `other` (which has the same places).
    pub fn changed_parts(&self, other: &ChatPrompt) -> Vec<PartName> {
        PartName::ALL
            .into_iter()
            .filter(|&name| self.part(name) != other.part(name))
            .collect()
    }

    /// Every part in prompt order: the system message, each turn's user and assistant side, the
    /// user template.
    pub fn sections(&self) -> Vec<Section<'_>> {
        let mut out = Vec::new();
        if let Some(system) = &self.system {
            out.push(Section {
                place: Place::System,
                text: system,
                fixed: self.system_fixed,
            });
        }
        for (at, turn) in self.turns.iter().enumerate() {
            out.push(Section {
                place: Place::TurnUser(at),
                text: &turn.user,
                fixed: true,
            });
            out.push(Section {
                place: Place::TurnAssistant(at),
                text: &turn.assistant,
                fixed: true,
            });
        }
        out.push(Section {
            place: Place::User,
            text: &self.user,
            fixed: self.user_fixed,
        });
        out
    }
}

fn check_markers(place: Place, text: &str) -> Result<(), PartsError> {
    for (index, line) in text.split('\n').enumerate() {
        if let Some(marker) = MARKERS.into_iter().find(|marker| *marker == line) {
            return Err(PartsError::MarkerLine {
                place,
                line: index + 1,
                marker,
            });
        }
    }
    Ok(())
}

/// The marker lines of `text` with their byte offsets: the start of the line and of the text
/// after it (past the end of `text` for a last line with no newline).
fn marker_lines(text: &str) -> Vec<(&'static str, usize, usize)> {
    let mut out = Vec::new();
    let mut start = 0;
    for line in text.split('\n') {
        if let Some(marker) = MARKERS.into_iter().find(|marker| *marker == line) {
            out.push((marker, start, start + line.len() + 1));
        }
        start += line.len() + 1;
    }
    out
}

/// The parts of a join, in the one order a join writes them; `None` for any other text.
fn parse_join(text: &str) -> Option<ChatPrompt> {
    let markers = marker_lines(text);
    if markers.first().is_none_or(|&(_, start, _)| start != 0) {
        return None;
    }
    // Each part's text runs from after its marker line to the separator before the next one.
    let mut parts: Vec<(&'static str, &str)> = Vec::new();
    for (index, &(marker, _, body)) in markers.iter().enumerate() {
        let end = match markers.get(index + 1) {
            Some(&(_, next, _)) => {
                let end = next.checked_sub(SEPARATOR.len())?;
                // Bytes, not a slice of the text: `end` may fall inside a character.
                (end >= body && text.as_bytes()[end..next] == *SEPARATOR.as_bytes())
                    .then_some(end)?
            }
            None => text.len(),
        };
        // A marker as the text's last line, with no newline after it, is no join.
        parts.push((marker, text.get(body..end)?));
    }
    let mut parts = parts.into_iter().peekable();
    let mut evolve = Vec::new();
    let system = match parts.peek() {
        Some(&(marker, text)) if marker == SYSTEM || marker == SYSTEM_FIXED => {
            parts.next();
            if marker == SYSTEM {
                evolve.push(PartName::System);
            }
            Some(text.to_owned())
        }
        _ => None,
    };
    let mut turns = Vec::new();
    while parts.peek().is_some_and(|&(marker, _)| marker == TURN_USER) {
        let (_, user) = parts.next()?;
        let (marker, assistant) = parts.next()?;
        if marker != TURN_ASSISTANT {
            return None;
        }
        turns.push(Turn {
            user: user.to_owned(),
            assistant: assistant.to_owned(),
        });
    }
    let (marker, user) = parts.next()?;
    if parts.next().is_some() || (marker != USER && marker != USER_FIXED) {
        return None;
    }
    if marker == USER {
        evolve.push(PartName::User);
    }
    ChatPrompt::new(system, turns, user.to_owned(), &evolve).ok()
}

/// A prompt parsed for rendering: each part a [`Template`], in the order its messages are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatTemplate {
    messages: Vec<(Role, Template)>,
}

impl ChatTemplate {
    /// Parses every part of the prompt `text` (a join, or a plain template). A syntax error's
    /// line is counted in `text` as a whole.
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let prompt = ChatPrompt::split(text);
        if prompt.is_plain() {
            return Ok(Self {
                messages: vec![(Role::User, Template::parse(text)?)],
            });
        }
        let mut messages = Vec::new();
        // The line of `text` each part starts on: after its marker line, and the blank line
        // between parts.
        let mut line = 2;
        for section in prompt.sections() {
            let role = match section.place {
                Place::System => Role::System,
                Place::TurnAssistant(_) => Role::Assistant,
                Place::TurnUser(_) | Place::User => Role::User,
            };
            let chars: usize = text
                .split('\n')
                .take(line - 1)
                .map(|before| before.chars().count() + 1)
                .sum();
            let template =
                Template::parse(section.text).map_err(|err| err.shifted(line - 1, chars))?;
            messages.push((role, template));
            line += section.text.split('\n').count() + 2;
        }
        Ok(Self { messages })
    }

    /// The chat messages for one row: each part with its placeholders filled by `lookup`.
    pub fn render<'a>(
        &self,
        lookup: impl Fn(&str) -> Option<&'a str>,
    ) -> Result<Vec<Message>, MissingVariable> {
        self.messages
            .iter()
            .map(|(role, template)| {
                Ok(Message {
                    role: *role,
                    text: template.render(&lookup)?,
                })
            })
            .collect()
    }

    /// Placeholder names of every part, in order of first appearance, each once.
    pub fn variables(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for (_, template) in &self.messages {
            for name in template.variables() {
                if !out.contains(&name) {
                    out.push(name);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three_parts() -> ChatPrompt {
        ChatPrompt::new(
            Some("You label reviews.\n\nBe brief.".into()),
            vec![Turn {
                user: "Review: fine".into(),
                assistant: "positive".into(),
            }],
            "Review: {review}\n".into(),
            &[PartName::System],
        )
        .unwrap()
    }

    #[test]
    fn a_join_is_documented_and_splits_back_into_the_same_parts() {
        let prompt = three_parts();
        let joined = prompt.join();
        assert_eq!(
            joined,
            "<system>\nYou label reviews.\n\nBe brief.\n\n<turn user>\nReview: fine\n\n\
             <turn assistant>\npositive\n\n<user fixed>\nReview: {review}\n"
        );
        assert_eq!(ChatPrompt::split(&joined), prompt);
        assert_eq!(prompt.evolvable(), vec![PartName::System]);
    }

    #[test]
    fn split_then_join_gives_back_any_text() {
        for text in [
            "Classify {review}.",
            "",
            "<system>\nno user part",
            "<user>\nalone and evolvable reads as plain",
            "<system>\nA\n<user>\nno blank line before the marker",
            "<user fixed>\n",
            "<user fixed>",
            "<system>\n\n\n<user>\n\n",
            "text\n<system>\nmarker not first",
            "<turn user>\nq\n\n<user>\nan unpaired turn",
            "<system>\né\n<user>\na character before the marker",
        ] {
            assert_eq!(ChatPrompt::split(text).join(), text, "{text:?}");
        }
    }

    #[test]
    fn empty_and_newline_edged_parts_round_trip() {
        for (system, user) in [("", ""), ("\n", "\n\n"), ("a\n\n", "\nb")] {
            let prompt =
                ChatPrompt::new(Some(system.into()), Vec::new(), user.into(), &PartName::ALL)
                    .unwrap();
            assert_eq!(
                ChatPrompt::split(&prompt.join()),
                prompt,
                "{system:?} {user:?}"
            );
        }
    }

    #[test]
    fn a_plain_prompt_joins_to_its_own_text() {
        let prompt = ChatPrompt::plain("Classify {review}.");
        assert!(prompt.is_plain());
        assert_eq!(prompt.join(), "Classify {review}.");
        assert_eq!(ChatPrompt::split("Classify {review}."), prompt);
        // The user template alone but fixed needs its marker to say so.
        let fixed = ChatPrompt::new(None, Vec::new(), "Q: {q}".into(), &[]).unwrap();
        assert_eq!(fixed.join(), "<user fixed>\nQ: {q}");
        assert_eq!(ChatPrompt::split(&fixed.join()), fixed);
    }

    #[test]
    fn a_marker_line_inside_a_part_is_refused() {
        let err = ChatPrompt::new(
            Some("ok\n<user>".into()),
            Vec::new(),
            "x".into(),
            &PartName::ALL,
        )
        .unwrap_err();
        assert_eq!(
            err,
            PartsError::MarkerLine {
                place: Place::System,
                line: 2,
                marker: "<user>"
            }
        );
        // Inside a line it is ordinary text.
        assert!(
            ChatPrompt::new(None, Vec::new(), "say <user> here".into(), &[]).is_ok(),
            "a marker within a line"
        );
        assert_eq!(
            three_parts().with_part(PartName::System, "<turn user>".into()),
            Err(PartsError::MarkerLine {
                place: Place::System,
                line: 1,
                marker: "<turn user>"
            })
        );
    }

    #[test]
    fn with_part_changes_that_part_alone() {
        let prompt = three_parts();
        let child = prompt
            .with_part(PartName::System, "Label the review.".into())
            .unwrap();
        assert_eq!(child.part(PartName::System), Some("Label the review."));
        assert_eq!(child.part(PartName::User), prompt.part(PartName::User));
        assert!(prompt.keeps_fixed_parts_of(&child));
        assert_eq!(prompt.changed_parts(&child), vec![PartName::System]);
        let broken = prompt
            .with_part(PartName::User, "Review: {review}!".into())
            .unwrap();
        assert!(
            !prompt.keeps_fixed_parts_of(&broken),
            "the user part is fixed"
        );
        assert_eq!(
            ChatPrompt::plain("x").with_part(PartName::System, "y".into()),
            Err(PartsError::Absent(PartName::System))
        );
    }

    #[test]
    fn renders_parts_as_chat_messages_in_order() {
        let template = ChatTemplate::parse(&three_parts().join()).unwrap();
        let messages = template
            .render(|name| (name == "review").then_some("great"))
            .unwrap();
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::User]
        );
        assert_eq!(messages[0].text, "You label reviews.\n\nBe brief.");
        assert_eq!(messages[3].text, "Review: great\n");
        assert_eq!(template.variables(), vec!["review"]);
        let plain = ChatTemplate::parse("Is {review} good?").unwrap();
        assert_eq!(
            plain.render(|_| Some("it")).unwrap(),
            vec![Message {
                role: Role::User,
                text: "Is it good?".into()
            }]
        );
    }

    #[test]
    fn a_syntax_error_names_its_line_in_the_whole_text() {
        let text = "<system>\nline two\nline three\n\n<user>\nfine\n{broken";
        let err = ChatTemplate::parse(text).unwrap_err();
        assert_eq!(err.position(), (7, 1), "{err}");
    }

    #[test]
    fn part_names_parse_from_their_words() {
        assert_eq!(PartName::parse("system"), Some(PartName::System));
        assert_eq!(PartName::parse("user"), Some(PartName::User));
        assert_eq!(PartName::parse("turns"), None);
    }
}
