//! Section `V`: the metered VM against stock Lua of the same release.
//!
//! Each program (the files of `bench/lua/`, and one program per pattern
//! workload of the P rows) runs as a whole command on both sides: the
//! stock interpreter built from the same verified sources without the
//! metering patch (`quirl_lua_testkit::stock`, `STOCK FILE`) and
//! `quirl-lua eval -- SOURCE` under the default policy (100,000,000
//! instructions, 32 MiB, 5,000 ms: DESIGN §15), worker start, lockdown and
//! parent included. A sample is the CPU time (user + system) of the
//! command's whole process tree; the two sides alternate program by
//! program within each round, so load changes hit both alike. Both sides
//! must print the same value (the worker's JSON string or number against
//! stock Lua's `tostring`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use quirl_lua_testkit::stock;

use crate::inproc::BoxError;
use crate::report::Row;

/// Whole-program rows: (name, target ratio, source).
const PROGRAMS: &[(&str, f64, &str)] = &[
    ("fib(30)", 1.15, include_str!("../lua/fib.lua")),
    (
        "binary-trees (depth 14)",
        1.15,
        include_str!("../lua/binary_trees.lua"),
    ),
    (
        "n-body (150,000 steps)",
        1.15,
        include_str!("../lua/nbody.lua"),
    ),
    (
        "spectral-norm (n = 200)",
        1.15,
        include_str!("../lua/spectral_norm.lua"),
    ),
    (
        "fannkuch-redux (n = 9)",
        1.15,
        include_str!("../lua/fannkuch_redux.lua"),
    ),
    (
        "tokenizer on anchored find",
        1.3,
        include_str!("../lua/tokenizer.lua"),
    ),
    (
        "JSON encode/decode round trip",
        1.3,
        include_str!("../lua/json_round_trip.lua"),
    ),
    (
        "10^6 sub/byte/plain find",
        1.3,
        include_str!("../lua/sub_byte_find.lua"),
    ),
];

/// The text of the P workloads (as `reference-worker/benches/patterns.rs`).
const TEXT: &str = "The quick brown fox jumps over the lazy dog; key=value pairs, \
    trimmed   text and a needle in the haystack of ordinary words, numbers 12 345 6789.";

/// The P workloads as programs: (name, calls, body of a loop that adds
/// to `c`, with `text` in scope).
const PATTERNS: &[(&str, u32, &str)] = &[
    (
        "P gmatch word split (%a+)",
        20_000,
        r#"for w in text:gmatch("%a+") do c = c + #w end"#,
    ),
    (
        "P match key=value ((%w+)=(%w+))",
        200_000,
        r#"local k, v = ("key=value"):match("(%w+)=(%w+)") c = c + #k + #v"#,
    ),
    (
        "P match trim (^%s*(.-)%s*$)",
        200_000,
        r#"c = c + #("   some padded text   "):match("^%s*(.-)%s*$")"#,
    ),
    (
        "P gsub with function (%w+)",
        10_000,
        r#"local s, k = text:gsub("%w+", function(w) return #w end) c = c + #s + k"#,
    ),
    (
        "P gsub with string (%s+ -> ' ')",
        20_000,
        r#"local s, k = text:gsub("%s+", " ") c = c + #s + k"#,
    ),
    (
        "P find plain (needle, plain=true)",
        300_000,
        r#"c = c + text:find("needle", 1, true)"#,
    ),
    (
        "P find pattern (n%a+e)",
        200_000,
        r#"c = c + text:find("n%a+e")"#,
    ),
];

fn pattern_program(calls: u32, body: &str) -> String {
    format!("local text = {TEXT:?}\nlocal c = 0\nfor _ = 1, {calls} do {body} end\nreturn c\n")
}

/// CPU time (user + system) of the waited-for descendants of this process.
fn children_cpu() -> Result<Duration, BoxError> {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `usage` is a valid, writable `rusage`; getrusage fills it
    // and touches nothing else (RUSAGE_CHILDREN is a valid `who`).
    let status = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, usage.as_mut_ptr()) };
    if status != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: getrusage returned 0, so it wrote the whole struct (and the
    // zeroed start is a valid `rusage` anyway).
    let usage = unsafe { usage.assume_init() };
    let time = |t: libc::timeval| {
        Duration::from_secs(u64::try_from(t.tv_sec).unwrap_or(0))
            + Duration::from_micros(u64::try_from(t.tv_usec).unwrap_or(0))
    };
    Ok(time(usage.ru_utime) + time(usage.ru_stime))
}

/// Run `command`, return its tree's CPU time and its stdout.
fn cpu_of(command: &mut Command) -> Result<(Duration, String), BoxError> {
    let before = children_cpu()?;
    let output = command.output()?;
    let after = children_cpu()?;
    if !output.status.success() {
        return Err(format!(
            "{command:?} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        )
        .into());
    }
    Ok((
        after.saturating_sub(before),
        String::from_utf8(output.stdout)?,
    ))
}

/// The worker's printed result as stock Lua's `tostring` shows it.
fn as_lua_text(json: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(json.trim()) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => json.trim().to_owned(),
    }
}

/// The V rows; `quirl_lua` is the `quirl-lua` binary, `rounds` the
/// samples per program and side.
pub fn v(quirl_lua: &Path, rounds: usize, notes: &mut Vec<String>) -> Result<Vec<Row>, BoxError> {
    let mut programs: Vec<(String, Option<f64>, String)> = PROGRAMS
        .iter()
        .map(|(name, target, source)| ((*name).to_owned(), Some(*target), (*source).to_owned()))
        .collect();
    programs.extend(
        PATTERNS.iter().map(|(name, calls, body)| {
            ((*name).to_owned(), Some(1.5), pattern_program(*calls, body))
        }),
    );
    programs.push((
        "empty program (`return 1`): the fixed cost of a command".to_owned(),
        None,
        "return 1".to_owned(),
    ));
    let files = programs
        .iter()
        .map(|(_, _, source)| stock::SourceFile::new(source))
        .collect::<Result<Vec<_>, _>>()?;
    let mut ours = vec![Vec::with_capacity(rounds); programs.len()];
    let mut base = vec![Vec::with_capacity(rounds); programs.len()];
    // One warm-up round (page cache, CPU frequency), then the samples.
    for round in 0..=rounds {
        for (index, ((name, _, source), file)) in programs.iter().zip(&files).enumerate() {
            let (stock_cpu, stock_out) = cpu_of(Command::new(stock::path()).arg(file.path()))?;
            let (quirl_cpu, quirl_out) =
                cpu_of(Command::new(quirl_lua).args(["eval", "--", source]))?;
            let expected = stock_out.strip_suffix('\n').unwrap_or(&stock_out);
            if as_lua_text(&quirl_out) != expected {
                return Err(format!(
                    "{name}: quirl-lua printed {quirl_out:?}, stock Lua {expected:?}"
                )
                .into());
            }
            if round > 0 {
                ours[index].push(quirl_cpu);
                base[index].push(stock_cpu);
            }
        }
    }
    let mut rows = Vec::new();
    for (index, (name, target, _)) in programs.iter().enumerate() {
        rows.push(crate::time_row(
            "V",
            name.clone(),
            &ours[index],
            "stock Lua 5.4.9",
            Some(&base[index]),
            *target,
        )?);
    }
    notes.push(format!(
        "V: CPU time (user + system) of the whole command, `quirl-lua eval` (worker included) against stock Lua 5.4.9 built from the same sources without the patch ({}); {rounds} rounds, sides alternating per program; same printed results asserted",
        stock::path().display()
    ));
    Ok(rows)
}
