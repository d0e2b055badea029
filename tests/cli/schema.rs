//! The committed JSON Schema is exactly what `rlx schema` prints.

use crate::common::{TestContext, repo};

#[test]
fn committed_schema_is_current() {
    let r = TestContext::new().run(&["schema"]);
    assert_eq!(r.code, 0);
    let committed = std::fs::read_to_string(repo().join("schemas/experiment.schema.json")).unwrap();
    assert!(
        r.stdout == committed,
        "schemas/experiment.schema.json is stale: run `cargo run -- schema > schemas/experiment.schema.json`"
    );
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["$schema"], "https://json-schema.org/draft/2020-12/schema");
    for section in ["model", "backend", "data", "prompt", "sampling", "grpo", "reward", "sandbox", "optimizer", "schedule", "eval", "log"] {
        assert!(v["properties"][section].is_object(), "schema lacks `{section}`");
    }
}
