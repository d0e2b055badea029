//! The filesystem of one CoreWeave-protocol sandbox as the server sees it from outside: a
//! directory on disk, the persistent root that the embedded sandbox shows the sandbox's commands
//! as `/` ([`crate::sandbox::local::LocalSandbox::run_in_root`]), read and written by
//! `ReadFile`/`WriteFile` without ever following the sandbox's own links out of it, measured
//! against its caps, and removed with the sandbox.
//!
//! Why `openat2(RESOLVE_IN_ROOT)` and not paths joined under the directory: a command may leave
//! `/tmp/x` as a link to `/etc/shadow`; joined on the host, a `ReadFile("/tmp/x")` by the server
//! would read the host's file. Resolved in the root, the link means what it means inside the
//! sandbox (its own `/etc/shadow`, which is not the host's), as in a container.

use std::ffi::CString;
use std::io::{Read as _, Write as _};
use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

/// Directories the sandbox sees read-only (the host's, bound at their paths): a write there is
/// refused, as the sandbox's own `open` would refuse it.
pub(crate) const READ_ONLY: &[&str] = &["usr", "lib", "lib32", "lib64", "bin", "sbin", "etc", "dev", "proc", "sys"];

/// What a sandbox's files occupy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// Bytes on disk (a file's length, or its blocks when more).
    pub(crate) bytes: u64,
    /// Entries: files, directories and links.
    pub(crate) files: u64,
}

/// A failed file operation, with the errno's meaning kept for the status code.
#[derive(Debug)]
pub(crate) enum FsError {
    /// No such file.
    Missing,
    /// The path names something that is not a regular file, or a read-only place.
    Invalid(String),
    /// Anything else the host said.
    Io(std::io::Error),
}

/// One sandbox's directory; removed when dropped.
#[derive(Debug)]
pub(crate) struct RootFs {
    dir: PathBuf,
}

impl RootFs {
    /// Creates `roots/name` with `/tmp`, `/root` (the home) and `workdir` (where commands
    /// start) in it.
    pub(crate) fn create(roots: &Path, name: &str, workdir: &str) -> Result<RootFs, FsError> {
        let dir = roots.join(name);
        std::fs::create_dir(&dir).map_err(FsError::Io)?;
        let fs = RootFs { dir };
        for d in ["/tmp", "/root", workdir] {
            let parts = parts(d);
            if !parts.is_empty() {
                fs.make_dirs(&parts)?;
            }
        }
        Ok(fs)
    }

    fn root(&self) -> Result<OwnedFd, FsError> {
        let c = CString::new(self.dir.as_os_str().as_encoded_bytes()).map_err(|_| FsError::Invalid("a NUL byte in the path".into()))?;
        // SAFETY: open(2) on a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        if fd < 0 {
            return Err(FsError::Io(std::io::Error::last_os_error()));
        }
        // SAFETY: a fresh descriptor nobody else owns.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// Creates the directories `parts` (each resolved in the root) as needed.
    fn make_dirs(&self, parts: &[&str]) -> Result<(), FsError> {
        let root = self.root()?;
        for i in 0..parts.len() {
            let prefix = parts[..=i].join("/");
            match open_in(&root, &prefix, libc::O_PATH | libc::O_DIRECTORY, 0) {
                Ok(_) => continue,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
                Err(e) => return Err(FsError::Io(e)),
            }
            let parent = if i == 0 { root.try_clone().map_err(FsError::Io)? } else { open_in(&root, &parts[..i].join("/"), libc::O_PATH | libc::O_DIRECTORY, 0).map_err(FsError::Io)? };
            let name = CString::new(parts[i]).map_err(|_| FsError::Invalid("a NUL byte in the path".into()))?;
            // SAFETY: mkdirat(2) in a directory we hold, with a single-component name (no `/`).
            if unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), 0o755) } != 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() != Some(libc::EEXIST) {
                    return Err(FsError::Io(e));
                }
            }
        }
        Ok(())
    }

    /// Writes `data` at the sandbox path `path` (absolute, already normalised), creating its
    /// folders.
    pub(crate) fn write(&self, path: &str, data: &[u8]) -> Result<(), FsError> {
        let parts = parts(path);
        if parts.first().is_some_and(|p| READ_ONLY.contains(p)) {
            return Err(FsError::Invalid(format!("`{path}` is on the sandbox's read-only system files (/{})", parts[0])));
        }
        let Some((_, folders)) = parts.split_last() else { return Err(FsError::Invalid(format!("`{path}` names no file"))) };
        self.make_dirs(folders)?;
        let root = self.root()?;
        // O_NONBLOCK: a FIFO left at the path fails at once instead of waiting for a reader.
        let fd = open_in(&root, &parts.join("/"), libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_NONBLOCK, 0o644).map_err(|e| classify(e, path))?;
        let mut f = std::fs::File::from(fd);
        if !f.metadata().map_err(FsError::Io)?.is_file() {
            return Err(FsError::Invalid(format!("`{path}` is not a regular file")));
        }
        f.write_all(data).map_err(FsError::Io)
    }

    /// Reads the sandbox file `path`, refusing one of more than `max` bytes.
    pub(crate) fn read(&self, path: &str, max: u64) -> Result<Vec<u8>, FsError> {
        let root = self.root()?;
        let fd = open_in(&root, &parts(path).join("/"), libc::O_RDONLY | libc::O_NONBLOCK, 0).map_err(|e| classify(e, path))?;
        let mut f = std::fs::File::from(fd);
        let meta = f.metadata().map_err(FsError::Io)?;
        if !meta.is_file() {
            return Err(FsError::Invalid(format!("`{path}` is not a regular file")));
        }
        if meta.len() > max {
            return Err(FsError::Invalid(format!("`{path}` holds {} bytes, more than the {max} a read may return", meta.len())));
        }
        let mut out = Vec::with_capacity(meta.len() as usize);
        std::io::Read::by_ref(&mut f).take(max).read_to_end(&mut out).map_err(FsError::Io)?;
        Ok(out)
    }

    /// What the directory holds, counting no further than `files_cap + 1` entries (past the cap
    /// the exact figure does not matter, and a walk must stay bounded).
    pub(crate) fn usage(&self, files_cap: u64) -> Usage {
        let mut u = Usage::default();
        let mut stack = vec![self.dir.clone()];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else { continue };
            for e in entries.flatten() {
                u.files += 1;
                if u.files > files_cap {
                    return u;
                }
                let Ok(m) = e.path().symlink_metadata() else { continue };
                if m.is_dir() {
                    stack.push(e.path());
                } else {
                    u.bytes += m.len().max(m.blocks() * 512);
                }
            }
        }
        u
    }
}

impl Drop for RootFs {
    fn drop(&mut self) {
        // remove_dir_all does not follow links (std's fix for CVE-2022-21658).
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), "cannot remove a sandbox's files: {e}");
        }
    }
}

/// `path`'s components (`.` and empty ones dropped; the caller refused `..`).
fn parts(path: &str) -> Vec<&str> {
    path.split('/').filter(|p| !p.is_empty() && *p != ".").collect()
}

fn classify(e: std::io::Error, path: &str) -> FsError {
    match e.raw_os_error() {
        Some(libc::ENOENT) => FsError::Missing,
        Some(libc::EISDIR | libc::ENOTDIR | libc::ENXIO | libc::ELOOP) => FsError::Invalid(format!("`{path}`: {e}")),
        _ => FsError::Io(e),
    }
}

/// `openat2(root, rel, flags, mode)` with `RESOLVE_IN_ROOT`: `..` and links, absolute ones
/// included, resolve as if `root` were `/`.
fn open_in(root: &OwnedFd, rel: &str, flags: i32, mode: u32) -> std::io::Result<OwnedFd> {
    let rel = if rel.is_empty() { "." } else { rel };
    let c = CString::new(rel).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // `struct open_how` (libc's is non-exhaustive, so it cannot be built by value).
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    let how = OpenHow { flags: (flags | libc::O_CLOEXEC) as u64, mode: u64::from(mode), resolve: libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS };
    // SAFETY: openat2(2) with a valid directory descriptor, a NUL-terminated path and a
    // correctly sized `open_how`; the descriptor returned is owned below.
    let fd = unsafe { libc::syscall(libc::SYS_openat2, root.as_raw_fd(), c.as_ptr(), &raw const how, std::mem::size_of::<OpenHow>()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_resolve_inside_the_root_and_usage_counts() {
        let roots = tempfile::tempdir().unwrap();
        let secret = roots.path().join("secret");
        std::fs::write(&secret, "host").unwrap();
        let fs = RootFs::create(roots.path(), "a", "/work").unwrap();
        assert!(roots.path().join("a/work").is_dir());
        fs.write("/tmp/x/data.txt", b"abc").unwrap();
        assert_eq!(fs.read("/tmp/x/data.txt", 10).unwrap(), b"abc");
        // A link planted by a command, pointing out of the root: resolved inside it.
        std::os::unix::fs::symlink(&secret, roots.path().join("a/tmp/link")).unwrap();
        std::os::unix::fs::symlink("../../../secret", roots.path().join("a/tmp/rel")).unwrap();
        assert!(matches!(fs.read("/tmp/link", 10), Err(FsError::Missing)));
        assert!(matches!(fs.read("/tmp/rel", 10), Err(FsError::Missing)));
        let _ = fs.write("/tmp/link", b"mine");
        assert_eq!(std::fs::read_to_string(&secret).unwrap(), "host");
        assert!(matches!(fs.read("/tmp/x/data.txt", 2), Err(FsError::Invalid(_))));
        assert!(matches!(fs.write("/etc/passwd", b""), Err(FsError::Invalid(_))));
        assert!(matches!(fs.read("/tmp", 10), Err(FsError::Invalid(_))));
        let u = fs.usage(100);
        assert_eq!(u.files, 7, "{u:?}");
        assert!(u.bytes >= 3, "{u:?}");
        assert_eq!(fs.usage(2).files, 3);
        drop(fs);
        assert!(!roots.path().join("a").exists() && secret.exists());
    }
}
