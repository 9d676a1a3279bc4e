//! Stable replay of the `lua_programs` fuzz target (DESIGN §15.6): generated
//! Lua programs — loops, library calls with adversarial arguments, sparse
//! tables, metamethods, to-be-closed variables, coroutines — each end by the
//! worker's own limits (completion, a Lua error, an `instructions` or
//! `memory` trip; never the wall clock) within the CPU bound per budget
//! unit. The generator and the check are the fuzz target's own
//! (`quirl_lua_testkit::lua_programs`); proptest drives them from a fixed seed, and
//! every committed seed of the fuzz corpus is replayed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use quirl_lua_testkit::lua_programs::{Ending, check, program, run, run_source};

#[test]
fn generated_programs_end_by_the_budget() {
    let config = Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner =
        TestRunner::new_with_rng(config, TestRng::deterministic_rng(RngAlgorithm::ChaCha));
    let endings = std::cell::RefCell::new(std::collections::BTreeMap::<String, u32>::new());
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..160), |bytes| {
            let source = program(&bytes);
            let outcome = run_source(&source);
            check(&source, &outcome);
            *endings
                .borrow_mut()
                .entry(format!("{:?}", outcome.ending))
                .or_default() += 1;
            Ok(())
        })
        .unwrap();
    // The grammar must actually reach the budget, not only finish or fail.
    let endings = endings.into_inner();
    assert!(
        endings.keys().any(|k| k.contains("instructions")),
        "no generated program tripped the instruction budget: {endings:?}"
    );
}

#[test]
fn committed_fuzz_seeds_replay() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/lua_programs");
    let mut replayed = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("seed-") {
            continue;
        }
        // the fuzz target's own entry: churn seeds run twice and compared
        run(&std::fs::read(&path).unwrap());
        replayed += 1;
    }
    assert!(replayed >= 8, "only {replayed} seeds in {}", dir.display());
}

#[test]
fn the_issue_examples_are_generated_shapes() {
    // A to-be-closed variable whose handler loops, around a loop: the
    // unwinding case of DESIGN §15.8, as the generator writes it.
    let source = "do local c <close> = setmetatable({}, {__close = function(o, e) while true do end end}) while true do end end";
    let outcome = run_source(source);
    assert_eq!(outcome.ending, Ending::Tripped("instructions".to_owned()));
    check(source, &outcome);
}
