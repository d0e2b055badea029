//! An export of a checkpoint on this machine ([`export`]), `rlx serve`'s adapter files
//! ([`adapter_files`]), and the steps the export of a Tinker checkpoint (`remote`) shares: the
//! dtype check, the weights in the asked format, the list of files written.

use std::path::Path;

use super::error::Error;
use super::locate::{self, Checkpoint};
use super::types::{Dtype, Format, Report, Request};
use super::{card, gguf, hf, merge, peft, staging};

/// Exports the checkpoint `req.source` names into `req.out`.
///
/// # Errors
/// User errors ([`Error::is_user_error`]): a run without checkpoints, a step that does not
/// exist, a non-empty output directory, a weight format the chosen format cannot hold, an
/// adapter asked of a full fine-tune; otherwise I/O and tensor failures.
pub(crate) fn export(req: &Request) -> Result<Report, Error> {
    let dtype = req.dtype.unwrap_or(Dtype::F32);
    check_dtype(req, dtype)?;
    let checkpoint = locate::locate(&req.source)?;
    if checkpoint.is_remote() {
        return Err(Error::Remote { state: checkpoint.state.display().to_string() });
    }
    let stage = staging::Staging::begin(&req.out)?;
    let merged = merge::load(&checkpoint, req.adapter_only)?;
    let info = card::Info::gather(&checkpoint, &merged.tuning, &merged.base.display().to_string(), req.format, Some(dtype), req.adapter_only);
    write_weights(stage.path(), &merged, req.format, req.adapter_only, dtype, &info)?;
    card::write(stage.path(), &info, Some(&merged.base))?;
    let files = list(stage.path())?;
    let out = stage.commit()?;
    Ok(Report { checkpoint, out, files })
}

/// Writes the PEFT adapter of the LoRA trainer state at `state` into the directory `out` (which
/// appears only once complete), naming `base_name` as its base model: `rlx serve`'s external
/// weights. Returns each file's name and size.
///
/// # Errors
/// A state that is not LoRA or does not fit its base, a non-empty `out`, I/O failures.
pub(crate) fn adapter_files(state: &Path, out: &Path, base_name: &str) -> Result<Vec<(String, u64)>, Error> {
    let ck = Checkpoint { state: state.to_path_buf(), name: String::new(), step: None, run: None };
    let stage = staging::Staging::begin(out)?;
    let merged = merge::load(&ck, true)?;
    peft::write(stage.path(), &merged, base_name)?;
    let mut files = vec![];
    for name in list(stage.path())? {
        let p = stage.path().join(&name);
        let size = std::fs::metadata(&p).map_err(|source| Error::Io { action: "read", path: p.clone(), source })?.len();
        files.push((name, size));
    }
    stage.commit()?;
    Ok(files)
}

/// The weights in the format asked for: a PEFT adapter, a Hugging Face directory, or a GGUF file
/// (named after the run and checkpoint in `info`).
pub(super) fn write_weights(dir: &Path, merged: &merge::Merged, format: Format, adapter_only: bool, dtype: Dtype, info: &card::Info) -> Result<(), Error> {
    match (format, adapter_only) {
        (Format::Hf, true) => peft::write(dir, merged, &info.base_name),
        (Format::Hf, false) => hf::write(dir, merged, dtype),
        (Format::Gguf, _) => {
            let name = format!("{} {}", info.run_id.as_deref().unwrap_or("rlx"), info.checkpoint);
            gguf::write(&dir.join(gguf::file_name(dtype)), merged, dtype, &name)
        }
    }
}

pub(super) fn check_dtype(req: &Request, dtype: Dtype) -> Result<(), Error> {
    let ok = match (req.format, req.adapter_only) {
        (Format::Hf, true) => dtype == Dtype::F32,
        (Format::Hf, false) => dtype != Dtype::Q8_0,
        (Format::Gguf, true) => return Err(Error::Usage("`--adapter-only` writes a PEFT adapter, a Hugging Face format: use it with `--format hf`".into())),
        (Format::Gguf, false) => dtype != Dtype::Bf16,
    };
    if ok {
        return Ok(());
    }
    let allowed = match (req.format, req.adapter_only) {
        (Format::Hf, true) => "f32",
        (Format::Hf, false) => "f32, f16 or bf16",
        _ => "f32, f16 or q8_0",
    };
    Err(Error::Usage(format!("`--dtype {}` is not available here: this export writes {allowed}", dtype.name())))
}

/// The names of the files in `dir`, sorted.
pub(super) fn list(dir: &Path) -> Result<Vec<String>, Error> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|source| Error::Io { action: "list", path: dir.to_path_buf(), source })?
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    Ok(names)
}
