//! Spec data sources through the library: parquet files (written here with polars), `hf://`
//! datasets from a Hugging Face cache these tests build themselves (no network), filters,
//! `max_tests`, the seeded shuffle, the dataset fingerprint, and LiveCodeBench private tests
//! encoded by Python's own pickle/zlib/base64. Tests of the real files in ../shared/data are
//! skipped where it is missing (a user's clone).

use std::path::{Path, PathBuf};
use std::process::Command;

use rlx::data::hf::{self, Options as HfOptions};
use rlx::data::source::{self, Options};
use rlx::data::{Problem, Tests, filter};
use rlx::spec::types::{DataFormat, Source};
use serde_json::{Value, json};

use crate::common::shared_data;

// Paths under ../shared/data.
const LCB: &str = "lcb/lcb_train_580.json";
const CODE_CONTESTS: &str = "lcb/code_contests_test_165.json";
const MBPP: &str = "mbpp/mbpp.jsonl";
const MBPP_SANITIZED: &str = "mbpp/sanitized-mbpp.json";

fn src(path: impl Into<String>) -> Source {
    Source::new(path)
}

/// A source reading a file found by [`shared_data`].
fn shared_src(path: &Path) -> Source {
    src(path.display().to_string())
}

/// Options that never touch the network or the user's cache.
pub(crate) fn offline(cache: &Path) -> Options {
    Options { hf: HfOptions { cache_dir: cache.to_owned(), offline: true, endpoint: None, token: None } }
}

fn no_hub() -> Options {
    offline(Path::new("/nonexistent-hf-cache"))
}

fn total_tests(ps: &[Problem]) -> usize {
    ps.iter().map(|p| p.tests.len()).sum()
}

fn rows(path: &Path) -> Vec<serde_json::Map<String, Value>> {
    let text = std::fs::read_to_string(path).unwrap();
    if path.extension().is_some_and(|e| e == "jsonl") {
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

#[cfg(feature = "parquet")]
mod pq {
    use polars::prelude::*;

    use super::*;

    /// Write string/int/list/datetime columns as a parquet file.
    pub(super) fn write(path: &Path, columns: Vec<Column>) {
        let mut df = DataFrame::new_infer_height(columns).unwrap();
        let mut file = std::fs::File::create(path).unwrap();
        ParquetWriter::new(&mut file).finish(&mut df).unwrap();
    }

    pub(super) fn strings(name: &str, values: Vec<String>) -> Column {
        Column::new(name.into(), values)
    }

    /// The LiveCodeBench file `lcb` as parquet, with `tests` stored as a JSON string (DeepCoder style).
    pub(super) fn lcb_as_parquet(lcb: &Path, path: &Path) {
        let rows = rows(lcb);
        let get = |k: &str| rows.iter().map(|r| r[k].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        let tests = rows.iter().map(|r| r["tests"].to_string()).collect();
        write(path, vec![strings("problem", get("problem")), strings("starter_code", get("starter_code")), strings("tests", tests)]);
    }

    /// The MBPP file `mbpp` as parquet the way the Hub stores it: `task_id` an integer, `test_list` a list column.
    pub(super) fn mbpp_as_parquet(mbpp: &Path, path: &Path) {
        let rows = rows(mbpp);
        let get = |k: &str| rows.iter().map(|r| r[k].as_str().unwrap().to_owned()).collect::<Vec<_>>();
        let ids: Vec<i64> = rows.iter().map(|r| r["task_id"].as_i64().unwrap()).collect();
        let lists = |k: &str| {
            let series: Vec<Series> = rows
                .iter()
                .map(|r| {
                    let items: Vec<&str> = r[k].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
                    Series::new("".into(), items)
                })
                .collect();
            Column::new(k.into(), series)
        };
        write(
            path,
            vec![
                strings("text", get("text")),
                strings("code", get("code")),
                Column::new("task_id".into(), ids),
                strings("test_setup_code", get("test_setup_code")),
                lists("test_list"),
                lists("challenge_test_list"),
            ],
        );
    }
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_copies_load_like_the_json_originals() {
    let (Some(lcb), Some(mbpp)) = (shared_data(LCB), shared_data(MBPP)) else { return };
    let dir = tempfile::tempdir().unwrap();
    // Same stem as the JSON file, so rows without ids get the same ids and the fingerprints match.
    let lcb_pq = dir.path().join("lcb_train_580.parquet");
    pq::lcb_as_parquet(&lcb, &lcb_pq);
    let from_json = source::load_source(&shared_src(&lcb), &no_hub()).unwrap();
    let from_parquet = source::load_source(&src(lcb_pq.display().to_string()), &no_hub()).unwrap();
    assert_eq!(from_parquet.problems.len(), 580);
    assert_eq!(total_tests(&from_parquet.problems), 1543);
    assert_eq!(from_parquet.problems, from_json.problems);
    assert_eq!(from_parquet.fingerprint, from_json.fingerprint);

    let mbpp_pq = dir.path().join("mbpp.parquet");
    pq::mbpp_as_parquet(&mbpp, &mbpp_pq);
    let a = source::load_source(&shared_src(&mbpp), &no_hub()).unwrap();
    let b = source::load_source(&src(mbpp_pq.display().to_string()), &no_hub()).unwrap();
    assert_eq!((b.problems.len(), total_tests(&b.problems)), (974, 2922));
    assert_eq!(b.problems[0].id, "1", "integer task ids become the id");
    assert_eq!(a.fingerprint, b.fingerprint);
}

#[cfg(feature = "parquet")]
#[test]
fn parquet_dates_feed_the_date_filter() {
    use polars::prelude::*;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dated.parquet");
    // 2024-07-31T23:00, 2024-08-01T00:00, 2024-09-30T12:30 in milliseconds since the epoch.
    let ms: Vec<i64> = vec![1_722_466_800_000, 1_722_470_400_000, 1_727_699_400_000];
    let dates = Column::new("contest_date".into(), ms)
        .cast(&DataType::Datetime(TimeUnit::Milliseconds, None))
        .unwrap();
    let tests = r#"[{"input": "1\n", "output": "1\n", "testtype": "stdin"}]"#.to_owned();
    pq::write(
        &path,
        vec![
            pq::strings("question_id", vec!["a".into(), "b".into(), "c".into()]),
            pq::strings("problem", vec!["p".into(); 3]),
            pq::strings("tests", vec![tests; 3]),
            pq::strings("difficulty", vec!["easy".into(), "hard".into(), "Easy".into()]),
            dates,
        ],
    );
    let all = source::load_source(&src(path.display().to_string()), &no_hub()).unwrap();
    assert_eq!(all.problems[1].metadata["contest_date"], "2024-08-01T00:00:00");
    let s = Source { date_from: Some("2024-08-01".into()), ..src(path.display().to_string()) };
    let ids: Vec<String> = source::load_source(&s, &no_hub()).unwrap().problems.into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["b", "c"]);
    let s = Source { difficulty: vec!["EASY".into()], ..src(path.display().to_string()) };
    let ids: Vec<String> = source::load_source(&s, &no_hub()).unwrap().problems.into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["a", "c"]);
}

#[test]
fn a_file_that_is_not_parquet_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.parquet");
    std::fs::write(&path, b"PAR1 this is not a parquet file").unwrap();
    let err = source::load_source(&src(path.display().to_string()), &no_hub()).unwrap_err().to_string();
    assert!(err.contains("broken.parquet"), "{err}");
    let err = source::load_source(&src(dir.path().join("absent.jsonl").display().to_string()), &no_hub()).unwrap_err();
    assert!(err.to_string().contains("absent.jsonl") && err.to_string().contains("does not exist"), "{err}");
    std::fs::write(dir.path().join("rows.csv"), "a,b\n").unwrap();
    let err = source::load_source(&src(dir.path().join("rows.csv").display().to_string()), &no_hub()).unwrap_err();
    assert!(err.to_string().contains("expected .jsonl, .json or .parquet"), "{err}");
}

/// A Hugging Face cache laid out as `huggingface_hub` writes it: content in `blobs/`, the
/// snapshot's files as relative symlinks to them, and `refs/main` naming the snapshot.
pub(crate) struct HubCache {
    dir: tempfile::TempDir,
}

pub(crate) const REV: &str = "0123456789abcdef0123456789abcdef01234567";

impl HubCache {
    pub(crate) fn new() -> Self {
        HubCache { dir: tempfile::tempdir().unwrap() }
    }

    pub(crate) fn root(&self) -> &Path {
        self.dir.path()
    }

    fn repo(&self, repo: &str) -> PathBuf {
        self.root().join(format!("datasets--{}", repo.replace('/', "--")))
    }

    /// Put `content` at `file` in the snapshot of `repo`, as a symlink into `blobs/`.
    pub(crate) fn add(&self, repo: &str, file: &str, content: &[u8]) -> PathBuf {
        let repo_dir = self.repo(repo);
        let blob_name = format!("blob{}", std::fs::read_dir(repo_dir.join("blobs")).map_or(0, |d| d.count()));
        std::fs::create_dir_all(repo_dir.join("blobs")).unwrap();
        std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
        std::fs::write(repo_dir.join("refs/main"), REV).unwrap();
        std::fs::write(repo_dir.join("blobs").join(&blob_name), content).unwrap();
        let link = repo_dir.join("snapshots").join(REV).join(file);
        std::fs::create_dir_all(link.parent().unwrap()).unwrap();
        let depth = file.matches('/').count() + 2;
        let target = format!("{}blobs/{blob_name}", "../".repeat(depth));
        std::os::unix::fs::symlink(target, &link).unwrap();
        assert!(link.is_file(), "symlink {} resolves", link.display());
        link
    }
}

pub(crate) fn jsonl(rows: &[Value]) -> Vec<u8> {
    rows.iter().map(|r| format!("{r}\n")).collect::<String>().into_bytes()
}

fn lcbv5_row(i: usize, date: &str) -> Value {
    let tests = json!([{"input": format!("{i}\n"), "output": format!("{i}\n"), "testtype": "stdin"}]).to_string();
    json!({"problem": format!("echo {i}"), "tests": tests, "contest_date": date})
}

#[test]
fn hf_sources_load_offline_from_a_cache_built_here() {
    let cache = HubCache::new();
    let repo = "agentica-org/DeepCoder-Preview-Dataset";
    // Two shards of one split (read in name order), and a second config with the same split.
    cache.add(repo, "lcbv5/train-00001-of-00002.jsonl", &jsonl(&[lcbv5_row(2, "2024-09-01"), lcbv5_row(3, "2024-10-01")]));
    cache.add(repo, "lcbv5/train-00000-of-00002.jsonl", &jsonl(&[lcbv5_row(0, "2024-07-01"), lcbv5_row(1, "2024-08-01")]));
    cache.add(repo, "lcbv5/test-00000-of-00001.jsonl", &jsonl(&[lcbv5_row(9, "2025-01-01")]));
    let cf = json!({"problem": "cf", "tests": json!([{"input": "1", "output": "1"}, {"input": "22", "output": "2"}]).to_string()});
    cache.add(repo, "codeforces/train-00000-of-00001.jsonl", &jsonl(&[cf]));
    cache.add(repo, "README.md", b"# card\n");

    let opts = offline(cache.root());
    let loaded = source::load_source(&src(format!("hf://{repo}/lcbv5:train")), &opts).unwrap();
    let ids: Vec<&str> = loaded.problems.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(
        ids,
        [
            "DeepCoder-Preview-Dataset/lcbv5/train/0",
            "DeepCoder-Preview-Dataset/lcbv5/train/1",
            "DeepCoder-Preview-Dataset/lcbv5/train/2",
            "DeepCoder-Preview-Dataset/lcbv5/train/3"
        ]
    );
    assert_eq!(loaded.problems[2].statement, "echo 2");
    assert_eq!(loaded.origin.revision.as_deref(), Some(REV));
    assert_eq!(loaded.origin.files.len(), 2);
    // Default split is `train`; filters apply to hub sources like to files.
    let s = Source { date_to: Some("2024-08-31".into()), ..src(format!("hf://{repo}/lcbv5")) };
    assert_eq!(source::load_source(&s, &opts).unwrap().problems.len(), 2);
    let test = source::load_source(&src(format!("hf://{repo}/lcbv5:test")), &opts).unwrap();
    assert_eq!(test.problems[0].id, "DeepCoder-Preview-Dataset/lcbv5/test/0");
    let cf = source::load_source(&src(format!("hf://{repo}/codeforces:train")), &opts).unwrap();
    assert_eq!(cf.problems[0].tests.len(), 2);

    // Without a config the split is ambiguous here, and the error says which configs exist.
    let err = source::load_source(&src(format!("hf://{repo}:train")), &opts).unwrap_err().to_string();
    assert!(err.contains("`codeforces`, `lcbv5`") && err.contains(REV), "{err}");
    let err = source::load_source(&src(format!("hf://{repo}/taco:train")), &opts).unwrap_err().to_string();
    assert!(err.contains("no config `taco`"), "{err}");
    let err = source::load_source(&src("hf://nobody/nothing:train"), &opts).unwrap_err().to_string();
    assert!(err.contains("hf://nobody/nothing:train") && err.contains("not in the Hugging Face cache") && err.contains("HF_HUB_OFFLINE"), "{err}");
}

#[cfg(feature = "parquet")]
#[test]
fn hf_parquet_shards_in_a_data_directory() {
    let Some(lcb) = shared_data(LCB) else { return };
    let cache = HubCache::new();
    let staging = tempfile::tempdir().unwrap();
    let pq_path = staging.path().join("x.parquet");
    pq::lcb_as_parquet(&lcb, &pq_path);
    let repo = "someone/lcb-parquet";
    cache.add(repo, "data/train-00000-of-00001.parquet", &std::fs::read(&pq_path).unwrap());
    let loaded = source::load_source(&src(format!("hf://{repo}")), &offline(cache.root())).unwrap();
    assert_eq!((loaded.problems.len(), total_tests(&loaded.problems)), (580, 1543));
    assert_eq!(loaded.problems[0].id, "lcb-parquet/train/0");
}

#[test]
fn hf_cache_damage_and_missing_refs() {
    let cache = HubCache::new();
    let repo = "o/broken";
    let link = cache.add(repo, "data/train-00000-of-00001.jsonl", &jsonl(&[lcbv5_row(0, "2024-01-01")]));
    let opts = offline(cache.root());
    assert_eq!(source::load_source(&src("hf://o/broken"), &opts).unwrap().problems.len(), 1);
    // `refs/main` gone: the only snapshot is still used.
    std::fs::remove_file(cache.repo(repo).join("refs/main")).unwrap();
    assert_eq!(source::load_source(&src("hf://o/broken"), &opts).unwrap().origin.revision.as_deref(), Some(REV));
    // A snapshot entry whose blob was deleted.
    let blob = std::fs::canonicalize(&link).unwrap();
    std::fs::remove_file(blob).unwrap();
    let err = source::load_source(&src("hf://o/broken"), &opts).unwrap_err().to_string();
    assert!(err.contains("content is missing") && err.contains("train-00000-of-00001.jsonl"), "{err}");
}

#[test]
fn an_unreachable_hub_falls_back_to_the_cache() {
    let cache = HubCache::new();
    cache.add("o/cached", "train.jsonl", &jsonl(&[lcbv5_row(0, "2024-01-01")]));
    // Port 9 on localhost refuses connections: the Hub gives no answer at all.
    let opts = Options {
        hf: HfOptions {
            cache_dir: cache.root().to_owned(),
            offline: false,
            endpoint: Some("http://127.0.0.1:9".into()),
            token: None,
        },
    };
    let loaded = source::load_source(&src("hf://o/cached"), &opts).unwrap();
    assert_eq!(loaded.problems.len(), 1);
    let err = source::load_source(&src("hf://o/uncached"), &opts).unwrap_err().to_string();
    assert!(err.contains("cannot reach the Hugging Face Hub") && err.contains("hf://o/uncached:train"), "{err}");
}

#[test]
fn hf_options_parse_uris_before_touching_anything() {
    let err = source::load_source(&src("hf://only-owner"), &no_hub()).unwrap_err();
    assert!(matches!(err, source::Error::Hub(hf::Error::BadUri { .. })), "{err}");
}

#[test]
fn max_tests_keeps_the_longest_inputs_like_rllm() {
    let Some(cc) = shared_data(CODE_CONTESTS) else { return };
    let s = Source { max_tests: Some(15), ..shared_src(&cc) };
    let loaded = source::load_source(&s, &no_hub()).unwrap();
    assert_eq!(loaded.problems.len(), 165);
    assert_eq!(total_tests(&loaded.problems), 980);
    assert_eq!(loaded.stats.tests_dropped, 857);
    // Problem 140 has 138 tests. rLLM keeps
    // `sorted(range(n), key=lambda i: len(inputs[i]), reverse=True)[:15]`; Python computed these
    // indices, and the kept cases stay in file order.
    let raw = rows(&cc);
    let inputs = raw[140]["tests"]["inputs"].as_array().unwrap();
    assert_eq!(inputs.len(), 138);
    let want: Vec<&str> =
        [16, 23, 28, 33, 39, 47, 50, 60, 72, 78, 79, 82, 96, 128, 134].iter().map(|&i| inputs[i].as_str().unwrap()).collect();
    let Tests::Stdin { cases } = &loaded.problems[140].tests else { panic!("stdin expected") };
    assert_eq!(cases.iter().map(|c| c.input.as_str()).collect::<Vec<_>>(), want);
}

#[test]
fn filters_on_real_files() {
    let (Some(lcb), Some(mbpp)) = (shared_data(LCB), shared_data(MBPP)) else { return };
    // The rLLM LiveCodeBench file carries neither difficulty nor dates: such filters are errors.
    let s = Source { difficulty: vec!["easy".into()], ..shared_src(&lcb) };
    let err = source::load_source(&s, &no_hub()).unwrap_err();
    let chain = format!("{err}: {}", std::error::Error::source(&err).unwrap());
    assert!(chain.contains("lcb_train_580.json") && chain.contains("no problem in the source has a `difficulty`"), "{chain}");
    let s = Source { date_from: Some("2024-01-01".into()), ..shared_src(&lcb) };
    assert!(source::load_source(&s, &no_hub()).is_err());

    let s = Source { ids: vec!["7".into(), "2".into(), "5".into()], ..shared_src(&mbpp) };
    let ids: Vec<String> = source::load_source(&s, &no_hub()).unwrap().problems.into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["2", "5", "7"]);
    let s = Source { limit: Some(10), max_tests: Some(2), ..shared_src(&lcb) };
    let l = source::load_source(&s, &no_hub()).unwrap();
    assert_eq!(l.problems.len(), 10);
    assert!(l.problems.iter().all(|p| p.tests.len() <= 2));
    let s = Source { ids: vec!["1".into(), "9999".into()], ..shared_src(&mbpp) };
    let err = source::load_source(&s, &no_hub()).unwrap_err();
    assert!(std::error::Error::source(&err).unwrap().to_string().contains("`9999`"), "{err}");
}

#[test]
fn fingerprint_changes_with_filters_and_nothing_else() {
    let Some(lcb) = shared_data(LCB) else { return };
    let base = source::load_source(&shared_src(&lcb), &no_hub()).unwrap().fingerprint;
    assert_eq!(base, source::load_source(&shared_src(&lcb), &no_hub()).unwrap().fingerprint, "reloading");
    // Filters that remove nothing leave it alone: it hashes the problems, not the spec.
    let noop = Source { max_tests: Some(1000), limit: Some(580), ..shared_src(&lcb) };
    assert_eq!(base, source::load_source(&noop, &no_hub()).unwrap().fingerprint);
    // Forcing the format that auto-detection picks changes nothing either.
    let forced = Source { format: DataFormat::Lcb, ..shared_src(&lcb) };
    assert_eq!(base, source::load_source(&forced, &no_hub()).unwrap().fingerprint);
    let mut seen = vec![base];
    for s in [
        Source { limit: Some(579), ..shared_src(&lcb) },
        Source { max_tests: Some(2), ..shared_src(&lcb) },
        Source { max_tests: Some(3), ..shared_src(&lcb) },
        Source { ids: vec!["lcb_train_580/0".into()], ..shared_src(&lcb) },
    ] {
        let fp = source::load_source(&s, &no_hub()).unwrap().fingerprint;
        assert!(!seen.contains(&fp), "{s:?} gave a fingerprint seen before");
        seen.push(fp);
    }
}

/// A spec over the three files (found by [`shared_data`]).
fn write_spec(dir: &Path, [lcb, sanitized, cc]: [&Path; 3], shuffle: bool, seed: u64) -> PathBuf {
    std::fs::write(dir.join("user.j2"), "{{ problem.statement }}").unwrap();
    let spec = format!(
        "name: data-test\nseed: {seed}\nmodel: {{base: org/model}}\nbackend: {{kind: local}}\n\
         data:\n  shuffle: {shuffle}\n  train:\n    - {{path: {}, limit: 50}}\n    - {{path: {}, max_tests: 2}}\n  eval:\n    - {{path: {}, limit: 5}}\n\
         prompt:\n  user: user.j2\n",
        lcb.display(),
        sanitized.display(),
        cc.display(),
    );
    let path = dir.join(format!("spec-{shuffle}-{seed}.yaml"));
    std::fs::write(&path, spec).unwrap();
    path
}

#[test]
fn spec_data_loads_with_a_seeded_shuffle() {
    let (Some(lcb), Some(sanitized), Some(cc)) = (shared_data(LCB), shared_data(MBPP_SANITIZED), shared_data(CODE_CONTESTS)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let load = |shuffle: bool, seed: u64| {
        let plan = rlx::plan::plan(&write_spec(dir.path(), [&lcb, &sanitized, &cc], shuffle, seed), &[]).unwrap();
        rlx::data::load_data(&plan.data, plan.seed, &no_hub()).unwrap()
    };
    let ordered = load(false, 1);
    assert_eq!(ordered.train.problems.len(), 50 + 427);
    assert_eq!(total_tests(&ordered.train.problems[50..]), 427 * 2);
    assert_eq!(ordered.train.sources.len(), 2);
    assert_eq!(ordered.eval.problems.len(), 5);
    assert_eq!(ordered.train.problems[0].id, "lcb_train_580/0");

    let a = load(true, 1);
    let b = load(true, 1);
    let c = load(true, 2);
    let ids = |d: &rlx::data::Dataset| d.train.problems.iter().map(|p| p.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&a), ids(&b));
    assert_eq!(a.train.fingerprint, b.train.fingerprint);
    assert_ne!(ids(&a), ids(&c));
    assert_ne!(a.train.fingerprint, c.train.fingerprint);
    assert_ne!(a.train.fingerprint, ordered.train.fingerprint);
    // The shuffle is the documented SplitMix64 Fisher–Yates permutation of the ordered set.
    let mut expect = ids(&ordered);
    filter::shuffle(&mut expect, 1);
    assert_eq!(ids(&a), expect);
    // Source fingerprints are taken before the shuffle, and eval is never shuffled.
    assert_eq!(a.train.sources[0].fingerprint, ordered.train.sources[0].fingerprint);
    assert_eq!(a.eval.fingerprint, ordered.eval.fingerprint);
}

/// `private_test_cases` encoded by CPython: `base64(zlib(pickle(json)))` with each pickle protocol.
pub(crate) fn python_private_field(cases: &Value, protocol: u8) -> Option<String> {
    let script = format!(
        "import base64, pickle, sys, zlib\ns = sys.stdin.read()\n\
         sys.stdout.write(base64.b64encode(zlib.compress(pickle.dumps(s, protocol={protocol}))).decode())"
    );
    let mut child = Command::new("python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .ok()?;
    use std::io::Write;
    child.stdin.take()?.write_all(cases.to_string().as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    out.status.success().then(|| String::from_utf8(out.stdout).unwrap())
}

#[test]
fn livecodebench_private_tests_decode() {
    let private = json!([
        {"input": "3\n1 2 3\n", "output": "6\n", "testtype": "stdin"},
        {"input": "1\nünïcödé ✓\n", "output": "0\n", "testtype": "stdin"},
        {"input": "2\n10 20\n", "output": "30\n", "testtype": "stdin"}
    ]);
    let public = json!([{"input": "1\n5\n", "output": "5\n", "testtype": "stdin"}]).to_string();
    let mut lines = Vec::new();
    for protocol in 0..=5u8 {
        let Some(field) = python_private_field(&private, protocol) else {
            panic!("python3 is needed to build the pickled fixture (pickle protocol {protocol})");
        };
        lines.push(json!({
            "question_title": "sum", "question_content": "Print the sum.", "platform": "atcoder",
            "question_id": format!("abc{protocol}"), "contest_id": "abc", "contest_date": "2024-08-03T00:00:00",
            "starter_code": "", "difficulty": "easy", "public_test_cases": public,
            "private_test_cases": field, "metadata": "{}"
        }));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("lcb_native.jsonl");
    std::fs::write(&path, jsonl(&lines)).unwrap();
    let loaded = source::load_source(&src(path.display().to_string()), &no_hub()).unwrap();
    assert_eq!(loaded.problems.len(), 6);
    for p in &loaded.problems {
        let Tests::Stdin { cases } = &p.tests else { panic!("stdin expected") };
        assert_eq!(cases.len(), 4, "{}: one public and three private tests", p.id);
        assert_eq!(cases[0].input, "1\n5\n");
        assert_eq!(cases[2].input, "1\nünïcödé ✓\n");
        assert_eq!(cases[3].output, "30\n");
    }
    assert_eq!(loaded.problems[3].id, "abc3");

    // A corrupted field is an error naming the file, the row and the layer that failed.
    let mut bad = lines[1].clone();
    bad["private_test_cases"] = json!("eJzLSM3JyQcABiwCFQ==");
    std::fs::write(&path, jsonl(&[lines[0].clone(), bad])).unwrap();
    let err = source::load_source(&src(path.display().to_string()), &no_hub()).unwrap_err().to_string();
    assert!(err.contains("lcb_native.jsonl") && err.contains("row 1") && err.contains("pickled string"), "{err}");
}

#[test]
fn taco_apps_and_humaneval_fixtures() {
    let taco = source::load_source(&src("tests/fixtures/data/taco_apps.jsonl"), &no_hub()).unwrap().problems;
    assert_eq!(taco.len(), 4);
    assert_eq!(taco.iter().map(|p| p.tests.len()).collect::<Vec<_>>(), [3, 4, 2, 1]);
    match &taco[1].tests {
        Tests::Functional { fn_name, cases } => {
            assert_eq!(fn_name, "add");
            assert_eq!((cases[2].input.as_str(), cases[2].output.as_str()), ("10\n-2", "[8]"));
        }
        other => panic!("functional expected, got {other:?}"),
    }
    let Tests::Stdin { cases } = &taco[2].tests else { panic!("stdin expected") };
    assert_eq!((cases[0].input.as_str(), cases[0].output.as_str()), ("3\n1 2 3", "6"), "lists of lines are joined");
    assert_eq!(taco[3].id, "4000");
    assert_eq!(taco[0].metadata["difficulty"], "EASY");
    let s = Source { difficulty: vec!["medium_hard".into(), "introductory".into()], ..src("tests/fixtures/data/taco_apps.jsonl") };
    let ids: Vec<String> = source::load_source(&s, &no_hub()).unwrap().problems.into_iter().map(|p| p.id).collect();
    assert_eq!(ids, ["taco_apps/1", "4000"]);

    let he = source::load_source(&src("tests/fixtures/data/humaneval.jsonl"), &no_hub()).unwrap().problems;
    assert_eq!(he.len(), 2);
    match &he[1].tests {
        Tests::Check { entry_point, test, prompt } => {
            assert_eq!(entry_point, "is_even");
            assert!(test.contains("def check(candidate)") && prompt.starts_with("def is_even"));
        }
        other => panic!("check expected, got {other:?}"),
    }
    assert_eq!(he[0].id, "Fixture/0");
    let Tests::Check { prompt, .. } = &he[0].tests else { unreachable!() };
    assert_eq!(he[0].starter_code.as_deref(), Some(prompt.as_str()), "the prompt is the starter code");
}

#[test]
fn malformed_taco_rows_name_file_row_and_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("taco.jsonl");
    let good = json!({"question": "q", "input_output": json!({"inputs": ["1"], "outputs": ["1"]}).to_string()});
    let uneven = json!({"question": "q", "input_output": json!({"inputs": ["1", "2"], "outputs": ["1"]}).to_string()});
    let not_json = json!({"question": "q", "input_output": "{inputs: [1]"});
    for (bad, expect) in [(uneven, "2 inputs but 1 outputs"), (not_json, "`input_output` is not JSON")] {
        std::fs::write(&path, jsonl(&[good.clone(), good.clone(), bad])).unwrap();
        let err = source::load_source(&src(path.display().to_string()), &no_hub()).unwrap_err().to_string();
        assert!(err.contains("taco.jsonl") && err.contains("row 2") && err.contains(expect), "{err}");
    }
}

/// `language` on a source: stdin problems carry it (and the other settings) into their
/// metadata, Python leaves no trace (fingerprints unchanged), and problems only Python can
/// pass are refused naming the first one.
#[test]
fn a_source_language_reaches_its_problems() {
    use rlx::spec::types::{Checker, Language};
    let data = crate::common::repo().join("experiments/data");
    let stdin = data.join("easy_stdin_train.jsonl").display().to_string();
    let plain = source::load_source(&src(&stdin), &no_hub()).unwrap();
    let mut cpp = src(&stdin);
    cpp.language = Some(Language::Cpp);
    cpp.compile_flags = Some(vec!["-O0".into()]);
    cpp.checker = Some(Checker::Tokens);
    let loaded = source::load_source(&cpp, &no_hub()).unwrap();
    assert!(plain.problems.iter().all(|p| p.language() == Language::Python && !p.metadata.contains_key("language")));
    assert!(loaded.problems.iter().all(|p| p.language() == Language::Cpp && p.checker() == Checker::Tokens && p.compile_flags() == Some(vec!["-O0".to_owned()])));
    assert_ne!(plain.fingerprint, loaded.fingerprint, "another language is another task");
    let mut python = src(&stdin);
    python.language = Some(Language::Python);
    assert_eq!(source::load_source(&python, &no_hub()).unwrap().fingerprint, plain.fingerprint, "python is the default");

    let mut mbpp = src(data.join("easy_python_train.jsonl").display().to_string());
    mbpp.language = Some(Language::Cpp);
    let err = source::load_source(&mbpp, &no_hub()).unwrap_err();
    assert!(err.is_user_error());
    let msg = err.to_string();
    assert!(msg.contains("problem `10001` has assert tests, which only Python can pass") && msg.contains("`cpp`"), "{msg}");
}
