//! What `layering.rs` checks between modules, this checks inside them, over every crate of the
//! workspace (`crates/*/src`, and `src/` for the command line) and the benches:
//! - no import circle between files: inside a crate, no file uses an item of another file that,
//!   directly or through others, uses an item of the first. A file may use the modules it
//!   declares (`lib.rs` and `mod.rs` call into their children, which use their parent's types),
//!   so only the uses that leave a file's own subtree count; code under `#[cfg(test)]` does not;
//! - no function is longer than [`MAX_FUNCTION_LINES`] lines, from its `fn` line to its closing
//!   brace, outside tests (`tests.rs` files and `#[cfg(test)]` modules).
//!
//! Both read code the way `layering.rs` does, with comments and strings blanked out, and resolve
//! paths by the files' names rather than by compiling them: a `use` names a file when its path
//! runs through the crate's module files (`crate::a::b::Item` is `a/b.rs` or `a/b/mod.rs`, or
//! `a.rs` when `b` is an item of it), and a re-export (`pub use`) is followed to the file that
//! defines the item.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::common::root;
use crate::layering::code_only;

/// The longest a function may be, in lines.
const MAX_FUNCTION_LINES: usize = 80;

/// Every `.rs` file below `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The index of the brace that closes the one at `open`.
fn closing_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// `code` with every `#[cfg(test)]` module (`#[cfg(test)] mod tests { ... }`) blanked out.
fn without_test_modules(code: &str) -> String {
    let test_module =
        regex::Regex::new(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{").unwrap();
    let mut chars: Vec<char> = code.chars().collect();
    while let Some(found) = test_module.find(&chars.iter().collect::<String>()) {
        let text: String = chars.iter().collect();
        let start = text[..found.start()].chars().count();
        let open = text[..found.end()].chars().count() - 1;
        let end = closing_brace(&chars, open).min(chars.len() - 1);
        for c in &mut chars[start..=end] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    }
    chars.into_iter().collect()
}

/// `code` with everything inside braces blanked out but `use` groups: what is left is the
/// file's top level.
fn top_level(code: &str) -> String {
    let mut depth = 0usize;
    code.chars()
        .map(|c| {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                _ => {}
            }
            if depth == 0 || c == '\n' { c } else { ' ' }
        })
        .collect()
}

/// The names a file's top level defines: its items and the modules it declares.
fn defined_items(top: &str) -> BTreeSet<String> {
    let item = regex::Regex::new(
        r"\b(?:struct|enum|fn|const|static|trait|type|union|mod|macro_rules!)\s+([A-Za-z_]\w*)",
    )
    .unwrap();
    item.captures_iter(top)
        .map(|c| c[1].to_owned())
        .filter(|name| name != "fn")
        .collect()
}

/// The paths of a `use` tree, each with the name it binds: `a::{b, c::d as e}` is
/// `(a::b, b)` and `(a::c::d, e)`.
fn expand_use(tree: &str, prefix: &[String], out: &mut Vec<(Vec<String>, String)>) {
    let tree = tree.trim();
    if let Some(open) = tree.find('{') {
        let mut head = prefix.to_vec();
        head.extend(
            tree[..open]
                .split("::")
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
        );
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let (mut depth, mut start) = (0usize, 0usize);
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand_use(&inner[start..i], &head, out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        expand_use(&inner[start..], &head, out);
        return;
    }
    if tree.is_empty() {
        return;
    }
    let (path, alias) = match tree.split_once(" as ") {
        Some((path, alias)) => (path.trim(), Some(alias.trim().to_owned())),
        None => (tree, None),
    };
    let mut full = prefix.to_vec();
    full.extend(path.split("::").map(str::trim).map(str::to_owned));
    if full.last().is_some_and(|last| last == "self") {
        full.pop();
    }
    let Some(last) = full.last().cloned() else {
        return;
    };
    out.push((full, alias.unwrap_or(last)));
}

/// A file of a crate.
struct File {
    /// Relative to the workspace's root, for messages.
    shown: String,
    code: String,
    items: BTreeSet<String>,
    /// Every `use` of the file (not only its top level's), as (path, name bound).
    uses: Vec<(Vec<String>, String)>,
}

/// The files of one crate, by module path (`lib.rs` is `[]`, `a/b.rs` and `a/b/mod.rs` are
/// `[a, b]`).
struct Crate {
    files: BTreeMap<Vec<String>, File>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let has_lib = src.join("lib.rs").exists();
        let use_statement = regex::Regex::new(r"\buse\s+([^;]+);").unwrap();
        let mut files = BTreeMap::new();
        for path in rust_files(src) {
            let relative = path.strip_prefix(src).unwrap();
            let name = relative.file_name().unwrap_or_default();
            if name == "tests.rs" || (name == "main.rs" && has_lib) {
                continue; // tests, or the binary's root when the library is the crate
            }
            let mut module: Vec<String> = relative
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                module.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = without_test_modules(&code_only(&text));
            let items = defined_items(&top_level(&code));
            let mut uses = Vec::new();
            for statement in use_statement.captures_iter(&code) {
                expand_use(&statement[1], &[], &mut uses);
            }
            let shown = path
                .strip_prefix(root())
                .unwrap_or(&path)
                .display()
                .to_string();
            files.insert(
                module,
                File {
                    shown,
                    code,
                    items,
                    uses,
                },
            );
        }
        Crate { files }
    }

    /// Whether `path`, used in `module`, starts at a module of this crate.
    fn is_local(&self, module: &[String], path: &[String]) -> bool {
        let Some(first) = path.first() else {
            return false;
        };
        matches!(first.as_str(), "crate" | "self" | "super") || self.child(module, first)
    }

    fn child(&self, module: &[String], name: &str) -> bool {
        let mut child = module.to_vec();
        child.push(name.to_owned());
        self.files.contains_key(&child)
    }

    /// The file that defines the item `path` names when used in `module`, or `None` when the
    /// path names a module, or a name from outside the crate.
    fn resolve(&self, module: &[String], path: &[String], depth: usize) -> Option<Vec<String>> {
        if depth > 16 || path.is_empty() {
            return None;
        }
        let (mut at, mut rest): (Vec<String>, &[String]) = match path[0].as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (module.to_vec(), &path[1..]),
            "super" => {
                let mut at = module.to_vec();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop();
                    rest = &rest[1..];
                }
                (at, rest)
            }
            first if self.child(module, first) => (module.to_vec(), path),
            first => {
                // A name the file imported: `use super::x; ... x::Item`.
                let file = self.files.get(module)?;
                let (imported, _) = file.uses.iter().find(|(p, alias)| {
                    alias == first
                        && p.first().is_none_or(|f| f != first)
                        && self.is_local(module, p)
                })?;
                let mut full = imported.clone();
                full.extend_from_slice(&path[1..]);
                return self.resolve(module, &full, depth + 1);
            }
        };
        while let Some(next) = rest.first()
            && self.child(&at, next)
        {
            at.push(next.clone());
            rest = &rest[1..];
        }
        let name = rest.first()?;
        let file = self.files.get(&at)?;
        if !file.items.contains(name) {
            for (imported, alias) in &file.uses {
                if alias == name && self.is_local(&at, imported) {
                    let mut full = imported.clone();
                    full.extend_from_slice(&rest[1..]);
                    if let Some(found) = self.resolve(&at, &full, depth + 1) {
                        return Some(found);
                    }
                }
            }
        }
        Some(at)
    }

    /// For each file, the files of this crate whose items it uses outside its own subtree,
    /// each with the first path that does.
    fn edges(&self) -> BTreeMap<&Vec<String>, BTreeMap<Vec<String>, String>> {
        let inline = regex::Regex::new(r"[A-Za-z_]\w*(?:::[A-Za-z_]\w*)+").unwrap();
        let mut edges = BTreeMap::new();
        for (module, file) in &self.files {
            let mut paths: Vec<Vec<String>> = file
                .uses
                .iter()
                .filter(|(path, _)| self.is_local(module, path))
                .map(|(path, _)| path.clone())
                .collect();
            for found in inline.find_iter(&file.code) {
                let before = file.code[..found.start()].chars().next_back();
                if before.is_some_and(|c| is_ident(c) || c == ':') {
                    continue;
                }
                let path: Vec<String> = found.as_str().split("::").map(str::to_owned).collect();
                let imported = file
                    .uses
                    .iter()
                    .any(|(p, alias)| *alias == path[0] && self.is_local(module, p));
                if self.is_local(module, &path) || imported {
                    paths.push(path);
                }
            }
            let mut used: BTreeMap<Vec<String>, String> = BTreeMap::new();
            for path in paths {
                let Some(target) = self.resolve(module, &path, 0) else {
                    continue;
                };
                if target.starts_with(module) {
                    continue; // itself, or a module it declares
                }
                used.entry(target).or_insert_with(|| path.join("::"));
            }
            edges.insert(module, used);
        }
        edges
    }
}

/// The circles of a graph: its strongly connected components of more than one node.
fn circles<'a>(
    edges: &BTreeMap<&'a Vec<String>, BTreeMap<Vec<String>, String>>,
) -> Vec<Vec<&'a Vec<String>>> {
    // Kosaraju: finish order on the graph, then components on the reversed graph.
    fn finish<'a>(
        node: &'a Vec<String>,
        edges: &BTreeMap<&'a Vec<String>, BTreeMap<Vec<String>, String>>,
        seen: &mut BTreeSet<&'a Vec<String>>,
        order: &mut Vec<&'a Vec<String>>,
    ) {
        if !seen.insert(node) {
            return;
        }
        for next in edges[node].keys() {
            if let Some((key, _)) = edges.get_key_value(next) {
                finish(key, edges, seen, order);
            }
        }
        order.push(node);
    }
    let (mut seen, mut order) = (BTreeSet::new(), Vec::new());
    for node in edges.keys() {
        finish(node, edges, &mut seen, &mut order);
    }
    let mut reversed: BTreeMap<&Vec<String>, Vec<&Vec<String>>> = BTreeMap::new();
    for (from, to) in edges {
        for target in to.keys() {
            if let Some((key, _)) = edges.get_key_value(target) {
                reversed.entry(*key).or_default().push(*from);
            }
        }
    }
    let (mut assigned, mut out) = (BTreeSet::new(), Vec::new());
    for node in order.into_iter().rev() {
        if assigned.contains(node) {
            continue;
        }
        let (mut component, mut stack) = (Vec::new(), vec![node]);
        while let Some(at) = stack.pop() {
            if assigned.insert(at) {
                component.push(at);
                stack.extend(reversed.get(at).into_iter().flatten().copied());
            }
        }
        if component.len() > 1 {
            component.sort();
            out.push(component);
        }
    }
    out
}

/// The source folders of the workspace's crates: `src/` and `crates/*/src`.
fn crate_sources() -> Vec<PathBuf> {
    let mut out = vec![root().join("src")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .expect("crates/")
        .map(|entry| entry.expect("an entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    out.extend(crates);
    out
}

#[test]
fn no_two_files_of_a_crate_use_each_other() {
    let mut problems = Vec::new();
    for src in crate_sources() {
        let krate = Crate::read(&src);
        let edges = krate.edges();
        for circle in circles(&edges) {
            let mut lines = Vec::new();
            for from in &circle {
                for to in &circle {
                    if let Some(path) = edges[from].get(*to) {
                        lines.push(format!(
                            "  {} uses {} ({path})",
                            krate.files[*from].shown, krate.files[*to].shown
                        ));
                    }
                }
            }
            problems.push(format!(
                "an import circle of {} files:\n{}",
                circle.len(),
                lines.join("\n")
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "files that use each other (move what both need into one of them, or into a third):\n{}",
        problems.join("\n")
    );
}

/// The functions of `code` longer than [`MAX_FUNCTION_LINES`], as (name, first line, lines).
fn long_functions(code: &str) -> Vec<(String, usize, usize)> {
    let chars: Vec<char> = code.chars().collect();
    let function = regex::Regex::new(r"\bfn\s+([A-Za-z_]\w*)").unwrap();
    let mut out = Vec::new();
    for found in function.captures_iter(code) {
        let start = code[..found.get(0).unwrap().start()].chars().count();
        let (mut depth, mut open) = (0i32, None);
        for (i, c) in chars.iter().enumerate().skip(start) {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break, // a declaration without a body
                '{' if depth == 0 => {
                    open = Some(i);
                    break;
                }
                _ => {}
            }
        }
        let Some(open) = open else { continue };
        let close = closing_brace(&chars, open);
        let line_of = |at: usize| chars[..at].iter().filter(|c| **c == '\n').count() + 1;
        let lines = line_of(close.min(chars.len())) - line_of(start) + 1;
        if lines > MAX_FUNCTION_LINES {
            out.push((found[1].to_owned(), line_of(start), lines));
        }
    }
    out
}

#[test]
fn no_function_outside_tests_is_longer_than_80_lines() {
    let mut files = Vec::new();
    for src in crate_sources() {
        files.extend(rust_files(&src));
    }
    files.extend(rust_files(&root().join("benches")));
    let mut problems = Vec::new();
    for file in files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = without_test_modules(&code_only(&text));
        for (name, line, lines) in long_functions(&code) {
            let shown = file.strip_prefix(root()).unwrap_or(&file).display();
            problems.push(format!("{shown}:{line}: fn {name} has {lines} lines"));
        }
    }
    assert!(
        problems.is_empty(),
        "functions longer than {MAX_FUNCTION_LINES} lines (split them where they do two things):\n{}",
        problems.join("\n")
    );
}

#[test]
fn the_checks_see_circles_and_long_functions() {
    let mut uses = Vec::new();
    expand_use("super::{a::{B, c as d}, self}", &[], &mut uses);
    let names: Vec<String> = uses
        .iter()
        .map(|(p, a)| format!("{}={a}", p.join("::")))
        .collect();
    assert_eq!(names, ["super::a::B=B", "super::a::c=d", "super=super"]);
    let code = without_test_modules("fn a() {}\n#[cfg(test)]\nmod tests {\n    fn b() {}\n}\n");
    assert!(code.contains("fn a") && !code.contains("fn b"));
    let long = format!(
        "fn long() {{\n{}}}\nfn short() {{}}\n",
        "    x();\n".repeat(80)
    );
    assert_eq!(long_functions(&long), [("long".to_owned(), 1, 82)]);
    let edges: BTreeMap<&Vec<String>, BTreeMap<Vec<String>, String>> = BTreeMap::new();
    assert!(circles(&edges).is_empty());
    let (a, b, c) = (
        vec!["a".to_owned()],
        vec!["b".to_owned()],
        vec!["c".to_owned()],
    );
    let mut edges = BTreeMap::new();
    edges.insert(&a, BTreeMap::from([(b.clone(), "b::X".to_owned())]));
    edges.insert(&b, BTreeMap::from([(a.clone(), "a::Y".to_owned())]));
    edges.insert(&c, BTreeMap::from([(a.clone(), "a::Y".to_owned())]));
    assert_eq!(circles(&edges), [vec![&a, &b]]);
}
