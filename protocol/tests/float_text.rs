#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §12.1-b (rule 6): the text of a non-integer number in a free-form
//! value, each branch of the rule and its edges. A change of the JSON
//! library's float writer that moves any of these fails here.

use quirl_lua_protocol::serde_json::{Number, Value};
use quirl_lua_protocol::value::encode_value;

fn text(value: f64) -> String {
    let number = Number::from_f64(value).expect("finite");
    String::from_utf8(encode_value(&Value::Number(number))).expect("UTF-8")
}

#[test]
fn plain_with_a_point_from_one_to_sixteen_integer_digits() {
    assert_eq!(text(1.5), "1.5");
    assert_eq!(text(100.0), "100.0");
    assert_eq!(text(-2.25), "-2.25");
    assert_eq!(text(1e15), "1000000000000000.0");
    assert_eq!(text(9_007_199_254_740_992.0), "9007199254740992.0");
}

#[test]
fn plain_below_one_down_to_four_leading_zeros() {
    assert_eq!(text(0.1), "0.1");
    assert_eq!(text(0.00001), "0.00001");
    assert_eq!(text(2.5e-5), "0.000025");
    assert_eq!(text(0.0), "0.0");
    assert_eq!(text(-0.0), "-0.0");
}

#[test]
fn exponent_notation_elsewhere_with_a_sign_on_the_exponent() {
    assert_eq!(text(1e16), "1e+16");
    assert_eq!(text(1.5e16), "1.5e+16");
    assert_eq!(text(1e-6), "1e-6");
    assert_eq!(text(1.23456e-8), "1.23456e-8");
    assert_eq!(text(1e300), "1e+300");
    assert_eq!(text(-1e300), "-1e+300");
    assert_eq!(text(5e-324), "5e-324");
    assert_eq!(text(f64::MAX), "1.7976931348623157e+308");
}
