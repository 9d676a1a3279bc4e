#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §19.5: the committed JSON Schemas match the types. They are `insta`
//! snapshots kept as plain JSON files beside their metadata
//! (`fixtures/schema/NAME.snap.json`, `NAME.snap`): a change of a record
//! fails this test until the new schema is reviewed (`cargo insta review`)
//! or accepted (`INSTA_UPDATE=always cargo test -p quirl-lua-protocol
//! --features schema --test schema`). CI runs with `CI=true`, where insta
//! never writes a snapshot.

use quirl_lua_protocol::schema::{parent_to_worker_schema, worker_to_parent_schema};

/// Compare `generated` with the committed `fixtures/schema/{name}.snap.json`.
fn check(name: &str, generated: String) {
    let mut settings = insta::Settings::clone_current();
    settings.set_snapshot_path("../../fixtures/schema");
    settings.set_prepend_module_to_snapshot(false);
    settings.bind(|| {
        insta::assert_binary_snapshot!(&format!("{name}.json"), generated.into_bytes());
    });
}

#[test]
fn parent_to_worker_schema_is_committed_and_current() {
    check("parent_to_worker", parent_to_worker_schema());
}

#[test]
fn worker_to_parent_schema_is_committed_and_current() {
    check("worker_to_parent", worker_to_parent_schema());
}

#[test]
fn schemas_close_every_record() {
    for text in [parent_to_worker_schema(), worker_to_parent_schema()] {
        let schema: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut stack = vec![&schema];
        let mut objects = 0;
        while let Some(node) = stack.pop() {
            match node {
                serde_json::Value::Object(map) => {
                    if map.get("type") == Some(&serde_json::json!("object"))
                        && map.contains_key("properties")
                    {
                        objects += 1;
                        assert_eq!(
                            map.get("additionalProperties"),
                            Some(&serde_json::json!(false)),
                            "open record in schema: {node}"
                        );
                    }
                    stack.extend(map.values());
                }
                serde_json::Value::Array(items) => stack.extend(items),
                _ => {}
            }
        }
        assert!(objects >= 5, "{objects} records found");
    }
}
