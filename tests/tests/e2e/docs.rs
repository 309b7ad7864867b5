//! What can be checked of the docs by reading them: the contents of
//! OPERATIONS, POOLS and INSTALL list every section, in order, with working
//! anchors; no table in the
//! reference docs is cut in two by a blank line.

use std::path::{Path, PathBuf};

fn doc(name: &str) -> (PathBuf, String) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../docs")
        .join(name);
    let text = std::fs::read_to_string(&path).expect("read doc");
    (path, text)
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces
/// as hyphens.
fn anchor(title: &str) -> String {
    title
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

#[test]
fn operations_lists_every_section_in_its_contents() {
    lists_every_section("OPERATIONS.md", 14);
}

#[test]
fn pools_lists_every_section_in_its_contents() {
    lists_every_section("POOLS.md", 8);
}

#[test]
fn install_lists_every_section_in_its_contents() {
    lists_every_section("INSTALL.md", 8);
}

/// A doc's contents name every `##` and `###` heading, in order, with
/// working anchors.
fn lists_every_section(name: &str, at_least: usize) {
    let (_, text) = doc(name);
    let mut headings = Vec::new();
    let mut listed = Vec::new();
    let mut in_contents = false;
    for line in text.lines() {
        if let Some(t) = line.strip_prefix("## ") {
            in_contents = t == "Contents";
            if !in_contents {
                headings.push((2, t.to_owned()));
            }
        } else if let Some(t) = line.strip_prefix("### ") {
            headings.push((3, t.to_owned()));
        } else if in_contents && let Some(entry) = line.trim_start().strip_prefix("- [") {
            let level = if line.starts_with("  ") { 3 } else { 2 };
            let (title, link) = entry.split_once("](#").expect("an entry [title](#anchor)");
            assert_eq!(
                link.trim_end_matches(')'),
                anchor(title),
                "the anchor of {title}"
            );
            listed.push((level, title.to_owned()));
        }
    }
    assert!(headings.len() >= at_least, "{name}: {headings:?}");
    assert_eq!(listed, headings, "{name}: Contents and the sections differ");
}

#[test]
fn no_reference_table_is_cut_by_a_blank_line() {
    for name in [
        "API.md",
        "METRICS.md",
        "OPERATIONS.md",
        "POOLS.md",
        "BENCHMARKS.md",
    ] {
        let (path, text) = doc(name);
        let lines: Vec<&str> = text.lines().collect();
        for i in 1..lines.len().saturating_sub(1) {
            let cut = lines[i].is_empty()
                && lines[i - 1].starts_with('|')
                && lines[i + 1].starts_with("| `");
            assert!(
                !cut,
                "{}:{}: a blank line inside a table",
                path.display(),
                i + 1
            );
        }
    }
}

/// Every link to a section of our docs (`[…](FILE.md#anchor)` or
/// `[…](#anchor)`) names a heading, or an `<a id>`, that is there: a
/// section moved to another file leaves no dead link behind.
#[test]
fn links_to_sections_of_the_docs_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    for f in ["README.md", "CHANGELOG.md", "examples/README.md"] {
        files.push(root.join(f));
    }
    let anchors = |path: &Path| -> Vec<String> {
        let text =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut out: Vec<String> = text
            .lines()
            .filter_map(|l| {
                l.trim_start_matches('#')
                    .strip_prefix(' ')
                    .filter(|_| l.starts_with('#'))
            })
            .map(anchor)
            .collect();
        for part in text.split("<a id=\"").skip(1) {
            out.extend(part.split('"').next().map(str::to_owned));
        }
        out
    };
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read");
        for part in text.split("](").skip(1) {
            let link = part.split(')').next().unwrap_or_default();
            let Some((target, section)) = link.split_once('#') else {
                continue;
            };
            if target.contains("://") || !(target.is_empty() || target.ends_with(".md")) {
                continue;
            }
            let path = if target.is_empty() {
                file.clone()
            } else {
                file.parent().expect("dir").join(target)
            };
            assert!(
                anchors(&path).iter().any(|a| a == section),
                "{}: the link {link} names no section there",
                file.display()
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "{checked} links checked");
}
