#![allow(clippy::unwrap_used, clippy::expect_used)]
//! Numbers in free-form values (SPEC §5.7-a, §5.1-e, §5.1-f) and `null` in
//! a required `any` member (SPEC §1.2-a), read through the decoder a
//! receiver uses: a Response's `result`, the free-form member a worker
//! writes.

use quirl_lua_protocol::records::{Response, WorkerFrame};
use quirl_lua_protocol::serde_json::Value;
use quirl_lua_protocol::{ErrorKind, decode_worker_frame};

fn frame(result: &str) -> String {
    format!(
        r#"{{"kind":"response","response":{{"version":1,"id":7,"ok":true,"result":{result}}}}}"#
    )
}

fn result_of(result: &str) -> Value {
    match decode_worker_frame(frame(result).as_bytes()) {
        Ok(WorkerFrame::Response {
            response: Response {
                result: Ok(value), ..
            },
        }) => value,
        other => panic!("{result}: {other:?}"),
    }
}

fn rejected(result: &str) -> ErrorKind {
    match decode_worker_frame(frame(result).as_bytes()) {
        Err(error) => error.kind(),
        Ok(other) => panic!("{result} was accepted: {other:?}"),
    }
}

fn float(value: &Value) -> f64 {
    assert!(value.is_f64(), "{value} is not read as a double");
    value.as_f64().expect("a double")
}

#[test]
fn integers_within_i64_and_u64_are_exact() {
    // SPEC §5.7-a: exact, never rounded through a double.
    assert_eq!(
        result_of("9007199254740993").as_u64(),
        Some(9_007_199_254_740_993)
    );
    assert_eq!(result_of("18446744073709551615").as_u64(), Some(u64::MAX));
    assert_eq!(result_of("-9223372036854775808").as_i64(), Some(i64::MIN));
}

#[test]
fn integers_beyond_i64_and_u64_are_doubles() {
    // SPEC §5.7-a: accepted, not integer_out_of_range.
    assert_eq!(
        float(&result_of("18446744073709551616")),
        18_446_744_073_709_551_616.0
    );
    assert_eq!(
        float(&result_of("-9223372036854775809")),
        -9_223_372_036_854_775_808.0
    );
    let long = format!("1{}", "0".repeat(300));
    assert_eq!(float(&result_of(&long)), 1e300);
}

#[test]
fn negative_zero_is_the_double_negative_zero() {
    // SPEC §5.7-a: `-0` is -0.0, not the integer 0.
    for text in ["-0", "-0.0", "-0e5"] {
        let value = float(&result_of(text));
        assert_eq!(value, 0.0, "{text}");
        assert!(value.is_sign_negative(), "{text} lost its sign");
    }
    assert_eq!(result_of("0").as_u64(), Some(0));
}

#[test]
fn numbers_beyond_a_double_are_malformed_json() {
    // SPEC §5.1-e, in free-form values too.
    let long = format!("1{}", "0".repeat(309));
    for text in [
        "1e400",
        "-1e400",
        long.as_str(),
        "[1.8e308]",
        "{\"a\":2e308}",
    ] {
        assert_eq!(rejected(text), ErrorKind::MalformedJson, "{text}");
    }
    assert_eq!(float(&result_of("1.7976931348623157e308")), f64::MAX);
}

#[test]
fn numbers_too_small_for_a_double_read_as_zero_with_their_sign() {
    // SPEC §5.1-f: underflow is not out of range.
    let positive = float(&result_of("1e-400"));
    assert_eq!(positive, 0.0);
    assert!(positive.is_sign_positive());
    let negative = float(&result_of("-1e-400"));
    assert_eq!(negative, 0.0);
    assert!(negative.is_sign_negative());
    assert_eq!(float(&result_of("5e-324")), 5e-324);
}

#[test]
fn null_is_a_value_of_a_required_free_form_member() {
    // SPEC §1.2-a: present and null is not missing.
    assert_eq!(result_of("null"), Value::Null);
    let missing = r#"{"kind":"response","response":{"version":1,"id":7,"ok":true}}"#;
    assert_eq!(
        decode_worker_frame(missing.as_bytes())
            .map_err(|error| error.kind())
            .err(),
        Some(ErrorKind::MissingField)
    );
}
