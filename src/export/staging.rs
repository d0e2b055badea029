//! [`Staging`]: the export is written into a hidden sibling of the output directory
//! (`.<name>.rlx-partial-<pid>`) and renamed onto it at the end. A crash or an error leaves no
//! directory under the requested name; the partial one is removed when the staging is dropped
//! uncommitted, and its name says what it is if a `kill -9` leaves it behind.
//!
//! Writing in place and deleting on failure was the rejected alternative: a reader (or a user
//! who copies the directory) could see `config.json` beside half a `model.safetensors`.

use std::path::{Path, PathBuf};

use super::error::Error;

/// An output directory being written.
#[derive(Debug)]
pub(crate) struct Staging {
    tmp: PathBuf,
    target: PathBuf,
    committed: bool,
}

impl Staging {
    /// Checks that `target` is absent or an empty directory, and creates the hidden sibling.
    ///
    /// # Errors
    /// [`Error::OutNotEmpty`]; I/O failures creating the directories.
    pub(crate) fn begin(target: &Path) -> Result<Staging, Error> {
        let target = std::path::absolute(target).map_err(|source| Error::Io { action: "resolve", path: target.to_path_buf(), source })?;
        if target.exists() && !is_empty_dir(&target) {
            return Err(Error::OutNotEmpty { path: target });
        }
        let parent = target.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));
        std::fs::create_dir_all(&parent).map_err(|source| Error::Io { action: "create", path: parent.clone(), source })?;
        let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "export".into());
        let tmp = parent.join(format!(".{name}.rlx-partial-{}", std::process::id()));
        if tmp.exists() {
            std::fs::remove_dir_all(&tmp).map_err(|source| Error::Io { action: "remove", path: tmp.clone(), source })?;
        }
        std::fs::create_dir(&tmp).map_err(|source| Error::Io { action: "create", path: tmp.clone(), source })?;
        Ok(Staging { tmp, target, committed: false })
    }

    /// Where to write.
    pub(crate) fn path(&self) -> &Path {
        &self.tmp
    }

    /// Renames the finished directory onto the target; returns the target.
    ///
    /// # Errors
    /// [`Error::OutNotEmpty`] when something appeared at the target meanwhile; I/O failures.
    pub(crate) fn commit(mut self) -> Result<PathBuf, Error> {
        if self.target.exists() {
            // An empty directory the user made: rename(2) replaces only an empty directory, and
            // a non-empty one that appeared since `begin` must not be clobbered.
            if !is_empty_dir(&self.target) {
                return Err(Error::OutNotEmpty { path: self.target.clone() });
            }
            std::fs::remove_dir(&self.target).map_err(|source| Error::Io { action: "replace", path: self.target.clone(), source })?;
        }
        std::fs::rename(&self.tmp, &self.target).map_err(|source| Error::Io { action: "rename into", path: self.target.clone(), source })?;
        self.committed = true;
        Ok(self.target.clone())
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        if !self.committed {
            let _ = std::fs::remove_dir_all(&self.tmp);
        }
    }
}

fn is_empty_dir(p: &Path) -> bool {
    std::fs::read_dir(p).is_ok_and(|mut d| d.next().is_none())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_appears_until_commit_and_a_dropped_staging_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let s = Staging::begin(&target).unwrap();
        std::fs::write(s.path().join("config.json"), "{}").unwrap();
        assert!(!target.exists());
        drop(s);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "the partial directory is removed");
        let s = Staging::begin(&target).unwrap();
        std::fs::write(s.path().join("config.json"), "{}").unwrap();
        assert_eq!(s.commit().unwrap(), target);
        assert!(target.join("config.json").is_file());
        assert!(matches!(Staging::begin(&target), Err(Error::OutNotEmpty { .. })));
        let empty = dir.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        let s = Staging::begin(&empty).unwrap();
        std::fs::write(s.path().join("a"), "x").unwrap();
        s.commit().unwrap();
        assert!(empty.join("a").is_file());
    }
}
