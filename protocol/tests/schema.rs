#![allow(clippy::unwrap_used, clippy::expect_used)]
//! SPEC §19: the committed JSON Schemas match the types. `UPDATE_SCHEMA=1` regenerates them.

use quirl_lua_protocol::schema::{parent_to_worker_schema, worker_to_parent_schema};
use std::path::PathBuf;

fn check(name: &str, generated: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/schema")
        .join(name);
    if std::env::var_os("UPDATE_SCHEMA").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}; run with UPDATE_SCHEMA=1", path.display()));
    assert!(
        committed == generated,
        "{} drifted from the types; run `UPDATE_SCHEMA=1 cargo test -p quirl-lua-protocol --test schema`",
        path.display()
    );
}

#[test]
fn parent_to_worker_schema_is_committed_and_current() {
    check("parent_to_worker.json", &parent_to_worker_schema());
}

#[test]
fn worker_to_parent_schema_is_committed_and_current() {
    check("worker_to_parent.json", &worker_to_parent_schema());
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
