//! A crate's modules and which of its files import which.
//!
//! The module tree comes from the crate root (`lib.rs`, `main.rs`) and its
//! `mod x;` declarations (`x.rs` or `x/mod.rs` beside a `mod.rs`, `lib.rs`
//! or `main.rs`, else in the folder named after the file) and inline
//! `mod x { … }` blocks; `#[path]` attributes are not followed (none is
//! used). A path into the crate points at the file that defines the item
//! it names: walking the path, the longest prefix that is a module gives
//! the file, and the next name is looked up there. If that module only
//! imports the name (`pub use shard::Shard` in a `mod.rs`), the import is
//! followed to where the item is defined; a name imported from another
//! crate is no edge; a name it neither defines nor imports (made by a
//! macro) points at the module's file. So an item defined in a `mod.rs` or
//! `lib.rs` points at that file, not at its children, and a `mod child;`
//! declaration alone is no import.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use crate::{
    items::{self, Parsed},
    lex,
    uses::{Root, UsePath},
};

/// A file of one crate, with the module path it is.
#[derive(Debug)]
pub(crate) struct File {
    pub(crate) path: PathBuf,
    pub(crate) module: Vec<String>,
    pub(crate) parsed: Parsed,
}

/// One import that makes `from` depend on `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Import {
    pub(crate) line: usize,
    pub(crate) text: String,
}

#[derive(Debug, Default)]
pub(crate) struct CrateTree {
    pub(crate) files: Vec<File>,
    /// Module path → (file index, inline module path within the file).
    modules: BTreeMap<Vec<String>, (usize, Vec<String>)>,
    /// Files that only `#[cfg(test)] mod x;` declarations reach.
    pub(crate) test_files: BTreeSet<PathBuf>,
}

impl CrateTree {
    /// The crate whose root file is `root`, read through `read`.
    pub(crate) fn load(root: &Path, read: &dyn Fn(&Path) -> Option<String>) -> Self {
        let mut tree = Self::default();
        let mut queue = vec![(root.to_path_buf(), Vec::new())];
        while let Some((path, module)) = queue.pop() {
            let Some(src) = read(&path) else { continue };
            let parsed = items::parse(&lex::tokenize(&src));
            let index = tree.files.len();
            for inline in parsed.scopes.keys() {
                let mut full = module.clone();
                full.extend(inline.iter().cloned());
                tree.modules.insert(full, (index, inline.clone()));
            }
            for decl in &parsed.mods {
                let dir = child_dir(&path, &decl.scope);
                let found = [
                    dir.join(format!("{}.rs", decl.name)),
                    dir.join(&decl.name).join("mod.rs"),
                ]
                .into_iter()
                .find(|p| read(p).is_some());
                let Some(child) = found else { continue };
                if decl.test {
                    tree.test_files.insert(child);
                    continue;
                }
                let mut child_module = module.clone();
                child_module.extend(decl.scope.iter().cloned());
                child_module.push(decl.name.clone());
                queue.push((child, child_module));
            }
            tree.files.push(File {
                path,
                module,
                parsed,
            });
        }
        tree
    }

    /// Every file → file import: for each pair, the first import by line.
    pub(crate) fn edges(&self) -> BTreeMap<(usize, usize), Import> {
        let mut out: BTreeMap<(usize, usize), Import> = BTreeMap::new();
        for (from, file) in self.files.iter().enumerate() {
            for r in &file.parsed.refs {
                let mut here = file.module.clone();
                here.extend(r.scope.iter().cloned());
                let Some(target) = self.absolute(&r.path, &here) else {
                    continue;
                };
                let Some(to) = self.resolve(&target, 0) else {
                    continue;
                };
                if to == from {
                    continue;
                }
                let import = Import {
                    line: r.line,
                    text: r.text.clone(),
                };
                out.entry((from, to))
                    .and_modify(|i| {
                        if import.line < i.line {
                            *i = import.clone();
                        }
                    })
                    .or_insert(import);
            }
        }
        out
    }

    /// `path` written in module `here`, from the crate root; `None` when it
    /// names another crate or climbs above the root.
    fn absolute(&self, path: &UsePath, here: &[String]) -> Option<Vec<String>> {
        let mut out = match path.root {
            Root::Crate => Vec::new(),
            Root::SelfMod => here.to_vec(),
            Root::Super(n) => here[..here.len().checked_sub(n)?].to_vec(),
            Root::Plain => {
                // A plain name in a `use` is a child module of `here`, or
                // another crate.
                let mut child = here.to_vec();
                child.push(path.segs.first()?.clone());
                if !self.modules.contains_key(&child) {
                    return None;
                }
                here.to_vec()
            }
        };
        out.extend(path.segs.iter().cloned());
        Some(out)
    }

    /// The file that defines what `path` (from the crate root) names.
    fn resolve(&self, path: &[String], depth: usize) -> Option<usize> {
        self.lookup(path, depth).map(|(file, _)| file)
    }

    /// The file that defines what `path` names, and whether it was found
    /// defined (rather than guessed as the module's file, for a name the
    /// module neither defines nor imports).
    fn lookup(&self, path: &[String], depth: usize) -> Option<(usize, bool)> {
        let n = (0..=path.len())
            .rev()
            .find(|n| self.modules.contains_key(&path[..*n]))?;
        let (file, inline) = &self.modules[&path[..n]];
        let Some(name) = path.get(n) else {
            return Some((*file, true));
        };
        let scope = &self.files[*file].parsed.scopes[inline];
        if scope.defs.contains(name) {
            return Some((*file, true));
        }
        if depth > 16 {
            return Some((*file, false));
        }
        let module = &path[..n];
        if let Some(import) = scope.imports.get(name) {
            let mut target = self.absolute(import, module)?;
            target.extend(path[n + 1..].iter().cloned());
            return self.lookup(&target, depth + 1);
        }
        for glob in &scope.globs {
            let Some(mut target) = self.absolute(glob, module) else {
                continue;
            };
            target.extend(path[n..].iter().cloned());
            if let Some((found, true)) = self.lookup(&target, depth + 1) {
                return Some((found, true));
            }
        }
        Some((*file, false))
    }
}

/// The folder where `mod x;` in `file`, inside its inline modules `scope`,
/// finds `x.rs`.
fn child_dir(file: &Path, scope: &[String]) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(""));
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let mut dir = if matches!(stem, "mod" | "lib" | "main") {
        parent.to_path_buf()
    } else {
        parent.join(stem)
    };
    for s in scope {
        dir.push(s);
    }
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A crate held in memory: (path, source).
    fn tree(files: &[(&str, &str)]) -> (CrateTree, BTreeMap<(String, String), String>) {
        let files: BTreeMap<PathBuf, String> = files
            .iter()
            .map(|(p, s)| (PathBuf::from(p), (*s).to_owned()))
            .collect();
        let tree = CrateTree::load(Path::new("src/lib.rs"), &|p| files.get(p).cloned());
        let name = |i: usize| tree.files[i].path.display().to_string();
        let edges = tree
            .edges()
            .into_iter()
            .map(|((a, b), i)| ((name(a), name(b)), i.text))
            .collect();
        (tree, edges)
    }

    fn pairs(edges: &BTreeMap<(String, String), String>) -> Vec<(&str, &str, &str)> {
        edges
            .iter()
            .map(|((a, b), t)| (a.as_str(), b.as_str(), t.as_str()))
            .collect()
    }

    #[test]
    fn modules_are_found_beside_mod_rs_and_in_the_folder_of_a_file() {
        let (tree, _) = tree(&[
            ("src/lib.rs", "mod a;\nmod b;\nmod inline { mod deep; }"),
            ("src/a.rs", "mod c;"),
            ("src/a/c.rs", ""),
            ("src/b/mod.rs", "mod d;\n#[cfg(test)]\nmod tests;"),
            ("src/b/d.rs", ""),
            ("src/b/tests.rs", ""),
            ("src/inline/deep.rs", ""),
        ]);
        let mut files: Vec<(String, String)> = tree
            .files
            .iter()
            .map(|f| (f.path.display().to_string(), f.module.join("::")))
            .collect();
        files.sort();
        let want = [
            ("src/a.rs", "a"),
            ("src/a/c.rs", "a::c"),
            ("src/b/d.rs", "b::d"),
            ("src/b/mod.rs", "b"),
            ("src/inline/deep.rs", "inline::deep"),
            ("src/lib.rs", ""),
        ];
        assert_eq!(files, want.map(|(a, b)| (a.to_owned(), b.to_owned())));
        assert_eq!(
            tree.test_files.into_iter().collect::<Vec<_>>(),
            [PathBuf::from("src/b/tests.rs")]
        );
    }

    #[test]
    fn an_item_of_a_mod_rs_points_at_it_and_a_re_export_at_where_it_is_defined() {
        let (_, edges) = tree(&[
            (
                "src/lib.rs",
                "mod e;\npub use e::Shard;\npub struct Config;",
            ),
            (
                "src/e/mod.rs",
                "mod shard;\nmod nodes;\npub use shard::Shard;\npub struct Own;\n\
                 pub use std::io::Error;",
            ),
            ("src/e/shard.rs", "pub struct Shard;\nuse super::Own;"),
            (
                "src/e/nodes.rs",
                "use super::{Shard, Error};\nfn f() -> crate::Shard { crate::Config; todo!() }",
            ),
        ]);
        assert_eq!(
            pairs(&edges),
            [
                ("src/e/nodes.rs", "src/e/shard.rs", "use super::Shard"),
                ("src/e/nodes.rs", "src/lib.rs", "crate::Config"),
                ("src/e/shard.rs", "src/e/mod.rs", "use super::Own"),
            ],
            "a `mod` declaration and a plain re-export are no import; an item of another crate is none"
        );
    }

    #[test]
    fn paths_resolve_from_inline_modules_globs_and_enum_variants() {
        let (_, edges) = tree(&[
            ("src/lib.rs", "mod a;\nmod b;\npub use b::*;"),
            (
                "src/a.rs",
                "mod inner {\n    use super::super::b::Kind::One;\n    fn f() { self::g(); }\n    fn g() {}\n}\n\
                 fn h() { crate::Two; crate::made_by_a_macro(); }",
            ),
            ("src/b.rs", "pub enum Kind { One }\npub struct Two;"),
        ]);
        assert_eq!(
            pairs(&edges),
            [
                ("src/a.rs", "src/b.rs", "use super::super::b::Kind::One"),
                ("src/a.rs", "src/lib.rs", "crate::made_by_a_macro"),
            ]
        );
    }
}
