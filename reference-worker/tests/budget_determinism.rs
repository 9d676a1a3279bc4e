//! The budget trips at the same unit in every run (DESIGN §15.6-a): no
//! charge depends on where keys land in a hash part, on the process's hash
//! secret or on the state's string seed, and the collector does the same
//! work at the same points.
//!
//! Each test runs the same programs in separate processes (this test
//! binary again, in a child mode), so that every run has its own secret
//! (`getrandom`, per process), string seeds and address-space layout, and
//! compares how each program ended, what it returned, the units charged
//! and the bytes held at the end.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_testkit::lua_programs::{Ending, churn_program, run_measured};
use std::collections::BTreeMap;
use std::process::{Command, Stdio};

/// Set in a child: what to run.
const CHILD: &str = "QUIRL_DETERMINISM_CHILD";
/// Generated programs per run.
const PROGRAMS: u64 = 1_100;
/// Memory limit of the generated runs (some trip it).
const MEMORY: u64 = 16 * 1024 * 1024;

/// A program's bytes: 16 to 79 bytes of a fixed pseudo-random stream.
fn program_bytes(index: u64) -> Vec<u8> {
    let mut x = index.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let len = 16 + (next() % 64) as usize;
    (0..len).map(|_| (next() >> 24) as u8).collect()
}

/// The two programs of the issue (15.6-a): a sliding-window set, whose
/// rehashes depended on where keys landed, and lookups of long-string keys
/// of one length, whose comparisons depended on the chains the string seed
/// made; and a table of enough long-string keys that some share a whole
/// hash. Each with a budget that trips inside it and one it completes in.
const EXAMPLES: &[(&str, &str, u64)] = &[
    (
        "sliding-window",
        "local s, w = {}, 1000
         for i = 1, 60000 do s[i] = true s[i - w] = nil s['k' .. i] = i s['k' .. (i - w)] = nil end
         local c = 0 for _ in pairs(s) do c = c + 1 end return c",
        500_000,
    ),
    (
        "long-string-keys",
        "local base = string.rep('x', 300) local t = {} for i = 1, 2000 do t[base .. i] = i end
         local n = 0 for j = 1, 40 do for i = 1, 2000, 7 do n = n + t[base .. i] end end return n",
        100_000,
    ),
    (
        // 60,000 long-string keys: among them about n^2/2^33 = 0.4 pairs
        // share a 32-bit hash (which pairs, the secret and the seed
        // decide), and the bytes of such a pair were compared and charged
        // (now uncharged: `luaQ_eqlngkey`)
        "long-string-key-collisions",
        "local base = string.rep('x', 300) local t = {} for i = 1, 60000 do t[base .. i] = i end
         local n = 0 for i = 1, 60000, 7 do n = n + t[base .. i] end return n",
        700_000,
    ),
];

/// The lines a child prints: one per run.
fn child(mode: &str) {
    // The worker binaries' allocation path (DESIGN §15.6, "The allocator").
    // SAFETY: this test binary declares no `#[global_allocator]`.
    unsafe { quirl_lua_reference_worker::declare_system_allocator() };
    // libtest has printed `test NAME ... ` without a line break
    println!();
    match mode {
        "programs" => {
            for index in 0..PROGRAMS {
                let (source, limit) = churn_program(&program_bytes(index));
                let m = run_measured(&source, limit, MEMORY);
                println!(
                    "RUN {index} {:?} units={} memory={} result={:?}",
                    m.ending, m.units, m.memory, m.result
                );
            }
        }
        "examples" => {
            for (name, source, trips) in EXAMPLES {
                for (what, limit) in [("trip", *trips), ("complete", 100_000_000)] {
                    let m = run_measured(source, limit, 32 * 1024 * 1024);
                    println!(
                        "RUN {name}/{what} {:?} units={} memory={} result={:?}",
                        m.ending, m.units, m.memory, m.result
                    );
                }
            }
        }
        other => panic!("unknown child mode {other}"),
    }
}

/// Run `test` of this binary in child mode `mode`, `copies` processes at a
/// time; the runs each printed, by their key.
fn children(test: &str, mode: &str, copies: usize) -> Vec<BTreeMap<String, String>> {
    let exe = std::env::current_exe().unwrap();
    let spawned: Vec<_> = (0..copies)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", test, "--nocapture", "--test-threads", "1"])
                .env(CHILD, mode)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    spawned
        .into_iter()
        .map(|child| {
            let output = child.wait_with_output().unwrap();
            assert!(
                output.status.success(),
                "child failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8_lossy(&output.stdout)
                .lines()
                .filter_map(|line| line.strip_prefix("RUN "))
                .filter_map(|line| line.split_once(' '))
                .map(|(key, rest)| (key.to_owned(), rest.to_owned()))
                .collect()
        })
        .collect()
}

#[track_caller]
fn assert_same_runs(runs: &[BTreeMap<String, String>], expected: usize) {
    let first = &runs[0];
    assert_eq!(first.len(), expected, "runs reported: {first:?}");
    for (n, other) in runs.iter().enumerate().skip(1) {
        for (key, line) in first {
            assert_eq!(
                other.get(key),
                Some(line),
                "run {key} differs between process 1 and process {}",
                n + 1
            );
        }
    }
}

#[test]
fn generated_table_churn_programs_end_the_same_way_in_separate_processes() {
    const NAME: &str = "generated_table_churn_programs_end_the_same_way_in_separate_processes";
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let runs = children(NAME, "programs", 2);
    assert_same_runs(&runs, PROGRAMS as usize);
    // The grammar reaches each ending, so the comparison covers trips at
    // differing points as well as complete runs.
    let mut endings = BTreeMap::<String, u32>::new();
    for line in runs[0].values() {
        let ending = line.split(' ').next().unwrap_or_default().to_owned();
        *endings.entry(ending).or_default() += 1;
    }
    for wanted in [
        format!("{:?}", Ending::Completed),
        format!("{:?}", Ending::Tripped("instructions".to_owned())),
    ] {
        assert!(
            endings.get(&wanted).is_some_and(|n| *n >= 50),
            "too few runs ended {wanted}: {endings:?}"
        );
    }
}

#[test]
fn the_issue_examples_trip_at_the_same_unit_in_twenty_processes() {
    const NAME: &str = "the_issue_examples_trip_at_the_same_unit_in_twenty_processes";
    if let Ok(mode) = std::env::var(CHILD) {
        return child(&mode);
    }
    let mut runs = Vec::new();
    for _ in 0..10 {
        runs.extend(children(NAME, "examples", 2));
    }
    assert_eq!(runs.len(), 20);
    assert_same_runs(&runs, 2 * EXAMPLES.len());
    for (name, _, _) in EXAMPLES {
        let trip = &runs[0][&format!("{name}/trip")];
        assert!(
            trip.starts_with(&format!("{:?}", Ending::Tripped("instructions".to_owned()))),
            "{name}: {trip}"
        );
        let complete = &runs[0][&format!("{name}/complete")];
        assert!(
            complete.starts_with(&format!("{:?}", Ending::Completed)),
            "{name}: {complete}"
        );
    }
}
