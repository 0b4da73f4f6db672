//! What `stackgate check` reads: files, directories (recursively), standard input, and which
//! files are plain Helm values files (`--values-for CHART=GLOB`).

use std::cell::Cell;
use std::io::Read;
use std::path::{Path, PathBuf};

use super::CheckError;
use crate::sites::umbrella::Dependency;

/// Why a file could not be read, in the words `ls` and `cat` use ("no such file or
/// directory"), not Rust's `ErrorKind` names ("entity not found"). Only the kind is shown: the
/// OS message could repeat a path, and the caller already names it.
pub(crate) fn io_reason(e: &std::io::Error) -> std::borrow::Cow<'static, str> {
    use std::io::ErrorKind as K;
    std::borrow::Cow::Borrowed(match e.kind() {
        K::NotFound => "no such file or directory",
        K::PermissionDenied => "permission denied",
        K::IsADirectory => "is a directory",
        K::NotADirectory => "a path component is not a directory",
        K::InvalidData => "not UTF-8 text",
        K::StorageFull => "no space left on device",
        K::ReadOnlyFilesystem => "read-only file system",
        K::OutOfMemory => "out of memory",
        K::Interrupted | K::WouldBlock => "interrupted; try again",
        other => return std::borrow::Cow::Owned(other.to_string()),
    })
}

/// File extensions read when walking a directory.
pub const EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

/// File extensions of plain INI cloud configs (`cloud.conf`) checked when named on the
/// command line; while walking, only files matching an `--ini` glob are read as INI.
pub const INI_EXTENSIONS: &[&str] = &["conf", "ini"];

/// Name shown for standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// What a plain values file holds values of: the chart `--values-for` names and, when the
/// file belongs to an umbrella chart that depends on that chart, the key its values are under
/// in the file (the dependency's `alias`, else its name; see `index::ChartDirs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuesTarget<'a> {
    /// The chart.
    pub chart: &'a str,
    /// In an umbrella chart's values file, the umbrella's dependency on the chart (the
    /// subchart key and what switches it, from its `Chart.yaml`).
    pub subchart: Option<&'a Dependency>,
    /// The chart version the values are for: `--values-for CHART@VERSION`, else the
    /// umbrella's dependency `version`.
    pub version: Option<&'a str>,
}

impl<'a> ValuesTarget<'a> {
    /// The values of `chart` itself.
    pub fn chart(chart: &'a str) -> Self {
        ValuesTarget {
            chart,
            subchart: None,
            version: None,
        }
    }
}

/// `--values-for CHART[@VERSION]=GLOB`: files matching GLOB are values files of chart CHART
/// (at chart version VERSION, which decides how the chart reads them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuesFor {
    /// Chart name.
    pub chart: String,
    /// The chart version the values are for, when given (`CHART@VERSION`).
    pub version: Option<String>,
    /// Glob over the path as shown (`*` within a path segment, `**` across segments, `?`,
    /// `[abc]`); a glob without `/` at its start also matches any trailing part of the path
    /// that starts at a segment boundary.
    pub glob: String,
}

impl std::str::FromStr for ValuesFor {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.split_once('=') {
            Some((chart, glob)) if !chart.trim().is_empty() && !glob.trim().is_empty() => {
                let (chart, version) = match chart.split_once('@') {
                    Some((chart, version)) => (chart, Some(version.trim())),
                    None => (chart, None),
                };
                if chart.trim().is_empty() || version.is_some_and(str::is_empty) {
                    return Err(format!("{s:?} is not CHART[@VERSION]=GLOB"));
                }
                Ok(Self {
                    chart: chart.trim().to_owned(),
                    version: version.map(str::to_owned),
                    glob: glob.trim().to_owned(),
                })
            }
            _ => Err(format!(
                "{s:?} is not CHART[@VERSION]=GLOB, e.g. openstack-cloud-controller-manager@2.31.1='clusters/*/occm-values.yaml'"
            )),
        }
    }
}

/// Largest input `stackgate check` reads by default (8 MiB), per file and for standard input.
///
/// Checking costs a multiple of the input's size (YAML nodes with spans, the object as JSON, the
/// synthetic review, the site texts); 8 MiB is far above any manifest a cluster stores (the
/// apiserver's request limit is 3 MiB, etcd's value limit 1.5 MiB), and keeps one file's cost
/// to a few hundred MB at worst. Tunable with `--max-file-size`.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 8 * 1024 * 1024;

/// One input: where it came from and its text.
#[derive(Debug, Clone)]
pub struct Input {
    /// Display name (the path as given or found, or `<stdin>`).
    pub name: String,
    /// The file, when the input is one (None for stdin). `--fix` writes here, and only when
    /// it is still the regular file that was read.
    pub path: Option<PathBuf>,
    /// The text, or why it was not read.
    pub content: Content,
    /// Identity of the regular file that was read, re-checked before `--fix` replaces it.
    pub identity: Option<FileId>,
    /// Made by `--render` (Helm's output, or a note about it), not read: never written,
    /// never a values file.
    pub rendered: bool,
}

/// What reading an input gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// The input's text.
    Text(String),
    /// The input is in scope but could not be checked (unreadable, not UTF-8, larger than the
    /// size bound, not a regular file, an unreadable directory): an input error, exit code 2.
    Error(String),
    /// Deliberately not read, which does not fail the run: a symbolic link found while walking
    /// a directory that leads out of the checked tree (or nowhere), or a FIFO, socket or
    /// device found while walking, or a file named on the command line that `--exclude` matches.
    Skipped(String),
}

/// Device and inode of a regular file (Unix), to notice a file replaced between reading and
/// writing it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    #[cfg(unix)]
    fn of(meta: &std::fs::Metadata) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        Some(Self {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    #[cfg(not(unix))]
    fn of(_meta: &std::fs::Metadata) -> Option<Self> {
        None
    }
}

/// The message for an input over the size bound.
pub fn too_large(max: u64) -> String {
    format!("skipped: larger than {max} bytes (--max-file-size); not checked")
}

/// Reads every input named by `paths` (`-` is standard input; no paths means `.`), each at
/// most `max_size` bytes. Only a path on the command line that does not exist (or cannot be
/// examined) stops the run; everything else becomes an input's [`Content`].
///
/// A file or directory found while walking whose path (relative to the directory walked, or
/// as shown) matches one of the `exclude` globs is not read and not reported. A file named on
/// the command line that matches is not read either, but is reported as skipped, so that an
/// explicit path never vanishes from the report silently.
pub fn collect(
    paths: &[PathBuf],
    stdin: &mut dyn Read,
    max_size: u64,
    exclude: &[String],
    ini: &[String],
) -> Result<Vec<Input>, CheckError> {
    let default = [PathBuf::from(".")];
    let paths = if paths.is_empty() {
        &default[..]
    } else {
        paths
    };
    let hits = Hits {
        exclude: exclude.iter().map(|_| Cell::new(false)).collect(),
        ini: ini.iter().map(|_| Cell::new(false)).collect(),
    };
    let mut out = Vec::new();
    let mut stdin_read = false;
    for path in paths {
        if path.as_os_str() == "-" {
            if stdin_read {
                continue;
            }
            stdin_read = true;
            out.push(Input {
                name: STDIN_NAME.to_owned(),
                path: None,
                content: read_stdin(stdin, max_size),
                identity: None,
                rendered: false,
            });
            continue;
        }
        // A path named on the command line is the user's choice: a symbolic link to it is
        // followed (its target is what they asked for).
        let meta = std::fs::metadata(path).map_err(|e| CheckError::Path {
            path: path.clone(),
            message: io_reason(&e).into_owned(),
        })?;
        if meta.is_dir() {
            let mut found = walk(path, exclude, ini, &hits);
            found.sort_by(|a, b| a.0.cmp(&b.0));
            out.extend(found.into_iter().map(|(path, entry)| match entry {
                Found::File { open } => read(path, &open, max_size),
                Found::Error(message) => Input {
                    name: display(&path),
                    path: None,
                    content: Content::Error(message),
                    identity: None,
                    rendered: false,
                },
                Found::Skipped(message) => Input {
                    name: display(&path),
                    path: None,
                    content: Content::Skipped(message),
                    identity: None,
                    rendered: false,
                },
            }));
        } else if let Some(glob) = excluded_by(exclude, &[&display(path)], &hits.exclude) {
            out.push(Input {
                name: display(path),
                path: Some(path.clone()),
                content: Content::Skipped(format!("excluded by --exclude {glob:?}; not read")),
                identity: None,
                rendered: false,
            });
        } else {
            // A file named on the command line counts as matched by an `--ini` glob it fits.
            let _ = excluded_by(ini, &[&display(path)], &hits.ini);
            out.push(read(path.clone(), path, max_size));
        }
    }
    unmatched("--exclude", exclude, &hits.exclude)?;
    unmatched("--ini", ini, &hits.ini)?;
    Ok(out)
}

/// Which globs of `--exclude` and `--ini` matched a path while collecting.
struct Hits {
    exclude: Vec<Cell<bool>>,
    ini: Vec<Cell<bool>>,
}

/// A usage error for the first of `globs` (given with `flag`) that matched nothing: a typo
/// in a glob must not make a check silently cover less (or more) than asked.
fn unmatched(flag: &'static str, globs: &[String], hits: &[Cell<bool>]) -> Result<(), CheckError> {
    match globs.iter().zip(hits).find(|(_, hit)| !hit.get()) {
        Some((glob, _)) => Err(CheckError::Unmatched {
            flag,
            glob: glob.clone(),
        }),
        None => Ok(()),
    }
}

/// The first of the `exclude` globs that matches one of `names` (the forms of one path:
/// relative to the walked directory, as shown, with a trailing `/` for a directory).
fn excluded_by<'a>(exclude: &'a [String], names: &[&str], hits: &[Cell<bool>]) -> Option<&'a str> {
    let found = exclude
        .iter()
        .enumerate()
        .map(|(i, g)| (i, g.trim()))
        .filter(|(_, g)| !g.is_empty())
        .find(|(_, g)| names.iter().any(|n| glob_matches_path(g, n)));
    let (i, glob) = found?;
    if let Some(hit) = hits.get(i) {
        hit.set(true);
    }
    Some(glob)
}

/// Whether a file `path` found below `root` matches one of `globs` (relative to `root`, or
/// as shown).
fn walk_matches(globs: &[String], root: &Path, path: &Path, hits: &[Cell<bool>]) -> bool {
    if globs.is_empty() {
        return false;
    }
    let shown = display(path);
    let relative = path
        .strip_prefix(root)
        .map_or_else(|_| shown.clone(), display);
    excluded_by(globs, &[&relative, &shown], hits).is_some()
}

/// Whether input `name` (at `path`) is a plain INI cloud config: it matches an `--ini` glob,
/// or it is a file with an [`INI_EXTENSIONS`] extension (only named files have one: the walk
/// reads other extensions only through `--ini`).
pub fn is_ini(name: &str, path: Option<&Path>, ini: &[String]) -> bool {
    ini.iter()
        .map(|g| g.trim())
        .any(|g| !g.is_empty() && glob_matches_path(g, name))
        || path
            .and_then(|p| p.extension())
            .and_then(|e| e.to_str())
            .is_some_and(|e| INI_EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// Whether the walker leaves `path` (found below `root`) out because of `exclude`. A directory
/// is also matched with a trailing `/`, so that `vendor/**` prunes `vendor` itself.
fn walk_excludes(
    exclude: &[String],
    root: &Path,
    path: &Path,
    is_dir: bool,
    hits: &[Cell<bool>],
) -> bool {
    if exclude.is_empty() {
        return false;
    }
    let shown = display(path);
    let relative = path
        .strip_prefix(root)
        .map_or_else(|_| shown.clone(), display);
    let mut names = vec![relative.clone(), shown.clone()];
    if is_dir {
        names.push(format!("{relative}/"));
        names.push(format!("{shown}/"));
    }
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    excluded_by(exclude, &names, hits).is_some()
}

fn read_stdin(stdin: &mut dyn Read, max_size: u64) -> Content {
    let mut bytes = Vec::new();
    // One byte more than the bound tells "exactly at the bound" from "over it" without
    // reading (or holding) the rest.
    match stdin
        .take(max_size.saturating_add(1))
        .read_to_end(&mut bytes)
    {
        Ok(_) if bytes.len() as u64 > max_size => Content::Error(too_large(max_size)),
        Ok(_) => String::from_utf8(bytes).map_or_else(
            |_| Content::Error("standard input is not UTF-8 text".to_owned()),
            Content::Text,
        ),
        Err(e) => Content::Error(format!("cannot read standard input: {}", io_reason(&e))),
    }
}

/// Reads the file `open` (the path itself, or for a symbolic link found while walking its
/// resolved target) and shows it as `path`.
fn read(path: PathBuf, open: &Path, max_size: u64) -> Input {
    let name = display(&path);
    let (content, identity) = match read_regular(open, max_size) {
        Ok((text, id)) => (Content::Text(text), id),
        Err(message) => (Content::Error(message), None),
    };
    Input {
        name,
        path: Some(path),
        content,
        identity,
        rendered: false,
    }
}

/// The text of the regular file at `path`, at most `max_size` bytes, and its identity.
fn read_regular(path: &Path, max_size: u64) -> Result<(String, Option<FileId>), String> {
    // Look before opening: opening a FIFO for reading blocks until a writer appears, and
    // opening a device can have effects. `open_nonblocking` covers the file being swapped
    // between this look and the open.
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read: {}", io_reason(&e)))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    if meta.len() > max_size {
        return Err(too_large(max_size));
    }
    let file = open_nonblocking(path).map_err(|e| format!("cannot read: {}", io_reason(&e)))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read: {}", io_reason(&e)))?;
    if !meta.is_file() {
        return Err(not_regular(&meta));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len().min(max_size)).unwrap_or(0));
    // The file can grow after the look; never read past the bound.
    file.take(max_size.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read: {}", io_reason(&e)))?;
    if bytes.len() as u64 > max_size {
        return Err(too_large(max_size));
    }
    let text = String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned())?;
    Ok((text, FileId::of(&meta)))
}

/// Opens `path` for reading without blocking on a FIFO. `O_NONBLOCK` is 0o4000 on the Linux
/// architectures listed (std exposes no constant and `libc` is not a direct dependency); it
/// does not change reads of a regular file, which is all that is read after the open.
/// Elsewhere the metadata check before the open keeps FIFOs out.
fn open_nonblocking(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(all(
        target_os = "linux",
        any(
            target_arch = "x86_64",
            target_arch = "x86",
            target_arch = "aarch64",
            target_arch = "arm",
            target_arch = "riscv64",
            target_arch = "powerpc64",
            target_arch = "s390x"
        )
    ))]
    {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000;
        options.custom_flags(O_NONBLOCK);
    }
    options.open(path)
}

/// "skipped: not a regular file (a FIFO)" and the like.
fn not_regular(meta: &std::fs::Metadata) -> String {
    format!(
        "skipped: not a regular file ({}); not read",
        file_kind(&meta.file_type())
    )
}

#[cfg(unix)]
fn file_kind(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() || t.is_char_device() {
        "a device"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn file_kind(t: &std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else {
        "a special file"
    }
}

/// The path as shown in reports: as given, `./` removed, `/` separators.
pub fn display(path: &Path) -> String {
    let s = path.to_string_lossy().replace('\\', "/");
    s.strip_prefix("./").map(str::to_owned).unwrap_or(s)
}

/// What the walker found at a path.
enum Found {
    /// A YAML/JSON file to read through `open` (the path itself, or a symbolic link's
    /// resolved target inside the tree).
    File { open: PathBuf },
    /// An input error (exit code 2): an unreadable directory or entry.
    Error(String),
    /// Not read, by design.
    Skipped(String),
}

fn yaml_extension(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
}

/// Whether `path` is named like a template file ([`super::template::TEMPLATE_EXTENSIONS`]).
fn template_extension(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).is_some_and(|e| {
        super::template::TEMPLATE_EXTENSIONS
            .iter()
            .any(|x| x.eq_ignore_ascii_case(e))
    })
}

/// Collects YAML/JSON and template files below `root`, skipping hidden directories (`.git`), never
/// following symbolic links to directories, following a symbolic link to a file only when
/// its target is inside `root`, and skipping FIFOs, sockets and devices. A directory or entry
/// that cannot be read is reported with its own path and the walk goes on. Iterative, so the
/// depth of the tree does not touch the stack. Paths matching an `exclude` glob are left out
/// (directories are not entered).
fn walk(root: &Path, exclude: &[String], ini: &[String], hits: &Hits) -> Vec<(PathBuf, Found)> {
    // Template files are read too, to be noted (`template::input_template_reason`), never
    // skipped in silence.
    let wanted = |path: &Path| {
        // An `--ini` glob is matched (and its hit counted) before a template name is.
        yaml_extension(path) || walk_matches(ini, root, path, &hits.ini) || template_extension(path)
    };
    let mut out = Vec::new();
    // The tree a symbolic link must stay inside. Without it (root not resolvable), no
    // symbolic link is followed.
    let tree = std::fs::canonicalize(root).ok();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) => {
                out.push((
                    dir,
                    Found::Error(format!("cannot read directory: {}", io_reason(&e))),
                ));
                continue;
            }
        };
        for entry in entries {
            let entry = match entry {
                Ok(e) => e,
                Err(e) => {
                    out.push((
                        dir.clone(),
                        Found::Error(format!("cannot list directory: {}", io_reason(&e))),
                    ));
                    break;
                }
            };
            let path = entry.path();
            let file_type = match entry.file_type() {
                Ok(t) => t,
                Err(e) => {
                    if wanted(&path) && !walk_excludes(exclude, root, &path, false, &hits.exclude) {
                        out.push((
                            path,
                            Found::Error(format!("cannot read: {}", io_reason(&e))),
                        ));
                    }
                    continue;
                }
            };
            if file_type.is_dir() {
                if !entry.file_name().to_string_lossy().starts_with('.')
                    && !walk_excludes(exclude, root, &path, true, &hits.exclude)
                {
                    pending.push(path);
                }
                continue;
            }
            if !wanted(&path) || walk_excludes(exclude, root, &path, false, &hits.exclude) {
                continue;
            }
            if file_type.is_file() {
                out.push((path.clone(), Found::File { open: path }));
            } else if file_type.is_symlink() {
                let found = symlink_target(&path, tree.as_deref());
                out.push((path, found));
            } else {
                out.push((
                    path,
                    Found::Skipped(format!(
                        "not a regular file ({}); not read",
                        file_kind(&file_type)
                    )),
                ));
            }
        }
    }
    out
}

/// Where a symbolic link found while walking may be read from: its resolved target when that
/// is a regular file inside `tree`; otherwise why it is skipped.
fn symlink_target(link: &Path, tree: Option<&Path>) -> Found {
    let Ok(target) = std::fs::canonicalize(link) else {
        return Found::Skipped("symbolic link that leads nowhere; not followed".to_owned());
    };
    if !tree.is_some_and(|t| target.starts_with(t)) {
        return Found::Skipped(
            "symbolic link to a file outside the checked tree; not followed".to_owned(),
        );
    }
    match std::fs::metadata(&target) {
        Ok(m) if m.is_file() => Found::File { open: target },
        Ok(m) => Found::Skipped(format!(
            "symbolic link to {}; not followed",
            file_kind(&m.file_type())
        )),
        Err(e) => Found::Error(format!("cannot read: {}", io_reason(&e))),
    }
}

/// Why `--fix` left a file alone (the report says so; the run goes on).
pub type NotWritten = String;

/// Replaces the file at `path` with `text`, only if it is still the regular file that was
/// read (`identity`): never through a symbolic link, never into a FIFO or device. The text
/// goes to a new file in the same directory that is then renamed over the old one, so a
/// reader sees the old or the new file and never half of one, and a hard link to the old file
/// elsewhere keeps the old contents. Permissions (and, where allowed, owner) are kept.
/// `Ok(Some(reason))` when the file was left alone; `Err` when writing failed.
pub fn write_fix(
    path: &Path,
    identity: Option<FileId>,
    text: &str,
) -> Result<Option<NotWritten>, CheckError> {
    let fail = |e: std::io::Error| CheckError::Write {
        path: path.to_path_buf(),
        message: io_reason(&e).into_owned(),
    };
    let meta = std::fs::symlink_metadata(path).map_err(fail)?;
    let file_type = meta.file_type();
    if file_type.is_symlink() {
        return Ok(Some(
            "not written: a symbolic link; --fix writes regular files only (fix the file it points to)"
                .to_owned(),
        ));
    }
    if !file_type.is_file() {
        return Ok(Some(format!(
            "not written: {}; --fix writes regular files only",
            file_kind(&file_type)
        )));
    }
    if identity.is_some() && FileId::of(&meta) != identity {
        return Ok(Some(
            "not written: the file was replaced after it was read; run again".to_owned(),
        ));
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let base = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy());
    // A name left over by a crashed run (or planted) is never opened: try a few others.
    let mut last = std::io::Error::from(std::io::ErrorKind::AlreadyExists);
    for attempt in 0..8 {
        let tmp = dir.join(format!(
            ".{base}.stackgate-{}-{attempt}.tmp",
            std::process::id()
        ));
        match write_new(&tmp, text, &meta) {
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = e,
            Err(e) => {
                // Best effort: a leftover temporary file is harmless but untidy.
                let _ = std::fs::remove_file(&tmp);
                return Err(fail(e));
            }
            Ok(()) => {
                return match std::fs::rename(&tmp, path) {
                    Ok(()) => Ok(None),
                    Err(e) => {
                        let _ = std::fs::remove_file(&tmp);
                        Err(fail(e))
                    }
                };
            }
        }
    }
    Err(fail(last))
}

/// Creates `tmp` (never opening an existing file or following a link there) with `text` and
/// the permissions of `like`.
fn write_new(tmp: &Path, text: &str, like: &std::fs::Metadata) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(tmp)?;
    file.write_all(text.as_bytes())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // Keeping the owner needs privileges the user may not have; the contents matter more.
        let _ = std::os::unix::fs::fchown(&file, Some(like.uid()), Some(like.gid()));
    }
    file.set_permissions(like.permissions())?;
    file.sync_all()
}

/// The chart whose values file `name` is, per `--values-for`.
pub fn values_chart<'a>(name: &str, specs: &'a [ValuesFor]) -> Option<&'a ValuesFor> {
    specs.iter().find(|s| glob_matches_path(&s.glob, name))
}

/// Whether `glob` matches `path` or, for a glob that does not start with `/`, a trailing part
/// of it that starts at a segment boundary.
pub fn glob_matches_path(glob: &str, path: &str) -> bool {
    let glob = glob.strip_prefix("./").unwrap_or(glob);
    if glob_match(glob.as_bytes(), path.as_bytes()) {
        return true;
    }
    if glob.starts_with('/') {
        return false;
    }
    path.match_indices('/')
        .any(|(i, _)| glob_match(glob.as_bytes(), &path.as_bytes()[i + 1..]))
}

/// Glob matching: `**` any characters, `*` any characters but `/`, `?` one character but `/`,
/// `[...]` a class (`!` or `^` negates, `a-z` ranges).
fn glob_match(p: &[u8], s: &[u8]) -> bool {
    match p.first() {
        None => s.is_empty(),
        Some(b'*') if p.get(1) == Some(&b'*') => {
            let after = &p[2..];
            match after.strip_prefix(b"/") {
                // `**/`: zero or more whole segments.
                Some(rest) => {
                    glob_match(rest, s)
                        || s.iter()
                            .enumerate()
                            .any(|(i, c)| *c == b'/' && glob_match(rest, &s[i + 1..]))
                }
                None => (0..=s.len()).any(|i| glob_match(after, &s[i..])),
            }
        }
        Some(b'*') => {
            let rest = &p[1..];
            let mut i = 0;
            loop {
                if glob_match(rest, &s[i..]) {
                    return true;
                }
                match s.get(i) {
                    Some(b'/') | None => return false,
                    Some(_) => i += 1,
                }
            }
        }
        Some(b'?') => matches!(s.first(), Some(c) if *c != b'/') && glob_match(&p[1..], &s[1..]),
        Some(b'[') => {
            let Some(close) = p.iter().skip(2).position(|c| *c == b']').map(|i| i + 2) else {
                return s.first() == Some(&b'[') && glob_match(&p[1..], &s[1..]);
            };
            let Some(&c) = s.first() else { return false };
            let mut class = &p[1..close];
            let negate = matches!(class.first(), Some(b'!' | b'^'));
            if negate {
                class = &class[1..];
            }
            let mut hit = false;
            let mut i = 0;
            while i < class.len() {
                if i + 2 < class.len() && class[i + 1] == b'-' {
                    hit |= class[i] <= c && c <= class[i + 2];
                    i += 3;
                } else {
                    hit |= class[i] == c;
                    i += 1;
                }
            }
            hit != negate && c != b'/' && glob_match(&p[close + 1..], &s[1..])
        }
        Some(&c) => s.first() == Some(&c) && glob_match(&p[1..], &s[1..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob_matches_path(
            "clusters/*/values.yaml",
            "gitops/clusters/a/values.yaml"
        ));
        assert!(!glob_matches_path(
            "clusters/*/values.yaml",
            "gitops/clusters/a/b/values.yaml"
        ));
        assert!(glob_matches_path("**/occm-*.yaml", "a/b/occm-base.yaml"));
        assert!(glob_matches_path("values/**", "x/values/a/b.yaml"));
        assert!(glob_matches_path("*.y?ml", "dir/f.yaml"));
        assert!(glob_matches_path("[ab]/f.yaml", "x/a/f.yaml"));
        assert!(!glob_matches_path("[!ab]/f.yaml", "a/f.yaml"));
        assert!(!glob_matches_path("/abs/*.yaml", "x/abs/f.yaml"));
        assert!(glob_matches_path("/abs/*.yaml", "/abs/f.yaml"));
    }

    #[test]
    fn values_for_syntax() {
        let v: ValuesFor = "openstack-cloud-controller-manager=clusters/*/values.yaml"
            .parse()
            .unwrap();
        assert_eq!(v.chart, "openstack-cloud-controller-manager");
        assert!("nochart".parse::<ValuesFor>().is_err());
        assert!("=x".parse::<ValuesFor>().is_err());
    }
}
