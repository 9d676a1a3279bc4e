//! The one error-context builder: [`ErrorContext::with_context`], shared
//! by every error type of the protocol crate and of the reference peers.
//!
//! An error's context is the list of supporting facts that follows its
//! message (`context` of the v1 error record, SPEC §6.9). Context is
//! only ever *appended*: a fact learned later — a cleanup problem, the
//! worker's exit status, the containment mode — goes after the facts
//! already there and never replaces them, so the first line a reader sees
//! is still the one the failure was reported with.
//!
//! Each error type says only where its context lives
//! ([`ErrorContext::append_context`]); the builder is defined once here.

/// An error that carries context lines, with the builder that appends one.
///
/// Implemented by [`ShellError`](crate::records::ShellError) (its
/// `context` list) and [`ProtocolError`](crate::ProtocolError) (its one
/// location text), and by the reference peers' own error types. The trait
/// is re-exported at the crate root: `use quirl_lua_protocol::ErrorContext;`
/// brings `.with_context(…)` into scope.
pub trait ErrorContext: Sized {
    /// Add `line` to this error's context after what is already there.
    /// An implementation may bound what it keeps (drop or shorten a line
    /// that would exceed its record's bounds) but never removes or replaces
    /// a line it already holds.
    fn append_context(&mut self, line: String);

    /// This error with `context` appended to its context.
    #[must_use]
    fn with_context(mut self, context: impl Into<String>) -> Self {
        self.append_context(context.into());
        self
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorContext;
    use crate::records::{ErrorCode, ShellError};
    use crate::{ErrorKind, ProtocolError};

    // SPEC §6.9: context lines are kept in the order they were added; a
    // later line never replaces an earlier one.
    #[test]
    fn a_record_keeps_every_line_in_order() {
        let error = ShellError::new(ErrorCode::Io, "the pipe failed")
            .with_context("worker 7 was killed by signal 9 (SIGKILL)")
            .with_context("cleanup: the cgroup was not removed");
        assert_eq!(
            error.context,
            [
                "worker 7 was killed by signal 9 (SIGKILL)",
                "cleanup: the cgroup was not removed"
            ]
        );
    }

    #[test]
    fn a_protocol_error_location_is_set_once_then_appended_to() {
        let error = ProtocolError::new(ErrorKind::InvalidUtf8, "payload is not valid UTF-8")
            .with_context("byte offset 3");
        assert_eq!(error.context(), "byte offset 3");
        let error = error.with_context("while reading request 2");
        assert_eq!(error.context(), "byte offset 3; while reading request 2");
        assert_eq!(
            error.to_string(),
            "invalid_utf8: payload is not valid UTF-8 (at byte offset 3; while reading request 2)"
        );
    }

    // The builder goes through `append_context`, the one method an
    // implementation provides.
    #[test]
    fn the_builder_is_the_append_of_the_implementation() {
        struct Lines(Vec<String>);
        impl ErrorContext for Lines {
            fn append_context(&mut self, line: String) {
                self.0.push(line);
            }
        }
        let lines = Lines(vec!["first".to_owned()]).with_context(String::from("second"));
        assert_eq!(lines.0, ["first", "second"]);
    }
}
