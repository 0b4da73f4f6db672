//! The log lines of the real binary: written by the batching writer (`log_writer`) while the
//! server runs, and every one of them on stderr after a SIGTERM, also when the server exits
//! right after answering (docs/operations.md, "Logs").

mod common;

use std::time::{Duration, Instant};

use common::{ChildServer, Client, ClientOptions, captured, post};
use http::StatusCode;

const REVIEW: &str = "configmap/mutate-create-cloud-provider-config.json";

/// The lines of `path` that record an answered review of `uid`.
fn answered_lines(path: &std::path::Path, uid: &str) -> usize {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter(|line| {
            let Ok(line) = serde_json::from_str::<serde_json::Value>(line) else {
                return false;
            };
            line["message"] == "review answered"
                && line["uid"] == uid
                && line["decision"] == "patched"
        })
        .count()
}

async fn start(log: &std::path::Path) -> ChildServer {
    let file = std::fs::File::create(log).expect("log file");
    ChildServer::start_logging(
        &["--log-format", "json", "--log-level", "info"],
        file.into(),
        &[],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_patched_reviews_line_is_on_stderr_while_the_server_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr");
    let server = start(&log).await;
    let client = Client::connect(server.addr, &ClientOptions::trusting(&server.ca))
        .await
        .expect("connect");
    let body = captured(REVIEW);
    let uid = common::uid_of(&body);
    let (status, answer) = post(&client, "/mutate", body).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        common::decoded_patch(&answer["response"]).is_some(),
        "{answer}"
    );
    let asked = Instant::now();
    while answered_lines(&log, &uid) == 0 {
        assert!(
            asked.elapsed() < Duration::from_secs(10),
            "no line 10 s after the answer: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(answered_lines(&log, &uid), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_is_on_stderr_when_sigterm_comes_right_after_the_answers() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("stderr");
    let mut server = start(&log).await;
    let options = ClientOptions::trusting(&server.ca);
    let body = captured(REVIEW);
    let uid = common::uid_of(&body);
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let (addr, options, body) = (server.addr, options.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            let client = Client::connect(addr, &options).await.expect("connect");
            for _ in 0..100 {
                let (status, _) = post(&client, "/mutate", body.clone()).await;
                assert_eq!(status, StatusCode::OK);
            }
        }));
    }
    for task in tasks {
        task.await.expect("client");
    }
    let pid = server.child.id().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(killed.success());
    let exited = tokio::task::spawn_blocking(move || {
        let status = server.child.wait();
        (server, status)
    });
    let (_server, status) = tokio::time::timeout(Duration::from_secs(30), exited)
        .await
        .expect("exits within 30 s of SIGTERM")
        .expect("wait");
    assert!(status.expect("status").success());
    assert_eq!(answered_lines(&log, &uid), 400);
}

/// A command that fails at once logs its error as a line and then prints it plainly, in that
/// order, though the process ends right after: the line waiting in the writer's buffer is
/// written before `main` prints and returns.
#[test]
fn a_failing_commands_error_line_comes_before_its_plain_message() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_stackgate"))
        .args(["--log-format", "json", "serve", "--kube", "off"])
        .args(["--policies", "/nonexistent/stackgate-policies"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run stackgate");
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8(output.stderr).expect("utf-8");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(lines[0]).expect("a JSON log line first");
    assert_eq!(line["message"], "stackgate failed", "{stderr}");
    assert_eq!(line["level"], "ERROR");
    assert!(
        lines[1].starts_with("stackgate: loading policies"),
        "{stderr}"
    );
}
