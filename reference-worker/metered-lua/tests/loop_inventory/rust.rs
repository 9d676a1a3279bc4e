//! The loops of Rust sources the guest can reach.
//!
//! The source is tokenized (comments, strings, raw strings, byte strings
//! and character literals skipped; lifetimes told from characters), and
//! within every function body each token that starts a loop is an item:
//! `for` (not the `for` of `impl Trait for Type` or of `for<'a>`),
//! `while`, `loop`. Rust has no other loop statement; loops inside the
//! standard library are recorded where an iterator is consumed or a text
//! searched (`collect`, `sum`, `any`, `contains`, … below: a loop each, in
//! the library; adapters whose `next` can skip any number of items, such as
//! `split` and `filter`; `std::str::from_utf8` and the like), and recursion is a function that calls itself (`name(`,
//! `Self::name(`, `self.name(`). Copies (`to_string`, `to_owned`, `clone`)
//! are not listed: each allocates what it copies, so it is bounded as
//! that allocation is (LOOPS.md, "Rust").

use std::collections::BTreeMap;

use super::{Item, Kind};

/// Iterator and slice methods that loop over what they are given.
pub const CONSUMERS: &[&str] = &[
    "collect",
    "count",
    "sum",
    "product",
    "any",
    "all",
    "find",
    "find_map",
    "position",
    "rposition",
    "for_each",
    "try_for_each",
    "fold",
    "try_fold",
    "reduce",
    "max_by",
    "min_by",
    "max_by_key",
    "min_by_key",
    "last",
    "nth",
    "join",
    "concat",
    "extend",
    "retain",
    "dedup",
    "sort",
    "sort_by",
    "sort_by_key",
    "sort_unstable",
    "sort_unstable_by",
    "sort_unstable_by_key",
    "contains",
    "rfind",
    "replace",
    "split_once",
    "rsplit_once",
    // Adapters whose `next` can skip any number of items (a `split`'s
    // first piece scans to the first separator), so one `next` is a loop.
    "split",
    "splitn",
    "rsplit",
    "rsplitn",
    "split_terminator",
    "split_whitespace",
    "split_ascii_whitespace",
    "lines",
    "filter",
    "filter_map",
    "skip_while",
    "matches",
    "match_indices",
    // Text checked or converted whole.
    "trim",
    "trim_start",
    "trim_end",
    "trim_matches",
    "trim_start_matches",
    "trim_end_matches",
    "eq_ignore_ascii_case",
    "to_ascii_lowercase",
    "to_ascii_uppercase",
    "to_lowercase",
    "to_uppercase",
    "repeat",
];

/// Functions called by path (`std::str::from_utf8(`) that scan what they
/// are given.
pub const PATH_SCANS: &[&str] = &["from_utf8", "from_utf8_lossy"];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    Literal,
}

fn tokenize(text: &str) -> Vec<Tok> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == '/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == '/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if (c == 'r' || c == 'b')
            && (b.get(i + 1) == Some(&b'#')
                || b.get(i + 1) == Some(&b'"')
                || (c == 'b' && b.get(i + 1) == Some(&b'r')))
            && raw_or_byte_string(b, i).is_some()
        {
            i = raw_or_byte_string(b, i).unwrap_or(b.len());
            out.push(Tok::Literal);
        } else if c == '"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
            out.push(Tok::Literal);
        } else if c == '\'' {
            // a character literal or a lifetime
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
                out.push(Tok::Literal);
            } else {
                // one (possibly multi-byte) character, then a quote?
                let rest = &text[i + 1..];
                let mut chars = rest.char_indices();
                let next = chars.next();
                let after = chars.next();
                match (next, after) {
                    (Some(_), Some((at, '\''))) => {
                        i += 1 + at + 1;
                        out.push(Tok::Literal);
                    }
                    _ => {
                        // a lifetime: skip the quote and the name
                        i += 1;
                        while i < b.len()
                            && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_')
                        {
                            i += 1;
                        }
                    }
                }
            }
        } else if c.is_ascii_alphabetic() || c == '_' || !c.is_ascii() {
            let start = i;
            while i < b.len()
                && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_' || b[i] >= 0x80)
            {
                i += 1;
            }
            out.push(Tok::Ident(text[start..i].to_owned()));
        } else if c.is_ascii_digit() {
            while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            // `1.5` but not `1..n` or `x.0.y`
            if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
                i += 1;
                while i < b.len() && ((b[i] as char).is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
            }
            out.push(Tok::Literal);
        } else {
            i += 1;
            out.push(Tok::Punct(c));
        }
    }
    out
}

/// End of a raw string (`r"…"`, `r#"…"#`) or byte string (`b"…"`,
/// `br#"…"#`, `b'…'`) starting at `i`.
fn raw_or_byte_string(b: &[u8], mut i: usize) -> Option<usize> {
    let mut raw = false;
    if b[i] == b'b' {
        i += 1;
        if b.get(i) == Some(&b'\'') {
            i += 1;
            if b.get(i) == Some(&b'\\') {
                i += 1;
            }
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            return Some(i + 1);
        }
    }
    if b.get(i) == Some(&b'r') {
        raw = true;
        i += 1;
    }
    let mut hashes = 0;
    while b.get(i) == Some(&b'#') {
        hashes += 1;
        i += 1;
    }
    if b.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    while i < b.len() {
        if !raw && b[i] == b'\\' {
            i += 2;
            continue;
        }
        if b[i] == b'"'
            && b[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&h| h == b'#')
                .count()
                == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(b.len())
}

/// The tokens without the items under `#[cfg(test)]` (unit tests are no
/// code a guest reaches).
fn without_tests(tokens: Vec<Tok>) -> Vec<Tok> {
    let mut out = Vec::with_capacity(tokens.len());
    let mut i = 0;
    while i < tokens.len() {
        let attribute = ["#", "[", "cfg", "(", "test", ")", "]"];
        let is_test = attribute.iter().enumerate().all(|(k, want)| {
            tokens.get(i + k).is_some_and(|t| match t {
                Tok::Ident(s) => s == want,
                Tok::Punct(c) => want.len() == 1 && want.starts_with(*c),
                Tok::Literal => false,
            })
        });
        if !is_test {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        // skip the item: up to its `;`, or its `{ … }`
        i += attribute.len();
        while i < tokens.len() && !is(&tokens[i], '{') && !is(&tokens[i], ';') {
            i += 1;
        }
        if i < tokens.len() && is(&tokens[i], '{') {
            let mut depth = 0usize;
            while i < tokens.len() {
                if is(&tokens[i], '{') {
                    depth += 1;
                } else if is(&tokens[i], '}') {
                    depth -= 1;
                    if depth == 0 {
                        break;
                    }
                }
                i += 1;
            }
        }
        i += 1;
    }
    out
}

fn is(t: &Tok, c: char) -> bool {
    *t == Tok::Punct(c)
}

fn ident(t: &Tok) -> Option<&str> {
    match t {
        Tok::Ident(s) => Some(s),
        _ => None,
    }
}

/// The items of one Rust file (`name`: how the inventory names it).
pub fn items(name: &str, text: &str) -> Vec<Item> {
    let tokens = without_tests(tokenize(text));
    let mut items = Vec::new();
    // Functions: `fn name … {`, nested ones attributed to themselves.
    // A stack of (function, brace depth at which its body opened).
    let mut stack: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending: Option<String> = None; // a `fn` whose body has not opened
    let mut in_impl_header = false;
    let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut add = |function: &str, kind: Kind, what: &str, items: &mut Vec<Item>| {
        let n = counts
            .entry((function.to_owned(), what.to_owned()))
            .or_default();
        *n += 1;
        items.push(Item {
            file: name.to_owned(),
            function: function.to_owned(),
            kind,
            what: format!("{what} {n}"),
        });
    };
    for i in 0..tokens.len() {
        let t = &tokens[i];
        match t {
            Tok::Punct('{') => {
                depth += 1;
                in_impl_header = false;
                if let Some(f) = pending.take() {
                    stack.push((f, depth));
                }
            }
            Tok::Punct('}') => {
                if stack.last().is_some_and(|(_, d)| *d == depth) {
                    stack.pop();
                }
                depth = depth.saturating_sub(1);
            }
            Tok::Punct(';') => {
                // `fn f();` in a trait: no body
                pending = None;
                in_impl_header = false;
            }
            Tok::Ident(word) => {
                let next = tokens.get(i + 1);
                match word.as_str() {
                    "fn" => {
                        if let Some(n) = next.and_then(ident) {
                            pending = Some(n.to_owned());
                        }
                    }
                    "impl" => in_impl_header = true,
                    _ => {}
                }
                let Some((function, _)) = stack.last() else {
                    continue;
                };
                let function = function.clone();
                match word.as_str() {
                    "for" if !in_impl_header && !next.is_some_and(|t| is(t, '<')) => {
                        add(&function, Kind::Loop, "for", &mut items)
                    }
                    "while" => add(&function, Kind::Loop, "while", &mut items),
                    "loop" => add(&function, Kind::Loop, "loop", &mut items),
                    _ => {
                        let called = next.is_some_and(|t| is(t, '('))
                            || (next.is_some_and(|t| is(t, ':'))
                                && tokens.get(i + 2).is_some_and(|t| is(t, ':'))
                                && tokens.get(i + 3).is_some_and(|t| is(t, '<')));
                        if !called {
                            continue;
                        }
                        let method = i > 0 && is(&tokens[i - 1], '.');
                        let path = i >= 2 && is(&tokens[i - 1], ':') && is(&tokens[i - 2], ':');
                        if (method && CONSUMERS.contains(&word.as_str()))
                            || (path && PATH_SCANS.contains(&word.as_str()))
                        {
                            add(&function, Kind::Scan, word, &mut items);
                        }
                        // recursion: `f(`, `Self::f(`, `self.f(`
                        if *word == function {
                            let via_self =
                                (method && i >= 2 && ident(&tokens[i - 2]) == Some("self"))
                                    || (i >= 3
                                        && is(&tokens[i - 1], ':')
                                        && ident(&tokens[i - 3]) == Some("Self"))
                                    || !(method || (i > 0 && is(&tokens[i - 1], ':')));
                            if via_self {
                                add(&function, Kind::Recursion, "recursion", &mut items);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
    // one recursion item per function, however many calls
    let mut seen = std::collections::BTreeSet::new();
    items.retain(|item| {
        item.kind != Kind::Recursion || seen.insert((item.file.clone(), item.function.clone()))
    });
    for item in &mut items {
        if item.kind == Kind::Recursion {
            item.what = "recursion 1".to_owned();
        }
    }
    items
}
