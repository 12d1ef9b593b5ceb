//! `gepa-lab channel post` and `gepa-lab channel read [--follow]`: the community channels.
//! Messages print oldest first, one per line, as a chat log reads.
use super::ExitStatus;
use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, TimeDelta, Utc};
use clap::Subcommand;

use super::inference_args::InferenceArgs;
use crate::account::channel::{DEFAULT_LIMIT, check_limit, parse_cursor};
use crate::account::wire::{ChannelMessage, PostMessage};
use crate::account::{
    AccountClient, AccountError, Channel, ReadQuery, created_at, sort_oldest_first,
};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: ChannelCommand,
}

#[derive(Debug, Subcommand)]
enum ChannelCommand {
    /// Post a message to a channel (general or requests).
    Post(PostArgs),
    /// Read a channel's messages, oldest first; --follow keeps printing new ones.
    Read(ReadArgs),
}

#[derive(Debug, clap::Args)]
struct PostArgs {
    #[command(flatten)]
    inference: InferenceArgs,
    /// general or requests.
    channel: String,
    /// The message text.
    text: String,
    /// Display name: lowercase letters, hyphens and underscores, at most 32 characters.
    #[arg(long)]
    name: Option<String>,
    /// Profile picture shown on the bridged platform: an https URL.
    #[arg(long, value_name = "URL")]
    avatar: Option<String>,
    /// Print the stored message as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, clap::Args)]
struct ReadArgs {
    #[command(flatten)]
    inference: InferenceArgs,
    /// general or requests.
    channel: String,
    /// Messages per page, 1 to 200.
    #[arg(long, default_value_t = DEFAULT_LIMIT)]
    limit: u32,
    /// Only messages before this ISO 8601 time (e.g. 2025-03-01T12:00:00.000Z).
    #[arg(long, value_name = "TIME", conflicts_with = "follow")]
    before: Option<String>,
    /// Only messages after this ISO 8601 time.
    #[arg(long, value_name = "TIME")]
    after: Option<String>,
    /// Keep reading: poll for newer messages (paging forward with `after`) until Ctrl-C.
    #[arg(long)]
    follow: bool,
    /// Seconds between polls with --follow.
    #[arg(long, value_name = "SECONDS", default_value_t = 10,
          value_parser = clap::value_parser!(u64).range(2..=300))]
    interval: u64,
    /// Print each message as a line of JSON.
    #[arg(long)]
    json: bool,
}

impl Args {
    pub fn key_sent(&self) -> super::keys::KeySent {
        match &self.command {
            ChannelCommand::Post(args) => args.inference.key_sent(),
            ChannelCommand::Read(args) => args.inference.key_sent(),
        }
    }
}

pub fn run(args: Args) -> anyhow::Result<ExitStatus> {
    let result = match args.command {
        ChannelCommand::Post(args) => post(args),
        ChannelCommand::Read(args) => read(args),
    };
    match result {
        Err(err) => match err.downcast_ref::<AccountError>() {
            // A broken rule is the user's input, refused before anything was sent.
            Some(AccountError::Rule(rule)) => {
                eprintln!("error: {rule}");
                Ok(ExitStatus::Invalid)
            }
            _ => Err(err),
        },
        ok => ok,
    }
}

fn post(args: PostArgs) -> anyhow::Result<ExitStatus> {
    let post = PostMessage {
        channel: args.channel,
        content: args.text,
        name: args.name,
        avatar: args.avatar,
    };
    crate::account::channel::check_post(&post).map_err(AccountError::from)?;
    let client = args.inference.account_client()?;
    let message = super::runtime()?
        .block_on(client.post_message(&post))
        .map_err(anyhow::Error::from)
        .context("posting the message")?;
    print_message(&message, args.json);
    Ok(ExitStatus::Ok)
}

fn read(args: ReadArgs) -> anyhow::Result<ExitStatus> {
    let channel: Channel = args.channel.parse().map_err(AccountError::from)?;
    let mut query = ReadQuery::new(channel);
    query.limit = check_limit(args.limit).map_err(AccountError::from)?;
    if let Some(before) = &args.before {
        query.before = Some(parse_cursor("before", before).map_err(AccountError::from)?);
    }
    if let Some(after) = &args.after {
        query.after = Some(parse_cursor("after", after).map_err(AccountError::from)?);
    }
    let client = args.inference.account_client()?;
    let runtime = super::runtime()?;
    let mut messages = runtime
        .block_on(client.read_messages(&query))
        .map_err(anyhow::Error::from)
        .context("reading the channel")?;
    sort_oldest_first(&mut messages);
    for message in &messages {
        print_message(message, args.json);
    }
    if args.follow {
        let mut follower = Follower::new(query.after);
        follower.saw(&messages);
        runtime.block_on(follow(
            &client,
            channel,
            follower,
            Duration::from_secs(args.interval),
            args.json,
        ))?;
    }
    Ok(ExitStatus::Ok)
}

/// What `--follow` has already printed, so overlapping reads print each message once.
struct Follower {
    cursor: Option<DateTime<Utc>>,
    /// Ids printed, with their time; only those near the cursor are kept.
    printed: HashMap<String, Option<DateTime<Utc>>>,
}

/// Reads restart this far below the newest time printed: a message stamped in the same
/// millisecond as it, but not yet seen, would be skipped by a strict `after`.
const CURSOR_OVERLAP: TimeDelta = TimeDelta::milliseconds(1);

impl Follower {
    fn new(after: Option<DateTime<Utc>>) -> Self {
        Follower {
            cursor: after,
            printed: HashMap::new(),
        }
    }

    /// Marks messages printed; returns those not printed before, oldest first.
    fn saw(&mut self, messages: &[ChannelMessage]) -> Vec<ChannelMessage> {
        let mut fresh = Vec::new();
        for message in messages {
            let time = created_at(message);
            if self.printed.insert(message.id.clone(), time).is_none() {
                fresh.push(message.clone());
            }
            if let Some(time) = time {
                self.cursor = Some(self.cursor.map_or(time, |c| c.max(time)));
            }
        }
        if let Some(cursor) = self.cursor {
            let keep_from = cursor - CURSOR_OVERLAP;
            self.printed
                .retain(|_, time| time.is_none_or(|t| t >= keep_from));
        }
        sort_oldest_first(&mut fresh);
        fresh
    }
}

async fn follow(
    client: &AccountClient,
    channel: Channel,
    mut follower: Follower,
    interval: Duration,
    json: bool,
) -> anyhow::Result<()> {
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(()),
            () = tokio::time::sleep(interval) => {}
        }
        let messages = match follower.cursor {
            Some(cursor) => client.read_after(channel, cursor - CURSOR_OVERLAP).await,
            None => client.read_messages(&ReadQuery::new(channel)).await,
        };
        let messages = match messages {
            Ok(messages) => messages,
            Err(err) => {
                // One failed poll (after the client's own retries) is reported, not fatal:
                // following is meant to outlast a flaky network.
                eprintln!("warning: reading {channel}: {err}");
                continue;
            }
        };
        for message in follower.saw(&messages) {
            print_message(&message, json);
        }
    }
}

fn print_message(message: &ChannelMessage, json: bool) {
    let line = if json {
        serde_json::to_string(message).unwrap_or_default()
    } else {
        format!(
            "{}  #{}  {} [{} {}]: {}",
            message.created_at,
            message.channel,
            message.author_name,
            message.author_type,
            message.author,
            message.content
        )
    };
    let mut stdout = std::io::stdout();
    // A closed pipe (`| head`) ends the output; nothing more to do about it.
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, at: &str) -> ChannelMessage {
        ChannelMessage {
            id: id.into(),
            channel: "general".into(),
            author: "0x1".into(),
            author_name: "n".into(),
            author_type: "api".into(),
            content: "c".into(),
            created_at: at.into(),
        }
    }

    #[test]
    fn the_follower_prints_each_message_once_and_advances() {
        let mut follower = Follower::new(None);
        let first = follower.saw(&[
            message("b", "2025-01-01T00:00:02.000Z"),
            message("a", "2025-01-01T00:00:01.000Z"),
        ]);
        assert_eq!(
            first.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            follower
                .cursor
                .map(crate::account::channel::format_timestamp)
                .as_deref(),
            Some("2025-01-01T00:00:02.000Z")
        );
        // The overlap read returns b again, and c stamped in the same millisecond.
        let second = follower.saw(&[
            message("c", "2025-01-01T00:00:02.000Z"),
            message("b", "2025-01-01T00:00:02.000Z"),
        ]);
        assert_eq!(
            second.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
            ["c"]
        );
        // Ids well below the cursor are forgotten, so memory stays bounded.
        assert!(!follower.printed.contains_key("a"));
    }
}
