//! Generators of [`Decode`](super::Decode) for the wire records: fixed-field
//! records, internally tagged enums and string enums, each rejecting unknown,
//! missing, duplicate and wrongly null members (SPEC §5.3, §5.9).

/// Generate [`Decode`] for a record (a JSON object with fixed fields).
///
/// Field modes: `req` — must be present (an `Option` field then accepts
/// `null`); `omit` — an `Option` field that is absent when `None` and never
/// `null`. In a host's own JSON ([`Mode::Host`](super::Mode::Host)) a `req`
/// list, map or option may be absent too (read as empty or `None`), and an
/// `omit` field may be `null`.
macro_rules! decode_record {
    ($ty:ident $name:literal { $($field:ident : $mode:ident),* $(,)? }) => {
        impl $crate::json::Decode for $ty {
            fn decode(parser: &mut $crate::json::Parser<'_>) -> Result<Self, $crate::error::ProtocolError> {
                parser.begin_object($name)?;
                $( let mut $field = None; )*
                let mut first = true;
                while let Some(key) = parser.next_key(&mut first)? {
                    match key.as_ref() {
                        $( stringify!($field) => {
                            if $field.is_some() {
                                return Err($crate::error::ProtocolError::duplicate_key(&key));
                            }
                            $field = Some($crate::json::decode_record!(@decode $mode, parser)
                                .map_err(|e| e.at(stringify!($field)))?);
                        } )*
                        _ => return Err($crate::error::ProtocolError::unknown_field(&key, $name)),
                    }
                }
                let value = Self {
                    $( $field: $crate::json::decode_record!(@finish $mode, $field, $name, parser)?, )*
                };
                $crate::json::Validate::validate(&value)?;
                Ok(value)
            }
        }
    };
    (@decode req, $parser:ident) => { $crate::json::Decode::decode($parser) };
    (@decode omit, $parser:ident) => { $crate::json::decode_present($parser) };
    (@finish req, $field:ident, $name:expr, $parser:ident) => {
        $field
            .or_else(|| $crate::json::omitted($parser))
            .ok_or_else(|| $crate::error::ProtocolError::missing_field(stringify!($field), $name))
    };
    (@finish omit, $field:ident, $name:expr, $parser:ident) => {
        Ok::<_, $crate::error::ProtocolError>($field.unwrap_or(None))
    };
}
pub(crate) use decode_record;

/// Generate [`Decode`] for an internally tagged enum of struct and unit variants.
macro_rules! decode_tagged {
    ($ty:ident $name:literal, tag = $tag:literal {
        $( $vname:literal => $variant:ident { $($field:ident : $mode:ident),* $(,)? } ),* $(,)?
    }) => {
        impl $crate::json::Decode for $ty {
            fn decode(parser: &mut $crate::json::Parser<'_>) -> Result<Self, $crate::error::ProtocolError> {
                let (tag, mut tag_seen) = parser.begin_tagged($name, $tag)?;
                let mut first = !tag_seen;
                let value = match tag.as_ref() {
                    $( $vname => {
                        const RECORD: &str = concat!($name, " `", $vname, "`");
                        $( let mut $field = None; )*
                        while let Some(key) = parser.next_key(&mut first)? {
                            match key.as_ref() {
                                $tag => {
                                    if tag_seen {
                                        return Err($crate::error::ProtocolError::duplicate_key(&key));
                                    }
                                    tag_seen = true;
                                    parser.parse_string()?;
                                }
                                $( stringify!($field) => {
                                    if $field.is_some() {
                                        return Err($crate::error::ProtocolError::duplicate_key(&key));
                                    }
                                    $field = Some($crate::json::decode_record!(@decode $mode, parser)
                                        .map_err(|e| e.at(stringify!($field)))?);
                                } )*
                                _ => return Err($crate::error::ProtocolError::unknown_field(&key, RECORD)),
                            }
                        }
                        let _ = tag_seen;
                        $ty::$variant {
                            $( $field: $crate::json::decode_record!(@finish $mode, $field, RECORD, parser)?, )*
                        }
                    } )*
                    other => {
                        return Err($crate::error::ProtocolError::unknown_variant(other, $name)
                            .at($tag));
                    }
                };
                $crate::json::Validate::validate(&value)?;
                Ok(value)
            }
        }
    };
}
pub(crate) use decode_tagged;

/// Generate [`Decode`] and `as_str` for an enum encoded as a snake_case string.
macro_rules! string_enum {
    ($ty:ident $name:literal { $( $vname:literal => $variant:ident ),* $(,)? }) => {
        impl $crate::json::Decode for $ty {
            fn decode(parser: &mut $crate::json::Parser<'_>) -> Result<Self, $crate::error::ProtocolError> {
                let text = parser.parse_string()?;
                match text.as_ref() {
                    $( $vname => Ok($ty::$variant), )*
                    other => Err($crate::error::ProtocolError::unknown_variant(other, $name)),
                }
            }
        }

        impl $ty {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$ty] = &[$($ty::$variant),*];

            /// The snake_case wire name.
            pub const fn as_str(self) -> &'static str {
                match self { $( $ty::$variant => $vname, )* }
            }
        }
    };
}
pub(crate) use string_enum;
