//! The public registration checks a worker builds its registrations with
//! (SPEC §7.2): each record's own `check`, the plugin-wide
//! `check_collections`, and the bound/shape classification of
//! `RegistrationError`; plus the action and event helpers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use quirl_lua_protocol::ErrorKind;
use quirl_lua_protocol::limits::{
    PROMPT_SEGMENTS_MAX, REGISTRATION_DESCRIPTION_BYTES_MAX, REGISTRATION_NAME_BYTES_MAX,
};
use quirl_lua_protocol::records::{
    CommandRegistration, ContributionKind, ContributionRegistration, EventKind, EventSubscription,
    ExtensionAction, ExtensionCapability, ExtensionEventData, OutputStream, PluginRegistrations,
    PromptRegistration,
};
use std::collections::BTreeMap;

fn prompt(name: &str, deadline_ms: u64) -> PromptRegistration {
    PromptRegistration {
        name: name.to_owned(),
        deadline_ms,
    }
}

fn command() -> CommandRegistration {
    CommandRegistration {
        name: "hello".to_owned(),
        signature: "hello".to_owned(),
        summary: "greets".to_owned(),
        details: "says hello".to_owned(),
        input_type: "Nothing".to_owned(),
        output_type: "Values<String>".to_owned(),
        examples: vec!["hello".to_owned()],
        effects: vec!["none".to_owned()],
        error_codes: BTreeMap::from([("E".to_owned(), "bad".to_owned())]),
    }
}

#[test]
fn bounds_and_shape_rules_are_told_apart_and_name_their_field() {
    let long = prompt(&"x".repeat(REGISTRATION_NAME_BYTES_MAX + 1), 5)
        .check()
        .unwrap_err();
    assert!(long.exceeds_bound);
    assert_eq!(long.error.kind(), ErrorKind::DomainBounds);
    assert_eq!(long.error.context(), "name");
    let late = prompt("p", 101).check().unwrap_err();
    assert!(!late.exceeds_bound);
    assert_eq!(late.error.context(), "deadline_ms");
    assert!(late.error.message().contains("1..=100"), "{late}");

    let mut summary = command();
    summary.summary = "s".repeat(REGISTRATION_DESCRIPTION_BYTES_MAX + 1);
    let error = summary.check().unwrap_err();
    assert!(
        error.exceeds_bound && error.error.context() == "summary",
        "{error}"
    );
    let mut contract = command();
    contract.output_type = "Stream<String>".to_owned();
    let error = contract.check().unwrap_err();
    assert!(!error.exceeds_bound && error.error.context() == "output_type");
    command().check().unwrap();
}

#[test]
fn check_collections_covers_counts_and_unique_names_and_validate_agrees() {
    let mut plugin = PluginRegistrations {
        prompt_segments: (0..PROMPT_SEGMENTS_MAX)
            .map(|i| prompt(&format!("s{i}"), 5))
            .collect(),
        ..PluginRegistrations::default()
    };
    plugin.check_collections().unwrap();
    plugin.validate().unwrap();
    plugin.prompt_segments.push(prompt("extra", 5));
    let error = plugin.check_collections().unwrap_err();
    assert!(error.exceeds_bound);
    assert_eq!(error.error.context(), "prompt_segments");
    assert_eq!(plugin.validate().unwrap_err(), error.error);

    let panel = |name: &str| ContributionRegistration {
        kind: ContributionKind::Panel,
        name: name.to_owned(),
        deadline_ms: 5,
        plain_fallback: Some("text".to_owned()),
    };
    let plugin = PluginRegistrations {
        contributions: vec![panel("p"), panel("p")],
        ..PluginRegistrations::default()
    };
    let error = plugin.check_collections().unwrap_err();
    assert!(!error.exceeds_bound);
    assert!(
        error
            .error
            .message()
            .contains("duplicate panel contribution `p`")
    );
    assert_eq!(error.error.context(), "contributions[1]");

    // An item rule is the item check's, not the collections'.
    let plugin = PluginRegistrations {
        prompt_segments: vec![prompt("p", 0)],
        ..PluginRegistrations::default()
    };
    plugin.check_collections().unwrap();
    assert_eq!(
        plugin.validate().unwrap_err().context(),
        "prompt_segments[0].deadline_ms"
    );
}

#[test]
fn metadata_bytes_count_what_the_collection_bounds_count() {
    let handler = EventSubscription {
        name: "abc".to_owned(),
        events: vec![EventKind::Output, EventKind::Error],
        capabilities: vec![ExtensionCapability::EventsObserve],
        deadline_ms: 1,
    };
    assert_eq!(handler.metadata_bytes(), 3 + 2 + 1);
    assert_eq!(prompt("abcd", 1).metadata_bytes(), 4);
    let bytes = "hello".len() * 2
        + "greets".len()
        + "says hello".len()
        + "Nothing".len()
        + "Values<String>".len()
        + "hello".len()
        + "none".len()
        + "E".len()
        + "bad".len();
    assert_eq!(command().metadata_bytes(), bytes);
}

#[test]
fn action_rules_and_event_kinds_are_public() {
    ExtensionAction::Diagnose {
        message: "ok\n".to_owned(),
    }
    .validate()
    .unwrap();
    let error = ExtensionAction::SetEnvironment {
        name: "A B".to_owned(),
        value: "v".to_owned(),
    }
    .validate()
    .unwrap_err();
    assert_eq!(error.context(), "name");
    let error = ExtensionAction::Diagnose {
        message: "\u{1b}[2J".to_owned(),
    }
    .validate()
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::DomainBounds);
    let output = ExtensionEventData::Output {
        stream: OutputStream::Stdout,
        bytes: 1,
        text: None,
    };
    assert_eq!(output.kind(), EventKind::Output);
    assert_eq!(
        ExtensionEventData::Cancellation {
            reason: "r".to_owned()
        }
        .kind()
        .as_str(),
        "cancellation"
    );
}
