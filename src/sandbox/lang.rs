//! Compiled languages in the embedded sandbox: the compile step the harness runs, its limits,
//! and the cache of built programs.
//!
//! What a language is (its name, fences, source file, compiler and default flags) is the table
//! in [`crate::spec::language`]; this module turns a row of it into the harness's `lang` job:
//! the compiler's argv (resolved here, on the host, to the path the sandbox's read-only view of
//! `/usr` shows too), the run argv, and the compile step's own limits. The compile runs inside
//! the sandbox like any submission: a compiler reading `#include "/proc/self/environ"` or
//! looping in templates is contained as a program would be.
//!
//! Built programs are cached by the SHA-256 of (language, compiler, flags, source, the compile
//! step's limits): a group of
//! identical completions, or Sandbox Fusion clients that send one request per test (verl),
//! compile once. Only sources graded alone are cached (a `/run_code` request with files is not:
//! `#include "data.txt"` would put one request's file into another's program). A cache hit
//! answers without compiling, so its time tells a client that this exact source was compiled
//! before on this server: a side channel docs/sandbox.md describes and accepts (padding would
//! cancel the cache that makes groups of identical completions cheap).

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::harness::limits_json;
use super::error::Error;
use super::limits::Limits;
use crate::spec::types::Language;

/// Where compilers are looked for: what the sandbox's workers have on `PATH`, inside the
/// read-only view of `/usr` and `/bin` they run in. `RLX_TOOLCHAIN_PATH` (colon-separated)
/// replaces it; a directory outside `/usr`, `/bin` and `/etc` is not visible in the sandbox.
const SEARCH: &str = "/usr/local/bin:/usr/bin:/bin";

fn search_path() -> String {
    crate::switches::TOOLCHAIN_PATH.var().filter(|s| !s.trim().is_empty()).unwrap_or_else(|| SEARCH.to_owned())
}

/// The name of the built program in the working directory.
pub(crate) const BINARY: &str = "main";

/// Memory the compile step may use at least (cc1plus on `<bits/stdc++.h>` at `-O2` maps a few
/// hundred MiB), whatever the programs' own limit.
const COMPILE_MEMORY_MB: u64 = 2048;

/// The compiler `language` needs, as a path, if it has one.
///
/// # Errors
/// [`Error::Toolchain`] naming the compiler when it is not installed: a missing compiler is
/// the machine's problem, never a compile error of every rollout.
pub fn compiler(language: Language) -> Result<Option<PathBuf>, Error> {
    let Some(tc) = language.toolchain() else { return Ok(None) };
    let searched = search_path();
    find(tc.compiler, &searched).map(Some).ok_or_else(|| Error::Toolchain {
        language: language.display_name().to_owned(),
        compiler: tc.compiler.to_owned(),
        searched,
    })
}

fn find(name: &str, searched: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    searched
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| Path::new(d).join(name))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Checks that every language in `languages` has its compiler.
///
/// # Errors
/// [`Error::Toolchain`] for the first that does not.
pub fn check_toolchains(languages: impl IntoIterator<Item = Language>) -> Result<(), Error> {
    for l in languages {
        compiler(l)?;
    }
    Ok(())
}

/// Gets every language in `languages` ready to compile fast: for C++, starts building the
/// precompiled `<bits/stdc++.h>` for the default flags in the background (see
/// [`super::pch`]), so it is there before the first program is. Sources with their own
/// `compile_flags` build theirs on their first compile.
pub fn warm_toolchains(languages: impl IntoIterator<Item = Language>) {
    for l in languages {
        if let (Some(tc), Ok(Some(cc))) = (l.toolchain(), compiler(l))
            && l == Language::Cpp
        {
            super::pch::warm(&cc, tc.default_flags);
        }
    }
}

/// How one source is built: the harness's `lang` job and the cache key.
pub(crate) struct Build {
    /// The `lang` object of the harness job.
    pub job: Value,
    /// SHA-256 of language, compiler, flags, source and the compile step's limits.
    pub key: [u8; 32],
    /// Wall-clock limit of the compile step.
    pub timeout: Duration,
}

/// The build of `code` in `language` (`flags` replace the language's defaults). `pch`: the
/// root of the precompiled headers ([`super::pch`]) when the workers bind it; C++ compiles
/// then put theirs on the include path.
///
/// # Errors
/// [`Error::Toolchain`] when the compiler is missing; `Ok(None)` for interpreted languages.
pub(crate) fn build(language: Language, code: &str, flags: Option<&[String]>, limits: &Limits, pch: Option<&Path>) -> Result<Option<Build>, Error> {
    build_as(language, code, flags, limits, (language.source_file(), BINARY), pch)
}

/// [`build`] into other file names: (source, binary) in the working directory.
fn build_as(language: Language, code: &str, flags: Option<&[String]>, limits: &Limits, (source, binary): (&str, &str), pch: Option<&Path>) -> Result<Option<Build>, Error> {
    let (Some(tc), Some(cc)) = (language.toolchain(), compiler(language)?) else { return Ok(None) };
    let flags: Vec<String> = match flags {
        Some(f) => f.to_vec(),
        None => tc.default_flags.iter().map(|s| (*s).to_owned()).collect(),
    };
    let mut argv: Vec<String> = vec![cc.display().to_string()];
    argv.extend(flags.iter().cloned());
    // After the source's own flags, so that its own `-I` directories are searched first.
    if language == Language::Cpp
        && let Some(dir) = pch.and_then(|root| super::pch::include_dir(root, &cc, &flags))
    {
        argv.extend(["-I".into(), dir.display().to_string()]);
    }
    argv.extend(["-o".into(), binary.into(), source.into()]);
    argv.extend(tc.link_flags.iter().map(|s| (*s).to_owned()));
    let memory_mb = if limits.memory_mb == 0 { 0 } else { limits.memory_mb.max(COMPILE_MEMORY_MB) };
    let compile_limits = Limits { memory_mb, output_bytes: 1 << 20, ..limits.clone() };
    let mut h = Sha256::new();
    let joined = argv.join("\0");
    // The compile step's limits are part of the key: a compile that failed under a small memory
    // or time limit must not answer for the same source asked with a larger one (the cache of
    // failures used to ignore them).
    let compile_limits_json = limits_json(&compile_limits).to_string();
    let timeout = format!("{}", limits.compile_timeout.as_secs_f64());
    for part in [language.name(), joined.as_str(), code, compile_limits_json.as_str(), timeout.as_str()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    let job = json!({
        "source": source,
        "binary": binary,
        "compile": argv,
        "run": [format!("./{binary}")],
        "compile_timeout_s": limits.compile_timeout.as_secs_f64(),
        "compile_limits": limits_json(&compile_limits),
    });
    Ok(Some(Build { job, key: h.finalize().into(), timeout: limits.compile_timeout }))
}

/// Seconds a problem's checker program may take per test.
const CHECKER_TIMEOUT_S: f64 = 5.0;

/// The harness's `checker_prog` job for a problem's checker program (C++, testlib-style:
/// `checker input output answer`, exit 0 = accepted), and the seconds it may add to the
/// submission (its build, and a run per test). The harness builds it once per worker (keyed by
/// the build's SHA-256) inside the sandbox, with the compile step's limits, and runs it with the
/// same limits and isolation as a submission.
///
/// # Errors
/// [`Error::Toolchain`] when g++ is missing.
pub(crate) fn checker_job(code: &str, limits: &Limits, tests: usize) -> Result<(Value, f64), Error> {
    let Some(b) = build_as(Language::Cpp, code, None, limits, ("rlx_checker.cpp", "rlx_checker"), None)? else {
        return Err(Error::Rejected("C++ has no compile step".into()));
    };
    let key: String = b.key.iter().map(|x| format!("{x:02x}")).collect();
    let job = json!({
        "code": code,
        "lang": b.job,
        "key": key,
        "timeout_s": CHECKER_TIMEOUT_S,
        "limits": b.job["compile_limits"],
    });
    Ok((job, b.timeout.as_secs_f64() + 5.0 + tests as f64 * (CHECKER_TIMEOUT_S + 1.0)))
}

/// How the compile step of a graded or run program ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Compiled {
    /// `ok`, `error` (the compiler failed: the program's fault) or `timeout`.
    pub status: String,
    /// Wall time of the compile step, milliseconds (0 when the program came from the cache).
    pub time_ms: u64,
    /// The compiler's exit code, when it exited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i64>,
    /// What the compiler wrote (stderr, then stdout), from its start, cut at 16 KiB.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub output: String,
    /// The program came from the cache of built programs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cached: bool,
}

impl Compiled {
    /// From the harness's `compile` reply object.
    pub(crate) fn from_reply(v: &Value) -> Compiled {
        Compiled {
            status: v["status"].as_str().unwrap_or("error").to_owned(),
            time_ms: v["time_ms"].as_u64().unwrap_or(0),
            exit: v["exit"].as_i64(),
            output: v["output"].as_str().unwrap_or_default().to_owned(),
            cached: v["cached"].as_bool().unwrap_or(false),
        }
    }

    /// The program was built (or found in the cache).
    pub fn ok(&self) -> bool {
        self.status == "ok"
    }
}

/// Built programs by [`Build::key`], least recently used dropped first past [`Self::CAP_BYTES`].
/// It also keeps the outcome of sources the compiler refused (exit code 1: diagnosed errors,
/// not a timeout or a signal, which depend on the machine's load), so a non-compiling program
/// sent again (a group's identical completions, one request per test) is not compiled again.
#[derive(Default)]
pub(crate) struct BinaryCache {
    map: HashMap<[u8; 32], Arc<Vec<u8>>>,
    order: VecDeque<[u8; 32]>,
    bytes: usize,
    failed: HashMap<[u8; 32], Compiled>,
    failed_order: VecDeque<[u8; 32]>,
}

impl BinaryCache {
    /// What the cache may hold in all.
    const CAP_BYTES: usize = 256 << 20;
    /// Failed builds kept (each holds at most 16 KiB of compiler output).
    const CAP_FAILED: usize = 1024;

    /// The compile error of a source the compiler refused before, marked `cached`.
    pub(crate) fn failed(&self, key: &[u8; 32]) -> Option<Compiled> {
        self.failed.get(key).map(|c| Compiled { cached: true, time_ms: 0, ..c.clone() })
    }

    /// Keeps `compiled` if it is a diagnosed compile error (see the type's note).
    pub(crate) fn put_failed(&mut self, key: [u8; 32], compiled: &Compiled) {
        if compiled.status != "error" || compiled.exit != Some(1) || self.failed.contains_key(&key) {
            return;
        }
        self.failed.insert(key, compiled.clone());
        self.failed_order.push_back(key);
        while self.failed_order.len() > Self::CAP_FAILED {
            if let Some(old) = self.failed_order.pop_front() {
                self.failed.remove(&old);
            }
        }
    }

    pub(crate) fn get(&mut self, key: &[u8; 32]) -> Option<Arc<Vec<u8>>> {
        let hit = self.map.get(key).cloned()?;
        self.order.retain(|k| k != key);
        self.order.push_back(*key);
        Some(hit)
    }

    pub(crate) fn put(&mut self, key: [u8; 32], binary: Vec<u8>) {
        if self.map.contains_key(&key) || binary.len() > Self::CAP_BYTES / 4 {
            return;
        }
        self.bytes += binary.len();
        self.map.insert(key, Arc::new(binary));
        self.order.push_back(key);
        while self.bytes > Self::CAP_BYTES {
            let Some(old) = self.order.pop_front() else { break };
            if let Some(b) = self.map.remove(&old) {
                self.bytes -= b.len();
            }
        }
    }
}

/// A [`BinaryCache`] shared by the sandbox's slots.
pub(crate) type SharedCache = Arc<Mutex<BinaryCache>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
    fn the_key_covers_flags_and_source() {
        if compiler(Language::Cpp).ok().flatten().is_none() {
            eprintln!("SKIPPED: no g++");
            return;
        }
        let l = Limits::default();
        let a = build(Language::Cpp, "int main(){}", None, &l, None).unwrap().unwrap();
        let b = build(Language::Cpp, "int main(){ }", None, &l, None).unwrap().unwrap();
        let c = build(Language::Cpp, "int main(){}", Some(&["-O0".to_owned()]), &l, None).unwrap().unwrap();
        assert!(a.key != b.key && a.key != c.key);
        let argv: Vec<&str> = a.job["compile"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
        assert!(argv[0].ends_with("/g++") && argv[1..].starts_with(&["-O2", "-std=c++17", "-o", "main", "main.cpp"]), "{argv:?}");
        assert!(build(Language::Python, "print(1)", None, &l, None).unwrap().is_none());
    }

    /// A compile refused under small limits must not answer for the same source asked with
    /// larger ones: the compile step's memory and time limits are in the key (issue 51), and
    /// limits that give the compile step the same limits share it.
    #[test]
    #[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
    fn the_key_covers_the_compile_limits() {
        if compiler(Language::Cpp).ok().flatten().is_none() {
            eprintln!("SKIPPED: no g++");
            return;
        }
        let key = |l: &Limits| build(Language::Cpp, "int main(){}", None, l, None).unwrap().unwrap().key;
        let base = Limits::default();
        let more_memory = Limits { memory_mb: COMPILE_MEMORY_MB * 2, ..base.clone() };
        let more_time = Limits { compile_timeout: base.compile_timeout * 3, ..base.clone() };
        assert_ne!(key(&base), key(&more_memory));
        assert_ne!(key(&base), key(&more_time));
        // Below the compile step's floor, a program's memory limit does not change the compile.
        assert_eq!(key(&base), key(&Limits { memory_mb: 256, ..base.clone() }));
    }

    #[test]
    fn the_cache_drops_the_oldest() {
        let mut c = BinaryCache::default();
        let big = BinaryCache::CAP_BYTES / 4;
        for i in 0..5u8 {
            c.put([i; 32], vec![0; big]);
        }
        assert!(c.get(&[0; 32]).is_none() && c.get(&[4; 32]).is_some());
        assert!(c.bytes <= BinaryCache::CAP_BYTES);
    }
}
