//! "Did you mean": the closest of a set of names to a misspelt one, by
//! optimal string alignment distance (`strsim`: an edit is an insertion, a
//! deletion, a substitution or a swap of neighbours).

/// The candidate closest to `word`, if one is close enough to be a
/// plausible misspelling: at most one edit for words of up to four bytes,
/// else at most a third of the word's length (rounded down, at least one).
/// A candidate equal to `word` but for case is the closest of all. Ties go
/// to the first candidate in byte order, so the answer does not depend on
/// the order of `candidates`.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let limit = if word.len() <= 4 {
        1
    } else {
        (word.len() / 3).max(1)
    };
    let lower = word.to_ascii_lowercase();
    let mut best: Option<(usize, &'a str)> = None;
    for candidate in candidates {
        if candidate == word || candidate.is_empty() {
            continue;
        }
        let distance = if candidate.to_ascii_lowercase() == lower {
            0
        } else {
            strsim::osa_distance(word, candidate)
        };
        if distance > limit {
            continue;
        }
        let better = match best {
            None => true,
            Some((best_distance, best_name)) => {
                distance < best_distance || (distance == best_distance && candidate < best_name)
            }
        };
        if better {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_near_misses_and_nothing_far() {
        let names = ["print", "pairs", "process", "param", "return", "field"];
        assert_eq!(closest("prnt", names), Some("print"));
        assert_eq!(closest("proces", names), Some("process"));
        assert_eq!(closest("parm", names), Some("param"));
        assert_eq!(closest("retrun", names), Some("return"));
        assert_eq!(closest("feild", names), Some("field"));
        assert_eq!(closest("Param", names), Some("param"));
        assert_eq!(closest("xyz", names), None);
        assert_eq!(
            closest("print", names),
            None,
            "the word itself is no suggestion"
        );
    }

    #[test]
    fn ties_do_not_depend_on_the_order_of_candidates() {
        assert_eq!(closest("ab", ["ac", "ad"]), Some("ac"));
        assert_eq!(closest("ab", ["ad", "ac"]), Some("ac"));
    }
}
