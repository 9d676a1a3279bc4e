//! X7 (BENCHMARKS.md): how soon a client call blocked on a silent worker
//! returns `cancelled` after the host cancels, per way of cancelling —
//! blocking: the `Canceller` (a pipe woken in `poll(2)`) against a watched
//! `Arc<AtomicBool>` (`cancel_on`, looked at every
//! `CANCEL_CHECK_INTERVAL`); tokio: a future (`cancel_when`) against the
//! flag — and what watching a flag costs a waiting call in CPU time.
//!
//! `cargo bench -p quirl-lua-protocol --features tokio --bench cancel_latency`
//!
//! Latency is measured from the instant the canceling thread (or task)
//! sets the flag or calls `cancel` to the instant the call returned, over
//! 300 fresh clients each; the worker is a pipe that never answers. The
//! CPU rows: the calling thread's CPU time during a 2 s wait.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::blocking::ParentClient;
use quirl_lua_protocol::frame_payload;
use quirl_lua_protocol::operations::{Eval, Initialize};
use quirl_lua_protocol::records::{Policy, PolicySettings};
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Samples per row under `cargo bench`; a run without `--bench` (`cargo
/// test --all-targets`) is a smoke test of a few.
fn sample_count() -> usize {
    if std::env::args().any(|arg| arg == "--bench") {
        300
    } else {
        5
    }
}
const INIT_OK: &[u8] =
    br#"{"kind":"response","response":{"version":1,"id":1,"ok":true,"result":null}}"#;

fn policy() -> Policy {
    Policy::new(PolicySettings {
        wall_time_ms: 60_000,
        ..Policy::quirl_config_profile().settings()
    })
    .unwrap()
}

/// A client whose `initialize` was answered, and the silent worker's ends.
fn ready() -> (
    ParentClient<std::io::PipeReader, Vec<u8>>,
    std::io::PipeWriter,
) {
    let (reader, mut worker) = std::io::pipe().unwrap();
    worker.write_all(&frame_payload(INIT_OK).unwrap()).unwrap();
    let mut client = ParentClient::new(reader, Vec::new());
    client.call(Initialize::new(policy())).unwrap().unwrap();
    (client, worker)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index]
}

fn report(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    println!(
        "{name:<44} p50 {:>8.1} µs   p90 {:>8.1} µs   p99 {:>8.1} µs   max {:>8.1} µs",
        percentile(&samples, 0.5).as_secs_f64() * 1e6,
        percentile(&samples, 0.9).as_secs_f64() * 1e6,
        percentile(&samples, 0.99).as_secs_f64() * 1e6,
        samples.last().unwrap().as_secs_f64() * 1e6,
    );
}

/// One blocking sample: another thread cancels `delay` after the call
/// started; the latency from its cancel to the call's return.
fn blocking_sample(by_flag: bool, delay: Duration) -> Duration {
    let (mut client, _worker) = ready();
    let flag = Arc::new(AtomicBool::new(false));
    let canceller = if by_flag {
        client.cancel_on(Arc::clone(&flag));
        None
    } else {
        Some(client.canceller().unwrap())
    };
    let setter = std::thread::spawn(move || {
        std::thread::sleep(delay);
        let at = Instant::now();
        match canceller {
            Some(canceller) => canceller.cancel(),
            None => flag.store(true, Ordering::Release),
        }
        at
    });
    let error = client.call(Eval::new("return 1")).unwrap_err();
    let returned = Instant::now();
    assert!(error.is_cancelled());
    returned.saturating_duration_since(setter.join().unwrap())
}

/// CPU time this thread has run, in nanoseconds (the first field of
/// `/proc/thread-self/schedstat`; no clock-tick rounding).
fn cpu_time() -> Duration {
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    Duration::from_nanos(text.split_whitespace().next().unwrap().parse().unwrap())
}

/// CPU time the calling thread spends while its call waits `wait` for a
/// silent worker.
fn waiting_cost(by_flag: bool, wait: Duration) -> Duration {
    let (mut client, _worker) = ready();
    let flag = Arc::new(AtomicBool::new(false));
    if by_flag {
        client.cancel_on(Arc::clone(&flag));
    }
    let canceller = client.canceller().unwrap();
    let setter = std::thread::spawn(move || {
        std::thread::sleep(wait);
        canceller.cancel();
    });
    let before = cpu_time();
    let _ = client.call(Eval::new("return 1"));
    let spent = cpu_time().saturating_sub(before);
    setter.join().unwrap();
    spent
}

#[cfg(feature = "tokio")]
fn tokio_samples(by_future: bool) -> Vec<Duration> {
    use tokio::io::AsyncWriteExt;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut samples = Vec::with_capacity(sample_count());
        for index in 0..sample_count() {
            let (parent_end, mut worker_end) = tokio::io::duplex(1 << 16);
            let (read, write) = tokio::io::split(parent_end);
            let mut client = quirl_lua_protocol::tokio_io::ParentClient::new(read, write);
            worker_end
                .write_all(&frame_payload(INIT_OK).unwrap())
                .await
                .unwrap();
            client
                .call(Initialize::new(policy()))
                .await
                .unwrap()
                .unwrap();
            let flag = Arc::new(AtomicBool::new(false));
            let (stop, stopped) = tokio::sync::oneshot::channel::<Instant>();
            if by_future {
                client.cancel_when(async move {
                    let _ = stopped.await;
                });
            } else {
                client.cancel_on(Arc::clone(&flag));
            }
            let delay = Duration::from_micros(500 + 37 * (index as u64 % 50));
            let setter = tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let at = Instant::now();
                if by_future {
                    let _ = stop.send(at);
                } else {
                    flag.store(true, Ordering::Release);
                }
                at
            });
            let error = client.call(Eval::new("return 1")).await.unwrap_err();
            let returned = Instant::now();
            assert!(error.is_cancelled());
            samples.push(returned.saturating_duration_since(setter.await.unwrap()));
        }
        samples
    })
}

fn main() {
    // `cargo bench` passes `--bench`; nothing to parse.
    for (name, by_flag) in [
        ("blocking, Canceller::cancel", false),
        ("blocking, cancel_on(Arc<AtomicBool>)", true),
    ] {
        let samples = (0..sample_count())
            .map(|index| {
                blocking_sample(
                    by_flag,
                    Duration::from_micros(500 + 37 * (index as u64 % 50)),
                )
            })
            .collect();
        report(name, samples);
    }
    #[cfg(feature = "tokio")]
    {
        report("tokio, cancel_when(future)", tokio_samples(true));
        report("tokio, cancel_on(Arc<AtomicBool>)", tokio_samples(false));
    }
    let wait = if sample_count() > 5 {
        Duration::from_secs(2)
    } else {
        Duration::from_millis(50)
    };
    for (name, by_flag) in [
        ("CPU of a wait, Canceller only", false),
        ("CPU of a wait, watching a flag", true),
    ] {
        let spent = waiting_cost(by_flag, wait);
        println!(
            "{name:<44} {:>8.2} ms ({:.3} % of one core)",
            spent.as_secs_f64() * 1e3,
            spent.as_secs_f64() / wait.as_secs_f64() * 100.0
        );
    }
}
