//! `use` declarations: the names a use tree brings in, each with the path
//! it comes from (`use a::{b as c, d::*}`).

use crate::lex::{Tok, Token};

/// Where a path starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Root {
    /// `crate::`
    Crate,
    /// `super::`, repeated this many times.
    Super(usize),
    /// `self::`
    SelfMod,
    /// A plain name: a child module, or another crate.
    Plain,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UsePath {
    pub(crate) root: Root,
    /// The names after the root.
    pub(crate) segs: Vec<String>,
}

impl UsePath {
    /// A path from its words, root words included.
    pub(crate) fn new(words: &[String]) -> Option<Self> {
        let supers = words.iter().take_while(|w| *w == "super").count();
        let (root, rest) = match words.first().map(String::as_str) {
            Some("crate") => (Root::Crate, &words[1..]),
            Some("self") => (Root::SelfMod, &words[1..]),
            Some("super") => (Root::Super(supers), &words[supers..]),
            Some(_) => (Root::Plain, words),
            None => return None,
        };
        Some(Self {
            root,
            segs: rest.to_vec(),
        })
    }
}

/// One name a `use` brings in: `use a::b::{c as d, e::*}` gives
/// (`d`, `a::b::c`) and a glob of `a::b::e`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UseLeaf {
    Name(String, UsePath),
    Glob(UsePath),
}

/// `crate::a::b`, `super::super::a`: a path as written.
pub(crate) fn render(p: &UsePath) -> String {
    let mut words: Vec<&str> = match p.root {
        Root::Crate => vec!["crate"],
        Root::SelfMod => vec!["self"],
        Root::Super(n) => vec!["super"; n],
        Root::Plain => Vec::new(),
    };
    words.extend(p.segs.iter().map(String::as_str));
    words.join("::")
}

/// What the `use` declaration whose tree starts at token `i` (after the
/// `use`) brings in, and the index after its `;`.
pub(crate) fn use_decl(t: &[Token], i: usize) -> (Vec<UseLeaf>, usize) {
    let mut leaves = Vec::new();
    let end = use_tree(t, i, &mut Vec::new(), &mut leaves);
    (leaves, end)
}

/// Reads a use tree at `i` under `prefix`; returns the index after it
/// (after the `;` at the top).
fn use_tree(t: &[Token], mut i: usize, prefix: &mut Vec<String>, out: &mut Vec<UseLeaf>) -> usize {
    let depth = prefix.len();
    if t.get(i).is_some_and(|x| x.tok == Tok::PathSep) {
        // `use ::other_crate::…`: never this crate.
        i += 1;
        prefix.push("::".to_owned());
    }
    while let Some(tok) = t.get(i) {
        match &tok.tok {
            Tok::Punct('{') => {
                i += 1;
                while t.get(i).is_some_and(|x| !x.punct('}')) {
                    let mut inner = prefix.clone();
                    let at = i;
                    i = use_tree(t, i, &mut inner, out);
                    if i == at || t.get(i).is_some_and(|x| x.punct(',')) {
                        i += 1; // a comma, or a token no tree starts with
                    }
                }
                i += 1;
                break;
            }
            Tok::Punct('*') => {
                out.extend(leaf(prefix, None, true));
                i += 1;
                break;
            }
            Tok::Ident(w) => {
                prefix.push(w.clone());
                i += 1;
                if t.get(i).is_some_and(|x| x.tok == Tok::PathSep) {
                    i += 1;
                    continue;
                }
                let alias = if t.get(i).is_some_and(|x| x.is("as")) {
                    i += 2;
                    t.get(i - 1).and_then(Token::ident)
                } else {
                    None
                };
                out.extend(leaf(prefix, alias, false));
                break;
            }
            _ => break,
        }
    }
    prefix.truncate(depth);
    if depth == 0 && t.get(i).is_some_and(|x| x.punct(';')) {
        i += 1;
    }
    i
}

fn leaf(words: &[String], alias: Option<&str>, glob: bool) -> Option<UseLeaf> {
    if words.first().is_some_and(|w| w == "::") {
        return None;
    }
    let mut words = words.to_vec();
    if words.last().is_some_and(|w| w == "self") && words.len() > 1 {
        words.pop(); // `a::{self}` is `a`
    }
    let path = UsePath::new(&words)?;
    if glob {
        return Some(UseLeaf::Glob(path));
    }
    let name = alias.or(words.last().map(String::as_str))?.to_owned();
    Some(UseLeaf::Name(name, path))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lex::tokenize;

    fn leaves(src: &str) -> Vec<String> {
        let toks = tokenize(src);
        let (leaves, end) = use_decl(&toks, 1);
        assert_eq!(end, toks.len(), "{src}: the whole declaration is read");
        leaves
            .iter()
            .map(|l| match l {
                UseLeaf::Name(name, p) => format!("{name} = {}", render(p)),
                UseLeaf::Glob(p) => format!("{}::*", render(p)),
            })
            .collect()
    }

    #[test]
    fn a_grouped_tree_gives_each_name_with_its_whole_path() {
        assert_eq!(
            leaves("use crate::{a::{B, c as d, e::{self, *}}, f};"),
            [
                "B = crate::a::B",
                "d = crate::a::c",
                "e = crate::a::e",
                "crate::a::e::*",
                "f = crate::f",
            ]
        );
    }

    #[test]
    fn roots_are_told_apart_and_other_crates_kept_plain() {
        assert_eq!(
            leaves("use super::super::g::H;"),
            ["H = super::super::g::H"]
        );
        assert_eq!(leaves("use self::i::{J as K};"), ["K = self::i::J"]);
        assert_eq!(
            leaves("use std::{io, fmt::Write as _};"),
            ["io = std::io", "_ = std::fmt::Write"]
        );
        assert_eq!(leaves("use super::*;"), ["super::*"]);
        assert!(
            leaves("use ::other::L;").is_empty(),
            "a `::` path is never this crate"
        );
        let p = UsePath::new(&["super".to_owned(), "super".to_owned(), "x".to_owned()]);
        assert_eq!(
            p,
            Some(UsePath {
                root: Root::Super(2),
                segs: vec!["x".to_owned()]
            })
        );
    }
}
