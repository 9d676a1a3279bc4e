//! The backtracking matcher of Lua 5.4 (`match` and its helpers in
//! `lstrlib.c`), step for step, with every step counted for the budget.
//!
//! A *step* is one unit of matcher work: entering a pattern item (each
//! iteration of Lua's `match` loop, including the ones it reaches by `goto`),
//! testing one more subject byte for a repetition, scanning one byte of a
//! `%b` balance, and comparing up to 64 bytes of a back-reference. Steps are
//! counted locally and charged to the [`Budget`] every
//! [`STEPS_PER_CHARGE`] steps and when the operation ends (`finish`).
//!
//! Bytes past the end of the pattern or subject read as `0`, as the NUL
//! terminator of a Lua string does in the C implementation.

use super::class::{match_class, match_set};
use super::{Budget, MAX_CAPTURES, MAX_DEPTH, PatternError, STEPS_PER_CHARGE};

/// Length marker of a capture that is still open.
pub(super) const CAP_UNFINISHED: isize = -1;
/// Length marker of a position capture `()`.
pub(super) const CAP_POSITION: isize = -2;

/// One capture: its start in the subject and its length (or a marker).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Slot {
    pub(super) init: usize,
    pub(super) len: isize,
}

/// Why matching stopped early. Kept small (the matcher returns it through
/// every recursive call); the budget's stop itself waits in the matcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Abort {
    /// A Lua error with this message.
    Message(&'static str),
    /// `invalid capture index %N`.
    CaptureIndex(i32),
    /// The budget stopped the match (the stop is in the matcher).
    Stopped,
}

type Step<T> = Result<T, Abort>;

/// Matcher state for one subject and one pattern (Lua's `MatchState`).
pub(super) struct Matcher<'a, B: Budget> {
    pub(super) src: &'a [u8],
    pat: &'a [u8],
    depth: u32,
    pub(super) level: usize,
    pub(super) caps: [Slot; MAX_CAPTURES],
    steps: u64,
    budget: &'a mut B,
    stop: Option<B::Stop>,
}

impl<'a, B: Budget> Matcher<'a, B> {
    /// A matcher of `pat` (without a leading anchor that the caller handles)
    /// over `src`.
    pub(super) fn new(src: &'a [u8], pat: &'a [u8], budget: &'a mut B) -> Self {
        Self {
            src,
            pat,
            depth: MAX_DEPTH,
            level: 0,
            caps: [Slot::default(); MAX_CAPTURES],
            steps: 0,
            budget,
            stop: None,
        }
    }

    /// Reset before a match attempt at a new position (`reprepstate`).
    #[inline]
    pub(super) fn reset(&mut self) {
        self.depth = MAX_DEPTH;
        self.level = 0;
    }

    /// Charge the steps not yet charged.
    #[cold]
    pub(super) fn finish(&mut self) -> Step<()> {
        let steps = std::mem::take(&mut self.steps);
        if steps > 0
            && let Err(stop) = self.budget.charge(steps)
        {
            self.stop = Some(stop);
            return Err(Abort::Stopped);
        }
        Ok(())
    }

    /// Count `n` steps, charging a full batch.
    #[inline(always)]
    pub(super) fn step(&mut self, n: u64) -> Step<()> {
        self.steps += n;
        if self.steps >= STEPS_PER_CHARGE {
            self.finish()?;
        }
        Ok(())
    }

    /// The error an [`Abort`] stands for.
    pub(super) fn error(&mut self, abort: Abort) -> PatternError<B::Stop> {
        match abort {
            Abort::Message(message) => PatternError::lua(message),
            Abort::CaptureIndex(index) => {
                PatternError::Lua(format!("invalid capture index %{index}"))
            }
            Abort::Stopped => match self.stop.take() {
                Some(stop) => PatternError::Stopped(stop),
                // Not reached: `Stopped` is only returned with a stop kept.
                None => PatternError::lua("the pattern matcher stopped"),
            },
        }
    }

    /// The budget, for output checks of `gsub`.
    pub(super) fn budget(&mut self) -> &mut B {
        self.budget
    }

    #[inline]
    fn p(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    #[inline]
    fn s(&self, i: usize) -> u8 {
        self.src.get(i).copied().unwrap_or(0)
    }

    /// Try to match the pattern from `p` on at subject position `s`; the end
    /// of the match, if any (Lua's `match`).
    pub(super) fn do_match(&mut self, mut s: usize, mut p: usize) -> Step<Option<usize>> {
        if self.depth == 0 {
            return Err(Abort::Message("pattern too complex"));
        }
        self.depth -= 1;
        let end = self.pat.len();
        let result = loop {
            self.step(1)?;
            if p == end {
                break Some(s);
            }
            match self.pat[p] {
                b'(' => {
                    break if self.p(p + 1) == b')' {
                        self.start_capture(s, p + 2, CAP_POSITION)?
                    } else {
                        self.start_capture(s, p + 1, CAP_UNFINISHED)?
                    };
                }
                b')' => break self.end_capture(s, p + 1)?,
                b'$' if p + 1 == end => break (s == self.src.len()).then_some(s),
                b'%' if self.p(p + 1) == b'b' => match self.match_balance(s, p + 2)? {
                    Some(next) => {
                        s = next;
                        p += 4;
                    }
                    None => break None,
                },
                b'%' if self.p(p + 1) == b'f' => {
                    p += 2;
                    if self.p(p) != b'[' {
                        return Err(Abort::Message("missing '[' after '%f' in pattern"));
                    }
                    let ep = self.class_end(p)?;
                    let previous = if s == 0 { 0 } else { self.s(s - 1) };
                    if !match_set(previous, self.pat, p, ep - 1)
                        && match_set(self.s(s), self.pat, p, ep - 1)
                    {
                        p = ep;
                    } else {
                        break None;
                    }
                }
                b'%' if self.p(p + 1).is_ascii_digit() => {
                    match self.match_capture(s, self.p(p + 1))? {
                        Some(next) => {
                            s = next;
                            p += 2;
                        }
                        None => break None,
                    }
                }
                _ => {
                    let ep = self.class_end(p)?;
                    let suffix = self.p(ep);
                    if !self.single_match(s, p, ep) {
                        if matches!(suffix, b'*' | b'?' | b'-') {
                            p = ep + 1;
                            continue;
                        }
                        break None;
                    }
                    match suffix {
                        b'?' => match self.do_match(s + 1, ep + 1)? {
                            Some(res) => break Some(res),
                            None => p = ep + 1,
                        },
                        b'+' => break self.max_expand(s + 1, p, ep)?,
                        b'*' => break self.max_expand(s, p, ep)?,
                        b'-' => break self.min_expand(s, p, ep)?,
                        _ => {
                            s += 1;
                            p = ep;
                        }
                    }
                }
            }
        };
        self.depth += 1;
        Ok(result)
    }

    /// The end of the single-character class starting at `p` (`classend`).
    fn class_end(&self, p: usize) -> Step<usize> {
        let end = self.pat.len();
        let c = self.p(p);
        let mut p = p + 1;
        match c {
            b'%' => {
                if p >= end {
                    return Err(Abort::Message("malformed pattern (ends with '%')"));
                }
                Ok(p + 1)
            }
            b'[' => {
                if self.p(p) == b'^' {
                    p += 1;
                }
                loop {
                    if p >= end {
                        return Err(Abort::Message("malformed pattern (missing ']')"));
                    }
                    let c = self.pat[p];
                    p += 1;
                    if c == b'%' && p < end {
                        p += 1;
                    }
                    if self.p(p) == b']' {
                        return Ok(p + 1);
                    }
                }
            }
            _ => Ok(p),
        }
    }

    /// Whether the subject byte at `s` matches the class `pat[p..ep]`.
    #[inline]
    fn single_match(&self, s: usize, p: usize, ep: usize) -> bool {
        let Some(&c) = self.src.get(s) else {
            return false;
        };
        match self.pat[p] {
            b'.' => true,
            b'%' => match_class(c, self.p(p + 1)),
            b'[' => match_set(c, self.pat, p, ep - 1),
            pc => pc == c,
        }
    }

    fn match_balance(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        if p + 1 >= self.pat.len() {
            return Err(Abort::Message(
                "malformed pattern (missing arguments to '%b')",
            ));
        }
        let (open, close) = (self.pat[p], self.pat[p + 1]);
        if s >= self.src.len() || self.src[s] != open {
            return Ok(None);
        }
        let mut depth = 1u64;
        let mut i = s + 1;
        while i < self.src.len() {
            self.step(1)?;
            let c = self.src[i];
            if c == close {
                depth -= 1;
                if depth == 0 {
                    return Ok(Some(i + 1));
                }
            } else if c == open {
                depth += 1;
            }
            i += 1;
        }
        Ok(None)
    }

    fn max_expand(&mut self, s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        let mut i = 0usize;
        while self.single_match(s + i, p, ep) {
            self.step(1)?;
            i += 1;
        }
        loop {
            if let Some(res) = self.do_match(s + i, ep + 1)? {
                return Ok(Some(res));
            }
            if i == 0 {
                return Ok(None);
            }
            i -= 1;
        }
    }

    fn min_expand(&mut self, mut s: usize, p: usize, ep: usize) -> Step<Option<usize>> {
        loop {
            if let Some(res) = self.do_match(s, ep + 1)? {
                return Ok(Some(res));
            }
            if self.single_match(s, p, ep) {
                s += 1;
            } else {
                return Ok(None);
            }
        }
    }

    fn start_capture(&mut self, s: usize, p: usize, what: isize) -> Step<Option<usize>> {
        let level = self.level;
        if level >= MAX_CAPTURES {
            return Err(Abort::Message("too many captures"));
        }
        self.caps[level] = Slot { init: s, len: what };
        self.level = level + 1;
        let res = self.do_match(s, p)?;
        if res.is_none() {
            self.level -= 1;
        }
        Ok(res)
    }

    fn end_capture(&mut self, s: usize, p: usize) -> Step<Option<usize>> {
        let Some(l) = (0..self.level)
            .rev()
            .find(|&l| self.caps[l].len == CAP_UNFINISHED)
        else {
            return Err(Abort::Message("invalid pattern capture"));
        };
        self.caps[l].len = (s - self.caps[l].init) as isize;
        let res = self.do_match(s, p)?;
        if res.is_none() {
            self.caps[l].len = CAP_UNFINISHED;
        }
        Ok(res)
    }

    fn match_capture(&mut self, s: usize, digit: u8) -> Step<Option<usize>> {
        let l = i32::from(digit) - i32::from(b'1');
        if l < 0 || l as usize >= self.level || self.caps[l as usize].len == CAP_UNFINISHED {
            return Err(Abort::CaptureIndex(l + 1));
        }
        let Slot { init, len } = self.caps[l as usize];
        // A position capture has a negative length: as an unsigned length in
        // C it never fits, so it never matches.
        let Ok(len) = usize::try_from(len) else {
            return Ok(None);
        };
        self.step(1 + len as u64 / 64)?;
        if self.src.len() - s >= len && self.src[init..init + len] == self.src[s..s + len] {
            Ok(Some(s + len))
        } else {
            Ok(None)
        }
    }
}
