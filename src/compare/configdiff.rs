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

/// The prefix of an environment switch's key in a run's config: `env.RLX_TRAIN_PACK`.
pub(crate) const ENV: &str = "env.";

/// Adds the environment switches `provenance.json` recorded (those that change results, with
/// their values in force: `crate::switches`) to a flattened config as `env.<NAME>`, so two runs
/// that differ only in `RLX_TRAIN_PACK` differ as a config key does: in the diff, and as arms.
pub(crate) fn add_switches(config: &mut BTreeMap<String, String>, switches: &BTreeMap<String, String>) {
    config.extend(switches.iter().map(|(k, v)| (format!("{ENV}{k}"), v.clone())));
}

/// The keys (outside [`is_hidden`]) whose value differs between any two of `configs`, in key
/// order; a key one config lacks counts as differing, except a switch (`env.*`): a run older
/// than their record did not say, which is not a difference.
pub(crate) fn differing<'a>(configs: impl IntoIterator<Item = &'a BTreeMap<String, String>>) -> Vec<String> {
    let configs: Vec<&BTreeMap<String, String>> = configs.into_iter().collect();
    let keys: BTreeSet<&String> = configs.iter().flat_map(|c| c.keys()).collect();
    keys.into_iter()
        .filter(|k| !is_hidden(k))
        .filter(|k| !k.starts_with(ENV) || configs.iter().all(|c| c.contains_key(*k)))
        .filter(|k| {
            let first = configs.first().and_then(|c| c.get(*k));
            configs.iter().any(|c| c.get(*k) != first)
        })
        .cloned()
        .collect()
}

/// Gives each file key that provenance hashed (`hashes` per run: key → SHA-256) one value per
/// content: the path the first run holding that content named it by. Files with the same bytes
/// at different paths (two clones of one repository) become one value; files whose bytes differ
/// stay different (a file changed at one path gets its hash appended); a run without a recorded
/// hash keeps its path, which may differ. (Rejected: dropping a key only when every run recorded
/// one hash for it, which split three runs of one recipe from two clones into two arms as soon
/// as a fourth run's file differed.)
pub(crate) fn unify_by_content<'a>(runs: impl IntoIterator<Item = (&'a mut BTreeMap<String, String>, &'a BTreeMap<String, String>)>) {
    let mut named: BTreeMap<(String, String), String> = BTreeMap::new();
    for (config, hashes) in runs {
        for (key, hash) in hashes {
            let Some(path) = config.get(key).cloned() else { continue };
            let id = (key.clone(), hash.clone());
            let value = match named.get(&id) {
                Some(v) => v.clone(),
                None => {
                    let clash = named.iter().any(|((k, _), v)| k == key && *v == path);
                    let v = if clash { format!("{path} (sha256 {})", &hash[..hash.len().min(12)]) } else { path };
                    named.insert(id, v.clone());
                    v
                }
            };
            config.insert(key.clone(), value);
        }
    }
}

/// How each of `values` is shown: when all of them are absolute paths, relative to their
/// common directory with `…/` in front (keeping that directory's last component, so
/// `…/data/a.jsonl` vs `…/data/b.jsonl`, not two 120-character paths that differ at the end);
/// otherwise as they are. Distinct values stay distinct.
pub(crate) fn shown(values: &[&str]) -> Vec<String> {
    let paths = values.iter().all(|v| v.starts_with('/')) && values.iter().collect::<BTreeSet<_>>().len() > 1;
    if !paths {
        return values.iter().map(|v| (*v).to_string()).collect();
    }
    let parts: Vec<Vec<&str>> = values.iter().map(|v| v.split('/').filter(|c| !c.is_empty()).collect()).collect();
    // Directories shared by all (never a value's last component, which is the file itself).
    let shortest = parts.iter().map(|p| p.len().saturating_sub(1)).min().unwrap_or(0);
    let common = (0..shortest).take_while(|&i| parts.iter().all(|p| p[i] == parts[0][i])).count();
    let cut = common.saturating_sub(1);
    if cut == 0 {
        return values.iter().map(|v| (*v).to_string()).collect();
    }
    parts.iter().map(|p| format!("…/{}", p[cut..].join("/"))).collect()
}

/// The name a label gives `key`: its alias (`lr`), else its last segment that is not an index
/// (`optimizer.beta1` → `beta1`, `data.eval.0.format` → `format`).
pub(crate) fn label_name(key: &str) -> &str {
    let s = short(key);
    if s != key {
        return s;
    }
    key.rsplit('.').find(|seg| seg.parse::<usize>().is_err()).unwrap_or(key)
}

/// The letter label of the `i`-th arm: `A`..`Z`, then `AA`, `AB`, ...
pub(crate) fn letter(i: usize) -> String {
    let mut n = i;
    let mut out = vec![];
    loop {
        out.push(char::from(b'A' + (n % 26) as u8));
        if n < 26 {
            break;
        }
        n = n / 26 - 1;
    }
    out.iter().rev().collect()
}

/// `s` cut to `max` characters by replacing its middle with `…` (both ends carry meaning: a
/// run id's name and hash, a path's root and file).
pub(crate) fn middle_cut(s: &str, max: usize) -> String {
    let c: Vec<char> = s.chars().collect();
    if c.len() <= max || max < 3 {
        return s.to_string();
    }
    let keep = max - 1;
    let head = keep.div_ceil(2);
    c[..head].iter().chain(std::iter::once(&'…')).chain(&c[c.len() - (keep - head)..]).collect()
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
        assert_eq!(label_name("optimizer.learning_rate"), "lr");
        assert_eq!(label_name("optimizer.beta1"), "beta1");
        assert_eq!(label_name("data.eval.0.format"), "format");
    }

    #[test]
    fn a_recorded_switch_is_a_config_key_and_an_unrecorded_one_no_difference() {
        let config = |pack: Option<&str>| {
            let mut c = flatten(&json!({"seed": 0, "optimizer": {"learning_rate": 3e-4}}));
            add_switches(&mut c, &pack.map(|p| [("RLX_TRAIN_PACK".to_string(), p.to_string()), ("RLX_ALLOC".to_string(), "x".to_string())].into()).unwrap_or_default());
            c
        };
        let (on, off, old) = (config(Some("on")), config(Some("off")), config(None));
        assert_eq!(on["env.RLX_TRAIN_PACK"], "on");
        assert_eq!(differing([&on, &off]), ["env.RLX_TRAIN_PACK"]);
        assert_eq!(label_name("env.RLX_TRAIN_PACK"), "RLX_TRAIN_PACK");
        assert!(differing([&on, &old]).is_empty(), "a run older than the record said nothing");
    }

    #[test]
    fn files_are_one_value_per_content_whatever_their_paths() {
        let run = |path: &str, hash: Option<&str>| -> (BTreeMap<String, String>, BTreeMap<String, String>) {
            let key = "data.train.0.path".to_string();
            ([(key.clone(), path.to_string()), ("seed".into(), "0".into())].into(), hash.map(|h| [(key, h.to_string())].into()).unwrap_or_default())
        };
        let unified = |mut runs: Vec<(BTreeMap<String, String>, BTreeMap<String, String>)>| -> Vec<String> {
            unify_by_content(runs.iter_mut().map(|(c, h)| (c, &*h)));
            runs.into_iter().map(|(c, _)| c["data.train.0.path"].clone()).collect()
        };
        // Two clones of one file, and a third run on other bytes: the clones are one value.
        let v = unified(vec![run("/a/t.jsonl", Some("h1")), run("/b/t.jsonl", Some("h1")), run("/c/t.jsonl", Some("h2"))]);
        assert_eq!(v, ["/a/t.jsonl", "/a/t.jsonl", "/c/t.jsonl"]);
        let configs: Vec<BTreeMap<String, String>> = v.iter().map(|p| [("data.train.0.path".to_string(), p.clone())].into()).collect();
        assert_eq!(differing(configs.iter()), ["data.train.0.path"], "other bytes still differ");
        assert!(differing(configs[..2].iter()).is_empty(), "the clones do not");
        // One path whose bytes changed between runs: two values.
        let v = unified(vec![run("/a/t.jsonl", Some("h1aaaaaaaaaaaaaa")), run("/a/t.jsonl", Some("h2bbbbbbbbbbbbbb"))]);
        assert_eq!(v, ["/a/t.jsonl", "/a/t.jsonl (sha256 h2bbbbbbbbbb)"]);
        // Unrecorded content keeps its path, which is compared as written.
        let v = unified(vec![run("/a/t.jsonl", Some("h1")), run("/b/t.jsonl", None)]);
        assert_eq!(v, ["/a/t.jsonl", "/b/t.jsonl"]);
    }

    #[test]
    fn paths_are_shown_below_their_common_directory() {
        assert_eq!(shown(&["/home/u/clone1/data/a.jsonl", "/home/u/clone2/data/a.jsonl"]), ["…/u/clone1/data/a.jsonl", "…/u/clone2/data/a.jsonl"]);
        assert_eq!(shown(&["/w/rlx/data/a.jsonl", "/w/rlx/data/b.jsonl", "/w/rlx/data/a.jsonl"]), ["…/data/a.jsonl", "…/data/b.jsonl", "…/data/a.jsonl"]);
        assert_eq!(shown(&["/a.jsonl", "/b.jsonl"]), ["/a.jsonl", "/b.jsonl"]);
        assert_eq!(shown(&["data/a.jsonl", "data/b.jsonl"]), ["data/a.jsonl", "data/b.jsonl"], "relative paths are already short");
        assert_eq!(shown(&["0.001", "0.0001"]), ["0.001", "0.0001"]);
        assert_eq!(shown(&["/x/a", "/x/a"]), ["/x/a", "/x/a"]);
    }

    #[test]
    fn letters_go_on_after_z() {
        assert_eq!([0, 1, 25, 26, 27, 51, 52].map(letter), ["A", "B", "Z", "AA", "AB", "AZ", "BA"]);
    }
}
