#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §4.3 / BENCHMARKS.md X5: a peer that declares 5 MiB and sends 10 bytes costs the decoder
//! at most 64 KiB, counted by a global allocator.

use quirl_lua_protocol::limits::FRAME_BYTES_MAX;
use quirl_lua_protocol::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Measurements must not overlap: the counters are process-wide.
static SERIAL: Mutex<()> = Mutex::new(());

// SAFETY: every method forwards to the system allocator with the caller's
// arguments unchanged; the counters are only bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let now = CURRENT.fetch_add(layout.size(), Ordering::SeqCst) + layout.size();
        PEAK.fetch_max(now, Ordering::SeqCst);
        // SAFETY: forwarded unchanged.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::SeqCst);
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            let now = CURRENT.fetch_add(new_size - layout.size(), Ordering::SeqCst) + new_size
                - layout.size();
            PEAK.fetch_max(now, Ordering::SeqCst);
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::SeqCst);
        }
        // SAFETY: forwarded unchanged.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Peak bytes allocated (above the starting level) while running `f`.
fn peak_during(f: impl FnOnce()) -> usize {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = CURRENT.load(Ordering::SeqCst);
    PEAK.store(base, Ordering::SeqCst);
    f();
    PEAK.load(Ordering::SeqCst) - base
}

const LIMIT: usize = 64 * 1024;

// SPEC §4.3-d: 5 MiB declared, 10 bytes sent, at most 64 KiB spent.
#[test]
fn push_decoder_hostile_header_plus_ten_bytes_costs_at_most_64_kib() {
    let mut error = None;
    let peak = peak_during(|| {
        let mut decoder = FrameDecoder::new();
        decoder
            .feed(&(FRAME_BYTES_MAX as u32).to_be_bytes())
            .unwrap();
        decoder.feed(b"0123456789").unwrap();
        error = decoder.finish().err();
    });
    assert_eq!(error.unwrap().kind(), ErrorKind::TruncatedFrame);
    assert!(peak <= LIMIT, "peak {peak} bytes");
}

// SPEC §4.3-d: the same bound for the blocking reader.
#[test]
fn blocking_reader_hostile_header_plus_ten_bytes_costs_at_most_64_kib() {
    let stream: Vec<u8> = [&(FRAME_BYTES_MAX as u32).to_be_bytes()[..], b"0123456789"].concat();
    let mut error = None;
    let peak = peak_during(|| {
        let mut reader = std::io::Cursor::new(&stream);
        error = read_payload(&mut reader).err();
    });
    assert_eq!(error.unwrap().kind(), ErrorKind::TruncatedFrame);
    assert!(peak <= LIMIT, "peak {peak} bytes");
}

// SPEC §4.3-c: the buffer grows with the bytes received, not the declared length.
#[test]
fn buffer_grows_only_with_received_bytes() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut decoder = FrameDecoder::new();
    decoder
        .feed(&(FRAME_BYTES_MAX as u32).to_be_bytes())
        .unwrap();
    let chunk = vec![b' '; 100_000];
    let mut received = 0;
    while received + chunk.len() < FRAME_BYTES_MAX {
        decoder.feed(&chunk).unwrap();
        received += chunk.len();
        assert!(
            decoder.buffer_capacity() <= (2 * received).max(4096),
            "{} after {received}",
            decoder.buffer_capacity()
        );
    }
}
