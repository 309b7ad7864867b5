//! A Rust tokenizer just good enough for the structure checks: identifiers,
//! punctuation (`::` as one token) and literals, each with the line it
//! starts on. Comments (doc comments too) are dropped, and a string, raw
//! string, byte string or char literal is one token, so that a brace or a
//! path inside one is never seen as code.

/// What a token is; the text of a literal does not matter here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Tok {
    /// A word: an identifier or a keyword (`r#type` keeps its `r#`).
    Ident(String),
    /// `::`
    PathSep,
    /// Any other punctuation, one character at a time.
    Punct(char),
    /// A string, char, byte or number literal.
    Literal,
    /// A lifetime or a loop label (`'a`).
    Lifetime,
}

#[derive(Debug, Clone)]
pub(crate) struct Token {
    pub(crate) tok: Tok,
    pub(crate) line: usize,
}

impl Token {
    /// Whether this is the word `word`.
    pub(crate) fn is(&self, word: &str) -> bool {
        matches!(&self.tok, Tok::Ident(w) if w == word)
    }

    pub(crate) fn ident(&self) -> Option<&str> {
        match &self.tok {
            Tok::Ident(w) => Some(w),
            _ => None,
        }
    }

    pub(crate) fn punct(&self, c: char) -> bool {
        self.tok == Tok::Punct(c)
    }
}

/// The tokens of `src`, comments and whitespace left out.
pub(crate) fn tokenize(src: &str) -> Vec<Token> {
    let mut lexer = Lexer {
        c: src.chars().collect(),
        i: 0,
        line: 1,
        out: Vec::new(),
    };
    lexer.run();
    lexer.out
}

struct Lexer {
    c: Vec<char>,
    i: usize,
    line: usize,
    out: Vec<Token>,
}

impl Lexer {
    fn at(&self, k: usize) -> Option<char> {
        self.c.get(self.i + k).copied()
    }

    fn push(&mut self, tok: Tok, line: usize) {
        self.out.push(Token { tok, line });
    }

    /// Moves past one character, counting lines.
    fn bump(&mut self) {
        if self.at(0) == Some('\n') {
            self.line += 1;
        }
        self.i += 1;
    }

    fn run(&mut self) {
        while let Some(ch) = self.at(0) {
            let line = self.line;
            match ch {
                _ if ch.is_whitespace() => self.bump(),
                '/' if self.at(1) == Some('/') => {
                    while self.at(0).is_some_and(|c| c != '\n') {
                        self.bump();
                    }
                }
                '/' if self.at(1) == Some('*') => self.block_comment(),
                '"' => {
                    self.bump();
                    self.string();
                    self.push(Tok::Literal, line);
                }
                '\'' => self.quote(),
                ':' if self.at(1) == Some(':') => {
                    self.i += 2;
                    self.push(Tok::PathSep, line);
                }
                _ if ch.is_ascii_digit() => self.number(),
                _ if ch == '_' || ch.is_alphabetic() => self.word(),
                _ => {
                    self.bump();
                    self.push(Tok::Punct(ch), line);
                }
            }
        }
    }

    /// `/* … */`, nested ones included.
    fn block_comment(&mut self) {
        let mut depth = 0;
        while self.at(0).is_some() {
            if self.at(0) == Some('/') && self.at(1) == Some('*') {
                depth += 1;
                self.i += 2;
            } else if self.at(0) == Some('*') && self.at(1) == Some('/') {
                depth -= 1;
                self.i += 2;
                if depth == 0 {
                    return;
                }
            } else {
                self.bump();
            }
        }
    }

    /// The rest of a string with escapes, after its opening quote.
    fn string(&mut self) {
        while let Some(c) = self.at(0) {
            self.bump();
            match c {
                '\\' => self.bump(),
                '"' => return,
                _ => {}
            }
        }
    }

    /// The rest of a raw string, at its first `#` or quote: `r#"…"#`.
    fn raw_string(&mut self) {
        let mut hashes = 0;
        while self.at(0) == Some('#') {
            hashes += 1;
            self.i += 1;
        }
        self.bump(); // the opening quote
        while let Some(c) = self.at(0) {
            self.bump();
            if c == '"' && (0..hashes).all(|k| self.at(k) == Some('#')) {
                self.i += hashes;
                return;
            }
        }
    }

    /// A char literal (`'x'`, `'\n'`, `'\u{1F600}'`) or a lifetime (`'a`).
    fn quote(&mut self) {
        let line = self.line;
        if self.at(1) == Some('\\') {
            self.i += 2;
            self.bump(); // the escaped character
            while self.at(0).is_some_and(|c| c != '\'') {
                self.bump();
            }
            self.i += 1;
            self.push(Tok::Literal, line);
        } else if self.at(2) == Some('\'') {
            self.i += 1;
            self.bump();
            self.i += 1;
            self.push(Tok::Literal, line);
        } else {
            self.i += 1;
            while self.at(0).is_some_and(is_word_char) {
                self.i += 1;
            }
            self.push(Tok::Lifetime, line);
        }
    }

    fn number(&mut self) {
        let line = self.line;
        while let Some(c) = self.at(0) {
            let decimal_point = c == '.' && self.at(1).is_some_and(|d| d.is_ascii_digit());
            if !(is_word_char(c) || decimal_point) {
                break;
            }
            self.i += 1;
        }
        self.push(Tok::Literal, line);
    }

    /// A word, or a literal with a prefix (`b"…"`, `r#"…"#`, `b'x'`), or
    /// a raw identifier (`r#type`).
    fn word(&mut self) {
        let line = self.line;
        let start = self.i;
        while self.at(0).is_some_and(is_word_char) {
            self.i += 1;
        }
        let word: String = self.c[start..self.i].iter().collect();
        let (next, after) = (self.at(0), self.at(1));
        match (word.as_str(), next) {
            ("r" | "br" | "cr", Some('"')) => self.raw_string(),
            ("r" | "br" | "cr", Some('#')) if matches!(after, Some('"' | '#')) => {
                self.raw_string();
            }
            ("r", Some('#')) => {
                self.i += 1;
                let at = self.i;
                while self.at(0).is_some_and(is_word_char) {
                    self.i += 1;
                }
                let raw: String = self.c[at..self.i].iter().collect();
                self.push(Tok::Ident(format!("r#{raw}")), line);
                return;
            }
            ("b" | "c", Some('"')) => {
                self.i += 1;
                self.string();
            }
            ("b", Some('\'')) => {
                self.quote(); // pushes the literal
                return;
            }
            _ => {
                self.push(Tok::Ident(word), line);
                return;
            }
        }
        self.push(Tok::Literal, line);
    }
}

/// The index of the bracket that closes the one at `open` (or the end).
pub(crate) fn close(t: &[Token], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, tok) in t.iter().enumerate().skip(open) {
        match tok.tok {
            Tok::Punct('(' | '[' | '{') => depth += 1,
            Tok::Punct(')' | ']' | '}') => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    t.len()
}

fn is_word_char(c: char) -> bool {
    c == '_' || c.is_alphanumeric()
}

#[cfg(test)]
mod tests {
    use super::{Tok, close, tokenize};

    fn shapes(src: &str) -> String {
        tokenize(src)
            .iter()
            .map(|t| match &t.tok {
                Tok::Ident(w) => w.clone(),
                Tok::PathSep => "::".to_owned(),
                Tok::Punct(c) => c.to_string(),
                Tok::Literal => "LIT".to_owned(),
                Tok::Lifetime => "'LT".to_owned(),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn braces_and_paths_in_literals_and_comments_are_no_tokens() {
        let src = r####"
            let a = "}{ crate::x \" }"; // } crate::y
            /* { /* nested } */ crate::z } */
            let b = r#"} "{ crate::w"#;
            let c = br##"}"#"##; let d = b"}"; let e = c"{";
            let f = '{'; let g = '\''; let h = b'}'; let i = '\u{7D}';
            /// doc } comment
            //! inner { doc
        "####;
        assert_eq!(
            shapes(src),
            "let a = LIT ; let b = LIT ; let c = LIT ; let d = LIT ; let e = LIT ; \
             let f = LIT ; let g = LIT ; let h = LIT ; let i = LIT ;"
        );
    }

    #[test]
    fn lifetimes_labels_raw_identifiers_and_numbers() {
        assert_eq!(
            shapes(
                "fn f<'a>(x: &'a str) -> u8 { 'outer: loop { break 'outer; } r#type + 1.5e3 + 0..2 }"
            ),
            "fn f < 'LT > ( x : & 'LT str ) - > u8 { 'LT : loop { break 'LT ; } r#type + LIT + LIT . . LIT }"
        );
        assert_eq!(shapes("crate::a::B"), "crate :: a :: B");
    }

    #[test]
    fn lines_count_inside_literals_and_comments() {
        let src = "a\n\"x\ny\"\n/* 1\n2 */ b\nr#\"\n\"# c\n'\\n' d";
        let lines: Vec<(String, usize)> = tokenize(src)
            .iter()
            .filter_map(|t| Some((t.ident()?.to_owned(), t.line)))
            .collect();
        let want = [("a", 1), ("b", 5), ("c", 7), ("d", 8)];
        assert_eq!(
            lines,
            want.map(|(w, l)| (w.to_owned(), l)).to_vec(),
            "{src}"
        );
    }

    #[test]
    fn a_bracket_closes_at_its_pair_whatever_literals_and_comments_lie_between() {
        let t = tokenize(r#"f({ "}", '}', [1, 2] /* ) */ }) + x"#);
        assert!(t[1].punct('('));
        let end = close(&t, 1);
        assert!(t[end].punct(')'), "{:?}", t[end]);
        assert_eq!(t.len() - end, 3, "`) + x` follow");
        assert_eq!(
            close(&tokenize("( [ )"), 0),
            3,
            "an unclosed bracket runs to the end"
        );
    }
}
