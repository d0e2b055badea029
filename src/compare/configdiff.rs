//! The config diff: each run's resolved spec flattened to `key.path → value`, and the keys whose
//! values differ between runs. Only those keys are shown (a diff, not the whole config: the
//! complaint in wandb#4045 and SwanLab#1356), and they define the arms.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

/// Keys that never define an arm: `seed` is the replicate axis (runs that differ only in it are
/// one arm), `name`, `description` and `log.*` name and file a run, and `sweep.*` says where it
/// executes, without changing what it computes (the run id's hash leaves `description`, `log` and
/// `sweep` out for the same reason).
pub(crate) fn is_hidden(key: &str) -> bool {
    key == "seed" || key == "name" || key == "description" || key == "log" || key.starts_with("log.") || key == "sweep" || key.starts_with("sweep.") || key == "diagnostics" || key.starts_with("diagnostics.")
}

/// Flattens a resolved spec: objects by `.`, arrays of objects by index (`data.train.0.path`);
/// an array of scalars stays one value (`eval.k = [1,5]`), as do `null`s. Strings are shown
/// without quotes.
pub(crate) fn flatten(v: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    walk(v, String::new(), &mut out);
    out
}

fn walk(v: &Value, prefix: String, out: &mut BTreeMap<String, String>) {
    let join = |k: &str| if prefix.is_empty() { k.to_string() } else { format!("{prefix}.{k}") };
    match v {
        Value::Object(map) if !map.is_empty() => {
            for (k, x) in map {
                walk(x, join(k), out);
            }
        }
        Value::Array(items) if items.iter().any(|x| x.is_object()) => {
            for (i, x) in items.iter().enumerate() {
                walk(x, join(&i.to_string()), out);
            }
        }
        Value::String(s) => {
            out.insert(prefix, s.clone());
        }
        other => {
            out.insert(prefix, other.to_string());
        }
    }
}

/// The keys (outside [`is_hidden`]) whose value differs between any two of `configs`, in key
/// order; a key one config lacks counts as differing.
pub(crate) fn differing<'a>(configs: impl IntoIterator<Item = &'a BTreeMap<String, String>>) -> Vec<String> {
    let configs: Vec<&BTreeMap<String, String>> = configs.into_iter().collect();
    let keys: BTreeSet<&String> = configs.iter().flat_map(|c| c.keys()).collect();
    keys.into_iter()
        .filter(|k| !is_hidden(k))
        .filter(|k| {
            let first = configs.first().and_then(|c| c.get(*k));
            configs.iter().any(|c| c.get(*k) != first)
        })
        .cloned()
        .collect()
}

/// The short name of a key for labels: the spec's alias when it has one (`lr` for
/// `optimizer.learning_rate`), else the key.
pub(crate) fn short(key: &str) -> &str {
    crate::spec::schema::ALIASES.iter().find(|(_, full)| *full == key).map_or(key, |(alias, _)| alias)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn flattens_and_diffs() {
        let a = flatten(&json!({"seed": 0, "name": "q", "optimizer": {"learning_rate": 3e-4, "beta1": 0.9},
            "data": {"train": [{"path": "/a.jsonl", "limit": null}]}, "eval": {"k": [1, 5]}, "log": {"root": "/r1"}}));
        assert_eq!(a["optimizer.learning_rate"], "0.0003");
        assert_eq!(a["data.train.0.path"], "/a.jsonl");
        assert_eq!(a["data.train.0.limit"], "null");
        assert_eq!(a["eval.k"], "[1,5]");
        let mut b = a.clone();
        b.insert("optimizer.learning_rate".into(), "0.0001".into());
        b.insert("seed".into(), "1".into());
        b.insert("log.root".into(), "/r2".into());
        b.insert("grpo.group_size".into(), "8".into());
        assert_eq!(differing([&a, &b]), vec!["grpo.group_size".to_string(), "optimizer.learning_rate".to_string()]);
        assert!(differing([&a, &a]).is_empty());
        assert_eq!(short("optimizer.learning_rate"), "lr");
        assert_eq!(short("optimizer.beta1"), "optimizer.beta1");
    }
}
