//! The loops of the C sources, from the preprocessor's output.
//!
//! Each file is preprocessed with the definitions of the build
//! (`LUA_USE_LINUX`, `LUA_COMPAT_5_3`), so a loop inside a macro is found
//! where the macro is used, in the function that runs it, and code left
//! out by `#if` is left out here too. The output is tokenized (the
//! preprocessor has removed the comments; strings and characters are
//! skipped as tokens), and within every function body each token that
//! starts a loop is an item: `for`, `while` (but the `while` that ends a
//! `do`), `do`, a `goto` to a label earlier in the function, and a
//! computed `goto *` (the interpreter's dispatch). A tokenizer cannot
//! mistake a loop for anything else or miss one: C has no other loop
//! statement. The same pass records calls of the C library's scanning
//! functions (`memcpy`, `strlen`, `snprintf`, …: a loop each, in the C
//! library) and the direct call graph, whose cycles are the recursions.
//! Items whose tokens come from a system header are left out (the C
//! library's own code), those from our sources and Lua's headers are kept.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use super::{Item, Kind};

/// The C library's functions that scan or copy memory (a loop each).
pub const SCANS: &[&str] = &[
    "memcpy",
    "memmove",
    "memcmp",
    "memchr",
    "memset",
    "memmem",
    "strlen",
    "strcmp",
    "strncmp",
    "strcoll",
    "strchr",
    "strrchr",
    "strpbrk",
    "strspn",
    "strcspn",
    "strstr",
    "strcpy",
    "strncpy",
    "strcat",
    "strtod",
    "strtol",
    "strtoul",
    "strtoll",
    "strerror",
    "strftime",
    "snprintf",
    "sprintf",
    "vsnprintf",
    "fprintf",
    "fputs",
    "fwrite",
    "fread",
    "fgets",
    "fscanf",
    "getline",
    "qsort",
    "bsearch",
    "setvbuf",
    "tmpnam",
    "mkstemp",
    "getenv",
    "system",
    "remove",
    "rename",
    "fopen",
    "freopen",
    "popen",
    "dlopen",
    "dlsym",
    "dlerror",
    "localeconv",
    "setlocale",
    "strxfrm",
    "toupper",
    "tolower",
];

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Punct(char),
    Arrow,
    Literal,
}

struct Token {
    tok: Tok,
    /// The file the token comes from (the preprocessor's line markers).
    file: usize,
}

/// Tokenize preprocessor output, keeping for each token the file it comes
/// from (index into `files`).
fn tokenize(text: &str, files: &mut Vec<String>) -> Vec<Token> {
    let mut out = Vec::new();
    let mut current = 0usize;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if let Some(rest) = trimmed.strip_prefix('#') {
            // `# 123 "file" flags`
            if let Some(start) = rest.find('"') {
                let name = &rest[start + 1..];
                if let Some(end) = name.find('"') {
                    let name = name[..end].to_owned();
                    current = match files.iter().position(|f| *f == name) {
                        Some(i) => i,
                        None => {
                            files.push(name);
                            files.len() - 1
                        }
                    };
                }
            }
            continue;
        }
        let bytes = line.as_bytes();
        let mut i = 0;
        while i < bytes.len() {
            let c = bytes[i] as char;
            if c.is_ascii_whitespace() {
                i += 1;
            } else if c.is_ascii_alphabetic() || c == '_' {
                let start = i;
                while i < bytes.len()
                    && ((bytes[i] as char).is_ascii_alphanumeric() || bytes[i] == b'_')
                {
                    i += 1;
                }
                out.push(Token {
                    tok: Tok::Ident(line[start..i].to_owned()),
                    file: current,
                });
            } else if c.is_ascii_digit()
                || (c == '.' && i + 1 < bytes.len() && bytes[i + 1].is_ascii_digit())
            {
                while i < bytes.len()
                    && ((bytes[i] as char).is_ascii_alphanumeric()
                        || bytes[i] == b'.'
                        || bytes[i] == b'_'
                        || ((bytes[i] == b'+' || bytes[i] == b'-')
                            && matches!(bytes[i - 1], b'e' | b'E' | b'p' | b'P')))
                {
                    i += 1;
                }
                out.push(Token {
                    tok: Tok::Literal,
                    file: current,
                });
            } else if c == '"' || c == '\'' {
                i += 1;
                while i < bytes.len() && bytes[i] as char != c {
                    if bytes[i] == b'\\' {
                        i += 1;
                    }
                    i += 1;
                }
                i += 1;
                out.push(Token {
                    tok: Tok::Literal,
                    file: current,
                });
            } else if c == '-' && i + 1 < bytes.len() && bytes[i + 1] == b'>' {
                i += 2;
                out.push(Token {
                    tok: Tok::Arrow,
                    file: current,
                });
            } else {
                i += 1;
                out.push(Token {
                    tok: Tok::Punct(c),
                    file: current,
                });
            }
        }
    }
    out
}

fn ident(t: &Token) -> Option<&str> {
    match &t.tok {
        Tok::Ident(s) => Some(s),
        _ => None,
    }
}

fn is(t: &Token, c: char) -> bool {
    t.tok == Tok::Punct(c)
}

/// Index of the token that closes the bracket opened at `open`.
fn matching(tokens: &[Token], open: usize) -> usize {
    let (o, c) = match tokens[open].tok {
        Tok::Punct('(') => ('(', ')'),
        Tok::Punct('[') => ('[', ']'),
        _ => ('{', '}'),
    };
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        if is(t, o) {
            depth += 1;
        } else if is(t, c) {
            depth -= 1;
            if depth == 0 {
                return i;
            }
        }
    }
    tokens.len() - 1
}

/// A function definition: its name, the file it is in, its body.
struct Function {
    name: String,
    file: usize,
    body: std::ops::Range<usize>,
}

const KEYWORDS: &[&str] = &[
    "if",
    "while",
    "for",
    "switch",
    "return",
    "sizeof",
    "do",
    "else",
    "case",
    "goto",
    "break",
    "continue",
    "default",
    "__attribute__",
    "__typeof__",
    "typeof",
    "__extension__",
    "_Static_assert",
    "__asm__",
    "asm",
];

fn functions(tokens: &[Token]) -> Vec<Function> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if is(&tokens[i], '{') {
            let close = matching(tokens, i);
            // A function body: `name ( … ) {` (attributes may follow `)`).
            let mut j = i;
            while j > 0 && is(&tokens[j - 1], ')') {
                // skip back over `( … )` groups; the first one back that
                // follows an identifier other than `__attribute__` is the
                // parameter list
                let mut depth = 0usize;
                let mut k = j - 1;
                loop {
                    if is(&tokens[k], ')') {
                        depth += 1;
                    } else if is(&tokens[k], '(') {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    if k == 0 {
                        break;
                    }
                    k -= 1;
                }
                if let Some(name) = k.checked_sub(1).and_then(|p| ident(&tokens[p])) {
                    if name == "__attribute__" {
                        j = k - 1;
                        continue;
                    }
                    if !KEYWORDS.contains(&name) {
                        out.push(Function {
                            name: name.to_owned(),
                            file: tokens[k - 1].file,
                            body: i..close + 1,
                        });
                    }
                }
                break;
            }
            i = close + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// What one translation unit contributes.
#[derive(Default)]
pub struct Unit {
    pub items: Vec<Item>,
    /// (file, caller) -> callee names (direct calls).
    pub calls: BTreeMap<(String, String), BTreeSet<String>>,
    /// (file, function) of every definition.
    pub defined: BTreeSet<(String, String)>,
}

/// Preprocess `path` and extract its items; `keep` says which origin
/// files count (our sources and Lua's headers, not the system's).
pub fn unit(path: &Path, include: &Path, keep: &dyn Fn(&str) -> Option<String>) -> Unit {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
    let output = Command::new(&cc)
        .args(["-E", "-DLUA_USE_LINUX", "-DLUA_COMPAT_5_3", "-I"])
        .arg(include)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cc} -E (the C compiler of the build): {e}"));
    assert!(
        output.status.success(),
        "{cc} -E {} failed:\n{}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let mut files = Vec::new();
    let tokens = tokenize(&text, &mut files);
    let mut unit = Unit::default();
    for function in functions(&tokens) {
        let Some(file) = keep(&files[function.file]) else {
            continue;
        };
        unit.defined.insert((file.clone(), function.name.clone()));
        let body = &tokens[function.body.clone()];
        let mut counts: BTreeMap<String, usize> = BTreeMap::new();
        let mut add = |kind: Kind, what: String, items: &mut Vec<Item>| {
            let n = counts.entry(what.clone()).or_default();
            *n += 1;
            items.push(Item {
                file: file.clone(),
                function: function.name.clone(),
                kind,
                what: format!("{what} {n}"),
            });
        };
        // the `while` that ends a `do`
        let mut do_tails = BTreeSet::new();
        // labels and their positions
        let mut labels: BTreeMap<String, usize> = BTreeMap::new();
        for i in 0..body.len() {
            if let Some(name) = ident(&body[i])
                && i + 1 < body.len()
                && is(&body[i + 1], ':')
                && i > 0
                && (is(&body[i - 1], ';') || is(&body[i - 1], '{') || is(&body[i - 1], '}'))
                && name != "default"
            {
                labels.insert(name.to_owned(), i);
            }
        }
        let mut computed_goto = false;
        for i in 0..body.len() {
            let Some(name) = ident(&body[i]) else {
                continue;
            };
            let after = body.get(i + 1);
            match name {
                "for" => add(Kind::Loop, "for".to_owned(), &mut unit.items),
                "while" if !do_tails.contains(&i) => {
                    add(Kind::Loop, "while".to_owned(), &mut unit.items)
                }
                "do" => {
                    // find the `while` that ends it
                    let end = if after.is_some_and(|t| is(t, '{')) {
                        matching(body, i + 1) + 1
                    } else {
                        let mut j = i + 1;
                        let mut depth = 0i32;
                        while j < body.len() {
                            if is(&body[j], '(') || is(&body[j], '{') {
                                depth += 1;
                            } else if is(&body[j], ')') || is(&body[j], '}') {
                                depth -= 1;
                            } else if is(&body[j], ';') && depth == 0 {
                                break;
                            }
                            j += 1;
                        }
                        j + 1
                    };
                    if body.get(end).and_then(ident) == Some("while") {
                        do_tails.insert(end);
                    }
                    add(Kind::Loop, "do".to_owned(), &mut unit.items);
                }
                "goto" => {
                    if after.is_some_and(|t| is(t, '*')) {
                        computed_goto = true;
                    } else if let Some(label) = after.and_then(ident)
                        && labels.get(label).is_some_and(|&at| at < i)
                    {
                        add(Kind::Loop, "goto".to_owned(), &mut unit.items);
                    }
                }
                _ => {
                    let called = after.is_some_and(|t| is(t, '('));
                    let member = i > 0 && (is(&body[i - 1], '.') || body[i - 1].tok == Tok::Arrow);
                    if called && !member {
                        if SCANS.contains(&name) {
                            add(Kind::Scan, name.to_owned(), &mut unit.items);
                        }
                        if !KEYWORDS.contains(&name) {
                            unit.calls
                                .entry((file.clone(), function.name.clone()))
                                .or_default()
                                .insert(name.to_owned());
                        }
                    }
                }
            }
        }
        if computed_goto {
            add(Kind::Loop, "goto*".to_owned(), &mut unit.items);
        }
    }
    unit
}
