#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Property tests of the codec: round trip, canonical encoding, chunking
//! independence and strictness. Records are generated from random bytes by
//! the same structure-aware generator the fuzz targets use
//! (`quirl_lua_testkit::generate`), so proptest shrinks the bytes.

use proptest::prelude::*;
use quirl_lua_protocol::records::*;
use quirl_lua_protocol::*;
use quirl_lua_testkit::generate::{self, Source};
use quirl_lua_testkit::targets::{self, Ending, Mutation, reference_split};

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..400)
}

fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    /// Valid frames: decode(encode(f)) == f, encoding is canonical (stable,
    /// compact), and any member order and inter-token whitespace decode to
    /// the same frame and re-encode to the same bytes.
    #[test]
    fn round_trip_and_canonical_encoding(data in bytes()) {
        targets::round_trip(&data);
    }

    /// A generated parent frame re-encoded from its decoding is byte-identical.
    #[test]
    fn encoding_is_a_fixed_point(data in bytes()) {
        let mut src = Source::new(&data);
        let frame = generate::parent_frame(&mut src);
        let once = encode_parent_frame(&frame).unwrap();
        let twice = encode_parent_frame(&decode_parent_frame(&once).unwrap()).unwrap();
        prop_assert_eq!(once, twice);
        let frame = generate::worker_frame(&mut src);
        let once = encode_worker_frame(&frame).unwrap();
        let twice = encode_worker_frame(&decode_worker_frame(&once).unwrap()).unwrap();
        prop_assert_eq!(once, twice);
    }
}

proptest! {
    // Each case may build and decode several 256 KiB error records.
    #![proptest_config(config(64))]

    /// Policies and error records are accepted exactly when an independent
    /// oracle (the SPEC ranges) says so, by constructor, decoders and encoders.
    #[test]
    fn validation_matches_the_spec_oracle(data in bytes()) {
        targets::validation(&data);
    }
}

proptest! {
    #![proptest_config(config(128))]

    /// A stream of valid frames decodes to the same frames however it is
    /// chunked, and a stream cut anywhere ends with the right truncation kind.
    #[test]
    fn chunking_independence(
        data in bytes(),
        plan in proptest::collection::vec(1_usize..64, 1..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut src = Source::new(&data);
        let frames: Vec<ParentFrame> =
            (0..1 + src.below(4)).map(|_| generate::parent_frame(&mut src)).collect();
        let stream: Vec<u8> = frames
            .iter()
            .flat_map(|frame| frame.encode_framed().unwrap())
            .collect();
        for pieces in [plan.clone(), vec![1], vec![stream.len()]] {
            let mut decoder = FrameDecoder::new();
            let mut decoded = Vec::new();
            let mut offset = 0;
            let mut step = 0;
            while offset < stream.len() {
                let end = (offset + pieces[step % pieces.len()]).min(stream.len());
                step += 1;
                let mut chunk = &stream[offset..end];
                offset = end;
                while !chunk.is_empty() {
                    match decoder.feed(chunk).unwrap() {
                        Feed::NeedMore => chunk = &[],
                        Feed::Frame { payload, consumed } => {
                            decoded.push(decode_parent_frame(&payload).unwrap());
                            chunk = &chunk[consumed..];
                        }
                        other => panic!("unknown feed outcome {other:?}"),
                    }
                }
            }
            decoder.finish().unwrap();
            prop_assert_eq!(&decoded, &frames);
        }
        // Cut short: the frames before the cut, then a truncation kind.
        let at = cut.index(stream.len());
        let (complete, ending) = reference_split(&stream[..at], 5_242_880);
        let boundary: usize = complete.iter().map(|payload| 4 + payload.len()).sum();
        let expected = if at == boundary {
            Ending::Clean
        } else if at - boundary < 4 {
            Ending::Failed(ErrorKind::TruncatedHeader)
        } else {
            Ending::Failed(ErrorKind::TruncatedFrame)
        };
        prop_assert_eq!(ending, expected);
        // The crate's decoder agrees with the reference on the cut stream,
        // whatever the chunking (checked inside the target).
        let sizes: Vec<u8> = plan.iter().map(|&size| (size - 1) as u8).collect();
        let mut input = vec![sizes.len().min(15) as u8];
        input.extend_from_slice(&sizes[..sizes.len().min(15)]);
        input.extend_from_slice(&stream[..at]);
        targets::decoder_chunking(&input);
    }

    /// Arbitrary bytes through the push decoder: chunking never changes the
    /// frames or the error, and memory stays bounded.
    #[test]
    fn arbitrary_streams_decode_independently_of_chunking(data in bytes()) {
        targets::decoder_chunking(&data);
    }
}

proptest! {
    #![proptest_config(config(96))]

    /// An unknown member in any record or variant (unit variants included)
    /// is `unknown_field`; in a free-form value it is accepted.
    #[test]
    fn unknown_member_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::UnknownMember);
    }

    /// A repeated key in any object (records, tags, maps, free-form values),
    /// also when spelled with an escape, is `duplicate_key`.
    #[test]
    fn duplicate_key_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::DuplicateKey);
    }

    /// Whitespace or any bytes after the value are `trailing_bytes`.
    #[test]
    fn trailing_whitespace_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::Trailing);
    }

    /// Whitespace before the value is `malformed_json`.
    #[test]
    fn leading_whitespace_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::Leading);
    }

    /// A record sent as a JSON array is `not_an_object`.
    #[test]
    fn record_as_array_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::RecordAsArray);
    }

    /// An unknown tag is `unknown_variant`; a missing tag is `missing_tag`.
    #[test]
    fn bad_tag_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::Tag);
    }

    /// A missing required member is `missing_field` (or the response
    /// consistency kinds where the member is `error`/`outcome`).
    #[test]
    fn missing_member_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::MissingMember);
    }

    /// A payload cut short is never accepted.
    #[test]
    fn truncated_payload_is_rejected(data in bytes()) {
        targets::strictness_case(&data, Mutation::Truncate);
    }

    /// Member order and whitespace between tokens do not matter.
    #[test]
    fn layout_is_free(data in bytes()) {
        targets::strictness_case(&data, Mutation::Relayout);
    }
}
