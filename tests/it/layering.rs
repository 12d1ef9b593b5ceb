//! The module table of `docs/architecture.md` is the rule of what may use what: each row names a
//! module and, under "may use", the modules it may use, each of them in a row below it. A module
//! is either a crate of the workspace (`crates/<module>`, package `gepa-lab-<module>`, which
//! `src/lib.rs` re-exports as `pub use gepa_lab_<module> as <module>;`) or a module of the root
//! crate (`pub mod <module>;` in `src/lib.rs`). This test reads the table, every crate's
//! `Cargo.toml` and every source file, and fails when
//! - a crate's `Cargo.toml` depends on a gepa-lab crate its row does not name, or its row names
//!   one it does not depend on (the manifest is the rule the compiler enforces, so the two must
//!   say the same), or a crate's row names a module that is not a crate (a crate cannot use the
//!   root crate);
//! - a file of a module uses a module its row does not name, through any `crate::` path or
//!   `gepa_lab_<module>` name outside comments and string literals, grouped imports
//!   (`use crate::{a, b::c}`) included;
//! - a row names a module that no file of its module uses (the table would promise more than the
//!   code needs, and drift from it);
//! - a row's "may use" names a module that is not in a row below it (an arrow that climbs);
//! - a module of `src/lib.rs` or a crate under `crates/` has no row, or a row names neither, or
//!   a row says "(crate)" after its module's name when it is not a crate, or does not when it is.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::root;

/// One row of the table: the module, its place (0 at the top), whether the row says it is a
/// crate ("`engine` (crate)") and what it may use.
struct Row {
    position: usize,
    says_crate: bool,
    may_use: BTreeSet<String>,
}

/// The names in backticks of a cell, less the notes in brackets after them ("`server` (its
/// bounded connection loop, `ClientLimits`)" is `server`).
fn names(cell: &str) -> Vec<String> {
    let mut plain = String::new();
    let mut depth = 0usize;
    for c in cell.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            c if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|name| name.trim().to_owned())
        .collect()
}

/// The table of docs/architecture.md, by module.
fn table() -> BTreeMap<String, Row> {
    let page =
        std::fs::read_to_string(root().join("docs/architecture.md")).expect("docs/architecture.md");
    let start = page
        .find("| module | owns | may use |")
        .expect("docs/architecture.md's table, headed | module | owns | may use |");
    let mut rows = BTreeMap::new();
    for (position, line) in page[start..]
        .lines()
        .skip(2)
        .take_while(|line| line.trim_start().starts_with('|'))
        .enumerate()
    {
        let cells: Vec<&str> = line.trim().trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 3, "a row of three cells: {line:?}");
        let module = names(cells[0]);
        assert_eq!(module.len(), 1, "one module per row: {line:?}");
        let may_use = names(cells[2]).into_iter().collect();
        let says_crate = cells[0].contains("(crate)");
        let row = Row {
            position,
            says_crate,
            may_use,
        };
        let previous = rows.insert(module[0].clone(), row);
        assert!(previous.is_none(), "module {} has two rows", module[0]);
    }
    rows
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments, string literals and character literals blanked out (line breaks
/// kept, so line numbers hold): what is left is code.
pub(crate) fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let blank = |out: &mut String, skipped: &[char]| {
        for c in skipped {
            out.push(if *c == '\n' { '\n' } else { ' ' });
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after_ident = i > 0 && is_ident(chars[i - 1]);
        if c == '/' && next == Some('/') {
            let end = chars[i..]
                .iter()
                .position(|c| *c == '\n')
                .map_or(chars.len(), |n| i + n);
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '/' && next == Some('*') {
            let (mut depth, mut j) = (0usize, i);
            while j < chars.len() {
                if chars[j] == '/' && chars.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if chars[j] == '*' && chars.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &chars[i..j.min(chars.len())]);
            i = j;
        } else if !after_ident && (c == 'r' || (c == 'b' && next == Some('r'))) && {
            let at = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[at..].iter().take_while(|c| **c == '#').count();
            chars.get(at + hashes) == Some(&'"')
        } {
            // A raw string: r"...", r#"..."#, br"...".
            let at = if c == 'b' { i + 2 } else { i + 1 };
            let hashes = chars[at..].iter().take_while(|c| **c == '#').count();
            let mut j = at + hashes + 1;
            while j < chars.len() {
                if chars[j] == '"'
                    && chars[j + 1..]
                        .iter()
                        .take(hashes)
                        .filter(|c| **c == '#')
                        .count()
                        == hashes
                {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            blank(&mut out, &chars[i..j.min(chars.len())]);
            i = j;
        } else if c == '"' {
            let mut j = i + 1;
            while j < chars.len() && chars[j] != '"' {
                j += if chars[j] == '\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(chars.len());
            blank(&mut out, &chars[i..end]);
            i = end;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A character literal ('x', '\n', '\u{7f}'); a lifetime ('a) is code.
            let mut j = i + 1;
            if next == Some('\\') {
                j += 2;
            }
            while j < chars.len() && chars[j] != '\'' {
                j += 1;
            }
            let end = (j + 1).min(chars.len());
            blank(&mut out, &chars[i..end]);
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The top-level modules the `crate::` paths and `gepa_lab_<module>` names of `code` name, with
/// their line: `crate::a::b` names `a`, `crate::{a, b::{c, d}}` names `a` and `b`, and
/// `gepa_lab_c::d` names `c`.
fn uses(code: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let ident = |s: &str| -> String {
        s.trim_start()
            .chars()
            .take_while(|c| is_ident(*c))
            .collect()
    };
    for (at, _) in code.match_indices("crate::") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue; // `gepa_lab_crate::`, not ours
        }
        let line = code[..at].matches('\n').count() + 1;
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let (mut depth, mut part_start) = (1usize, 0usize);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        let name = ident(&group[part_start..i]);
                        if !name.is_empty() {
                            found.push((line, name));
                        }
                        part_start = i + 1;
                        if c == '}' {
                            break;
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.push((line, name));
            }
        }
    }
    for (at, _) in code.match_indices("gepa_lab_") {
        if code[..at].chars().next_back().is_some_and(is_ident) {
            continue;
        }
        let name = ident(&code[at + "gepa_lab_".len()..]);
        if !name.is_empty() {
            let line = code[..at].matches('\n').count() + 1;
            found.push((line, name));
        }
    }
    found
}

/// A crate of the workspace: its folder under `crates/` is its module's name.
struct Crate {
    /// The gepa-lab crates its `Cargo.toml` depends on (normal, dev and build), by module name.
    depends_on: BTreeSet<String>,
}

/// The crates under `crates/`, by module name, checking that each is named `gepa-lab-<module>`.
fn crates(problems: &mut Vec<String>) -> BTreeMap<String, Crate> {
    let mut crates = BTreeMap::new();
    for entry in std::fs::read_dir(root().join("crates")).expect("crates/") {
        let dir = entry.expect("an entry").path();
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        let module = dir.file_name().unwrap().to_str().unwrap().to_owned();
        let manifest: toml::Table = toml::from_str(&text).expect("a crate's Cargo.toml");
        let name = manifest["package"]["name"].as_str().unwrap_or_default();
        if name != format!("gepa-lab-{module}") {
            problems.push(format!(
                "crates/{module}/Cargo.toml names its package {name}, not gepa-lab-{module}"
            ));
        }
        let depends_on = ["dependencies", "dev-dependencies", "build-dependencies"]
            .into_iter()
            .filter_map(|section| manifest.get(section).and_then(|t| t.as_table()))
            .flat_map(|table| table.keys())
            .filter_map(|dependency| dependency.strip_prefix("gepa-lab-"))
            .map(str::to_owned)
            .collect();
        crates.insert(module, Crate { depends_on });
    }
    crates
}

#[test]
fn the_code_follows_the_architecture_table() {
    let rows = table();
    let src = root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    let modules: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';').to_owned())
        .collect();
    let reexported: BTreeSet<String> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub use gepa_lab_"))
        .filter_map(|rest| rest.trim_end_matches(';').split_once(" as "))
        .filter(|(krate, module)| krate == module)
        .map(|(krate, _)| krate.to_owned())
        .collect();
    let mut problems = Vec::new();
    let crates = crates(&mut problems);
    for module in crates.keys() {
        if !reexported.contains(module) {
            problems.push(format!(
                "crates/{module} is not re-exported by src/lib.rs (pub use gepa_lab_{module} as {module};)"
            ));
        }
    }
    for module in modules.iter().chain(&reexported) {
        if !rows.contains_key(module) {
            problems.push(format!(
                "module {module} (src/lib.rs) has no row in docs/architecture.md"
            ));
        }
    }
    for (module, row) in &rows {
        if !modules.contains(module) && !crates.contains_key(module) {
            problems.push(format!(
                "docs/architecture.md has a row for {module}, which is neither a crate under crates/ nor a module of src/lib.rs"
            ));
        }
        if row.says_crate != crates.contains_key(module) {
            problems.push(if row.says_crate {
                format!("row {module} says (crate), but there is no crates/{module}")
            } else {
                format!("crates/{module} is a crate, but its row does not say (crate)")
            });
        }
        for used in &row.may_use {
            match rows.get(used) {
                None => problems.push(format!("row {module} may use {used}, which has no row")),
                Some(theirs) if theirs.position <= row.position => problems.push(format!(
                    "row {module} may use {used}, which stands above it in the table"
                )),
                Some(_) => {}
            }
        }
        if let Some(krate) = crates.get(module) {
            for used in &row.may_use {
                if !crates.contains_key(used) {
                    problems.push(format!(
                        "row {module} (a crate) may use {used}, which is a module of the root crate, not a crate"
                    ));
                } else if !krate.depends_on.contains(used) {
                    problems.push(format!(
                        "row {module} may use {used}, but crates/{module}/Cargo.toml does not depend on gepa-lab-{used}"
                    ));
                }
            }
            for used in &krate.depends_on {
                if !row.may_use.contains(used) {
                    problems.push(format!(
                        "crates/{module}/Cargo.toml depends on gepa-lab-{used}, which its row in docs/architecture.md does not name"
                    ));
                }
            }
        }
    }
    // (module, the folder of its files, the prefix that names a file of it)
    let mut folders: Vec<(String, PathBuf, String)> = Vec::new();
    for module in crates.keys() {
        let dir = root().join("crates").join(module);
        folders.push((module.clone(), dir, format!("crates/{module}/")));
    }
    folders.push((String::new(), src.clone(), "src/".to_owned()));
    // module -> module it uses -> the first place it does
    let mut used: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for (owner, dir, prefix) in &folders {
        let mut files = Vec::new();
        sources(dir, &mut files);
        files.sort();
        for file in &files {
            let relative = file.strip_prefix(dir).unwrap();
            let top = if owner.is_empty() {
                // In the root crate, a file's module is its first component.
                relative
                    .components()
                    .next()
                    .and_then(|c| c.as_os_str().to_str())
                    .unwrap_or_default()
                    .trim_end_matches(".rs")
                    .to_owned()
            } else {
                owner.clone()
            };
            if !rows.contains_key(&top) {
                continue; // lib.rs, main.rs: the crate's root uses everything.
            }
            let text = std::fs::read_to_string(file).unwrap();
            for (line, name) in uses(&code_only(&text)) {
                if name == top || !rows.contains_key(&name) {
                    continue; // itself, or an item re-exported at the crate root
                }
                used.entry(top.clone())
                    .or_default()
                    .entry(name)
                    .or_insert_with(|| format!("{prefix}{}:{line}", relative.display()));
            }
        }
    }
    for (module, row) in &rows {
        let theirs = used.get(module).cloned().unwrap_or_default();
        let folder = if crates.contains_key(module) {
            format!("crates/{module}")
        } else {
            format!("src/{module}")
        };
        for (name, place) in &theirs {
            if !row.may_use.contains(name) {
                problems.push(format!(
                    "{place}: {module} uses {name}, which its row in docs/architecture.md does not name"
                ));
            }
        }
        for name in &row.may_use {
            if !theirs.contains_key(name) {
                problems.push(format!(
                    "row {module} may use {name}, but no file of {folder} uses it: remove it from the row"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "the code, the crates' Cargo.toml files and docs/architecture.md's module table disagree:\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_check_sees_grouped_imports_and_skips_comments_and_strings() {
    let text = "use crate::report::x; // crate::cli in a comment\n/// crate::runner in docs\nlet a = crate::store::y;\nuse crate::{evolution, engine::{A, B}, http::C};\nlet s = \"crate::view\"; let r = r#\"crate::server\"#; let c = '\"'; let d = crate::env::X;\n/* crate::local\n crate::wallet */ fn f<'a>(x: &'a crate::input::I) {}\nuse gepa_lab_engine::Task; // gepa_lab_store\nlet e = my_gepa_lab_x::y;";
    assert_eq!(
        uses(&code_only(text)),
        [
            (1, "report".to_owned()),
            (3, "store".to_owned()),
            (4, "evolution".to_owned()),
            (4, "engine".to_owned()),
            (4, "http".to_owned()),
            (5, "env".to_owned()),
            (7, "input".to_owned()),
            (8, "engine".to_owned()),
        ]
    );
    assert_eq!(
        names("`report`, `server` (its connection loop, `ClientLimits`), `store`"),
        ["report", "server", "store"]
    );
    let rows = table();
    assert!(rows["cli"].position < rows["runner"].position);
    assert!(rows["view"].may_use.contains("server"));
}
