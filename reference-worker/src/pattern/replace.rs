//! Replacement strings of `string.gsub` (`add_s` and `get_onecapture` of
//! `lstrlib.c`): `%0` is the whole match, `%1`–`%9` a capture (`%1` is the
//! whole match when the pattern has no captures), `%%` a percent sign;
//! anything else after `%` is an error.

use super::Budget;
use super::matcher::{Abort, CAP_POSITION, CAP_UNFINISHED, Matcher};
use std::ops::Range;

/// A string (or number, as its string) given as `gsub`'s replacement.
#[derive(Debug, Clone, Copy)]
pub struct Replacement<'r> {
    text: &'r [u8],
}

impl<'r> Replacement<'r> {
    /// The replacement text.
    pub fn new(text: &'r [u8]) -> Self {
        Self { text }
    }

    /// Append the replacement for the match `whole` to `out`.
    pub(super) fn expand<B: Budget>(
        &self,
        m: &Matcher<'_, B>,
        whole: Range<usize>,
        out: &mut Vec<u8>,
    ) -> Result<(), Abort> {
        let mut rest = self.text;
        while let Some(at) = memchr::memchr(b'%', rest) {
            out.extend_from_slice(&rest[..at]);
            let code = rest.get(at + 1).copied().unwrap_or(0);
            match code {
                b'%' => out.push(b'%'),
                b'0' => out.extend_from_slice(&m.src[whole.clone()]),
                b'1'..=b'9' => {
                    let index = usize::from(code - b'1');
                    append_capture(m, index, whole.clone(), out)?;
                }
                _ => {
                    return Err(Abort::Message("invalid use of '%' in replacement string"));
                }
            }
            rest = rest.get(at + 2..).unwrap_or_default();
        }
        out.extend_from_slice(rest);
        Ok(())
    }
}

fn append_capture<B: Budget>(
    m: &Matcher<'_, B>,
    index: usize,
    whole: Range<usize>,
    out: &mut Vec<u8>,
) -> Result<(), Abort> {
    if index >= m.level {
        if index != 0 {
            return Err(Abort::CaptureIndex(index as i32 + 1));
        }
        out.extend_from_slice(&m.src[whole]);
        return Ok(());
    }
    let slot = m.caps[index];
    match slot.len {
        CAP_UNFINISHED => Err(Abort::Message("unfinished capture")),
        CAP_POSITION => {
            out.extend_from_slice((slot.init + 1).to_string().as_bytes());
            Ok(())
        }
        len => {
            out.extend_from_slice(&m.src[slot.init..slot.init + len as usize]);
            Ok(())
        }
    }
}
