//! How deep a parse tree of the source would be, found from its tokens
//! before anything is parsed, so that the lint never builds a tree it
//! cannot walk or free on the worker's stack.
//!
//! full_moon parses, walks and frees its tree recursively. Lua's compiler,
//! which runs first, bounds most nesting (about 200 levels of C recursion)
//! but not a left-associative operator chain: `1+1+1+…` compiles at any
//! length, and its tree nests one level per operator (freeing 150,000 of
//! them overflows an 8 MiB stack). The worker cannot run the parse on a
//! thread with a larger stack (its seccomp filter refuses new threads,
//! DESIGN §18.3), so a source whose nesting or chains exceed the bounds
//! below is compiled but not linted.
//!
//! The scan reads full_moon's own tokens (strings, comments and long
//! brackets are the lexer's business, not this module's) and keeps a stack
//! of open constructs: brackets, `function … end`, and blocks (`do`,
//! `then`, `else`, `repeat`). Within the innermost one it counts the binary
//! operators since the last token that ends an expression (`,`, `;`, `=`,
//! a statement keyword, a block's end): an upper bound on the operators of
//! one expression's top level, which is how deep its chain nests. Every
//! `-` and `~` counts (they may be unary): the bound only grows.

use full_moon::tokenizer::{Lexer, LexerResult, Symbol, TokenType};

/// Open constructs at most (brackets, functions, blocks, together).
pub const NESTING_MAX: usize = 100;

/// Binary operators in one expression's top level at most.
pub const CHAIN_MAX: usize = 1_000;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Bracket,
    Function,
    Block,
}

/// Why a source is too deep to parse, if it is.
pub fn too_deep(source: &str) -> Option<String> {
    let mut lexer = Lexer::new_lazy(source, full_moon::LuaVersion::lua54());
    // The open constructs, each with the operators counted in it so far.
    let mut stack: Vec<(Open, usize)> = vec![(Open::Block, 0)];
    while let Some(result) = lexer.process_next() {
        let LexerResult::Ok(token) = result else {
            // Lua compiled the source, so full_moon's lexer should not
            // fail; where it does, nothing is parsed.
            return Some("its lexer stopped (full_moon reads no further)".to_owned());
        };
        let symbol = match token.token_type() {
            TokenType::Symbol { symbol } => *symbol,
            _ => continue,
        };
        let top = stack.len() - 1;
        match symbol {
            Symbol::LeftParen | Symbol::LeftBracket | Symbol::LeftBrace => {
                stack.push((Open::Bracket, 0));
            }
            Symbol::Function => stack.push((Open::Function, 0)),
            Symbol::Do | Symbol::Then | Symbol::Repeat => stack.push((Open::Block, 0)),
            Symbol::RightParen | Symbol::RightBracket | Symbol::RightBrace if stack.len() > 1 => {
                stack.pop();
            }
            Symbol::End | Symbol::Until | Symbol::ElseIf | Symbol::Else => {
                let closed = if stack.len() > 1 { stack.pop() } else { None };
                let top = stack.len() - 1;
                // A block's end ends its statement; a function's end is
                // part of the expression around it.
                if closed.is_some_and(|(open, _)| open == Open::Block) && symbol != Symbol::Until {
                    stack[top].1 = 0;
                }
                if symbol == Symbol::Else {
                    stack.push((Open::Block, 0));
                }
            }
            Symbol::Comma
            | Symbol::Semicolon
            | Symbol::Equal
            | Symbol::Local
            | Symbol::Return
            | Symbol::If
            | Symbol::While
            | Symbol::For
            | Symbol::In
            | Symbol::Goto
            | Symbol::Break => stack[top].1 = 0,
            Symbol::Plus
            | Symbol::Minus
            | Symbol::Star
            | Symbol::Slash
            | Symbol::DoubleSlash
            | Symbol::Percent
            | Symbol::Caret
            | Symbol::TwoDots
            | Symbol::Ampersand
            | Symbol::Pipe
            | Symbol::Tilde
            | Symbol::DoubleLessThan
            | Symbol::DoubleGreaterThan
            | Symbol::TwoEqual
            | Symbol::TildeEqual
            | Symbol::LessThan
            | Symbol::LessThanEqual
            | Symbol::GreaterThan
            | Symbol::GreaterThanEqual
            | Symbol::And
            | Symbol::Or => {
                stack[top].1 += 1;
                if stack[top].1 > CHAIN_MAX {
                    let (line, _) = position(&token);
                    return Some(format!(
                        "an expression at line {line} chains more than {CHAIN_MAX} operators"
                    ));
                }
            }
            _ => {}
        }
        if stack.len() > NESTING_MAX + 1 {
            let (line, _) = position(&token);
            return Some(format!(
                "it nests more than {NESTING_MAX} brackets, functions and blocks deep at line {line}"
            ));
        }
    }
    None
}

fn position(token: &full_moon::tokenizer::Token) -> (usize, usize) {
    let start = token.start_position();
    (start.line(), start.character())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_code_is_not_too_deep() {
        let source = "local function f(a, b)\n  if a then return a + b * 2 else return (a or b) .. 'x' end\nend\nreturn f(1, 2) + f(3, 4) - #{1, 2, 3}\n";
        assert_eq!(too_deep(source), None);
    }

    #[test]
    fn long_chains_and_deep_nesting_are_found() {
        let chain = format!("return {}1", "1+".repeat(CHAIN_MAX + 1));
        assert!(too_deep(&chain).is_some_and(|why| why.contains("chains")));
        let fits = format!("return {}1", "1+".repeat(CHAIN_MAX));
        assert_eq!(too_deep(&fits), None);
        let nested = format!(
            "return {}1{}",
            "(".repeat(NESTING_MAX + 1),
            ")".repeat(NESTING_MAX + 1)
        );
        assert!(too_deep(&nested).is_some_and(|why| why.contains("nests")));
        let nested = format!(
            "return {}1{}",
            "(".repeat(NESTING_MAX),
            ")".repeat(NESTING_MAX)
        );
        assert_eq!(too_deep(&nested), None);
    }

    #[test]
    fn a_chain_continues_across_calls_functions_and_brackets() {
        let chain = format!(
            "return {}1",
            "f(1)+function() return 1 end+t[1]+{}+".repeat(CHAIN_MAX / 4 + 1)
        );
        assert!(too_deep(&chain).is_some_and(|why| why.contains("chains")));
    }

    #[test]
    fn statements_and_blocks_end_an_expression() {
        let many = "local x = 1 + 2\nif x then x = x + 1 end\nwhile x > 0 do x = x - 1 end\n"
            .repeat(CHAIN_MAX);
        assert_eq!(too_deep(&many), None);
    }

    #[test]
    fn strings_and_comments_hold_no_operators() {
        let text = format!(
            "local s = '{}' -- {}\nreturn s",
            "+".repeat(CHAIN_MAX * 2),
            "(".repeat(NESTING_MAX * 2)
        );
        assert_eq!(too_deep(&text), None);
    }
}
