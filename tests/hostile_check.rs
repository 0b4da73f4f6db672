//! `stackgate check` against a hostile checkout (issue 12, items 7 and 8), through the real
//! binary: symbolic links out of the tree are neither read nor written, `--fix` never writes
//! through a link and replaces files atomically with their permissions, FIFOs never hang the
//! run, an unreadable directory is reported with its own path while the run goes on, a file
//! over the size bound is reported and skipped. (A canary credential in a Secret is followed
//! through every output format by `tests/leak_matrix.rs`.)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const REPO: &str = "tests/fixtures/gitops/repo";

/// Longer than any check of these small inputs takes, even on a loaded CI machine; only a
/// hang reaches it.
const HANG: Duration = Duration::from_secs(60);

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(REPO).join(rel)
}

/// Runs `stackgate check ARGS` (optionally through a wrapper such as `setpriv`) with `stdin`,
/// and fails the test if it does not finish within [`HANG`].
fn run_with(wrapper: &[&str], args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Output {
    let binary = env!("CARGO_BIN_EXE_stackgate");
    let mut command = match wrapper.split_first() {
        Some((program, rest)) => {
            let mut c = Command::new(program);
            c.args(rest).arg(binary);
            c
        }
        None => Command::new(binary),
    };
    command
        .arg("check")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("STACKGATE_POLICIES")
        .env_remove("STACKGATE_CHECK_MAX_FILE_SIZE")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("stackgate runs");
    if let Some(mut pipe) = child.stdin.take() {
        // A child that exits before reading all of stdin closes the pipe; that is its answer.
        let _ = pipe.write_all(stdin);
    }
    let start = Instant::now();
    loop {
        match child.try_wait().expect("wait") {
            Some(_) => break,
            None if start.elapsed() > HANG => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("stackgate check {args:?} did not finish in {HANG:?}");
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    child.wait_with_output().expect("output")
}

fn run(args: &[&str]) -> Output {
    run_with(&[], args, b"", &[])
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

fn json(o: &Output) -> serde_json::Value {
    serde_json::from_str(&out(o)).unwrap_or_else(|e| panic!("JSON report: {e}: {}", out(o)))
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

/// The flux HelmRelease lacks `provider-requires-serial-api-calls`: a warning whose fix the
/// mutating webhook (and `--fix`) would write.
fn fixable() -> Vec<u8> {
    std::fs::read(fixture("flux/occm-helmrelease.yaml")).expect("fixture")
}

#[cfg(unix)]
#[test]
fn symlinks_out_of_the_tree_are_skipped_and_never_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(&tree).expect("mkdir");
    std::fs::create_dir_all(&outside).expect("mkdir");
    let victim = outside.join("victim.yaml");
    std::fs::write(&victim, fixable()).expect("write");
    symlink(&victim, &tree.join("link-out.yaml"));
    symlink(
        Path::new("../outside/victim.yaml"),
        &tree.join("relative-out.yaml"),
    );
    symlink(Path::new("/proc/self/environ"), &tree.join("environ.yaml"));
    symlink(
        Path::new("does-not-exist.yaml"),
        &tree.join("dangling.yaml"),
    );
    std::fs::write(tree.join("inside.yaml"), fixable()).expect("write");
    let canary = "CANARY-ENVIRONMENT-3f9d";

    let o = run_with(
        &[],
        &["--fix", "--format", "json", path_str(&tree)],
        b"",
        &[("STACKGATE_TEST_CANARY", canary)],
    );
    assert_eq!(code(&o), 0, "{}", out(&o));
    assert!(
        !out(&o).contains(canary),
        "the environment was read: {}",
        out(&o)
    );
    assert_eq!(
        std::fs::read(&victim).expect("victim"),
        fixable(),
        "a file outside the tree was written"
    );
    let v = json(&o);
    let skipped: Vec<(String, String)> = v["skipped"]
        .as_array()
        .expect("skipped list")
        .iter()
        .map(|s| {
            (
                s["file"].as_str().unwrap_or_default().to_owned(),
                s["reason"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    for name in ["link-out.yaml", "relative-out.yaml", "environ.yaml"] {
        let hit = skipped
            .iter()
            .find(|(f, _)| f.ends_with(&format!("tree/{name}")))
            .unwrap_or_else(|| panic!("{name} not reported as skipped: {skipped:?}"));
        assert!(hit.1.contains("outside the checked tree"), "{hit:?}");
    }
    assert!(
        skipped
            .iter()
            .any(|(f, r)| f.ends_with("tree/dangling.yaml") && r.contains("leads nowhere")),
        "{skipped:?}"
    );
    assert_eq!(v["summary"]["skipped"], 4, "{v}");
    assert_eq!(v["summary"]["fixed"], 1, "the regular file is fixed: {v}");

    // Text output names each skipped link with its path.
    let o = run(&[path_str(&tree)]);
    assert!(
        out(&o).contains("link-out.yaml: note [skipped] symbolic link to a file outside the checked tree; not followed"),
        "{}",
        out(&o)
    );
}

#[cfg(unix)]
#[test]
fn fix_never_writes_through_a_symlink_and_replaces_files_atomically_keeping_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(&tree).expect("mkdir");
    let target = tree.join("target.yaml");
    std::fs::write(&target, fixable()).expect("write");
    std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let link = tree.join("link.yaml");
    symlink(Path::new("target.yaml"), &link);
    // Named on the command line, the link is read (the user asked for it) but not written.
    let o = run(&["--fix", path_str(&link)]);
    assert_eq!(code(&o), 0, "{}", out(&o));
    assert!(
        out(&o).contains("link.yaml: note [fix] not written: a symbolic link"),
        "{}",
        out(&o)
    );
    assert!(out(&o).contains("1 file not written"), "{}", out(&o));
    assert_eq!(std::fs::read(&target).expect("target"), fixable());
    assert!(
        std::fs::symlink_metadata(&link)
            .expect("link")
            .file_type()
            .is_symlink()
    );

    // The regular file is replaced: new contents, same mode, no temporary file left behind,
    // and a hard link elsewhere keeps the old contents (the file was replaced, not rewritten).
    let hard = dir.path().join("hard-link.yaml");
    std::fs::hard_link(&target, &hard).expect("hard link");
    let o = run(&["--fix", path_str(&target)]);
    assert_eq!(code(&o), 0, "{}", out(&o));
    assert!(out(&o).contains("fixed 1 file"), "{}", out(&o));
    let fixed = std::fs::read_to_string(&target).expect("fixed");
    assert!(
        fixed.contains("provider-requires-serial-api-calls: true"),
        "{fixed}"
    );
    let mode = std::fs::metadata(&target)
        .expect("meta")
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o640);
    assert_eq!(std::fs::read(&hard).expect("hard link"), fixable());
    let mut names: Vec<String> = std::fs::read_dir(&tree)
        .expect("read_dir")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    names.sort();
    assert_eq!(names, ["link.yaml", "target.yaml"]);
}

/// `mkfifo`, or None (with the reason printed) where it is not available.
fn make_fifo(path: &Path) -> Option<()> {
    match Command::new("mkfifo").arg(path).status() {
        Ok(s) if s.success() => Some(()),
        other => {
            eprintln!("skipping the FIFO part: mkfifo unavailable ({other:?})");
            None
        }
    }
}

#[test]
fn fifos_are_skipped_without_hanging() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    std::fs::create_dir_all(&tree).expect("mkdir");
    let fifo = tree.join("pipe.yaml");
    if make_fifo(&fifo).is_none() {
        return;
    }
    std::fs::write(tree.join("ok.yaml"), fixable()).expect("write");
    // Named on the command line: not read, an input error (exit 2); no hang.
    let o = run(&[path_str(&fifo)]);
    assert_eq!(code(&o), 2, "{}", out(&o));
    assert!(
        out(&o).contains("pipe.yaml:0:0: error [input] skipped: not a regular file (a FIFO)"),
        "{}",
        out(&o)
    );
    // Found while walking: skipped by design, the other file is checked, exit 0.
    let o = run(&["--fix", path_str(&tree)]);
    assert_eq!(code(&o), 0, "{}", out(&o));
    assert!(
        out(&o).contains("pipe.yaml: note [skipped] not a regular file (a FIFO); not read"),
        "{}",
        out(&o)
    );
    assert!(out(&o).contains("fixed 1 file"), "{}", out(&o));
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        let t = std::fs::symlink_metadata(&fifo).expect("fifo").file_type();
        assert!(t.is_fifo(), "--fix replaced the FIFO");
    }
}

/// How to run the binary so that a `chmod 000` directory is unreadable: directly when not
/// root, through `setpriv` as `nobody` when root (root reads any directory), or not at all.
#[cfg(unix)]
fn unprivileged_wrapper() -> Option<Vec<&'static str>> {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    match root {
        Some(false) => Some(Vec::new()),
        Some(true) => {
            // `nobody` must also be able to run the binary where it was built.
            let setpriv = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_stackgate"))
                .arg("--version")
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            setpriv.then(|| {
                vec![
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                ]
            })
        }
        None => None,
    }
}

#[cfg(unix)]
#[test]
fn an_unreadable_directory_is_reported_with_its_own_path_and_the_run_goes_on() {
    use std::os::unix::fs::PermissionsExt;
    let Some(wrapper) = unprivileged_wrapper() else {
        eprintln!(
            "skipping: running as root without a way to run the binary as nobody (setpriv), so a chmod 000 directory stays readable"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let tree = dir.path().join("tree");
    let locked = tree.join("a-locked");
    std::fs::create_dir_all(&locked).expect("mkdir");
    std::fs::write(locked.join("hidden.yaml"), fixable()).expect("write");
    std::fs::write(
        tree.join("denied.yaml"),
        std::fs::read(fixture("rke2/occm-helmchart.yaml")).expect("fixture"),
    )
    .expect("write");
    std::fs::write(tree.join("z-warned.yaml"), fixable()).expect("write");
    // `nobody` must reach the tree; the temporary directory is private by default.
    for p in [dir.path(), tree.as_path()] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    for f in ["denied.yaml", "z-warned.yaml"] {
        std::fs::set_permissions(tree.join(f), std::fs::Permissions::from_mode(0o644))
            .expect("chmod");
    }
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
    let o = run_with(&wrapper, &[path_str(&tree)], b"", &[]);
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let text = out(&o);
    assert_eq!(code(&o), 2, "{text}");
    let locked_name = format!(
        "{}:0:0: error [input] cannot read directory",
        path_str(&locked)
    );
    assert!(text.contains(&locked_name), "{text}");
    // The files next to it, before and after it in walk order, were still checked.
    assert!(
        text.contains("denied.yaml:29: error [serial-lb-api-calls/"),
        "{text}"
    );
    assert!(
        text.contains("z-warned.yaml:") && text.contains("warning [serial-lb-api-calls/"),
        "{text}"
    );
}

#[test]
fn a_file_over_the_size_bound_is_reported_and_the_others_are_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Just over the default bound (8 MiB): one long string, the shape that cost 12 s and
    // 1.9 GB before the bound.
    let big = dir.path().join("big.yaml");
    let mut text =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: big}\ndata:\n  a: \"".to_vec();
    text.resize(8 * 1024 * 1024 + 1, b'x');
    std::fs::write(&big, &text).expect("write");
    std::fs::write(dir.path().join("ok.yaml"), fixable()).expect("write");
    let o = run(&["--format", "json", path_str(dir.path())]);
    assert_eq!(
        code(&o),
        2,
        "an unchecked file is an input error: {}",
        out(&o)
    );
    let v = json(&o);
    let errors = v["errors"].as_array().expect("errors");
    assert_eq!(errors.len(), 1, "{v}");
    assert!(
        errors[0]["file"]
            .as_str()
            .unwrap_or_default()
            .ends_with("big.yaml")
    );
    assert_eq!(
        errors[0]["message"],
        "skipped: larger than 8388608 bytes (--max-file-size); not checked"
    );
    assert_eq!(v["summary"]["warnings"], 1, "ok.yaml is still checked: {v}");

    // The bound is a flag (and an environment variable), and applies to standard input.
    let small = "4096";
    let o = run(&[
        "--max-file-size",
        small,
        &fixture("flux/occm-helmrelease.yaml").display().to_string(),
    ]);
    assert_eq!(code(&o), 0, "the fixture is under 4 KiB: {}", out(&o));
    let o = run_with(
        &[],
        &[path_str(&big)],
        b"",
        &[("STACKGATE_CHECK_MAX_FILE_SIZE", "100")],
    );
    assert!(
        out(&o).contains("skipped: larger than 100 bytes"),
        "{}",
        out(&o)
    );
    let o = run_with(&[], &["--max-file-size", "100", "-"], &fixable(), &[]);
    assert_eq!(code(&o), 2, "{}", out(&o));
    assert!(
        out(&o).contains("<stdin>:0:0: error [input] skipped: larger than 100 bytes"),
        "{}",
        out(&o)
    );
}
