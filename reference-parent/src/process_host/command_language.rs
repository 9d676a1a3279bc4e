//! The command language of `quirl.process.run` (DESIGN §16.4): POSIX word
//! splitting and quoting, nothing else — and the crate's one POSIX word
//! splitter, which also reads worker command lines (DESIGN §17.2).
//!
//! The rule this parser keeps for commands: **an accepted command yields
//! exactly the argv a POSIX shell would build for it** (with no aliases or
//! functions and the program found on the granted `PATH`). Quoting,
//! backslash escapes and blank-separated words are implemented exactly;
//! every other character or word a shell would treat specially is rejected
//! with `invalid_argument` rather than passed through with a different
//! meaning. The full rule list is in the module documentation of [`super`].
//!
//! A worker command line ([`Dialect::WorkerCommandLine`]) shares the quoting
//! and escape rules but, as DESIGN §17.2 says, "nothing is expanded": the
//! characters a shell would treat specially are taken literally instead of
//! being rejected, and a newline is a blank.

use quirl_lua_protocol::{ErrorContext, records::ErrorCode};

use super::host_error::HostError;

/// Largest accepted command source, in bytes (the v1 host-call bound).
pub const COMMAND_BYTES_MAX: usize = 1_048_576;

/// Program names that only have meaning inside an interactive shell's job
/// table. Rejected as the program (compared by final path component).
const JOB_CONTROL: &[&str] = &["fg", "bg", "jobs", "disown", "wait", "suspend"];

/// Built-ins that change or read shell session state. Without a shell they
/// would either fail or silently do nothing useful, so they are rejected.
const STATEFUL_BUILTINS: &[&str] = &[
    ".", "alias", "break", "cd", "continue", "eval", "exec", "exit", "export", "local", "readonly",
    "return", "set", "shift", "source", "trap", "ulimit", "umask", "unalias", "unset",
];

/// POSIX reserved words (plus `]]`, `function`, `select`; `[[` is already
/// rejected as a glob),
/// recognised only when the first word is written without any quoting.
const RESERVED_WORDS: &[&str] = &[
    "!", "{", "}", "case", "do", "done", "elif", "else", "esac", "fi", "for", "if", "in", "then",
    "until", "while", "]]", "function", "select",
];

/// Which language a line is split in; the two differ only where documented.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// DESIGN §16.4: every construct whose meaning in `sh` differs from a
    /// plain word (operators, expansions, globs, `~`/`#` at a word start,
    /// an unquoted newline or control character) is rejected, and the
    /// first word is checked.
    CommandLanguage,
    /// DESIGN §17.2: quoting and escapes as in `sh`, nothing expanded; a
    /// newline separates words like a blank, and every other character
    /// outside quotes is literal.
    WorkerCommandLine,
}

/// Split `source` into the argument vector it denotes, or reject it.
///
/// Errors always have code `invalid_argument`; the message names the form
/// that was rejected and the context gives its byte offset.
pub fn parse_command(source: &str) -> Result<Vec<String>, HostError> {
    if source.len() > COMMAND_BYTES_MAX {
        return Err(invalid("command exceeds its byte limit")
            .with_context(format!(
                "limit {COMMAND_BYTES_MAX} bytes; observed {} bytes",
                source.len()
            ))
            .with_help("Pass large data through a file instead of the command line"));
    }
    let words = split(source, Dialect::CommandLanguage)?;
    check_words(&words)?;
    Ok(words.into_iter().map(|word| word.text).collect())
}

/// Split `source` into words in `dialect`, without the first-word checks
/// of the command language (an empty list is possible).
pub(crate) fn split_words(source: &str, dialect: Dialect) -> Result<Vec<String>, HostError> {
    Ok(split(source, dialect)?
        .into_iter()
        .map(|word| word.text)
        .collect())
}

fn split(source: &str, dialect: Dialect) -> Result<Vec<Word>, HostError> {
    if let Some(offset) = source.find('\0') {
        return Err(invalid("command contains a NUL byte")
            .with_context(at(offset))
            .with_help("Operating-system arguments cannot contain NUL bytes"));
    }
    Lexer::new(source, dialect).run()
}

#[derive(Debug)]
struct Word {
    text: String,
    /// No quote or backslash appeared in the word.
    plain: bool,
    /// The word starts with an unquoted `NAME=` (a shell variable assignment).
    assignment: bool,
    start: usize,
}

/// How far the current word has matched an assignment prefix `NAME=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AssignmentScan {
    Start,
    Name,
    Matched,
    Failed,
}

struct Lexer<'a> {
    source: &'a str,
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    words: Vec<Word>,
    current: Option<Word>,
    assignment: AssignmentScan,
    /// [`Dialect::WorkerCommandLine`]: shell syntax outside quotes is
    /// literal instead of rejected.
    literal: bool,
}

impl<'a> Lexer<'a> {
    fn new(source: &'a str, dialect: Dialect) -> Self {
        Self {
            literal: dialect == Dialect::WorkerCommandLine,
            source,
            chars: source.char_indices().peekable(),
            words: Vec::new(),
            current: None,
            assignment: AssignmentScan::Start,
        }
    }

    fn run(mut self) -> Result<Vec<Word>, HostError> {
        while let Some((offset, character)) = self.chars.next() {
            match character {
                ' ' | '\t' => self.finish_word(),
                '\n' if self.literal => self.finish_word(),
                '\n' => {
                    return Err(invalid("newline command separator is not supported")
                        .with_context(at(offset))
                        .with_help(
                            "Run one command per call; quote the newline to pass it as an argument",
                        ));
                }
                '\'' => self.single_quoted(offset)?,
                '"' => self.double_quoted(offset)?,
                '\\' => self.unquoted_backslash(offset)?,
                character if self.literal => self.push_unquoted(offset, character),
                '|' | '&' | ';' | '<' | '>' | '(' | ')' => {
                    return Err(self.operator_error(offset));
                }
                '$' => self.dollar(offset, false)?,
                '`' => return Err(backquote_error(offset)),
                '*' | '?' | '[' => {
                    return Err(invalid(format!(
                        "pathname expansion (glob `{character}`) is not supported"
                    ))
                    .with_context(at(offset))
                    .with_help(format!(
                        "Quote the character ('{character}') to pass it literally; commands run without a shell"
                    )));
                }
                '~' if self.current.is_none() => {
                    return Err(invalid("tilde expansion `~` is not supported")
                        .with_context(at(offset))
                        .with_help(
                            "Write the absolute path, or quote the `~` to pass it literally",
                        ));
                }
                '#' if self.current.is_none() => {
                    return Err(invalid("comment `#` is not supported")
                        .with_context(at(offset))
                        .with_help("Quote the `#` to pass it as an argument"));
                }
                character if character.is_control() => {
                    return Err(invalid(format!(
                        "unquoted control character U+{:04X} is not supported",
                        u32::from(character)
                    ))
                    .with_context(at(offset))
                    .with_help("Quote the character to pass it as an argument"));
                }
                character => self.push_unquoted(offset, character),
            }
        }
        self.finish_word();
        Ok(self.words)
    }

    fn word(&mut self, offset: usize) -> &mut Word {
        self.current.get_or_insert_with(|| Word {
            text: String::new(),
            plain: true,
            assignment: false,
            start: offset,
        })
    }

    fn push_unquoted(&mut self, offset: usize, character: char) {
        self.assignment = match (self.assignment, character) {
            (AssignmentScan::Start, 'A'..='Z' | 'a'..='z' | '_') => AssignmentScan::Name,
            (AssignmentScan::Name, 'A'..='Z' | 'a'..='z' | '0'..='9' | '_') => AssignmentScan::Name,
            (AssignmentScan::Name, '=') => AssignmentScan::Matched,
            (AssignmentScan::Matched, _) => AssignmentScan::Matched,
            _ => AssignmentScan::Failed,
        };
        let matched = self.assignment == AssignmentScan::Matched;
        let word = self.word(offset);
        word.text.push(character);
        word.assignment = matched;
    }

    fn push_quoted(&mut self, offset: usize, text: &str) {
        if self.assignment != AssignmentScan::Matched {
            self.assignment = AssignmentScan::Failed;
        }
        let word = self.word(offset);
        word.plain = false;
        word.text.push_str(text);
    }

    fn finish_word(&mut self) {
        if let Some(word) = self.current.take() {
            self.words.push(word);
        }
        self.assignment = AssignmentScan::Start;
    }

    fn single_quoted(&mut self, open: usize) -> Result<(), HostError> {
        // The opening quote alone already starts a (possibly empty) word.
        self.push_quoted(open, "");
        for (offset, character) in self.chars.by_ref() {
            if character == '\'' {
                return Ok(());
            }
            let _ = offset;
            let mut buffer = [0_u8; 4];
            let text = character.encode_utf8(&mut buffer);
            if let Some(word) = self.current.as_mut() {
                word.text.push_str(text);
            }
        }
        Err(invalid("unterminated single quote")
            .with_context(format!("opening quote at byte {open}"))
            .with_help("Close the quote with `'`"))
    }

    fn double_quoted(&mut self, open: usize) -> Result<(), HostError> {
        self.push_quoted(open, "");
        while let Some((offset, character)) = self.chars.next() {
            match character {
                '"' => return Ok(()),
                '\\' => match self.chars.peek().map(|(_, next)| *next) {
                    Some(next @ ('$' | '`' | '"' | '\\')) => {
                        self.chars.next();
                        self.push_quoted(offset, next.encode_utf8(&mut [0_u8; 4]));
                    }
                    Some('\n') => {
                        // Line continuation: both characters disappear.
                        self.chars.next();
                    }
                    _ => self.push_quoted(offset, "\\"),
                },
                '$' if !self.literal => self.dollar(offset, true)?,
                '`' if !self.literal => return Err(backquote_error(offset)),
                character => self.push_quoted(offset, character.encode_utf8(&mut [0_u8; 4])),
            }
        }
        Err(invalid("unterminated double quote")
            .with_context(format!("opening quote at byte {open}"))
            .with_help("Close the quote with `\"`"))
    }

    fn unquoted_backslash(&mut self, offset: usize) -> Result<(), HostError> {
        match self.chars.next() {
            // Line continuation: removed, and it does not end the word.
            Some((_, '\n')) => Ok(()),
            Some((_, next)) => {
                self.push_quoted(offset, next.encode_utf8(&mut [0_u8; 4]));
                Ok(())
            }
            None => Err(invalid("trailing backslash has nothing to escape")
                .with_context(at(offset))
                .with_help("Remove the final `\\` or write `\\\\` for a literal backslash")),
        }
    }

    /// `$` starts an expansion in a shell unless nothing expandable follows.
    fn dollar(&mut self, offset: usize, in_double_quotes: bool) -> Result<(), HostError> {
        let next = self.chars.peek().map(|(_, next)| *next);
        let after = self.source.get(offset + 1..).unwrap_or("");
        let form = match next {
            Some('(') if after.starts_with("((") => Some("arithmetic expansion `$((`"),
            Some('(') => Some("command substitution `$(`"),
            Some('{') => Some("parameter expansion `${`"),
            Some('A'..='Z' | 'a'..='z' | '_') => Some("parameter expansion `$NAME`"),
            Some('0'..='9' | '@' | '*' | '#' | '?' | '-' | '$' | '!') => {
                Some("special parameter expansion `$`")
            }
            Some('\'') if !in_double_quotes => Some("dollar-single-quote string `$'`"),
            Some('"') if !in_double_quotes => Some("locale string `$\"`"),
            _ => None,
        };
        if let Some(form) = form {
            return Err(invalid(format!("{form} is not supported"))
                .with_context(at(offset))
                .with_help(
                    "Commands run without a shell and nothing is expanded; write the value itself, \
                     or escape the `$` (`\\$`) or single-quote it to pass it literally",
                ));
        }
        if in_double_quotes {
            self.push_quoted(offset, "$");
        } else {
            self.push_unquoted(offset, '$');
        }
        Ok(())
    }

    fn operator_error(&self, offset: usize) -> HostError {
        let rest = self.source.get(offset..).unwrap_or("");
        let fd_prefix = self
            .current
            .as_ref()
            .filter(|word| {
                word.plain && !word.text.is_empty() && word.text.bytes().all(|b| b.is_ascii_digit())
            })
            .map(|word| (word.start, word.text.as_str()));
        let (form, operator) = classify_operator(rest);
        let (form, operator, offset) = match (form, fd_prefix) {
            (Form::Redirection, Some((start, digits))) => {
                (form, format!("{digits}{operator}"), start)
            }
            _ => (form, operator.to_owned(), offset),
        };
        let (message, help) = match form {
            Form::Background => (
                format!("background operator `{operator}` is not supported"),
                "Run the command in the foreground; background work cannot outlive the call",
            ),
            Form::Pipeline => (
                format!("pipeline `{operator}` is not supported"),
                "Run one program per call and pass data between calls in Lua",
            ),
            Form::AndList => (
                format!("control operator `{operator}` (and-list) is not supported"),
                "Run one command per call and check `status` in Lua",
            ),
            Form::OrList => (
                format!("control operator `{operator}` (or-list) is not supported"),
                "Run one command per call and check `status` in Lua",
            ),
            Form::Separator => (
                format!("command separator `{operator}` is not supported"),
                "Run one command per call",
            ),
            Form::Redirection => (
                format!("redirection `{operator}` is not supported"),
                "Standard input is empty and output is captured; read or write files from the program itself",
            ),
            Form::ProcessSubstitution => (
                format!("process substitution `{operator}` is not supported"),
                "Run one program per call",
            ),
            Form::Subshell => (
                format!("subshell or grouping `{operator}` is not supported"),
                "Run one program per call",
            ),
        };
        invalid(message)
            .with_context(at(offset))
            .with_help(help)
            .with_help("Quote the characters to pass them as an argument")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Form {
    Background,
    Pipeline,
    AndList,
    OrList,
    Separator,
    Redirection,
    ProcessSubstitution,
    Subshell,
}

/// Name the operator at the start of `rest` (which starts with one of
/// `| & ; < > ( )`), longest spelling first.
fn classify_operator(rest: &str) -> (Form, &'static str) {
    const TABLE: &[(&str, Form)] = &[
        ("&>>", Form::Redirection),
        ("<<<", Form::Redirection),
        ("<<-", Form::Redirection),
        ("&&", Form::AndList),
        ("&>", Form::Redirection),
        ("||", Form::OrList),
        ("|&", Form::Pipeline),
        (";;", Form::Separator),
        (";&", Form::Separator),
        ("<<", Form::Redirection),
        ("<>", Form::Redirection),
        ("<&", Form::Redirection),
        ("<(", Form::ProcessSubstitution),
        (">>", Form::Redirection),
        (">|", Form::Redirection),
        (">&", Form::Redirection),
        (">(", Form::ProcessSubstitution),
        ("&", Form::Background),
        ("|", Form::Pipeline),
        (";", Form::Separator),
        ("<", Form::Redirection),
        (">", Form::Redirection),
        ("(", Form::Subshell),
        (")", Form::Subshell),
    ];
    TABLE
        .iter()
        .find(|(spelling, _)| rest.starts_with(spelling))
        .map_or((Form::Separator, ";"), |(spelling, form)| {
            (*form, *spelling)
        })
}

fn check_words(words: &[Word]) -> Result<(), HostError> {
    let Some(first) = words.first() else {
        return Err(invalid("empty command")
            .with_help("Pass a program name, optionally followed by arguments"));
    };
    if first.text.is_empty() {
        return Err(invalid("empty program name")
            .with_context(at(first.start))
            .with_help("Pass a program name, optionally followed by arguments"));
    }
    if first.assignment {
        return Err(invalid("environment assignment prefix `NAME=value` is not supported")
            .with_context(at(first.start))
            .with_help(
                "The environment comes from the grants; quote the word to run a program whose name contains `=`",
            ));
    }
    if first.plain && RESERVED_WORDS.contains(&first.text.as_str()) {
        return Err(invalid(format!(
            "shell reserved word `{}` is not supported",
            first.text
        ))
        .with_context(at(first.start))
        .with_help("Commands run without a shell; run one program per call"));
    }
    let name = first.text.rsplit('/').next().unwrap_or(&first.text);
    if JOB_CONTROL.contains(&name) {
        return Err(invalid(format!("job control `{name}` is not supported"))
            .with_context(at(first.start))
            .with_help("Commands run in the foreground of a call with no job table"));
    }
    if name == "kill"
        && let Some(job) = words[1..].iter().find(|word| word.text.starts_with('%'))
    {
        return Err(invalid("job control `kill %…` is not supported")
            .with_context(at(job.start))
            .with_help("There is no job table; signal processes by PID if the program allows it"));
    }
    if STATEFUL_BUILTINS.contains(&name) {
        return Err(invalid(format!("shell built-in `{name}` is not supported"))
            .with_context(at(first.start))
            .with_help("Commands run without a shell; the working directory and environment come from the grants"));
    }
    Ok(())
}

fn backquote_error(offset: usize) -> HostError {
    invalid("command substitution (backquote) is not supported")
        .with_context(at(offset))
        .with_help("Escape the backquote (`\\``) or single-quote it to pass it literally")
}

fn invalid(message: impl Into<String>) -> HostError {
    HostError::new(ErrorCode::InvalidArgument, message)
}

fn at(offset: usize) -> String {
    format!("at byte {offset}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn words(source: &str) -> Vec<String> {
        parse_command(source).unwrap()
    }

    fn rejected(source: &str) -> HostError {
        let error = parse_command(source).unwrap_err();
        assert_eq!(error.code(), ErrorCode::InvalidArgument, "{source:?}");
        error
    }

    #[test]
    fn splits_on_blanks() {
        assert_eq!(words("echo hi"), ["echo", "hi"]);
        assert_eq!(words("  echo \t a   b  "), ["echo", "a", "b"]);
    }

    #[test]
    fn single_quotes_are_literal() {
        assert_eq!(
            words(r#"echo 'a "b" \n $x `y` &;|<>'"#),
            ["echo", r#"a "b" \n $x `y` &;|<>"#]
        );
        assert_eq!(words("echo 'multi\nline'"), ["echo", "multi\nline"]);
    }

    #[test]
    fn double_quotes_escape_only_posix_characters() {
        assert_eq!(words(r#"echo "a\"b""#), ["echo", r#"a"b"#]);
        assert_eq!(words(r#"echo "\\ \$ \` \n \a""#), ["echo", r"\ $ ` \n \a"]);
        assert_eq!(
            words("echo \"line\\\ncontinued\""),
            ["echo", "linecontinued"]
        );
        assert_eq!(
            words(r#"echo "it's & | ; < > * ? [ ~ #""#),
            ["echo", "it's & | ; < > * ? [ ~ #"]
        );
    }

    #[test]
    fn backslash_outside_quotes_escapes_the_next_character() {
        assert_eq!(
            words(r"echo a\ b \& \$HOME \\"),
            ["echo", "a b", "&", "$HOME", "\\"]
        );
        assert_eq!(words("echo a\\\nb"), ["echo", "ab"]);
    }

    #[test]
    fn adjacent_quoted_parts_join_one_word() {
        assert_eq!(words(r#"echo a'b'"c"d"#), ["echo", "abcd"]);
    }

    #[test]
    fn quoted_empty_strings_are_empty_arguments() {
        assert_eq!(
            words("printf '%s|' '' \"\" x"),
            ["printf", "%s|", "", "", "x"]
        );
    }

    #[test]
    fn quoted_operators_are_plain_words() {
        assert_eq!(words("echo '&'"), ["echo", "&"]);
        assert_eq!(
            words("echo \"a && b\" '|' \\;"),
            ["echo", "a && b", "|", ";"]
        );
        assert_eq!(
            words("sh -c \"sleep 100 & sleep 100\""),
            ["sh", "-c", "sleep 100 & sleep 100"]
        );
    }

    #[test]
    fn lone_dollar_and_mid_word_specials_are_literal() {
        assert_eq!(
            words("echo $ a$ a=b x~ a#b {a,b} ! ]"),
            ["echo", "$", "a$", "a=b", "x~", "a#b", "{a,b}", "!", "]"]
        );
        assert_eq!(words("echo \"cost: $\""), ["echo", "cost: $"]);
    }

    #[test]
    fn non_ascii_text_passes_through() {
        assert_eq!(
            words("echo héllo 'wörld' \"✓\""),
            ["echo", "héllo", "wörld", "✓"]
        );
    }

    #[test]
    fn rejects_background_operator_anywhere() {
        for source in ["sleep 1 &", "sleep 1&", "a & b", "echo a&b", "& echo"] {
            assert!(
                rejected(source).message().contains("background"),
                "{source}"
            );
        }
    }

    #[test]
    fn rejects_control_operators() {
        for (source, form) in [
            ("a; b", "separator `;`"),
            ("a ;; b", "`;;`"),
            ("a | b", "pipeline `|`"),
            ("a |& b", "pipeline `|&`"),
            ("a && b", "and-list"),
            ("a || b", "or-list"),
            ("a\nb", "newline"),
            ("(a)", "subshell"),
            ("a )", "subshell"),
        ] {
            let error = rejected(source);
            assert!(
                error.message().contains(form),
                "{source}: {}",
                error.message()
            );
        }
    }

    #[test]
    fn rejects_redirections_including_fd_prefixed_forms() {
        for (source, spelling) in [
            ("cat < f", "`<`"),
            ("echo > f", "`>`"),
            ("echo >> f", "`>>`"),
            ("echo 2> f", "`2>`"),
            ("echo 2>&1", "`2>&`"),
            ("echo 10>>f", "`10>>`"),
            ("echo &> f", "`&>`"),
            ("echo &>> f", "`&>>`"),
            ("cat << EOF", "`<<`"),
            ("cat <<- EOF", "`<<-`"),
            ("cat <<< x", "`<<<`"),
            ("cat <> f", "`<>`"),
            ("cat 0<&3", "`0<&`"),
            ("echo >| f", "`>|`"),
            ("echo >&2", "`>&`"),
            ("echo x>f", "`>`"),
        ] {
            let error = rejected(source);
            assert!(error.message().contains("redirection"), "{source}");
            assert!(
                error.message().contains(spelling),
                "{source}: {}",
                error.message()
            );
        }
        assert!(
            rejected("diff <(a) b")
                .message()
                .contains("process substitution")
        );
        assert!(
            rejected("tee >(a)")
                .message()
                .contains("process substitution")
        );
    }

    #[test]
    fn rejects_job_control_programs() {
        for source in [
            "fg",
            "bg %1",
            "jobs -l",
            "disown",
            "wait",
            "suspend",
            "'fg'",
            "/bin/wait 1",
        ] {
            assert!(
                rejected(source).message().contains("job control"),
                "{source}"
            );
        }
        for source in ["kill %1", "kill -9 %2", "/usr/bin/kill %+"] {
            assert!(rejected(source).message().contains("kill %"), "{source}");
        }
        assert_eq!(words("kill -0 1"), ["kill", "-0", "1"]);
    }

    #[test]
    fn rejects_stateful_builtins_and_reserved_words() {
        for source in [
            "cd /",
            "export A=1",
            "exec ls",
            "exit 1",
            ". ./x",
            "source x",
            "eval ls",
        ] {
            assert!(rejected(source).message().contains("built-in"), "{source}");
        }
        for source in ["if true", "! ls", "{ ls", "while x", "]] a"] {
            assert!(
                rejected(source).message().contains("reserved word"),
                "{source}"
            );
        }
        assert_eq!(words("'if' x"), ["if", "x"]);
    }

    #[test]
    fn rejects_expansions() {
        for (source, form) in [
            ("echo $HOME", "`$NAME`"),
            ("echo \"$HOME\"", "`$NAME`"),
            ("echo ${HOME}", "`${`"),
            ("echo $(id)", "command substitution"),
            ("echo \"$(id)\"", "command substitution"),
            ("echo $((1+1))", "arithmetic"),
            ("echo $?", "special parameter"),
            ("echo $1", "special parameter"),
            ("echo `id`", "backquote"),
            ("echo \"`id`\"", "backquote"),
            ("echo $'a'", "dollar-single-quote"),
            ("echo $\"a\"", "locale"),
            ("ls *.rs", "glob `*`"),
            ("ls a?", "glob `?`"),
            ("ls [ab]", "glob `[`"),
            ("ls ~", "tilde"),
            ("ls ~/x", "tilde"),
            ("echo a #b", "comment"),
            ("FOO=bar env", "assignment"),
            ("A_1=\"x y\" env", "assignment"),
        ] {
            let error = rejected(source);
            assert!(
                error.message().contains(form),
                "{source}: {}",
                error.message()
            );
        }
        assert_eq!(words("'FOO=bar' \"A\"=b"), ["FOO=bar", "A=b"]);
        assert_eq!(words("env FOO=bar"), ["env", "FOO=bar"]);
    }

    #[test]
    fn rejects_unterminated_quotes_and_trailing_backslash() {
        assert!(
            rejected("echo 'abc")
                .message()
                .contains("unterminated single quote")
        );
        assert!(
            rejected("echo \"abc")
                .message()
                .contains("unterminated double quote")
        );
        assert!(
            rejected("echo \"a\\\"")
                .message()
                .contains("unterminated double quote")
        );
        assert!(
            rejected("echo a\\")
                .message()
                .contains("trailing backslash")
        );
    }

    #[test]
    fn rejects_empty_commands() {
        for source in ["", "   ", "\t", "\\\n"] {
            assert!(
                rejected(source).message().contains("empty command"),
                "{source:?}"
            );
        }
        assert!(rejected("'' x").message().contains("empty program name"));
    }

    #[test]
    fn rejects_nul_and_control_characters() {
        assert!(rejected("echo a\0b").message().contains("NUL"));
        assert!(rejected("echo 'a\0b'").message().contains("NUL"));
        assert!(
            rejected("echo a\rb")
                .message()
                .contains("control character")
        );
        assert_eq!(words("echo 'a\rb'"), ["echo", "a\rb"]);
    }

    #[test]
    fn enforces_the_byte_limit_exactly() {
        let at_limit = format!("echo {}", "x".repeat(COMMAND_BYTES_MAX - 5));
        assert_eq!(at_limit.len(), COMMAND_BYTES_MAX);
        assert_eq!(words(&at_limit).len(), 2);
        let over = format!("{at_limit}x");
        let error = rejected(&over);
        assert!(error.message().contains("byte limit"));
        assert!(error.context()[0].contains("observed 1048577"));
    }

    #[test]
    fn error_context_names_the_byte_offset() {
        assert_eq!(rejected("echo a | b").context()[0], "at byte 7");
        assert_eq!(rejected("echo 2>f").context()[0], "at byte 5");
    }
}
