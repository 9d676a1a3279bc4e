//! `string.find`, `string.match`, `string.gmatch` and `string.gsub` of Lua
//! 5.4 over the matcher (`str_find_aux`, `gmatch_aux` and `str_gsub` of
//! `lstrlib.c`): initial positions, anchors, plain search, the captures each
//! function returns, and the empty-match rules of `gmatch` and `gsub` (a
//! match may not end where the previous one ended).

use super::matcher::{CAP_POSITION, CAP_UNFINISHED, Matcher};
use super::replace::Replacement;
use super::{Budget, PatternError};
use std::ops::Range;

/// Literal search charges one step per this many bytes scanned.
const PLAIN_BYTES_PER_STEP: u64 = 64;

/// One value a pattern function returns for a capture.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capture {
    /// A substring of the subject, by byte range.
    Text(Range<usize>),
    /// A position capture `()`: the 1-based position in the subject.
    Position(usize),
}

/// A successful `find` or `match`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Byte range of the whole match in the subject.
    pub range: Range<usize>,
    /// The captures to return: for `find` the explicit captures only, for
    /// `match` the whole match when the pattern has none.
    pub captures: Vec<Capture>,
}

type Outcome<T, S> = Result<T, PatternError<S>>;

/// Lua's `posrelatI`: a 1-based start position from `init`, for a subject
/// of `len` bytes (negative counts from the end, clamped to 1).
fn start_position(init: i64, len: usize) -> usize {
    if init > 0 {
        usize::try_from(init).unwrap_or(usize::MAX)
    } else if init == 0 || init.unsigned_abs() > len as u64 {
        1
    } else {
        len - init.unsigned_abs() as usize + 1
    }
}

/// The captures of a successful match at `s..e` (`push_captures`): the
/// whole match when `whole` and the pattern has no captures. At most
/// `limit` are read (`gsub` with a table reads only the first, so a later
/// unfinished capture is no error there).
fn captures<B: Budget>(
    m: &Matcher<'_, B>,
    whole: Option<Range<usize>>,
    limit: usize,
) -> Outcome<Vec<Capture>, B::Stop> {
    if m.level == 0 {
        return Ok(whole.map(Capture::Text).into_iter().collect());
    }
    m.caps[..m.level.min(limit)]
        .iter()
        .map(|slot| match slot.len {
            CAP_UNFINISHED => Err(PatternError::lua("unfinished capture")),
            CAP_POSITION => Ok(Capture::Position(slot.init + 1)),
            len => Ok(Capture::Text(slot.init..slot.init + len as usize)),
        })
        .collect()
}

/// Whether `p` has none of Lua's special characters `^$*+?.([%-`.
fn no_specials(p: &[u8]) -> bool {
    !p.iter().any(|c| b"^$*+?.([%-".contains(c))
}

/// `string.find(s, p, init, plain)`: `plain` is the truthiness of the fourth
/// argument. `None` is Lua's `nil` (fail).
pub fn find<B: Budget>(
    s: &[u8],
    p: &[u8],
    init: i64,
    plain: bool,
    budget: &mut B,
) -> Outcome<Option<Found>, B::Stop> {
    find_aux(s, p, init, plain, true, budget)
}

/// `string.match(s, p, init)`. `None` is Lua's `nil` (fail).
pub fn lua_match<B: Budget>(
    s: &[u8],
    p: &[u8],
    init: i64,
    budget: &mut B,
) -> Outcome<Option<Found>, B::Stop> {
    find_aux(s, p, init, false, false, budget)
}

/// The first window of a literal search, in bytes; each next one is twice
/// as long, up to [`LITERAL_WINDOW_MAX`].
const LITERAL_WINDOW_FIRST: usize = 256;
const LITERAL_WINDOW_MAX: usize = 1 << 20;

/// Where `p` first occurs in `s` at or after `init` (SPEC §15.4, §15.6).
///
/// The search runs over windows that start at 256 bytes and double, each
/// charged (one unit plus one per 64 bytes, the needle's bytes included)
/// before it is scanned: a hit near `init` costs a few units however long
/// the rest of the subject is — as a tokenizer's `s:find(",", pos, true)`
/// over a large text needs — and a miss costs at most about twice a single
/// charged scan of the rest. Consecutive windows overlap by the needle's
/// length minus one, so no occurrence straddling a border is missed.
fn literal_find<B: Budget>(
    s: &[u8],
    p: &[u8],
    init: usize,
    budget: &mut B,
) -> Outcome<Option<usize>, B::Stop> {
    let finder = memchr::memmem::Finder::new(p);
    let mut start = init;
    let mut window = LITERAL_WINDOW_FIRST;
    loop {
        let end = start
            .saturating_add(window)
            .saturating_add(p.len())
            .min(s.len());
        let scanned = (end - start + p.len()) as u64;
        budget
            .charge(1 + scanned / PLAIN_BYTES_PER_STEP)
            .map_err(PatternError::Stopped)?;
        if let Some(offset) = finder.find(&s[start..end]) {
            return Ok(Some(start + offset));
        }
        if end == s.len() {
            return Ok(None);
        }
        // Every start position whose occurrence would end inside this
        // window was checked (the needle is not empty: an empty one is
        // found at once); the next window begins after the last of them.
        start = end + 1 - p.len();
        window = (window * 2).min(LITERAL_WINDOW_MAX);
    }
}

fn find_aux<B: Budget>(
    s: &[u8],
    p: &[u8],
    init: i64,
    plain: bool,
    find: bool,
    budget: &mut B,
) -> Outcome<Option<Found>, B::Stop> {
    let init = start_position(init, s.len()) - 1;
    if init > s.len() {
        return Ok(None);
    }
    if find && (plain || no_specials(p)) {
        return literal_find(s, p, init, budget).map(|found| {
            found.map(|start| Found {
                range: start..start + p.len(),
                captures: Vec::new(),
            })
        });
    }
    let (anchor, p) = match p.split_first() {
        Some((b'^', rest)) => (true, rest),
        _ => (false, p),
    };
    let mut m = Matcher::new(s, p, budget);
    let mut start = init;
    let found = loop {
        m.reset();
        if let Some(end) = m.do_match(start, 0).map_err(|a| m.error(a))? {
            let whole = (!find).then_some(start..end);
            break Some(Found {
                range: start..end,
                captures: captures(&m, whole, usize::MAX)?,
            });
        }
        start += 1;
        if start > s.len() || anchor {
            break None;
        }
    };
    m.finish().map_err(|a| m.error(a))?;
    Ok(found)
}

/// Where a `gmatch` iterator continues (its `src` and `lastmatch`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GmatchCursor {
    /// The next position to try (0-based; `len + 1` when exhausted by init).
    pub position: usize,
    /// The end of the previous match; a match ending there again is skipped.
    pub last_match: Option<usize>,
}

impl GmatchCursor {
    /// The cursor of `string.gmatch(s, p, init)` for a subject of `len`
    /// bytes.
    pub fn new(init: i64, len: usize) -> Self {
        Self {
            position: (start_position(init, len) - 1).min(len + 1),
            last_match: None,
        }
    }
}

/// One call of a `gmatch` iterator: the captures of the next match (the
/// whole match when the pattern has none), or `None` when there is none.
/// In `gmatch` a leading `^` is an ordinary character, as in Lua 5.4.
pub fn gmatch_next<B: Budget>(
    s: &[u8],
    p: &[u8],
    cursor: &mut GmatchCursor,
    budget: &mut B,
) -> Outcome<Option<Vec<Capture>>, B::Stop> {
    let mut m = Matcher::new(s, p, budget);
    let mut src = cursor.position;
    let mut found = None;
    while src <= s.len() {
        m.reset();
        if let Some(end) = m.do_match(src, 0).map_err(|a| m.error(a))?
            && Some(end) != cursor.last_match
        {
            cursor.position = end;
            cursor.last_match = Some(end);
            found = Some(captures(&m, Some(src..end), usize::MAX)?);
            break;
        }
        src += 1;
    }
    m.finish().map_err(|a| m.error(a))?;
    Ok(found)
}

/// The next match of a `gsub` loop at or after `src` (only at `src` when
/// `p` starts with the anchor `^`), skipping an empty match that ends at
/// `last_match`. For the replacement driver that calls guest functions
/// between matches: returns the match range and its captures as `match`
/// would return them, only the first when `first_only` (the key of a table
/// replacement).
pub fn gsub_scan<B: Budget>(
    s: &[u8],
    p: &[u8],
    src: usize,
    last_match: Option<usize>,
    first_only: bool,
    budget: &mut B,
) -> Outcome<Option<Found>, B::Stop> {
    let (anchor, p) = match p.split_first() {
        Some((b'^', rest)) => (true, rest),
        _ => (false, p),
    };
    let mut m = Matcher::new(s, p, budget);
    let mut start = src;
    let mut found = None;
    while start <= s.len() {
        m.reset();
        if let Some(end) = m.do_match(start, 0).map_err(|a| m.error(a))?
            && Some(end) != last_match
        {
            let limit = if first_only { 1 } else { usize::MAX };
            found = Some(Found {
                range: start..end,
                captures: captures(&m, Some(start..end), limit)?,
            });
            break;
        }
        if anchor {
            break;
        }
        start += 1;
    }
    m.finish().map_err(|a| m.error(a))?;
    Ok(found)
}

/// `string.gsub(s, p, repl, max)` with a string (or number) replacement:
/// the result (`None` when nothing changed, so the caller returns `s`
/// itself) and the number of matches replaced.
pub fn gsub<B: Budget>(
    s: &[u8],
    p: &[u8],
    repl: &Replacement<'_>,
    max: i64,
    budget: &mut B,
) -> Outcome<(Option<Vec<u8>>, i64), B::Stop> {
    let (anchor, p) = match p.split_first() {
        Some((b'^', rest)) => (true, rest),
        _ => (false, p),
    };
    let mut m = Matcher::new(s, p, budget);
    let mut out: Vec<u8> = Vec::new();
    let mut src = 0usize;
    let mut last_match = None;
    let mut n = 0i64;
    let mut copied_from = 0usize;
    while n < max {
        m.reset();
        match m.do_match(src, 0).map_err(|a| m.error(a))? {
            Some(end) if Some(end) != last_match => {
                n += 1;
                out.extend_from_slice(&s[copied_from..src]);
                repl.expand(&m, src..end, &mut out)
                    .map_err(|a| m.error(a))?;
                let limit = m.budget().output_limit();
                if out.len() > limit {
                    let requested = out.len();
                    return Err(PatternError::Stopped(
                        m.budget().output_too_large(requested),
                    ));
                }
                src = end;
                copied_from = end;
                last_match = Some(end);
            }
            _ if src < s.len() => src += 1,
            _ => break,
        }
        if anchor {
            break;
        }
    }
    if n == 0 {
        m.finish().map_err(|a| m.error(a))?;
        return Ok((None, 0));
    }
    out.extend_from_slice(&s[copied_from..]);
    if out.len() > m.budget().output_limit() {
        let requested = out.len();
        return Err(PatternError::Stopped(
            m.budget().output_too_large(requested),
        ));
    }
    m.step(out.len() as u64 / PLAIN_BYTES_PER_STEP)
        .map_err(|a| m.error(a))?;
    m.finish().map_err(|a| m.error(a))?;
    Ok((Some(out), n))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::StepLimit;
    use super::*;

    fn unlimited() -> StepLimit {
        StepLimit {
            steps: 0,
            limit: u64::MAX,
        }
    }

    fn literal(s: &[u8], p: &[u8], init: usize) -> (Option<usize>, u64) {
        let mut budget = unlimited();
        let found = literal_find(s, p, init, &mut budget).unwrap();
        (found, budget.steps)
    }

    #[test]
    fn finds_what_a_plain_scan_finds_at_every_window_border() {
        // Needles placed across every border of the first windows (256, then
        // 512, 1024 bytes after the previous start) are found at their first
        // position, exactly where a one-piece search finds them.
        let lengths = [1, 2, 3, 7, 64, 300];
        for len in lengths {
            let needle: Vec<u8> = (0..len).map(|i| b'a' + (i % 26) as u8).collect();
            for at in [
                0, 1, 200, 254, 255, 256, 257, 500, 767, 768, 769, 1790, 1800, 4000,
            ] {
                for init in [0, 1, 100] {
                    let mut subject = vec![b'.'; 5000];
                    subject[at..at + len].copy_from_slice(&needle);
                    let expected =
                        memchr::memmem::find(&subject[init..], &needle).map(|o| o + init);
                    assert_eq!(
                        literal(&subject, &needle, init).0,
                        expected,
                        "needle of {len} at {at}, init {init}"
                    );
                }
            }
        }
    }

    #[test]
    fn edges_empty_needles_and_the_end_of_the_subject() {
        assert_eq!(literal(b"abc", b"", 0).0, Some(0));
        assert_eq!(literal(b"abc", b"", 3).0, Some(3));
        assert_eq!(literal(b"abc", b"c", 3).0, None);
        assert_eq!(literal(b"abc", b"abcd", 0).0, None);
        assert_eq!(literal(b"", b"x", 0).0, None);
        let mut tail = vec![b'.'; 10_000];
        tail.extend_from_slice(b"xyz");
        assert_eq!(literal(&tail, b"xyz", 0).0, Some(10_000));
        assert_eq!(literal(&tail, b"xyz", 10_000).0, Some(10_000));
        assert_eq!(literal(&tail, b"xyz", 10_001).0, None);
    }

    #[test]
    fn a_hit_near_init_is_cheap_and_a_miss_costs_about_the_rest() {
        // SPEC §15.6: a literal find is charged per 64 bytes scanned. A hit
        // at init in a 1 MiB subject must not be charged for the megabyte.
        let mut subject = vec![b'a'; 1 << 20];
        subject[10] = b'x';
        let (found, near) = literal(&subject, b"x", 0);
        assert_eq!(found, Some(10));
        assert!(near <= 10, "a hit 10 bytes in charged {near} units");
        // A miss scans the whole subject: at least one unit per 64 bytes of
        // it, and not more than twice that (windows double) plus one unit
        // per window.
        let (missing, miss) = literal(&subject, b"y", 0);
        assert_eq!(missing, None);
        let rest = (1u64 << 20) / PLAIN_BYTES_PER_STEP;
        assert!(
            (rest..=2 * rest + 64).contains(&miss),
            "a miss over 1 MiB charged {miss} units (rest: {rest})"
        );
    }

    #[test]
    fn the_budget_stops_a_long_literal_search() {
        let subject = vec![b'a'; 1 << 20];
        let mut budget = StepLimit {
            steps: 0,
            limit: 1_000,
        };
        assert!(matches!(
            literal_find(&subject, b"y", 0, &mut budget),
            Err(PatternError::Stopped(_))
        ));
    }
}
