//! Checks that keep the production sources (`crates/*/src/**/*.rs`) in the
//! shape the house style asks for, and name every file that is not:
//!
//! - a file is at most 400 lines up to its first line that starts with
//!   `#[cfg(test)]`;
//! - a function (`fn`, methods and nested functions included, outside
//!   `#[cfg(test)]` code) spans at most 60 lines, from its `fn` to its
//!   closing brace;
//! - no two files of one crate import each other in a circle (through
//!   `use crate::…`, `use super::…`, `use self::…` or such a path in the
//!   code; see `modules.rs` for how a path finds its file).
//!
//! A file whose first 15 lines say why it is long (the words "long
//! because") may break the first two rules.
//!
//! The sources are read as text, so this test binary links only `std` and
//! builds in seconds: `lex.rs` tokenizes (comments and literals are no
//! code), `uses.rs` reads use trees, `items.rs` what one file holds,
//! `modules.rs` a crate's module tree and which file imports which, and
//! `circles.rs` finds the circles. Run it alone with
//! `cargo test -p sundial-tests --test structure`.

mod circles;
mod items;
mod lex;
mod modules;
mod uses;

use std::{
    collections::{BTreeMap, BTreeSet},
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
};

use modules::CrateTree;

const FILE_LINES: usize = 400;
const FN_LINES: usize = 60;
const HEAD_LINES: usize = 15;

/// The workspace: the folder above this package's.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace above tests/")
        .to_path_buf()
}

/// Each crate's `src` folder, by name.
fn crate_sources(root: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = fs::read_dir(root.join("crates"))
        .expect("crates/")
        .map(|e| e.expect("an entry of crates/").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    out.sort();
    out
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in fs::read_dir(&d).expect("a source folder") {
            let path = entry.expect("a source entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A crate's roots: `lib.rs`, `main.rs`, and each `bin/` target.
fn crate_roots(src: &Path) -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = ["lib.rs", "main.rs"]
        .iter()
        .map(|f| src.join(f))
        .filter(|p| p.is_file())
        .collect();
    let bin = src.join("bin");
    if bin.is_dir() {
        for entry in fs::read_dir(&bin).expect("src/bin") {
            let path = entry.expect("a bin entry").path();
            let main = path.join("main.rs");
            if path.extension().is_some_and(|e| e == "rs") {
                roots.push(path);
            } else if main.is_file() {
                roots.push(main);
            }
        }
    }
    roots
}

/// A production source file.
struct Source {
    /// Relative to the workspace, with `/`.
    name: String,
    text: String,
}

/// The production sources and each crate's module trees.
struct Workspace {
    sources: Vec<Source>,
    trees: Vec<CrateTree>,
}

impl Workspace {
    fn load() -> Self {
        let root = workspace();
        let name = |p: &Path| {
            let rel = p.strip_prefix(&root).unwrap_or(p);
            rel.components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/")
        };
        let read = |p: &Path| fs::read_to_string(p).ok();
        let mut trees = Vec::new();
        let mut test_files = BTreeSet::new();
        let mut sources = Vec::new();
        for src in crate_sources(&root) {
            for crate_root in crate_roots(&src) {
                let tree = CrateTree::load(&crate_root, &read);
                test_files.extend(tree.test_files.iter().cloned());
                trees.push(tree);
            }
            for file in rust_files(&src) {
                if !test_files.contains(&file) {
                    let text = fs::read_to_string(&file).expect("a source file");
                    sources.push(Source {
                        name: name(&file),
                        text,
                    });
                }
            }
        }
        for tree in &mut trees {
            for file in &mut tree.files {
                file.path = PathBuf::from(name(&file.path));
            }
        }
        Self { sources, trees }
    }
}

/// Whether the first 15 lines say why the file is long ("long because",
/// in any case, across a line break of a comment too).
fn says_why(text: &str) -> bool {
    let head: Vec<&str> = text
        .lines()
        .take(HEAD_LINES)
        .map(|l| {
            l.trim()
                .trim_start_matches('/')
                .trim_start_matches(['!', '*'])
        })
        .collect();
    let words = head.join(" ").to_lowercase();
    words
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .contains("long because")
}

/// Lines before the first line that starts with `#[cfg(test)]`.
fn lines_before_tests(text: &str) -> usize {
    text.lines()
        .take_while(|l| !l.starts_with("#[cfg(test)]"))
        .count()
}

#[test]
fn production_files_are_at_most_400_lines_up_to_their_tests() {
    let ws = Workspace::load();
    let long: Vec<String> = ws
        .sources
        .iter()
        .filter(|s| !says_why(&s.text))
        .filter_map(|s| {
            let n = lines_before_tests(&s.text);
            (n > FILE_LINES).then(|| format!("  {}: {n} lines", s.name))
        })
        .collect();
    assert!(
        long.is_empty(),
        "{} production files are over {FILE_LINES} lines up to their first `#[cfg(test)]` line \
         (split each by concept, or say why in its first {HEAD_LINES} lines with \"long because\"):\n{}",
        long.len(),
        long.join("\n")
    );
}

#[test]
fn production_functions_are_at_most_60_lines() {
    let ws = Workspace::load();
    let mut long = Vec::new();
    for s in ws.sources.iter().filter(|s| !says_why(&s.text)) {
        let parsed = items::parse(&lex::tokenize(&s.text));
        let mut fns = parsed.fns;
        fns.sort_by_key(|f| f.first);
        for f in fns {
            let n = f.last - f.first + 1;
            if n > FN_LINES {
                long.push(format!("  {}:{} fn {}: {n} lines", s.name, f.first, f.name));
            }
        }
    }
    assert!(
        long.is_empty(),
        "{} production functions span more than {FN_LINES} lines, from `fn` to closing brace \
         (split each into steps with names, or say why in the file's first {HEAD_LINES} lines \
         with \"long because\"):\n{}",
        long.len(),
        long.join("\n")
    );
}

#[test]
fn no_files_of_a_crate_import_each_other_in_a_circle() {
    let ws = Workspace::load();
    let mut seen = BTreeSet::new();
    let mut report = String::new();
    let mut count = 0;
    for tree in &ws.trees {
        let edges = tree.edges();
        let pairs: BTreeSet<(usize, usize)> = edges.keys().copied().collect();
        let path = |i: usize| tree.files[i].path.display().to_string();
        for circle in circles::circles(tree.files.len(), &pairs) {
            let mut files: Vec<String> = circle.iter().map(|&i| path(i)).collect();
            files.sort();
            if !seen.insert(files.clone()) {
                continue; // the same files under another root of the crate
            }
            count += 1;
            let _ = writeln!(
                report,
                "circle {count}: {} files: {}",
                files.len(),
                files.join(", ")
            );
            let mut ties: BTreeMap<(String, String), String> = BTreeMap::new();
            for (&(a, b), import) in &edges {
                if circle.contains(&a) && circle.contains(&b) {
                    ties.insert(
                        (path(a), path(b)),
                        format!("line {}: {}", import.line, import.text),
                    );
                }
            }
            for ((a, b), import) in ties {
                let _ = writeln!(report, "  {a} -> {b} ({import})");
            }
        }
    }
    assert!(
        count == 0,
        "{count} circles of imports between files of one crate (each file of a circle reaches \
         every other through the imports shown, one per pair; break one, e.g. by moving what \
         both sides need into a file of its own):\n{report}"
    );
}

#[cfg(test)]
mod tests {
    use super::{lines_before_tests, says_why};

    #[test]
    fn a_file_is_counted_up_to_its_first_line_that_starts_with_cfg_test() {
        assert_eq!(
            lines_before_tests("a\nb\n    #[cfg(test)]\nc\n#[cfg(test)]\nd\n"),
            4
        );
        assert_eq!(lines_before_tests("a\nb\n"), 2);
    }

    #[test]
    fn a_file_says_why_it_is_long_in_its_first_15_lines() {
        assert!(says_why(
            "//! The ring.\n//!\n//! Long because the golden vectors stay together."
        ));
        assert!(says_why(
            "//! This file is long\n//! because it is one table."
        ));
        let late = format!("{}// long because", "\n".repeat(15));
        assert!(!says_why(&late));
        assert!(!says_why("//! Not long, because short."));
    }
}
