//! Tagged objects: internally and adjacently tagged unions whose tag may
//! stand anywhere in the object (SPEC §5.8), with missing, repeated and
//! unknown tags and unit variants' extra members rejected (§5.9).

use super::Result;
use super::parser::Parser;
use crate::error::ProtocolError;
use std::borrow::Cow;

impl<'a> Parser<'a> {
    /// Open an internally or adjacently tagged object and read its tag.
    ///
    /// Returns the tag and whether it was consumed (it was the first key).
    /// When the tag is not first, the object is scanned for it and the
    /// parser is rewound to just after `{`, so the caller's field loop sees
    /// every key again (and must skip the tag once).
    pub(crate) fn begin_tagged(&mut self, record: &str, tag: &str) -> Result<(Cow<'a, str>, bool)> {
        self.begin_object(record)?;
        let after_brace = self.pos;
        let depth = self.depth;
        let mut first = true;
        match self.next_key(&mut first)? {
            None => return Err(ProtocolError::missing_tag(tag, record)),
            Some(key) if key == tag => {
                let value = self.parse_string().map_err(|e| e.at(tag))?;
                return Ok((value, true));
            }
            Some(_) => {}
        }
        self.pos = after_brace;
        let mut first = true;
        let mut found = None;
        while let Some(key) = self.next_key(&mut first)? {
            if key == tag {
                if found.is_some() {
                    return Err(ProtocolError::duplicate_key(tag));
                }
                found = Some(self.parse_string().map_err(|e| e.at(tag))?);
            } else {
                self.skip_value()?;
            }
        }
        let found = found.ok_or_else(|| ProtocolError::missing_tag(tag, record))?;
        self.pos = after_brace;
        self.depth = depth;
        Ok((found, false))
    }
}

impl<'a> Parser<'a> {
    /// Decode an adjacently tagged enum: `{tag: name, content: value}`.
    ///
    /// Variants without content (`has_content` false) must not carry the
    /// content key. Either key may come first.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn decode_adjacent<K: Copy, T>(
        &mut self,
        record: &str,
        tag: &str,
        content: &str,
        kind_of: impl Fn(&str) -> Option<K>,
        has_content: impl Fn(K) -> bool,
        decode_content: impl Fn(K, &mut Parser<'a>) -> Result<T>,
        unit: impl Fn(K) -> T,
    ) -> Result<T> {
        let (name, mut tag_seen) = self.begin_tagged(record, tag)?;
        let kind =
            kind_of(&name).ok_or_else(|| ProtocolError::unknown_variant(&name, record).at(tag))?;
        let with_content = has_content(kind);
        let mut first = !tag_seen;
        let mut value = None;
        while let Some(key) = self.next_key(&mut first)? {
            if key == tag {
                if tag_seen {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                tag_seen = true;
                self.parse_string()?;
            } else if key == content && with_content {
                if value.is_some() {
                    return Err(ProtocolError::duplicate_key(&key));
                }
                value = Some(decode_content(kind, self).map_err(|e| e.at(content))?);
            } else {
                return Err(ProtocolError::unknown_field(
                    &key,
                    &format!("{record} `{name}`"),
                ));
            }
        }
        if !with_content {
            return Ok(unit(kind));
        }
        value.ok_or_else(|| ProtocolError::missing_field(content, &format!("{record} `{name}`")))
    }
}
