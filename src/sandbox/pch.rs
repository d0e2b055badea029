//! A precompiled `<bits/stdc++.h>` for the C++ compile step.
//!
//! Parsing `<bits/stdc++.h>`, which most competitive-programming C++ includes, is nearly the
//! whole cost of compiling such a program (≈ 1.6 s of CPU of ≈ 1.7 s for an A+B at `-O2`; with
//! the header precompiled ≈ 0.3 s, docs/sandbox.md). The header is built once per toolchain and
//! flags, on the host, by rlx (the header is the system's, the flags are the spec's: nothing of a
//! submission goes into it), into `<root>/<key>/bits/stdc++.h.gch`, where `<root>` is
//! `$RLX_PCH_DIR` or `~/.cache/rlx/pch` and `<key>` the SHA-256 of the compiler's path, its
//! `--version` and the flags: a changed toolchain or spec builds another. The workers bind
//! `<root>` read-only into their root at the same path, and the compile gets `-I <root>/<key>`
//! after its own flags, so GCC's own rule decides: a directory on the include path holding
//! `bits/stdc++.h.gch` is searched before the system header, and a PCH it cannot use (other
//! code or a macro before the include, other flags) is skipped silently for the header itself,
//! which `<root>/<key>/bits/stdc++.h` links to (without it a second `#include <bits/stdc++.h>`
//! after the PCH was loaded fails to find the file).
//!
//! One owner builds it: per key, one thread of this process (the first C++ compile, or
//! [`warm`] when the data asks for C++), holding an exclusive `flock` on `<root>/<key>.lock`
//! against other rlx processes; it builds into a temporary name and renames, so a compile never
//! reads a half-written file. Until it is there, compiles run without it (same argv, so the
//! binary cache is unaffected). A build that fails is logged once and compiles go on without.
//! `RLX_PCH=0` turns it off.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use sha2::{Digest, Sha256};

/// The header that gets precompiled, as programs include it.
const HEADER: &str = "bits/stdc++.h";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Building,
    Ready,
    Failed,
}

/// Per (root, key): where its build stands in this process.
fn states() -> &'static Mutex<HashMap<PathBuf, State>> {
    static S: OnceLock<Mutex<HashMap<PathBuf, State>>> = OnceLock::new();
    S.get_or_init(Mutex::default)
}

/// Where precompiled headers live, if they are on: `$RLX_PCH_DIR`, else `~/.cache/rlx/pch`.
/// `None` when `RLX_PCH` is `0`/`off`/`false`, or the directory cannot serve the sandbox: it
/// must be absolute and outside the directories the sandbox binds or builds itself (`/tmp`,
/// `/usr`, ...), since the workers bind it read-only at the same path.
pub fn root() -> Option<PathBuf> {
    if crate::switches::PCH.var().is_some_and(|v| matches!(v.trim().to_ascii_lowercase().as_str(), "0" | "off" | "false" | "no")) {
        return None;
    }
    let dir = match crate::switches::PCH_DIR.var_os().filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").filter(|h| !h.is_empty())?).join(".cache/rlx/pch"),
    };
    usable_root(&dir).then_some(dir)
}

fn usable_root(dir: &Path) -> bool {
    const SYSTEM: [&str; 9] = ["/tmp", "/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/dev"];
    dir.is_absolute() && dir != Path::new("/") && !SYSTEM.iter().any(|s| dir.starts_with(s))
}

/// `compiler --version`, once per compiler.
fn version(compiler: &Path) -> Option<String> {
    static V: OnceLock<Mutex<HashMap<PathBuf, Option<String>>>> = OnceLock::new();
    let mut map = V.get_or_init(Mutex::default).lock().expect("pch version lock");
    map.entry(compiler.to_owned())
        .or_insert_with(|| {
            let out = Command::new(compiler).arg("--version").stdin(Stdio::null()).output().ok()?;
            out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
        })
        .clone()
}

/// The directory to put on the include path of a C++ compile with `flags` under `root`, and
/// the start of its build if nobody has built it yet. `None` when the toolchain cannot say its
/// version or an earlier build of it failed (the compile then runs as it always did).
pub(crate) fn include_dir(root: &Path, compiler: &Path, flags: &[String]) -> Option<PathBuf> {
    let dir = root.join(key(compiler, flags)?);
    let mut map = states().lock().expect("pch state lock");
    match map.get(&dir) {
        Some(State::Failed) => return None,
        Some(_) => return Some(dir),
        None => {}
    }
    if dir.join(HEADER).with_extension("h.gch").is_file() {
        map.insert(dir.clone(), State::Ready);
        return Some(dir);
    }
    map.insert(dir.clone(), State::Building);
    drop(map);
    let (d, cc, f) = (dir.clone(), compiler.to_owned(), flags.to_vec());
    let spawned = std::thread::Builder::new().name("rlx-pch".into()).spawn(move || {
        let state = match build(&d, &cc, &f) {
            Ok(()) => State::Ready,
            Err(e) => {
                tracing::warn!(dir = %d.display(), "the precompiled <bits/stdc++.h> did not build; C++ compiles go on without it: {e}");
                State::Failed
            }
        };
        states().lock().expect("pch state lock").insert(d, state);
    });
    if spawned.is_err() {
        states().lock().expect("pch state lock").insert(dir.clone(), State::Failed);
    }
    Some(dir)
}

/// Starts building the header for a C++ compile with `flags` (the language's defaults when
/// `None`) under [`root`], so that it is there before the first program is (`rlx run`,
/// `rlx eval` and `rlx grade` call this when their data asks for C++).
pub fn warm(compiler: &Path, flags: &[&str]) {
    if let Some(root) = root() {
        let flags: Vec<String> = flags.iter().map(|s| (*s).to_owned()).collect();
        let _ = include_dir(&root, compiler, &flags);
    }
}

/// Blocks until the build of `dir` (from [`include_dir`]) has ended in this process; `true`
/// when the header is there. For tests and benchmarks that need it built.
pub fn wait(dir: &Path, timeout: std::time::Duration) -> bool {
    let start = std::time::Instant::now();
    loop {
        let state = states().lock().expect("pch state lock").get(dir).copied();
        match state {
            Some(State::Ready) => return true,
            Some(State::Failed) => return false,
            _ if start.elapsed() > timeout => return false,
            _ => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

fn key(compiler: &Path, flags: &[String]) -> Option<String> {
    let version = version(compiler)?;
    let mut h = Sha256::new();
    for part in [compiler.display().to_string().as_str(), version.as_str(), flags.join("\0").as_str()] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    Some(h.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect())
}

/// The headers this process compiled (a test checks there is one build per key).
#[cfg(test)]
static BUILDS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Builds `<dir>/bits/stdc++.h.gch` (and the link to the header beside it) as the one owner.
fn build(dir: &Path, compiler: &Path, flags: &[String]) -> Result<(), String> {
    let io = |what: &str, p: &Path| {
        let (what, p) = (what.to_owned(), p.display().to_string());
        move |e: std::io::Error| format!("{what} {p}: {e}")
    };
    let bits = dir.join("bits");
    std::fs::create_dir_all(&bits).map_err(io("cannot create", &bits))?;
    for d in [dir.parent().unwrap_or(dir), dir, bits.as_path()] {
        set_mode(d, 0o755).map_err(io("cannot make readable", d))?;
    }
    let lock_path = dir.with_extension("lock");
    let lock = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(&lock_path).map_err(io("cannot open", &lock_path))?;
    // SAFETY: flock(2) on a descriptor this function owns; released when `lock` is dropped.
    if unsafe { libc::flock(std::os::fd::AsRawFd::as_raw_fd(&lock), libc::LOCK_EX) } != 0 {
        return Err(format!("cannot lock {}: {}", lock_path.display(), std::io::Error::last_os_error()));
    }
    let gch = dir.join(HEADER).with_extension("h.gch");
    if gch.is_file() {
        return Ok(()); // another rlx process built it while we waited for the lock
    }
    remove_stale(dir);
    let header = locate(compiler, flags)?;
    let link = dir.join(HEADER);
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&header, &link).map_err(io("cannot link", &link))?;
    let tmp = dir.join(format!(".stdc++.h.gch.tmp-{}", std::process::id()));
    #[cfg(test)]
    BUILDS.lock().expect("builds lock").push(dir.to_owned());
    let start = std::time::Instant::now();
    let out = Command::new(compiler)
        .args(flags)
        .args(["-x", "c++-header"])
        .arg(&header)
        .arg("-o")
        .arg(&tmp)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", compiler.display()))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&tmp);
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(format!("{} exited with {}: {}", compiler.display(), out.status, err.chars().take(2000).collect::<String>().trim()));
    }
    set_mode(&tmp, 0o644).map_err(io("cannot make readable", &tmp))?;
    std::fs::rename(&tmp, &gch).map_err(io("cannot rename into", &gch))?;
    tracing::info!(header = %header.display(), pch = %gch.display(), seconds = start.elapsed().as_secs_f64(), "built the precompiled <bits/stdc++.h>");
    Ok(())
}

/// Where the compiler finds `<bits/stdc++.h>` with these flags (the first header `-H` names).
fn locate(compiler: &Path, flags: &[String]) -> Result<PathBuf, String> {
    let mut child = Command::new(compiler)
        .args(flags)
        .args(["-x", "c++", "-E", "-H", "-o", "/dev/null", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", compiler.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = writeln!(stdin, "#include <{HEADER}>");
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let err = String::from_utf8_lossy(&out.stderr);
    let found = err.lines().find_map(|l| l.strip_prefix(". ")).map(|p| PathBuf::from(p.trim()));
    match found {
        Some(p) if out.status.success() && p.ends_with(HEADER) => Ok(p),
        _ => Err(format!("{} does not find <{HEADER}>: {}", compiler.display(), err.chars().take(500).collect::<String>().trim())),
    }
}

/// Temporary files of builders that died mid-build (their process is gone).
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.filter_map(Result::ok) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(".stdc++.h.gch.tmp-").and_then(|p| p.parse::<i32>().ok()) else { continue };
        // SAFETY: kill(2) with signal 0 only checks that the process exists.
        let alive = pid == std::process::id() as i32 || unsafe { libc::kill(pid, 0) } == 0;
        if !alive {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_the_sandbox_cannot_bind_are_refused() {
        assert!(usable_root(Path::new("/root/.cache/rlx/pch")) && usable_root(Path::new("/home/u/.cache/rlx/pch")));
        for bad in ["/", "/tmp", "/tmp/x", "/usr/local/pch", "relative/pch", "/etc/pch"] {
            assert!(!usable_root(Path::new(bad)), "{bad}");
        }
    }

    #[test]
    #[allow(clippy::print_stderr)] // the skip notice is meant to be seen in test output
    fn one_build_per_key_even_when_asked_at_once() {
        let Some(gpp) = ["/usr/local/bin/g++", "/usr/bin/g++", "/bin/g++"].into_iter().map(PathBuf::from).find(|p| p.is_file()) else {
            eprintln!("SKIPPED: no g++");
            return;
        };
        let root = tempfile::tempdir().unwrap();
        let flags = vec!["-O2".to_owned(), "-std=c++17".to_owned()];
        let dirs: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4).map(|_| s.spawn(|| include_dir(root.path(), &gpp, &flags))).collect();
            hs.into_iter().map(|h| h.join().unwrap().expect("a toolchain with a version")).collect()
        });
        assert!(dirs.windows(2).all(|w| w[0] == w[1]), "one key for one toolchain and flags: {dirs:?}");
        assert!(wait(&dirs[0], std::time::Duration::from_secs(300)), "the header builds");
        let builds = || BUILDS.lock().unwrap().iter().filter(|d| **d == dirs[0]).count();
        assert_eq!(builds(), 1, "four callers at once, one build");
        let gch = dirs[0].join("bits/stdc++.h.gch");
        let meta = std::fs::metadata(&gch).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        assert!(std::fs::read_link(dirs[0].join("bits/stdc++.h")).unwrap().ends_with("bits/stdc++.h"));
        // Nothing but the header, its link and the lock: no temporary file left behind.
        let names: Vec<String> = std::fs::read_dir(&dirs[0]).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["bits"], "{names:?}");
        // Asked again, it is found (no second build); other flags are another header.
        assert_eq!(include_dir(root.path(), &gpp, &flags).as_ref(), Some(&dirs[0]));
        let o0 = include_dir(root.path(), &gpp, &["-O0".to_owned(), "-std=c++17".to_owned()]).unwrap();
        assert_ne!(o0, dirs[0]);
        assert!(wait(&o0, std::time::Duration::from_secs(300)));
        assert_eq!(builds(), 1, "built once");
    }
}
