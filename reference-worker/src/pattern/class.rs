//! Character classes and sets of Lua patterns, in the "C" locale
//! (reference manual §6.4.1, `match_class` and `matchbracketclass` of
//! `lstrlib.c`).

/// Whether byte `c` is in the class named by `cl` (`a c d g l p s u w x z`,
/// upper case for the complement); any other `cl` stands for itself.
#[inline]
pub(super) fn match_class(c: u8, cl: u8) -> bool {
    let res = match cl.to_ascii_lowercase() {
        b'a' => c.is_ascii_alphabetic(),
        b'c' => c.is_ascii_control(),
        b'd' => c.is_ascii_digit(),
        b'g' => c.is_ascii_graphic(),
        b'l' => c.is_ascii_lowercase(),
        b'p' => c.is_ascii_punctuation(),
        // C's isspace: space, \t, \n, \v, \f, \r.
        b's' => matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'),
        b'u' => c.is_ascii_uppercase(),
        b'w' => c.is_ascii_alphanumeric(),
        b'x' => c.is_ascii_hexdigit(),
        // Deprecated in the manual, still honoured by Lua 5.4.
        b'z' => c == 0,
        _ => return cl == c,
    };
    if cl.is_ascii_lowercase() { res } else { !res }
}

/// Whether byte `c` is in the set `pat[open..=close]`, where `pat[open]` is
/// `[` and `pat[close]` its closing `]`. Reads past `close` never happen: the
/// set was delimited by `class_end`.
#[inline]
pub(super) fn match_set(c: u8, pat: &[u8], open: usize, close: usize) -> bool {
    let at = |i: usize| pat.get(i).copied().unwrap_or(0);
    let mut p = open;
    let mut sig = true;
    if at(p + 1) == b'^' {
        sig = false;
        p += 1;
    }
    loop {
        p += 1;
        if p >= close {
            return !sig;
        }
        let pc = at(p);
        if pc == b'%' {
            p += 1;
            if match_class(c, at(p)) {
                return sig;
            }
        } else if at(p + 1) == b'-' && p + 2 < close {
            p += 2;
            if at(p - 2) <= c && c <= at(p) {
                return sig;
            }
        } else if pc == c {
            return sig;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_c_locale() {
        assert!(match_class(b'a', b'a') && !match_class(b'1', b'a'));
        assert!(match_class(b'1', b'A'), "upper case is the complement");
        assert!(match_class(0x0b, b's'), "vertical tab is a space in C");
        assert!(!match_class(0xe9, b'a'), "no letters above ASCII in C");
        assert!(match_class(b'_', b'p') && !match_class(b'_', b'w'));
        assert!(match_class(0x7f, b'c') && !match_class(b' ', b'g'));
        assert!(match_class(0, b'z') && match_class(b'.', b'.'));
    }

    #[test]
    fn sets_handle_ranges_negation_and_escapes() {
        let set = b"[^a-c%d]";
        let close = set.len() - 1;
        assert!(!match_set(b'b', set, 0, close));
        assert!(!match_set(b'7', set, 0, close));
        assert!(match_set(b'z', set, 0, close));
        let set = b"[]a-]";
        assert!(match_set(b']', set, 0, set.len() - 1));
        assert!(
            match_set(b'-', set, 0, set.len() - 1),
            "a trailing '-' is literal"
        );
        assert!(!match_set(b'b', set, 0, set.len() - 1));
    }
}
