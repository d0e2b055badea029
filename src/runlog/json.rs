//! Whole-file JSON (`status.json`, `provenance.json`, `sweep.json`): atomic writes, and reads
//! that check `schema_version` before anything else.

use std::fs;
use std::io::Write;
use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Error, SCHEMA_VERSION, io};

/// Writes `bytes` to `path` so that readers see either the old or the new content, never a mix:
/// a temp file in the same directory, fsynced, then renamed over the target.
///
/// # Errors
/// I/O errors.
pub(crate) fn atomic_write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    };
    write().map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io("cannot write", path)(e)
    })
}

/// Writes `value` as pretty JSON plus a newline, atomically.
///
/// # Errors
/// I/O errors.
pub(crate) fn write(path: &Path, value: &impl Serialize) -> Result<(), Error> {
    let mut bytes = serde_json::to_vec_pretty(value).expect("run files serialise");
    bytes.push(b'\n');
    atomic_write(path, &bytes)
}

/// Reads a whole JSON file, `None` if absent.
///
/// # Errors
/// I/O errors and invalid content.
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Error> {
    bytes(path)?.map(|b| parse(path, &b)).transpose()
}

/// Reads a whole JSON file that carries a `schema_version`, `None` if absent.
///
/// The version is read on its own first: a file from a newer rlx may not parse as this build's
/// type at all, and "upgrade rlx" is the useful message then, not a complaint about some field.
/// A file without a version predates versioning and reads as version 1.
///
/// # Errors
/// [`Error::NewerFormat`] when the file's version is above [`SCHEMA_VERSION`]; I/O errors and
/// invalid content.
pub(crate) fn read_versioned<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, Error> {
    #[derive(serde::Deserialize)]
    struct Probe {
        schema_version: Option<u32>,
    }
    let Some(bytes) = bytes(path)? else { return Ok(None) };
    let probe: Probe = parse(path, &bytes)?;
    if let Some(found) = probe.schema_version
        && found > SCHEMA_VERSION
    {
        return Err(Error::NewerFormat { path: path.to_path_buf(), found, supported: SCHEMA_VERSION });
    }
    parse(path, &bytes).map(Some)
}

/// A file's bytes, `None` when it does not exist.
fn bytes(path: &Path) -> Result<Option<Vec<u8>>, Error> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("cannot read", path)(e)),
    }
}

fn parse<T: DeserializeOwned>(path: &Path, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| Error::Corrupt { path: path.to_path_buf(), line: e.line(), message: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_write_replaces_whole_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x.json");
        atomic_write(&p, b"{\"a\":1}").unwrap();
        atomic_write(&p, b"{\"a\":2}").unwrap();
        assert_eq!(fs::read_to_string(&p).unwrap(), "{\"a\":2}");
        // No temp files left behind.
        assert_eq!(fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_newer_version_is_refused_before_its_fields_are_read() {
        #[derive(Debug, serde::Deserialize)]
        struct V {
            #[allow(dead_code)]
            schema_version: u32,
            #[allow(dead_code)]
            name: String,
        }
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("status.json");
        // `name` changed type in the newer format: the version check must win over the parse error.
        fs::write(&p, format!("{{\"schema_version\": {}, \"name\": {{\"first\": \"x\"}}}}", SCHEMA_VERSION + 1)).unwrap();
        let err = read_versioned::<V>(&p).unwrap_err();
        assert!(matches!(err, Error::NewerFormat { found, supported, .. } if found == SCHEMA_VERSION + 1 && supported == SCHEMA_VERSION), "{err}");
        assert!(err.to_string().contains("written by a newer rlx") && err.to_string().contains("upgrade rlx"), "{err}");
        fs::write(&p, format!("{{\"schema_version\": {SCHEMA_VERSION}, \"name\": \"x\"}}")).unwrap();
        assert!(read_versioned::<V>(&p).unwrap().is_some());
        assert!(read_versioned::<V>(&d.path().join("absent.json")).unwrap().is_none());
    }
}
