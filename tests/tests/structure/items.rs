//! What one source file holds, read from its tokens: its functions with
//! the lines they span, its `mod` declarations and inline modules, the
//! items each of its modules defines and imports, and every path into the
//! crate (`use crate::…`, `use super::…`, `use self::…`, and inline
//! `crate::a::b`, `super::x`, `self::x` in the code).
//!
//! Code under `#[cfg(test)]` (a test module, or any other item) is left
//! out, as are visibilities (`pub(in crate::a)` is no import).

use std::collections::{BTreeMap, BTreeSet};

use crate::{
    lex::{Tok, Token, close},
    uses::{self, Root, UseLeaf, UsePath, render},
};

/// A function: its name and the lines from its `fn` to its closing brace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FnSpan {
    pub(crate) name: String,
    pub(crate) first: usize,
    pub(crate) last: usize,
}

/// A `mod name;` (its file is found elsewhere), in the inline module
/// `scope` of its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModDecl {
    pub(crate) scope: Vec<String>,
    pub(crate) name: String,
    /// Under `#[cfg(test)]`.
    pub(crate) test: bool,
}

/// What one module of the file defines and imports.
#[derive(Debug, Clone, Default)]
pub(crate) struct Scope {
    pub(crate) defs: BTreeSet<String>,
    pub(crate) imports: BTreeMap<String, UsePath>,
    pub(crate) globs: Vec<UsePath>,
}

/// A path into the crate, where it was written.
#[derive(Debug, Clone)]
pub(crate) struct Ref {
    /// The inline module of the file it is in (empty: the file's own).
    pub(crate) scope: Vec<String>,
    pub(crate) path: UsePath,
    pub(crate) line: usize,
    /// As written, e.g. `use super::shard::Shard` or `crate::keys::slot_of`.
    pub(crate) text: String,
}

/// What one file holds.
#[derive(Debug, Default)]
pub(crate) struct Parsed {
    pub(crate) fns: Vec<FnSpan>,
    pub(crate) mods: Vec<ModDecl>,
    /// Per inline module path (empty: the file's own module).
    pub(crate) scopes: BTreeMap<Vec<String>, Scope>,
    pub(crate) refs: Vec<Ref>,
}

/// A brace-delimited block being walked.
struct Frame {
    /// The module its code is in (inline path within the file).
    module: Vec<String>,
    /// Opened by a module (the file, or `mod x {`), so its items are the
    /// module's items.
    module_scope: bool,
    /// Opened as the body of this function (name, line of its `fn`).
    body_of: Option<(String, usize)>,
}

/// Reads the tokens of one file.
pub(crate) fn parse(toks: &[Token]) -> Parsed {
    let mut w = Walker {
        t: toks,
        out: Parsed::default(),
        stack: vec![Frame {
            module: Vec::new(),
            module_scope: true,
            body_of: None,
        }],
        opens: BTreeMap::new(),
    };
    w.out.scopes.insert(Vec::new(), Scope::default());
    w.walk();
    w.out
}

struct Walker<'a> {
    t: &'a [Token],
    out: Parsed,
    stack: Vec<Frame>,
    /// Braces seen ahead that open a module or a function body.
    opens: BTreeMap<usize, Frame>,
}

impl Walker<'_> {
    fn word(&self, i: usize) -> Option<&str> {
        self.t.get(i).and_then(Token::ident)
    }

    fn punct(&self, i: usize, c: char) -> bool {
        self.t.get(i).is_some_and(|t| t.punct(c))
    }

    fn sep(&self, i: usize) -> bool {
        self.t.get(i).is_some_and(|t| t.tok == Tok::PathSep)
    }

    fn frame(&self) -> &Frame {
        self.stack.last().expect("the file's frame")
    }

    fn scope(&mut self) -> &mut Scope {
        let module = self.frame().module.clone();
        self.out.scopes.entry(module).or_default()
    }

    fn walk(&mut self) {
        let mut i = 0;
        while i < self.t.len() {
            i = self.step(i);
        }
    }

    /// Reads what starts at token `i`; returns where to go on.
    fn step(&mut self, i: usize) -> usize {
        let t = &self.t[i];
        match &t.tok {
            Tok::Punct('#') => self.attribute(i),
            Tok::Punct('{') => {
                let frame = self.opens.remove(&i).unwrap_or_else(|| Frame {
                    module: self.frame().module.clone(),
                    module_scope: false,
                    body_of: None,
                });
                self.stack.push(frame);
                i + 1
            }
            Tok::Punct('}') => {
                if self.stack.len() > 1 {
                    let frame = self.stack.pop().expect("a frame");
                    if let Some((name, first)) = frame.body_of {
                        self.out.fns.push(FnSpan {
                            name,
                            first,
                            last: t.line,
                        });
                    }
                }
                i + 1
            }
            Tok::Ident(w) => match w.as_str() {
                "pub" if self.punct(i + 1, '(') => close(self.t, i + 1) + 1,
                "use" if !self.punct(i + 1, '<') => self.use_decl(i),
                "mod" => self.module(i, false),
                "fn" => self.function(i),
                "struct" | "enum" | "union" | "trait" | "type" | "const" | "static" => {
                    if let Some(name) = self.word(i + 1).filter(|n| *n != "fn") {
                        let name = name.to_owned();
                        self.define(name);
                    }
                    i + 1
                }
                "macro_rules" if self.punct(i + 1, '!') => {
                    if let Some(name) = self.word(i + 2) {
                        let name = name.to_owned();
                        self.define(name);
                    }
                    i + 1
                }
                "crate" | "super" | "self" if self.sep(i + 1) && !self.after_sep_or_dollar(i) => {
                    self.inline_path(i)
                }
                _ => i + 1,
            },
            _ => i + 1,
        }
    }

    fn after_sep_or_dollar(&self, i: usize) -> bool {
        i > 0 && (self.sep(i - 1) || self.punct(i - 1, '$'))
    }

    fn define(&mut self, name: String) {
        if self.frame().module_scope {
            self.scope().defs.insert(name);
        }
    }

    /// `#[…]` or `#![…]`; an item under `#[cfg(test)]` is skipped whole.
    fn attribute(&mut self, i: usize) -> usize {
        let inner = self.punct(i + 1, '!');
        let open = if inner { i + 2 } else { i + 1 };
        if !self.punct(open, '[') {
            return i + 1;
        }
        let end = close(self.t, open);
        let words: Vec<&Tok> = self.t[open + 1..end].iter().map(|t| &t.tok).collect();
        let cfg_test = [
            Tok::Ident("cfg".to_owned()),
            Tok::Punct('('),
            Tok::Ident("test".to_owned()),
            Tok::Punct(')'),
        ];
        if inner || !words.iter().copied().eq(cfg_test.iter()) {
            return end + 1;
        }
        // Further attributes of the same item, then the item.
        let mut j = end + 1;
        while self.punct(j, '#') && self.punct(j + 1, '[') {
            j = close(self.t, j + 1) + 1;
        }
        let mut k = j;
        while self.word(k) == Some("pub") {
            k = if self.punct(k + 1, '(') {
                close(self.t, k + 1) + 1
            } else {
                k + 1
            };
        }
        if self.word(k) == Some("mod") {
            self.module(k, true);
        }
        skip_item(self.t, j)
    }

    /// `mod name;` or `mod name { … }` at `i`.
    fn module(&mut self, i: usize, test: bool) -> usize {
        let Some(name) = self.word(i + 1).map(str::to_owned) else {
            return i + 1;
        };
        if self.punct(i + 2, ';') {
            let scope = self.frame().module.clone();
            self.out.mods.push(ModDecl { scope, name, test });
            return i + 3;
        }
        if self.punct(i + 2, '{') && !test {
            let mut module = self.frame().module.clone();
            module.push(name);
            self.out.scopes.entry(module.clone()).or_default();
            self.opens.insert(
                i + 2,
                Frame {
                    module,
                    module_scope: true,
                    body_of: None,
                },
            );
        }
        i + 2
    }

    /// `fn name …`: its body's brace, the first `{` outside the brackets
    /// of its signature (a const generic `Foo<{ N }>` is in one), is
    /// marked, so that its closing brace ends the span. A `fn(…)` pointer
    /// type is no function.
    fn function(&mut self, i: usize) -> usize {
        let Some(name) = self.word(i + 1).map(str::to_owned) else {
            return i + 1;
        };
        self.define(name.clone());
        let (mut depth, mut angles) = (0usize, 0usize);
        let mut j = i + 2;
        while let Some(t) = self.t.get(j) {
            let arrow = j > 0 && (self.punct(j - 1, '-') || self.punct(j - 1, '='));
            match t.tok {
                Tok::Punct('(' | '[') => depth += 1,
                Tok::Punct(')' | ']') => depth = depth.saturating_sub(1),
                Tok::Punct('<') => angles += 1,
                Tok::Punct('>') if !arrow => angles = angles.saturating_sub(1),
                Tok::Punct(';' | '}') if depth == 0 && angles == 0 => break,
                Tok::Punct('{') if depth == 0 && angles == 0 => {
                    let module = self.frame().module.clone();
                    let body_of = Some((name, self.t[i].line));
                    self.opens.insert(
                        j,
                        Frame {
                            module,
                            module_scope: false,
                            body_of,
                        },
                    );
                    break;
                }
                Tok::Punct('{') => j = close(self.t, j),
                _ => {}
            }
            j += 1;
        }
        i + 2
    }

    /// `use …;` at `i`.
    fn use_decl(&mut self, i: usize) -> usize {
        let (leaves, end) = uses::use_decl(self.t, i + 1);
        let line = self.t[i].line;
        let module_scope = self.frame().module_scope;
        let module = self.frame().module.clone();
        for leaf in leaves {
            let path = match &leaf {
                UseLeaf::Name(_, p) | UseLeaf::Glob(p) => p.clone(),
            };
            if path.root != Root::Plain {
                let glob = if matches!(leaf, UseLeaf::Glob(_)) {
                    "::*"
                } else {
                    ""
                };
                self.out.refs.push(Ref {
                    scope: module.clone(),
                    text: format!("use {}{glob}", render(&path)),
                    path: path.clone(),
                    line,
                });
            }
            if module_scope {
                match leaf {
                    UseLeaf::Name(name, p) => {
                        self.scope().imports.insert(name, p);
                    }
                    UseLeaf::Glob(p) => self.scope().globs.push(p),
                }
            }
        }
        end
    }

    /// `crate::a::b`, `super::super::x` or `self::x` in the code, at `i`.
    fn inline_path(&mut self, i: usize) -> usize {
        let mut words = vec![self.word(i).expect("a root").to_owned()];
        let mut j = i + 1;
        while self.sep(j) {
            match self.word(j + 1) {
                Some(w) => words.push(w.to_owned()),
                None => break,
            }
            j += 2;
        }
        if let Some(path) = UsePath::new(&words).filter(|p| !p.segs.is_empty()) {
            self.out.refs.push(Ref {
                scope: self.frame().module.clone(),
                text: render(&path),
                line: self.t[i].line,
                path,
            });
        }
        j
    }
}

/// Where the item that starts at `i` ends: after its `;`, or after the
/// block that closes it (`fn`, `mod`, `impl`, `struct S { … }`); an item
/// with an initializer (`const`, `static`, `let`, `type`, `use`) ends at
/// its `;` whatever braces it holds.
pub(crate) fn skip_item(t: &[Token], i: usize) -> usize {
    let mut k = i;
    while t.get(k).is_some_and(|x| x.is("pub")) {
        k += if t.get(k + 1).is_some_and(|x| x.punct('(')) {
            close(t, k + 1) + 1 - k
        } else {
            1
        };
    }
    let first = t.get(k).and_then(Token::ident).unwrap_or_default();
    let fn_next = t.get(k + 1).is_some_and(|x| x.is("fn"));
    let to_semicolon =
        matches!(first, "use" | "static" | "let" | "type") || (first == "const" && !fn_next);
    let mut j = i;
    while let Some(tok) = t.get(j) {
        match tok.tok {
            Tok::Punct(';') => return j + 1,
            Tok::Punct('}') => return j,
            Tok::Punct('{') if !to_semicolon => return close(t, j) + 1,
            Tok::Punct('(' | '[' | '{') => j = close(t, j),
            _ => {}
        }
        j += 1;
    }
    j
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lex::tokenize;

    fn spans(src: &str) -> Vec<(String, usize, usize)> {
        let mut f: Vec<_> = parse(&tokenize(src))
            .fns
            .into_iter()
            .map(|f| (f.name, f.first, f.last))
            .collect();
        f.sort_by_key(|(_, first, _)| *first);
        f
    }

    fn p(root: Root, segs: &[&str]) -> UsePath {
        UsePath {
            root,
            segs: segs.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    #[test]
    fn a_function_ends_at_its_own_brace_whatever_its_literals_and_comments_hold() {
        let src = r##"fn a() {
    let s = "}}}";
    let r = r#"} "# ;
    let c = '}';
    // }
    /* } */
    if true { let x = S { y: '{' }; }
}
impl T {
    pub(crate) async fn method(&self) -> Result<(), E>
    where
        E: Fn() -> u8,
    {
        fn nested() {}
        let f: fn(u8) -> u8 = g;
        let closure = || { 1 };
    }
}
trait U { fn declared(&self); fn with_default() {
} }
fn generic<const N: usize>() -> Foo<{ N + 1 }>
where
    [(); N]: Sized,
    F: Fn(u8) -> Vec<u8>,
{
}
"##;
        assert_eq!(
            spans(src),
            [
                ("a".to_owned(), 1, 8),
                ("method".to_owned(), 10, 17),
                ("nested".to_owned(), 14, 14),
                ("with_default".to_owned(), 19, 20),
                ("generic".to_owned(), 21, 26),
            ]
        );
    }

    #[test]
    fn test_code_is_left_out() {
        let src = "fn kept() {}\n#[cfg(test)]\nmod tests {\n    use crate::x::Y;\n    fn t() {}\n}\n\
                   #[cfg(test)]\n#[allow(dead_code)]\nfn helper() { crate::z::w(); }\n\
                   #[cfg(test)]\nmod more;\n#[cfg(not(test))]\nfn other() {}\n";
        let parsed = parse(&tokenize(src));
        let names: Vec<&str> = parsed.fns.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["kept", "other"]);
        assert!(parsed.refs.is_empty(), "{:?}", parsed.refs);
        assert_eq!(
            parsed.mods,
            [ModDecl {
                scope: vec![],
                name: "more".to_owned(),
                test: true
            }]
        );
    }

    #[test]
    fn a_module_records_its_imports_and_each_path_into_the_crate() {
        let src = "pub(crate) use crate::{a::{B, c as d, e::{self, *}}, f};\n\
                   use super::super::g::H;\nuse self::i::J;\nuse std::io;\nuse ::k::L;\n\
                   pub(in crate::m) fn n() {}";
        let parsed = parse(&tokenize(src));
        let scope = &parsed.scopes[&Vec::new()];
        let imports: Vec<(&str, &UsePath)> =
            scope.imports.iter().map(|(k, v)| (k.as_str(), v)).collect();
        assert_eq!(
            imports,
            [
                ("B", &p(Root::Crate, &["a", "B"])),
                ("H", &p(Root::Super(2), &["g", "H"])),
                ("J", &p(Root::SelfMod, &["i", "J"])),
                ("d", &p(Root::Crate, &["a", "c"])),
                ("e", &p(Root::Crate, &["a", "e"])),
                ("f", &p(Root::Crate, &["f"])),
                ("io", &p(Root::Plain, &["std", "io"])),
            ]
        );
        assert_eq!(scope.globs, [p(Root::Crate, &["a", "e"])]);
        let refs: Vec<&str> = parsed.refs.iter().map(|r| r.text.as_str()).collect();
        assert_eq!(
            refs,
            [
                "use crate::a::B",
                "use crate::a::c",
                "use crate::a::e",
                "use crate::a::e::*",
                "use crate::f",
                "use super::super::g::H",
                "use self::i::J",
            ]
        );
        assert!(scope.defs.contains("n"));
    }

    #[test]
    fn inline_paths_are_found_in_code_but_not_in_literals_or_visibilities() {
        let src = "mod inner {\n    pub(super) fn f() -> crate::a::B {\n        \
                   let s = \"crate::no::Path\";\n        super::c::d(self::e::F, $crate::g::H)\n    }\n}\n\
                   mod file;";
        let parsed = parse(&tokenize(src));
        let refs: Vec<(&[String], &str, usize)> = parsed
            .refs
            .iter()
            .map(|r| (r.scope.as_slice(), r.text.as_str(), r.line))
            .collect();
        let inner = ["inner".to_owned()];
        assert_eq!(
            refs,
            [
                (&inner[..], "crate::a::B", 2),
                (&inner[..], "super::c::d", 4),
                (&inner[..], "self::e::F", 4),
            ]
        );
        assert!(parsed.scopes[&inner.to_vec()].defs.contains("f"));
        assert_eq!(parsed.mods.len(), 1, "{:?}", parsed.mods);
    }

    #[test]
    fn module_items_are_told_from_items_in_blocks() {
        let src = "pub struct A;\nenum B {}\nconst C: u8 = 1;\nstatic D: u8 = 1;\ntype E = u8;\n\
                   trait F { type G; const H: u8; fn i(); }\nimpl A { fn j() { struct K; } }\n\
                   macro_rules! l { () => {} }\npub const fn m() {}";
        let parsed = parse(&tokenize(src));
        let defs: Vec<&str> = parsed.scopes[&Vec::new()]
            .defs
            .iter()
            .map(String::as_str)
            .collect();
        assert_eq!(defs, ["A", "B", "C", "D", "E", "F", "l", "m"]);
    }
}
