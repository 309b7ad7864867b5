//! What can be checked of the docs by reading them: OPERATIONS' contents
//! list every section, in order, with working anchors; no table in the
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
    let (_, text) = doc("OPERATIONS.md");
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
    assert!(headings.len() >= 20, "{headings:?}");
    assert_eq!(listed, headings, "Contents and the sections differ");
}

#[test]
fn no_reference_table_is_cut_by_a_blank_line() {
    for name in ["API.md", "METRICS.md", "OPERATIONS.md", "BENCHMARKS.md"] {
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
