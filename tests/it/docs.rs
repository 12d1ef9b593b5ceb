//! The README and `docs/` cannot rot: this test reads them and fails when
//! - a `gepa-lab ...` command line in a fenced shell block does not parse with the current CLI
//!   (`Cli::try_parse_from`, as `main` parses);
//! - a ` ```toml ` block is not TOML, a whole experiment file in one does not pass the
//!   validator, or a fragment of one has a key the experiment format does not define;
//! - a relative link or image (`](path)`, `](path#anchor)`, `](#anchor)`) names a file that does
//!   not exist, or a heading its target does not have;
//! - a subcommand is missing from `docs/cli.md`, an exit status from its table, or a key of the
//!   experiment format from `docs/experiment-file.md`;
//! - the README is longer than 300 lines or names a commit: history belongs in `CHANGELOG.md`
//!   and the records under `reports/`.
//!
//! Shell blocks are those whose info string is empty, `sh`, `bash`, `shell`, `console` or `zsh`.
//! In them a line may start with `$ ` and with `VAR=value ` assignments; it is cut into commands
//! at `|`, `&&`, `||` and `;` outside quotes, and each command ends at `>`, `<` or ` #`. A line
//! ending in `\` goes on on the next. Commands that start with `gepa-lab ` are checked, and so are
//! `cargo run [options] -- ARGS` (as `gepa-lab ARGS`). Placeholders such as `FILE`, `RUN_DIR` or
//! `<x>` are fine wherever a value goes.
//!
//! Two markers, an HTML comment on the line before a fence (invisible when rendered), opt a
//! block out, and nothing else does:
//! - `<!-- docs-test: synopsis -->`: the block is a usage synopsis (`[--flag X]`, `a|b`), not
//!   commands to run; its lines are not parsed.
//! - `<!-- docs-test: not-experiment -->`: a ` ```toml ` block that is another file (the config
//!   file, say); it must still be TOML, but is not checked against the experiment format.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use clap::{CommandFactory, Parser};
use gepa_lab::cli::Cli;
use serde_json::Value;

use crate::common::root;

/// The pages whose commands and TOML examples are checked: the README and every page of docs/.
fn doc_pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md")];
    markdown_below(&root.join("docs"), &mut pages);
    pages
}

/// The pages whose links are checked: the doc pages, the changelog, and the benchmark records
/// (`reports/*.md` and `reports/*/*.md`; run directories, one level deeper, are not pages).
fn linked_pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = doc_pages();
    pages.push(root.join("CHANGELOG.md"));
    let reports = root.join("reports");
    for entry in read_dir_sorted(&reports) {
        if entry.is_dir() {
            pages.extend(
                read_dir_sorted(&entry)
                    .into_iter()
                    .filter(|p| p.extension().is_some_and(|e| e == "md")),
            );
        } else if entry.extension().is_some_and(|e| e == "md") {
            pages.push(entry);
        }
    }
    pages
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a folder entry").path())
        .collect();
    entries.sort();
    entries
}

fn markdown_below(dir: &Path, out: &mut Vec<PathBuf>) {
    for path in read_dir_sorted(dir) {
        if path.is_dir() {
            markdown_below(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fenced code block: its info string's first word, the marker before it, its first line's
/// number (1-based, the line after the fence) and its lines.
#[derive(Debug)]
struct Block {
    lang: String,
    marker: Option<String>,
    line: usize,
    lines: Vec<String>,
}

/// The fenced blocks of a Markdown text (``` or ~~~, three or more, indented or not), and the
/// text with every block's lines blanked out (for the link check).
fn blocks(text: &str) -> (Vec<Block>, String) {
    let mut found = Vec::new();
    let mut prose = String::new();
    let mut open: Option<(char, usize, Block)> = None;
    let mut last_prose_line = "";
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let fence_char = trimmed.chars().next().filter(|c| *c == '`' || *c == '~');
        let fence_len = fence_char.map_or(0, |c| trimmed.chars().take_while(|x| *x == c).count());
        match open.take() {
            Some((c, len, block)) => {
                if fence_char == Some(c)
                    && fence_len >= len
                    && trimmed[fence_len..].trim().is_empty()
                {
                    found.push(block);
                    last_prose_line = "";
                } else {
                    let mut block = block;
                    block.lines.push(line.to_owned());
                    open = Some((c, len, block));
                }
                prose.push('\n');
            }
            None if fence_len >= 3 => {
                let c = fence_char.unwrap();
                let info = trimmed[fence_len..].trim();
                let marker = last_prose_line
                    .trim()
                    .strip_prefix("<!-- docs-test:")
                    .and_then(|rest| rest.strip_suffix("-->"))
                    .map(|m| m.split_whitespace().next().unwrap_or_default().to_owned());
                open = Some((
                    c,
                    fence_len,
                    Block {
                        lang: info
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_owned(),
                        marker,
                        line: number + 2,
                        lines: Vec::new(),
                    },
                ));
                prose.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
                if !line.trim().is_empty() {
                    last_prose_line = line;
                }
            }
        }
    }
    assert!(open.is_none(), "a code fence is never closed");
    (found, prose)
}

const SHELL_LANGS: [&str; 6] = ["", "sh", "bash", "shell", "console", "zsh"];

/// The shell words of one command line, cut into commands at `|`, `&&`, `||` and `;`, each
/// command ending at a redirection or a comment. Quotes group words and are removed.
fn commands(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word: Option<String> = None;
    let mut ended = false; // a redirection or comment ended this command
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' | '"' => {
                let mut quoted = String::new();
                for q in chars.by_ref() {
                    if q == c {
                        break;
                    }
                    quoted.push(q);
                }
                if !ended {
                    word.get_or_insert_with(String::new).push_str(&quoted);
                }
            }
            '\\' => {
                if let Some(next) = chars.next()
                    && !ended
                {
                    word.get_or_insert_with(String::new).push(next);
                }
            }
            // `&&`, `||`, `|`, `;`, and a lone `&` (to the background) end a command.
            '|' | '&' | ';' => {
                if chars.peek() == Some(&c) {
                    chars.next();
                }
                if let Some(w) = word.take()
                    && !ended
                {
                    commands.last_mut().unwrap().push(w);
                }
                commands.push(Vec::new());
                ended = false;
            }
            '>' | '<' => {
                // `2>` and `&>`: the number belongs to the redirection.
                if word
                    .as_deref()
                    .is_some_and(|w| w.chars().all(|d| d.is_ascii_digit()))
                {
                    word = None;
                }
                if let Some(w) = word.take()
                    && !ended
                {
                    commands.last_mut().unwrap().push(w);
                }
                ended = true;
            }
            '#' if word.is_none() => ended = true,
            c if c.is_whitespace() => {
                if let Some(w) = word.take()
                    && !ended
                {
                    commands.last_mut().unwrap().push(w);
                }
            }
            c => {
                if !ended {
                    word.get_or_insert_with(String::new).push(c);
                }
            }
        }
    }
    if let Some(w) = word.take()
        && !ended
    {
        commands.last_mut().unwrap().push(w);
    }
    commands.retain(|words| !words.is_empty());
    commands
}

/// The gepa-lab arguments of a command, when it runs gepa-lab: `gepa-lab ARGS` or
/// `cargo run [options] -- ARGS`, after any `VAR=value` assignments.
fn gepa_lab_args(words: &[String]) -> Option<Vec<String>> {
    let is_assignment = |w: &String| {
        w.split_once('=').is_some_and(|(name, _)| {
            !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit())
        })
    };
    let words: Vec<String> = words
        .iter()
        .skip_while(|w| is_assignment(w))
        .cloned()
        .collect();
    match words.first().map(String::as_str) {
        Some("gepa-lab") => Some(words[1..].to_vec()),
        Some("cargo") if words.get(1).map(String::as_str) == Some("run") => {
            let dashes = words.iter().position(|w| w == "--")?;
            Some(words[dashes + 1..].to_vec())
        }
        _ => None,
    }
}

/// Every gepa-lab command line of the shell blocks of `text`: (line number, its text, its
/// arguments).
fn gepa_lab_lines(text: &str) -> Vec<(usize, String, Vec<String>)> {
    let (blocks, _) = blocks(text);
    let mut found = Vec::new();
    for block in blocks {
        if !SHELL_LANGS.contains(&block.lang.as_str())
            || block.marker.as_deref() == Some("synopsis")
        {
            continue;
        }
        let mut logical = String::new();
        let mut start = block.line;
        for (offset, line) in block.lines.iter().enumerate() {
            if logical.is_empty() {
                start = block.line + offset;
            }
            let line = line.trim();
            if let Some(head) = line.strip_suffix('\\') {
                logical.push_str(head);
                logical.push(' ');
                continue;
            }
            logical.push_str(line);
            let text = std::mem::take(&mut logical);
            let command_line = text.strip_prefix("$ ").unwrap_or(&text);
            for words in commands(command_line) {
                if let Some(args) = gepa_lab_args(&words) {
                    found.push((start, text.clone(), args));
                }
            }
        }
    }
    found
}

/// Why a command line does not parse, or `None` when it does.
fn parse_error(args: &[String]) -> Option<String> {
    let argv = std::iter::once("gepa-lab".to_owned()).chain(args.iter().cloned());
    match Cli::try_parse_from(argv) {
        Ok(_) => None,
        Err(err) => Some(
            err.render()
                .to_string()
                .lines()
                .next()
                .unwrap_or("")
                .to_owned(),
        ),
    }
}

#[test]
fn every_gepa_lab_command_in_the_docs_parses() {
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in doc_pages() {
        for (line, text, args) in gepa_lab_lines(&read(&page)) {
            checked += 1;
            if let Some(error) = parse_error(&args) {
                problems.push(format!("{}:{line}: `{text}`: {error}", shown(&page)));
            }
        }
    }
    assert!(checked >= 40, "only {checked} command lines found");
    assert!(
        problems.is_empty(),
        "command lines the CLI does not accept (fix the docs, or mark a usage synopsis with \
         `<!-- docs-test: synopsis -->` before its fence):\n{}",
        problems.join("\n")
    );
}

/// The experiment format's JSON Schema, and the table shape under a node (following `$ref`s and
/// picking the table of an optional one).
fn resolve<'a>(schema: &'a Value, node: &'a Value) -> &'a Value {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let target = reference
            .trim_start_matches("#/")
            .split('/')
            .fold(schema, |at, part| &at[part]);
        return resolve(schema, target);
    }
    for combinator in ["anyOf", "oneOf", "allOf"] {
        if let Some(table) = node
            .get(combinator)
            .and_then(Value::as_array)
            .and_then(|options| {
                options
                    .iter()
                    .map(|option| resolve(schema, option))
                    .find(|option| {
                        option.get("properties").is_some()
                            || option.get("items").is_some()
                            || option
                                .get("additionalProperties")
                                .is_some_and(Value::is_object)
                    })
            })
        {
            return table;
        }
    }
    node
}

/// The problems of `table` against the schema node: keys it does not define, and values whose
/// kind its `type` or `enum` refuses (`minibatch = "eight"`), each named by its dotted path.
fn fragment_problems(
    schema: &Value,
    node: &Value,
    table: &toml::Table,
    path: &str,
    out: &mut Vec<String>,
) {
    let node = resolve(schema, node);
    let properties = node.get("properties").and_then(Value::as_object);
    // A table of named entries (a map) takes any key, each entry of this shape.
    let entries = node.get("additionalProperties").filter(|v| v.is_object());
    if properties.is_none() && entries.is_none() {
        return; // not a table the schema describes: nothing to check
    }
    for (key, value) in table {
        let dotted = if path.is_empty() {
            key.clone()
        } else {
            format!("{path}.{key}")
        };
        let Some(declared) = properties.and_then(|p| p.get(key)).or(entries) else {
            out.push(format!("`{dotted}` is not a key of the experiment format"));
            continue;
        };
        if let Some(why) = refused_value(schema, declared, value) {
            out.push(format!("`{dotted}`: {why}"));
            continue;
        }
        let property = resolve(schema, declared);
        match value {
            toml::Value::Table(inner) => fragment_problems(schema, property, inner, &dotted, out),
            toml::Value::Array(items) => {
                if let Some(item_schema) = property.get("items") {
                    for item in items {
                        if let Some(why) = refused_value(schema, item_schema, item) {
                            out.push(format!("`{dotted}[]`: {why}"));
                        } else if let toml::Value::Table(inner) = item {
                            let at = format!("{dotted}[]");
                            fragment_problems(schema, item_schema, inner, &at, out);
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

/// Why the schema node refuses `value`: a kind its `type` does not allow, or a string its
/// `enum` does not list; a union (`anyOf`, `oneOf`) refuses what every option refuses. Nodes
/// with neither accept anything here; `validate` checks whole examples further.
fn refused_value(schema: &Value, node: &Value, value: &toml::Value) -> Option<String> {
    if let Some(reference) = node.get("$ref").and_then(Value::as_str) {
        let target = reference
            .trim_start_matches("#/")
            .split('/')
            .fold(schema, |at, part| &at[part]);
        return refused_value(schema, target, value);
    }
    for union in ["anyOf", "oneOf"] {
        if let Some(options) = node.get(union).and_then(Value::as_array) {
            let mut refusals = options.iter().map(|o| refused_value(schema, o, value));
            return refusals
                .next()
                .flatten()
                .filter(|_| refusals.all(|r| r.is_some()));
        }
    }
    let kind = match value {
        toml::Value::String(_) => "string",
        toml::Value::Integer(_) => "integer",
        toml::Value::Float(_) => "number",
        toml::Value::Boolean(_) => "boolean",
        toml::Value::Datetime(_) => "datetime",
        toml::Value::Array(_) => "array",
        toml::Value::Table(_) => "object",
    };
    let types: Vec<&str> = match node.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    // An integer is a number too.
    let allowed = |t: &str| t == kind || (t == "number" && kind == "integer");
    if !types.is_empty() && !types.iter().any(|t| allowed(t)) {
        return Some(format!(
            "{kind} value, where the format takes {}",
            types.join(" or ")
        ));
    }
    let listed = node.get("enum").and_then(Value::as_array)?;
    let text = value.as_str()?;
    (!listed.iter().any(|v| v.as_str() == Some(text)))
        .then(|| format!("{text:?} is not one of {}", Value::Array(listed.clone())))
}

/// Problems of one ```toml block: not TOML; a whole experiment that does not validate; a
/// fragment with keys the format does not define or values it refuses.
fn toml_block_problems(block: &Block, schema: &Value) -> Vec<String> {
    let text = block.lines.join("\n");
    let table: toml::Table = match toml::from_str(&text) {
        Ok(table) => table,
        Err(err) => return vec![format!("not TOML: {}", err.to_string().replace('\n', " "))],
    };
    if block.marker.as_deref() == Some("not-experiment") {
        return Vec::new();
    }
    if table.contains_key("name") && table.get("prompt").is_some_and(toml::Value::is_table) {
        return experiment_problems(&text);
    }
    let mut problems = Vec::new();
    fragment_problems(schema, schema, &table, "", &mut problems);
    problems
}

/// A whole experiment file is validated as `gepa-lab validate` would: every error counts,
/// warnings do not. It is written to a temporary file in `experiments/` because the examples
/// name their datasets relative to that folder (`../datasets/sentiment.csv`), as the shipped
/// experiments do; so a missing dataset is an error like any other.
fn experiment_problems(text: &str) -> Vec<String> {
    let file = tempfile::Builder::new()
        .prefix(".docs-test-")
        .suffix(".toml")
        .tempfile_in(root().join("experiments"))
        .expect("a temporary file in experiments/");
    std::fs::write(file.path(), text).expect("write the example");
    let validation = gepa_lab::experiment::validate_file(
        file.path(),
        &gepa_lab::experiment::Settings::default(),
    );
    validation
        .diagnostics
        .iter()
        .filter(|d| d.is_error())
        .map(|d| format!("validate: error[{}]: {}", d.rule.id(), d.message))
        .collect()
}

#[test]
fn every_toml_example_is_valid() {
    let schema = gepa_lab::experiment::json_schema();
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in doc_pages() {
        let (blocks, _) = blocks(&read(&page));
        for block in blocks.iter().filter(|b| b.lang == "toml") {
            checked += 1;
            for problem in toml_block_problems(block, &schema) {
                problems.push(format!("{}:{}: {problem}", shown(&page), block.line));
            }
        }
    }
    assert!(checked >= 2, "only {checked} TOML blocks found");
    assert!(
        problems.is_empty(),
        "TOML examples that are wrong (a block that is another file than an experiment is \
         marked `<!-- docs-test: not-experiment -->` before its fence):\n{}",
        problems.join("\n")
    );
}

/// The anchor GitHub gives a heading: lower case, spaces to `-`, punctuation dropped (so
/// "Runs tracked in MLflow: `run --mlflow`" is `runs-tracked-in-mlflow-run---mlflow`), and a
/// repeated heading `-1`, `-2`...
fn anchors(text: &str) -> BTreeSet<String> {
    let (_, prose) = blocks(text);
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    for line in prose.lines() {
        let hashes = line.chars().take_while(|c| *c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let slug: String = line[hashes..]
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        anchors.insert(if *count == 0 {
            slug.clone()
        } else {
            format!("{slug}-{count}")
        });
        *count += 1;
    }
    anchors
}

/// `text` with every code span blanked out, line breaks kept. A span opens with a run of
/// backticks and closes with a run of the same length; it may go on over lines, but not past a
/// blank line (the end of a paragraph).
fn without_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut open: Option<usize> = None;
    let mut chars = text.chars().peekable();
    let mut previous = '\n';
    while let Some(c) = chars.next() {
        if c == '`' {
            let mut run = 1;
            while chars.peek() == Some(&'`') {
                chars.next();
                run += 1;
            }
            open = match open {
                None => Some(run),
                Some(len) if len == run => None,
                other => other,
            };
            out.push_str(&" ".repeat(run));
            previous = '`';
            continue;
        }
        if c == '\n' {
            if previous == '\n' {
                open = None; // a blank line ends the paragraph, and any span left open
            }
            out.push('\n');
        } else if open.is_some() {
            out.push(' ');
        } else {
            out.push(c);
        }
        previous = c;
    }
    out
}

/// The targets of the inline links and images of `text` outside code, with their line.
fn links(text: &str) -> Vec<(usize, String)> {
    let (_, prose) = blocks(text);
    let mut found = Vec::new();
    for (number, line) in without_code_spans(&prose).lines().enumerate() {
        for (at, _) in line.match_indices("](") {
            let rest = &line[at + 2..];
            let Some(end) = rest.find(')') else { continue };
            let target = rest[..end].split_whitespace().next().unwrap_or_default();
            found.push((number + 1, target.to_owned()));
        }
    }
    found
}

/// Why a link target does not resolve from `page`, or `None`.
fn broken(
    page: &Path,
    target: &str,
    anchors_of: &mut BTreeMap<PathBuf, BTreeSet<String>>,
) -> Option<String> {
    if target.contains("://") || target.starts_with("mailto:") {
        return None;
    }
    let (path, anchor) = match target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (target, None),
    };
    let file = if path.is_empty() {
        page.to_owned()
    } else {
        page.parent().unwrap().join(path)
    };
    if !file.exists() {
        return Some(format!("no file {}", file.display()));
    }
    let anchor = anchor?;
    if file.extension().is_none_or(|e| e != "md") {
        return None;
    }
    let known = anchors_of
        .entry(file.clone())
        .or_insert_with(|| anchors(&read(&file)));
    (!known.contains(anchor)).then(|| format!("no heading #{anchor} in {}", shown(&file)))
}

#[test]
fn every_relative_link_resolves() {
    let mut anchors_of = BTreeMap::new();
    let mut problems = Vec::new();
    let mut checked = 0;
    for page in linked_pages() {
        for (line, target) in links(&read(&page)) {
            checked += 1;
            if let Some(why) = broken(&page, &target, &mut anchors_of) {
                problems.push(format!("{}:{line}: ]({target}): {why}", shown(&page)));
            }
        }
    }
    assert!(checked >= 100, "only {checked} links found");
    assert!(
        problems.is_empty(),
        "broken links:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_cli_page_has_every_subcommand_and_exit_status() {
    let page = read(&root().join("docs/cli.md"));
    let everything: String = doc_pages().iter().map(|p| read(p)).collect();
    let mut missing = Vec::new();
    for command in Cli::command().get_subcommands() {
        let name = command.get_name();
        if !page.contains(&format!("`{name} ")) && !page.contains(&format!("`{name}`")) {
            missing.push(format!("docs/cli.md lacks `{name}`"));
        }
        for sub in command.get_subcommands() {
            let both = format!("{name} {}", sub.get_name());
            if !everything.contains(&both) {
                missing.push(format!("no page mentions `{both}`"));
            }
        }
    }
    for code in gepa_lab::cli::ExitStatus::ALL {
        if !page.contains(&format!("\n| {code} |")) {
            missing.push(format!("docs/cli.md's exit status table lacks {code}"));
        }
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

#[test]
fn the_experiment_page_has_every_key() {
    let page = read(&root().join("docs/experiment-file.md"));
    let schema = gepa_lab::experiment::json_schema();
    let mut keys = BTreeSet::new();
    fn collect(schema: &Value, node: &Value, keys: &mut BTreeSet<String>) {
        let node = resolve(schema, node);
        let node = node
            .get("items")
            .map_or(node, |items| resolve(schema, items));
        if let Some(entry) = node.get("additionalProperties").filter(|v| v.is_object()) {
            collect(schema, entry, keys);
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            for (key, property) in properties {
                keys.insert(key.clone());
                collect(schema, property, keys);
            }
        }
    }
    collect(&schema, &schema, &mut keys);
    let missing: Vec<&String> = keys
        .iter()
        .filter(|key| {
            ![
                format!("`{key}`"),
                format!("{key} ="),
                format!("[{key}]"),
                format!("[[{key}]]"),
            ]
            .iter()
            .any(|form| page.contains(form))
        })
        .collect();
    assert!(keys.len() > 30, "only {} keys in the schema", keys.len());
    assert!(
        missing.is_empty(),
        "docs/experiment-file.md lacks the keys {missing:?}"
    );
}

/// The words of `text` that look like a commit hash, short (7 or more) or full (40): lower-case
/// hex digits with at least one letter and one digit, so that dates, seeds and run ids (digits
/// only) and words such as "defaced" (letters only) are not taken for one.
fn commit_hashes(text: &str) -> Vec<&str> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| {
            (7..=40).contains(&word.len())
                && word.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f'))
                && word.chars().any(|c| c.is_ascii_digit())
                && word.chars().any(|c| c.is_ascii_alphabetic())
        })
        .collect()
}

#[test]
fn the_readme_is_a_front_door() {
    let readme = read(&root().join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; at most 300: move reference to docs/"
    );
    let hashes = commit_hashes(&readme);
    assert!(
        hashes.is_empty(),
        "README.md names commits {hashes:?}: say what changed in CHANGELOG.md or a record under reports/"
    );
}

#[test]
fn the_checks_see_what_they_are_meant_to() {
    let text = "Intro [a](docs/x.md) and `[not](a link)`, `a span\nover lines` [b](#runs-tracked-in-mlflow-run---mlflow).\n\n<!-- docs-test: synopsis -->\n```\ngepa-lab chat [--x]\n```\n\n```sh\n$ FOO=1 gepa-lab validate a.toml | head # and a comment\ncargo run --release -- plan \\\n  b.toml > out.txt\necho 'gepa-lab nope' && gepa-lab run \"my file.toml\" 2>/dev/null\n```\n\n## Runs tracked in MLflow: `run --mlflow`\n";
    let lines: Vec<Vec<String>> = gepa_lab_lines(text)
        .into_iter()
        .map(|(_, _, a)| a)
        .collect();
    let words = |s: &[&str]| s.iter().map(|w| (*w).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        lines,
        [
            words(&["validate", "a.toml"]),
            words(&["plan", "b.toml"]),
            words(&["run", "my file.toml"]),
        ]
    );
    assert_eq!(
        links(text),
        [
            (1, "docs/x.md".to_owned()),
            (2, "#runs-tracked-in-mlflow-run---mlflow".to_owned())
        ]
    );
    assert!(anchors(text).contains("runs-tracked-in-mlflow-run---mlflow"));
    assert_eq!(
        commit_hashes("at 3e8e310, run 20261128-035021-a91d, seed 3251493934730182763, defaced"),
        ["3e8e310"]
    );
    let schema = gepa_lab::experiment::json_schema();
    let fragment = |text: &str| {
        let block = Block {
            lang: "toml".into(),
            marker: None,
            line: 1,
            lines: text.lines().map(str::to_owned).collect(),
        };
        toml_block_problems(&block, &schema)
    };
    assert_eq!(
        fragment("[dataset]\nminibatch = 8\ninputs = [\"review\"]"),
        Vec::<String>::new()
    );
    assert_eq!(
        fragment("[dataset]\nminibatch = \"eight\""),
        ["`dataset.minibatch`: string value, where the format takes integer"]
    );
    assert_eq!(
        fragment("[dataset]\ninputs = [3]\nrows = 2"),
        [
            "`dataset.inputs[]`: integer value, where the format takes string",
            "`dataset.rows` is not a key of the experiment format",
        ]
    );
    assert!(parse_error(&words(&["validate", "FILE"])).is_none());
    assert!(parse_error(&words(&["no-such-command", "FILE"])).is_some());
    assert!(parse_error(&words(&["run", "--no-such-flag", "x.toml"])).is_some());
}
