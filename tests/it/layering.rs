//! The module table in the README's development section is the rule of what may use what: each
//! module uses only those below it (and, in a row of two, the one to its right). This test reads
//! the table and every source file, and fails on a `crate::` path in code (not in a comment)
//! that climbs it, or on a module the table does not list.
use std::collections::BTreeMap;
use std::path::Path;

use crate::common::root;

/// The table's modules, top first, with their level: a module may use any of a higher level, or
/// of its own level further right.
fn levels() -> BTreeMap<String, (usize, usize)> {
    let readme = std::fs::read_to_string(root().join("README.md")).expect("the README");
    let start = readme
        .find("| module | owns |")
        .expect("the README's module table");
    let mut levels = BTreeMap::new();
    for (level, line) in readme[start..]
        .lines()
        .skip(2)
        .take_while(|line| line.trim_start().starts_with('|'))
        .enumerate()
    {
        let first = line.trim_start().trim_start_matches('|');
        let cell = first.split('|').next().unwrap_or_default();
        for (column, name) in cell.split(',').enumerate() {
            let name = name.trim().trim_matches('`');
            assert!(!name.is_empty(), "an empty module name in {line:?}");
            levels.insert(name.to_owned(), (level, column));
        }
    }
    levels
}

/// Every `.rs` file below `dir`.
fn sources(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("a source folder") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules `crate::` paths of `text` name, outside comments, with their line.
fn uses(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (number, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        for (at, _) in code.match_indices("crate::") {
            let name: String = code[at + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.push((number + 1, name));
        }
    }
    found
}

#[test]
fn no_module_uses_one_above_it_in_the_readme_table() {
    let levels = levels();
    let src = root().join("src");
    let lib = std::fs::read_to_string(src.join("lib.rs")).unwrap();
    for module in lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod "))
        .map(|name| name.trim_end_matches(';'))
    {
        assert!(
            levels.contains_key(module),
            "module {module} (src/lib.rs) is not in the README's module table"
        );
    }
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut crossings = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).unwrap();
        let top = relative
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .trim_end_matches(".rs");
        let Some(&own) = levels.get(top) else {
            continue; // lib.rs, main.rs: the crate's root uses everything.
        };
        let text = std::fs::read_to_string(file).unwrap();
        for (line, used) in uses(&text) {
            let Some(&theirs) = levels.get(&used) else {
                continue; // `crate::Something` re-exported at the root, if any.
            };
            let allowed =
                used == top || theirs.0 > own.0 || (theirs.0 == own.0 && theirs.1 > own.1);
            if !allowed {
                crossings.push(format!(
                    "src/{}:{line}: {top} uses {used}",
                    relative.display()
                ));
            }
        }
    }
    assert!(
        crossings.is_empty(),
        "imports that climb the README's module table:\n{}",
        crossings.join("\n")
    );
}

#[test]
fn the_check_sees_a_crossing_and_skips_comments() {
    let text = "use crate::report::x; // crate::cli in a comment\n/// crate::runner in docs\nlet a = crate::store::y;";
    assert_eq!(
        uses(text),
        [(1, "report".to_owned()), (3, "store".to_owned())]
    );
    let levels = levels();
    assert!(levels["cli"].0 < levels["runner"].0);
    assert!(levels["account"].0 == levels["wallet"].0 && levels["account"].1 < levels["wallet"].1);
}
