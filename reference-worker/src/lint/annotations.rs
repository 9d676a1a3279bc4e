//! Annotation tags: a `---@tag` comment whose tag no annotation dialect
//! knows is silently ignored by the language server, so a misspelt one
//! (`---@parm`) is a mistake nothing else reports.
//!
//! Only real comments count (the comment tokens full_moon attaches to the
//! syntax tree, so text inside strings and long comments is never read),
//! and only LuaLS's form: three dashes, optional spaces, `@`, the tag.

use super::Span;
use super::suggest::closest;
use full_moon::ast::Ast;
use full_moon::tokenizer::{Token, TokenType};
use full_moon::visitors::Visitor;

/// The tags of LuaLS (LuaCATS), which Quirl's SDK stubs use.
pub const LUALS_TAGS: &[&str] = &[
    "alias",
    "as",
    "async",
    "cast",
    "class",
    "deprecated",
    "diagnostic",
    "enum",
    "field",
    "generic",
    "meta",
    "module",
    "nodiscard",
    "operator",
    "overload",
    "package",
    "param",
    "private",
    "protected",
    "return",
    "see",
    "source",
    "type",
    "vararg",
    "version",
];

/// Tags other dialects use in `---@` comments: EmmyLua's own, and LDoc's
/// (which real libraries write in `---` comments too). Not a mistake.
pub const OTHER_TAGS: &[&str] = &[
    // EmmyLua (classic and emmylua-analyzer)
    "attribute",
    "export",
    "language",
    "mapping",
    "namespace",
    "public",
    "readonly",
    "return_cast",
    "return_overload",
    "schema",
    "using",
    // LDoc
    "author",
    "bool",
    "classmod",
    "constructor",
    "copyright",
    "description",
    "example",
    "file",
    "fixme",
    "func",
    "function",
    "include",
    "int",
    "license",
    "lfunction",
    "local",
    "lookup",
    "number",
    "raise",
    "release",
    "script",
    "section",
    "set",
    "static",
    "string",
    "submodule",
    "summary",
    "tab",
    "table",
    "tfield",
    "thread",
    "todo",
    "topic",
    "tparam",
    "treturn",
    "usage",
    "warning",
    "within",
];

/// An annotation tag no dialect knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownTag {
    /// The tag as written, without `@`.
    pub tag: String,
    /// The span of `@tag`.
    pub span: Span,
    /// The LuaLS tag it is a near miss of, if any.
    pub near: Option<&'static str>,
}

/// Whether `source` may hold an annotation: `---`, optional spaces, `@`
/// (a scan of the text, far cheaper than a walk of the tree).
pub fn may_have_annotations(source: &str) -> bool {
    memchr::memmem::find_iter(source.as_bytes(), b"---").any(|at| {
        source.as_bytes()[at + 3..]
            .iter()
            .find(|&&b| b != b'-' && b != b' ' && b != b'\t')
            == Some(&b'@')
    })
}

/// Every unknown `---@tag` in the comments of `ast`, in source order.
pub fn unknown_tags(ast: &Ast) -> Vec<UnknownTag> {
    // full_moon's visitor reaches every comment token once, in order (its
    // `Node::tokens` iterator is quadratic in the length of a block).
    struct Comments(Vec<UnknownTag>);
    impl Visitor for Comments {
        fn visit_single_line_comment(&mut self, token: &Token) {
            if let Some(tag) = unknown_tag(token) {
                self.0.push(tag);
            }
        }
    }
    let mut comments = Comments(Vec::new());
    comments.visit_ast(ast);
    comments.0
}

fn unknown_tag(token: &Token) -> Option<UnknownTag> {
    let TokenType::SingleLineComment { comment } = token.token_type() else {
        return None;
    };
    // `comment` is the text after `--`: an annotation continues with `-`.
    let text = comment.as_str().strip_prefix('-')?;
    let spaces = text.len() - text.trim_start_matches([' ', '\t']).len();
    let text = text[spaces..].strip_prefix('@')?;
    let tag: &str = &text[..text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len())];
    if tag.is_empty() || LUALS_TAGS.contains(&tag) || OTHER_TAGS.contains(&tag) {
        return None;
    }
    // `--` + `-` + spaces, then `@`.
    let start = token.start_position().bytes() + 3 + spaces;
    Some(UnknownTag {
        tag: tag.to_owned(),
        span: Span {
            start,
            end: start + 1 + tag.len(),
        },
        near: closest(tag, LUALS_TAGS.iter().copied()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn tags(source: &str) -> Vec<UnknownTag> {
        let parsed = full_moon::parse_fallible(source, full_moon::LuaVersion::lua54());
        assert!(parsed.errors().is_empty(), "{:?}", parsed.errors());
        unknown_tags(parsed.ast())
    }

    #[test]
    fn a_misspelt_tag_is_found_with_its_span_and_near_miss() {
        let source = "local x = 1\n---@parm x number\nreturn x\n";
        let found = tags(source);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].tag, "parm");
        assert_eq!(&source[found[0].span.start..found[0].span.end], "@parm");
        assert_eq!(found[0].near, Some("param"));
        let found = tags("---  @retrun string\nreturn 1");
        assert_eq!(found[0].near, Some("return"));
        assert_eq!(found[0].span.start, 5);
    }

    #[test]
    fn known_tags_strings_and_plain_comments_are_not_annotations() {
        let source = r#"---@param x number
---@return string
--- @tparam string name (LDoc)
-- @parm two dashes is not LuaLS's form
--[[ ---@parm inside a long comment ]]
local s = "---@parm inside a string"
---@class (exact) Point
return s --- trailing @note is prose, not a tag
"#;
        assert_eq!(tags(source), Vec::new());
    }

    #[test]
    fn a_far_unknown_tag_has_no_near_miss() {
        let found = tags("---@frobnicate\nreturn 1");
        assert_eq!(found[0].near, None);
    }
}
