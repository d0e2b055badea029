//! The environment switches: every `RLX_*` variable rlx reads, one row each (name, meaning,
//! default, whether it changes results), and the only place that names them. A read site names
//! its row (`switches::TRAIN_PACK.var()`), so a switch is documented, listed by `rlx`'s docs
//! (docs/development.md, "Environment switches", checked against [`markdown_table`]) and, when
//! it changes results, recorded in `provenance.json` ([`recorded`]) and compared by
//! `rlx compare`, from this one row. A test fails when a `"RLX_…"` literal appears anywhere
//! else in `src/` or `crates/`.
//!
//! Why a table and not a spec key per switch: these are process settings (where Python is, where
//! caches live, which kernels run), not properties of an experiment; a spec that names one would
//! not run the same elsewhere. The four that change training numerics are exactly why they must
//! be recorded: two runs that differ only in one of them otherwise look identical.
//!
//! `RLX_ISA` is read by the kernels crate (`rlx-kernels`, which cannot depend on rlx): its row
//! takes the name from that crate and records the level it settled on (`rlx_kernels::isa`).

use std::collections::BTreeMap;
use std::ffi::OsString;

/// One environment switch.
#[derive(Debug, Clone, Copy)]
pub struct Switch {
    /// The variable.
    pub name: &'static str,
    /// What it does.
    pub meaning: &'static str,
    /// What holds when it is unset; for a switch that changes results, the value recorded then,
    /// in backticks.
    pub default: &'static str,
    /// Whether it can change a run's numbers (then `provenance.json` records it).
    pub changes_results: bool,
    /// Its value in force, as recorded: the variable's value, or the default when unset.
    effective: fn(&Switch) -> String,
}

impl Switch {
    const fn new(name: &'static str, meaning: &'static str, default: &'static str, changes_results: bool) -> Switch {
        Switch { name, meaning, default, changes_results, effective: set_or_default }
    }

    /// The variable's value, when set and Unicode.
    pub fn var(&self) -> Option<String> {
        std::env::var(self.name).ok()
    }

    /// The variable's value, when set (paths need not be Unicode).
    pub fn var_os(&self) -> Option<OsString> {
        std::env::var_os(self.name)
    }

    /// The value in force: what [`recorded`] writes.
    pub fn effective(&self) -> String {
        (self.effective)(self)
    }
}

/// The variable's value, or when unset its default as a value (`` `on` `` is recorded `on`).
fn set_or_default(s: &Switch) -> String {
    s.var().unwrap_or_else(|| s.default.trim_matches('`').to_owned())
}

/// `RLX_PYTHON`.
pub const PYTHON: Switch = Switch::new("RLX_PYTHON", "the Python interpreter the sandbox runs programs and Python rewards with", "`python3` on `PATH`", false);
/// `RLX_SANDBOX_NAMESPACES`.
pub const SANDBOX_NAMESPACES: Switch = Switch::new("RLX_SANDBOX_NAMESPACES", "`0`/`off`/`no`/`false`: the local sandbox runs without Linux namespaces (reduced isolation, said at start)", "namespaces on", false);
/// `RLX_PCH`.
pub const PCH: Switch = Switch::new("RLX_PCH", "`0`/`off`/`no`/`false`: C++ is compiled without precompiled headers", "on", false);
/// `RLX_PCH_DIR`.
pub const PCH_DIR: Switch = Switch::new("RLX_PCH_DIR", "where precompiled C++ headers are built and found", "`~/.cache/rlx/pch`", false);
/// `RLX_TOOLCHAIN_PATH`.
pub const TOOLCHAIN_PATH: Switch = Switch::new("RLX_TOOLCHAIN_PATH", "where the sandbox looks for compilers (colon-separated, inside `/usr`, `/bin`, `/etc`)", "`/usr/local/bin:/usr/bin:/bin`", false);
/// `RLX_MODEL_CACHE`.
pub const MODEL_CACHE: Switch = Switch::new("RLX_MODEL_CACHE", "rlx's model cache", "`~/.cache/rlx/models`", false);
/// `RLX_OFFLINE`.
pub const OFFLINE: Switch = Switch::new("RLX_OFFLINE", "`1`/`on`/`yes`/`true`: nothing is downloaded from the Hugging Face Hub; the cache must hold it", "off", false);
/// `RLX_TRAIN_PASS`.
pub const TRAIN_PASS: Switch = Switch::new("RLX_TRAIN_PASS", "`autograd`: the embedded trainer's f32 forward/backward run through candle's autograd instead of the hand-written pass", "`hand-written`", true);
/// `RLX_TRAIN_PACK`.
pub const TRAIN_PACK: Switch = Switch::new("RLX_TRAIN_PACK", "`off`/`0`/`false`: the embedded trainer does not pack a group's shared prompt once per row", "`on`", true);
/// `RLX_ALLOC`.
pub const ALLOC: Switch = Switch::new("RLX_ALLOC", "`system`: glibc's allocator as it is; `keep`: freed large blocks kept across steps; unset (`reuse`): they are reused, and handed back as a step starts after sampling or scoring", "`reuse`", true);
/// `RLX_ISA`.
pub const ISA: Switch = Switch {
    name: rlx_kernels::isa::SWITCH,
    meaning: "`scalar`/`avx2`/`avx512`: caps the instruction set of the sampler's and trainer's kernels (recorded: the level in force)",
    default: "the best the CPU has",
    changes_results: true,
    effective: |_| rlx_kernels::isa::current().name().to_owned(),
};
/// `RLX_SERVE_API_KEY`.
pub const SERVE_API_KEY: Switch = Switch::new("RLX_SERVE_API_KEY", "`rlx serve --api-key`: the `X-API-Key` every request must carry", "none", false);
/// `RLX_SANDBOX_API_KEY`.
pub const SANDBOX_API_KEY: Switch = Switch::new(
    "RLX_SANDBOX_API_KEY",
    "`rlx sandbox serve --api-key` (both protocols), and the `X-API-Key` rlx's Sandbox Fusion client sends",
    "none",
    false,
);
/// `RLX_SERVE_FAULTS`.
pub const SERVE_FAULTS: Switch = Switch::new("RLX_SERVE_FAULTS", "`rlx serve --fault`s, comma-separated (client tests)", "none", false);
/// `RLX_CWSANDBOX_PENDING_S`.
pub const CWSANDBOX_PENDING_S: Switch = Switch::new("RLX_CWSANDBOX_PENDING_S", "test only: seconds a new sandbox of `rlx sandbox serve --protocol cwsandbox` stays `PENDING` (`inf`: never starts)", "starts at once", false);
/// `RLX_TINKER_RETRY_S`.
pub const TINKER_RETRY_S: Switch = Switch::new("RLX_TINKER_RETRY_S", "test only: seconds rlx's Tinker client retries a request that keeps failing (connection errors, 5xx, 429) before it gives up", "300 (the SDK's)", false);

/// Every switch, in the order the docs list them.
pub const ALL: [Switch; 16] = [PYTHON, SANDBOX_NAMESPACES, PCH, PCH_DIR, TOOLCHAIN_PATH, MODEL_CACHE, OFFLINE, TRAIN_PASS, TRAIN_PACK, ALLOC, ISA, SANDBOX_API_KEY, SERVE_API_KEY, SERVE_FAULTS, CWSANDBOX_PENDING_S, TINKER_RETRY_S];

/// What `provenance.json` records: each switch that changes results, with its value in force.
pub fn recorded() -> BTreeMap<String, String> {
    ALL.iter().filter(|s| s.changes_results).map(|s| (s.name.to_owned(), s.effective())).collect()
}

/// The table as docs/development.md shows it.
pub fn markdown_table() -> String {
    let mut out = String::from("| variable | what it does | unset | changes results |\n|---|---|---|---|\n");
    for s in &ALL {
        out.push_str(&format!("| `{}` | {} | {} | {} |\n", s.name, s.meaning, s.default, if s.changes_results { "yes: recorded in `provenance.json`" } else { "no" }));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The code of a file: from the first `#[cfg(test)]` on left out, and `//` comments.
    fn code(text: &str) -> String {
        let mut out = String::new();
        for line in text.lines() {
            if line.trim_start().starts_with("#[cfg(test)]") {
                break;
            }
            out.push_str(line.split("//").next().unwrap_or(""));
            out.push('\n');
        }
        out
    }

    fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                files(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn no_rlx_variable_is_named_outside_the_table() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut paths = vec![];
        files(&root.join("src"), &mut paths);
        for c in std::fs::read_dir(root.join("crates")).unwrap() {
            files(&c.unwrap().path().join("src"), &mut paths);
        }
        let mut found = vec![];
        for p in &paths {
            if p.ends_with("src/switches.rs") {
                continue;
            }
            for (i, line) in code(&std::fs::read_to_string(p).unwrap()).lines().enumerate() {
                // The kernels crate declares its one switch's name, which the table takes.
                if line.contains("pub const SWITCH: &str = \"RLX_ISA\";") {
                    continue;
                }
                if line.match_indices("\"RLX_").any(|(at, _)| line[at + 5..].starts_with(|c: char| c.is_ascii_uppercase())) {
                    found.push(format!("{}:{}: {}", p.strip_prefix(root).unwrap().display(), i + 1, line.trim()));
                }
            }
        }
        assert!(found.is_empty(), "`RLX_` variables named outside src/switches.rs (add a row there and read it through the row):\n{}", found.join("\n"));
        // And the table has no row twice.
        let names: std::collections::BTreeSet<&str> = ALL.iter().map(|s| s.name).collect();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn the_docs_show_the_table() {
        let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/development.md")).unwrap();
        assert!(doc.contains(&markdown_table()), "docs/development.md's environment switches differ from src/switches.rs; paste:\n{}", markdown_table());
    }

    #[test]
    fn provenance_records_the_switches_that_change_results() {
        let r = recorded();
        assert_eq!(r.keys().map(String::as_str).collect::<Vec<_>>(), ["RLX_ALLOC", "RLX_ISA", "RLX_TRAIN_PACK", "RLX_TRAIN_PASS"]);
        assert_eq!(r["RLX_ISA"], rlx_kernels::isa::current().name());
        assert!(!r.contains_key("RLX_PYTHON"));
    }
}
