//! Flags shared by the subcommands that call a prompt-evolution API (`executions`, `batch`), and
//! the table they print with.
use anyhow::Context;

use super::inference_args::parse_secret;
use crate::evolution::{DEFAULT_EVOLUTION_URL, EvolutionConfig, HttpEvolution};
use crate::http::Secret;

#[derive(Debug, clap::Args)]
pub struct EvolutionArgs {
    /// Address of the prompt-evolution API (its routes are under /api/v0), or of a
    /// `gepa-lab serve`.
    #[arg(long = "url", env = crate::env::EVOLUTION_URL, default_value = DEFAULT_EVOLUTION_URL)]
    pub base_url: String,
    /// API key, sent as `x-api-key`. Prefer the environment variable: a command line is visible
    /// to other users of the machine. Without one, the key `auth key evolution` stored in the
    /// config file for this URL is used.
    #[arg(long, env = crate::env::EVOLUTION_KEY, hide_env_values = true, value_parser = parse_secret)]
    pub key: Option<Secret>,
}

impl EvolutionArgs {
    /// The key this command sends, and where: what the tip of a refusal names.
    pub fn key_sent(&self) -> super::keys::KeySent {
        use super::keys::{KeyOrigin, KeySent, Service};
        KeySent {
            service: Service::Evolution,
            url: self.base_url.clone(),
            origin: match self.key {
                Some(_) => KeyOrigin::Flag(crate::env::EVOLUTION_KEY),
                None => KeyOrigin::Config,
            },
        }
    }

    /// A client with the given key, else the key the config file holds for this URL.
    pub fn client(&self) -> anyhow::Result<HttpEvolution> {
        let credential = super::keys::for_service(self.key.clone(), &self.base_url)?;
        HttpEvolution::new(EvolutionConfig::new(self.base_url.clone(), credential.key))
            .with_context(|| format!("evolution API at {}", self.base_url))
    }
}

/// Columns padded to their widest cell; the columns listed in `right` are right-aligned
/// (numbers, so magnitudes line up).
pub fn table(header: &[&str], rows: &[Vec<String>], right: &[usize]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            let width = widths.get(i).copied().unwrap_or_default();
            if right.contains(&i) {
                out.push_str(&format!("{cell:>width$}"));
            } else {
                out.push_str(&format!("{cell:<width$}"));
            }
            out.push_str("  ");
        }
        format!("{}\n", out.trim_end())
    };
    let mut out = line(header.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A score as people read it; absent scores show as `-`.
pub fn score(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.3}"))
}

/// A generation number as written; absent ones show as `-`.
pub fn generation(value: Option<f64>) -> String {
    match value {
        Some(v) if v.fract() == 0.0 => format!("{v:.0}"),
        Some(v) => v.to_string(),
        None => "-".to_owned(),
    }
}

/// The first line of a prompt, cut to `max` characters, for one table cell.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    let more = text.lines().nth(1).is_some();
    match line.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &line[..cut]),
        None if more => format!("{line} …"),
        None => line.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_and_numbers_go_right() {
        let rows = vec![
            vec!["a".to_owned(), "1".to_owned()],
            vec!["long".to_owned(), "12".to_owned()],
        ];
        assert_eq!(
            table(&["name", "n"], &rows, &[1]),
            "name   n\na      1\nlong  12\n"
        );
    }

    #[test]
    fn cells_are_short_and_say_when_something_is_missing() {
        assert_eq!(score(Some(0.5)), "0.500");
        assert_eq!(score(None), "-");
        assert_eq!(generation(Some(3.0)), "3");
        assert_eq!(generation(None), "-");
        assert_eq!(first_line("Classify.\nReview: {r}", 40), "Classify. …");
        assert_eq!(first_line("abcdef", 3), "abc…");
    }
}
