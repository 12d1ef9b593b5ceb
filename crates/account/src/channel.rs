//! The contract's rules for community channel messages and reads, checked by the client before
//! sending and by `serve` on receipt, so both refuse the same things with the same words.
use std::fmt;
use std::str::FromStr;

use chrono::{DateTime, SecondsFormat, Utc};

use super::wire::PostMessage;

pub const NAME_MAX_CHARS: usize = 32;
pub const DEFAULT_LIMIT: u32 = 50;
pub const MAX_LIMIT: u32 = 200;

/// A broken channel rule: which parameter, what was seen, and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid parameter {field}: {value:?} {reason}")]
pub struct ChannelRuleError {
    pub field: &'static str,
    pub value: String,
    pub reason: String,
}

fn broken(field: &'static str, value: &str, reason: impl Into<String>) -> ChannelRuleError {
    ChannelRuleError {
        field,
        value: value.to_string(),
        reason: reason.into(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Channel {
    General,
    Requests,
}

impl Channel {
    pub fn name(self) -> &'static str {
        match self {
            Channel::General => "general",
            Channel::Requests => "requests",
        }
    }
}

impl FromStr for Channel {
    type Err = ChannelRuleError;

    fn from_str(value: &str) -> Result<Self, ChannelRuleError> {
        match value {
            "general" => Ok(Channel::General),
            "requests" => Ok(Channel::Requests),
            _ => Err(broken(
                "channel",
                value,
                "is not a channel; expected general or requests",
            )),
        }
    }
}

impl fmt::Display for Channel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A display name: lowercase ASCII letters, hyphens and underscores, 1 to 32 characters.
pub fn check_name(name: &str) -> Result<(), ChannelRuleError> {
    let count = name.chars().count();
    if count == 0 || count > NAME_MAX_CHARS {
        return Err(broken(
            "name",
            name,
            format!("has {count} characters; a name has 1 to {NAME_MAX_CHARS}"),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || *c == '-' || *c == '_'))
    {
        return Err(broken(
            "name",
            name,
            format!(
                "contains {bad:?}; a name uses only lowercase letters, hyphens and underscores"
            ),
        ));
    }
    Ok(())
}

/// A profile picture: an `https` URL with a host.
pub fn check_avatar(avatar: &str) -> Result<(), ChannelRuleError> {
    match reqwest::Url::parse(avatar) {
        Ok(url) if url.scheme() == "https" && url.host_str().is_some_and(|h| !h.is_empty()) => {
            Ok(())
        }
        Ok(url) => Err(broken(
            "avatar",
            avatar,
            format!(
                "has scheme {}; an avatar must be an https URL",
                url.scheme()
            ),
        )),
        Err(err) => Err(broken(
            "avatar",
            avatar,
            format!("is not a URL ({err}); an avatar must be an https URL"),
        )),
    }
}

pub fn check_content(content: &str) -> Result<(), ChannelRuleError> {
    if content.trim().is_empty() {
        return Err(broken("content", content, "is empty; a message needs text"));
    }
    Ok(())
}

/// Every rule of `POST /v1/channel`.
pub fn check_post(post: &PostMessage) -> Result<Channel, ChannelRuleError> {
    let channel = post.channel.parse()?;
    check_content(&post.content)?;
    if let Some(name) = &post.name {
        check_name(name)?;
    }
    if let Some(avatar) = &post.avatar {
        check_avatar(avatar)?;
    }
    Ok(channel)
}

pub fn check_limit(limit: u32) -> Result<u32, ChannelRuleError> {
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(broken(
            "limit",
            &limit.to_string(),
            format!("is out of range; limit is 1 to {MAX_LIMIT}"),
        ));
    }
    Ok(limit)
}

/// An ISO 8601 date and time with an offset (RFC 3339, e.g. `2025-03-01T12:00:00.000Z`).
pub fn parse_cursor(field: &'static str, value: &str) -> Result<DateTime<Utc>, ChannelRuleError> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|err| {
            broken(
                field,
                value,
                format!(
                    "is not an ISO 8601 date and time with offset, such as 2025-03-01T12:00:00.000Z ({err})"
                ),
            )
        })
}

/// The contract's timestamp form: UTC with milliseconds.
pub fn format_timestamp(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// A validated `GET /v1/channel` query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadQuery {
    pub channel: Channel,
    pub limit: u32,
    pub before: Option<DateTime<Utc>>,
    pub after: Option<DateTime<Utc>>,
}

impl ReadQuery {
    pub fn new(channel: Channel) -> Self {
        ReadQuery {
            channel,
            limit: DEFAULT_LIMIT,
            before: None,
            after: None,
        }
    }

    /// The query string, cursors in the contract's own timestamp form.
    pub fn to_query_string(&self) -> String {
        let mut query = format!("channel={}&limit={}", self.channel, self.limit);
        for (key, cursor) in [("before", self.before), ("after", self.after)] {
            if let Some(time) = cursor {
                // `+` would be read as a space; the Z form needs no escaping.
                query.push_str(&format!("&{key}={}", format_timestamp(time)));
            }
        }
        query
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_are_general_or_requests() {
        assert_eq!("general".parse::<Channel>().unwrap(), Channel::General);
        assert_eq!("requests".parse::<Channel>().unwrap(), Channel::Requests);
        let err = "General".parse::<Channel>().unwrap_err();
        assert_eq!(err.field, "channel");
        assert!(err.to_string().contains("\"General\""), "{err}");
    }

    #[test]
    fn names_follow_the_pattern_and_length() {
        for good in ["a", "prompt-bot", "gepa_lab", &"x".repeat(32)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for (bad, reason) in [
            ("", "0 characters"),
            (&"x".repeat(33) as &str, "33 characters"),
            ("Bot", "'B'"),
            ("bot1", "'1'"),
            ("a b", "' '"),
            ("é", "'é'"),
        ] {
            let err = check_name(bad).unwrap_err();
            assert!(err.to_string().contains(reason), "{bad:?}: {err}");
        }
    }

    #[test]
    fn avatars_are_https_urls() {
        assert!(check_avatar("https://example.org/a.png").is_ok());
        for bad in [
            "http://example.org/a.png",
            "example.org/a.png",
            "data:image/png;base64,AA",
        ] {
            let err = check_avatar(bad).unwrap_err();
            assert_eq!(err.field, "avatar");
            assert!(err.to_string().contains("https"), "{err}");
        }
    }

    #[test]
    fn limits_are_one_to_two_hundred() {
        assert_eq!(check_limit(200), Ok(200));
        assert_eq!(check_limit(1), Ok(1));
        assert!(check_limit(0).is_err());
        let err = check_limit(201).unwrap_err();
        assert!(err.to_string().contains("1 to 200"), "{err}");
    }

    #[test]
    fn cursors_are_rfc3339_and_sent_in_utc_with_milliseconds() {
        let time = parse_cursor("before", "2025-03-01T13:00:00.5+01:00").unwrap();
        assert_eq!(format_timestamp(time), "2025-03-01T12:00:00.500Z");
        for bad in [
            "2025-03-01",
            "yesterday",
            "2025-03-01T12:00:00",
            "1740672089",
        ] {
            let err = parse_cursor("after", bad).unwrap_err();
            assert_eq!(err.field, "after");
            assert!(err.to_string().contains("ISO 8601"), "{err}");
        }
        let mut query = ReadQuery::new(Channel::Requests);
        query.before = Some(time);
        assert_eq!(
            query.to_query_string(),
            "channel=requests&limit=50&before=2025-03-01T12:00:00.500Z"
        );
    }

    #[test]
    fn posts_are_checked_field_by_field() {
        let post = |channel: &str, content: &str, name: Option<&str>, avatar: Option<&str>| {
            check_post(&PostMessage {
                channel: channel.into(),
                content: content.into(),
                name: name.map(Into::into),
                avatar: avatar.map(Into::into),
            })
        };
        assert_eq!(
            post("general", "hi", Some("bot"), Some("https://x.org/a.png")),
            Ok(Channel::General)
        );
        assert_eq!(
            post("random", "hi", None, None).unwrap_err().field,
            "channel"
        );
        assert_eq!(
            post("general", "  ", None, None).unwrap_err().field,
            "content"
        );
        assert_eq!(
            post("general", "hi", Some("Bot"), None).unwrap_err().field,
            "name"
        );
        assert_eq!(
            post("general", "hi", None, Some("http://x.org"))
                .unwrap_err()
                .field,
            "avatar"
        );
    }
}
