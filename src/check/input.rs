//! What `stackgate check` reads: files, directories (recursively), standard input, and which
//! files are plain Helm values files (`--values-for CHART=GLOB`).

use std::io::Read;
use std::path::{Path, PathBuf};

use super::CheckError;

/// File extensions read when walking a directory.
pub const EXTENSIONS: &[&str] = &["yaml", "yml", "json"];

/// Name shown for standard input.
pub const STDIN_NAME: &str = "<stdin>";

/// `--values-for CHART=GLOB`: files matching GLOB are values files of chart CHART.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuesFor {
    /// Chart name.
    pub chart: String,
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
                Ok(Self {
                    chart: chart.trim().to_owned(),
                    glob: glob.trim().to_owned(),
                })
            }
            _ => Err(format!(
                "{s:?} is not CHART=GLOB, e.g. openstack-cloud-controller-manager='clusters/*/occm-values.yaml'"
            )),
        }
    }
}

/// One input: where it came from and its text.
#[derive(Debug, Clone)]
pub struct Input {
    /// Display name (the path as given or found, or `<stdin>`).
    pub name: String,
    /// The file, when the input is one (None for stdin).
    pub path: Option<PathBuf>,
    /// The text, or why it could not be read.
    pub text: Result<String, String>,
}

/// Reads every input named by `paths` (`-` is standard input; no paths means `.`).
pub fn collect(paths: &[PathBuf], stdin: &mut dyn Read) -> Result<Vec<Input>, CheckError> {
    let default = [PathBuf::from(".")];
    let paths = if paths.is_empty() {
        &default[..]
    } else {
        paths
    };
    let mut out = Vec::new();
    let mut stdin_read = false;
    for path in paths {
        if path.as_os_str() == "-" {
            if stdin_read {
                continue;
            }
            stdin_read = true;
            let mut bytes = Vec::new();
            let text = match stdin.read_to_end(&mut bytes) {
                Ok(_) => String::from_utf8(bytes)
                    .map_err(|_| "standard input is not UTF-8 text".to_owned()),
                Err(e) => Err(format!("cannot read standard input: {}", e.kind())),
            };
            out.push(Input {
                name: STDIN_NAME.to_owned(),
                path: None,
                text,
            });
            continue;
        }
        let meta = std::fs::metadata(path).map_err(|e| CheckError::Path {
            path: path.clone(),
            message: e.kind().to_string(),
        })?;
        if meta.is_dir() {
            let mut files = Vec::new();
            walk(path, &mut files).map_err(|e| CheckError::Path {
                path: path.clone(),
                message: e.kind().to_string(),
            })?;
            files.sort();
            out.extend(files.into_iter().map(read));
        } else {
            out.push(read(path.clone()));
        }
    }
    Ok(out)
}

fn read(path: PathBuf) -> Input {
    let name = display(&path);
    let text = match std::fs::read(&path) {
        Ok(bytes) => String::from_utf8(bytes).map_err(|_| "not UTF-8 text".to_owned()),
        Err(e) => Err(format!("cannot read: {}", e.kind())),
    };
    Input {
        name,
        path: Some(path),
        text,
    }
}

/// The path as shown in reports: as given, `./` removed, `/` separators.
pub fn display(path: &Path) -> String {
    let s = path.to_string_lossy().replace('\\', "/");
    s.strip_prefix("./").map(str::to_owned).unwrap_or(s)
}

/// Collects YAML/JSON files below `dir`, skipping hidden directories (`.git`) and not
/// following symbolic links to directories.
fn walk(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let file_type = entry.file_type()?;
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if file_type.is_dir() {
            if !hidden {
                walk(&path, files)?;
            }
        } else if (file_type.is_file() || file_type.is_symlink() && path.is_file())
            && path
                .extension()
                .and_then(|e| e.to_str())
                .is_some_and(|e| EXTENSIONS.iter().any(|x| x.eq_ignore_ascii_case(e)))
        {
            files.push(path);
        }
    }
    Ok(())
}

/// The chart whose values file `name` is, per `--values-for`.
pub fn values_chart<'a>(name: &str, specs: &'a [ValuesFor]) -> Option<&'a str> {
    specs
        .iter()
        .find(|s| glob_matches_path(&s.glob, name))
        .map(|s| s.chart.as_str())
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
