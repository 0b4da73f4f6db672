//! Log lines on their way to stderr, written by a thread of their own in batches.
//!
//! Every patched review logs one line. Written directly, each line is a `write` system call
//! on the review's own thread; to a file that cost a patched review more CPU than everything
//! else it logs (BENCHMARKS.md, "The log line's own write"). Here a line is appended to a
//! buffer under a lock, and a writer thread writes what has gathered:
//!
//! - The writer sleeps until a line arrives, then lets lines gather for [`Pacing::gather`]
//!   (2 ms) or until [`Pacing::write_at`] bytes wait, and writes them with one `write_all`.
//!   Under load one write carries hundreds of lines; when idle a line is on stderr at most
//!   `gather` after it was logged.
//! - A logger wakes the writer only when the writer is asleep with nothing to write, or when
//!   the batch is full: a line costs no system call of its own.
//! - Past [`Pacing::hold_at`] bytes waiting, loggers wait for the writer to take them, as they
//!   waited on a direct write before: when stderr is slow or blocked, the lines held are at
//!   most the batch being written and `hold_at` plus one line.
//! - [`LogWriter::flush`] waits until every line logged before it is written (or its time is
//!   up); the guard `telemetry::init` returns flushes when dropped, so lines are not lost on an
//!   orderly exit. A process killed outright (SIGKILL, an OOM kill) loses the lines of its
//!   last `gather` at most.
//!
//! A line is appended whole under the lock, so lines from different threads never interleave,
//! and lines from one thread keep their order.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// When the writer writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pacing {
    /// How long lines gather after the first one arrives before they are written.
    pub gather: Duration,
    /// Bytes waiting that make the writer write at once, whatever `gather` says.
    pub write_at: usize,
    /// Bytes waiting past which a logger waits for the writer before appending its line.
    pub hold_at: usize,
}

impl Pacing {
    /// The pacing of `serve` and of the CLI: 2 ms, 64 KiB, 1 MiB.
    pub const DEFAULT: Pacing = Pacing {
        gather: Duration::from_millis(2),
        write_at: 64 * 1024,
        hold_at: 1024 * 1024,
    };
}

/// What the writer thread is doing, so that a logger knows whether to wake it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writer {
    /// Asleep with nothing to write: the next line wakes it.
    Asleep,
    /// Letting lines gather: only a full batch or a flush wakes it early.
    Gathering,
    /// Writing a batch: lines appended now go in the next one.
    Writing,
    /// Gone (its output failed to be set up, or it was closed).
    Stopped,
}

/// The state behind the lock.
#[derive(Debug)]
struct Waiting {
    lines: Vec<u8>,
    writer: Writer,
    /// Bytes appended since the start, and bytes written: a flush waits until the second
    /// reaches what the first was when it began.
    appended: u64,
    written: u64,
    /// A flush is waiting: write without gathering.
    hurry: bool,
    /// Loggers and flushes waiting on `for_loggers` (only then is it notified).
    waiters: usize,
    /// No more lines: the writer writes what is left and stops.
    closing: bool,
}

#[derive(Debug)]
struct Shared {
    waiting: Mutex<Waiting>,
    /// The writer waits on this for lines, a full batch, a flush or the close.
    for_writer: Condvar,
    /// Loggers over `hold_at` wait on this for a batch to be taken, flushes for one to be
    /// written.
    for_loggers: Condvar,
    pacing: Pacing,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        // A panic while the lock is held leaves whole lines in the buffer (a line is appended
        // with one `extend`), so the state is still good to use.
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A handle for appending log lines; cheap to clone. Install it as the subscriber's writer
/// (`with_writer`): each formatted event arrives as one `write_all`.
#[derive(Debug, Clone)]
pub struct LogWriter(Arc<Shared>);

impl LogWriter {
    /// Starts the writer thread over `out` (stderr in the binary).
    pub fn spawn(out: impl Write + Send + 'static, pacing: Pacing) -> io::Result<LogWriter> {
        let shared = Arc::new(Shared {
            waiting: Mutex::new(Waiting {
                lines: Vec::new(),
                writer: Writer::Asleep,
                appended: 0,
                written: 0,
                hurry: false,
                waiters: 0,
                closing: false,
            }),
            for_writer: Condvar::new(),
            for_loggers: Condvar::new(),
            pacing,
        });
        let writer = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("stackgate-log".into())
            .spawn(move || write_batches(&writer, out))?;
        Ok(LogWriter(shared))
    }

    /// Appends `line` (whole, after any wait for room).
    fn append(&self, line: &[u8]) {
        let shared = &self.0;
        let mut waiting = shared.lock();
        while waiting.lines.len() >= shared.pacing.hold_at && waiting.writer != Writer::Stopped {
            waiting.waiters += 1;
            waiting = shared
                .for_loggers
                .wait(waiting)
                .unwrap_or_else(PoisonError::into_inner);
            waiting.waiters -= 1;
        }
        if waiting.writer == Writer::Stopped {
            // Nobody is left to write the buffer: write the line directly, as before.
            drop(waiting);
            let _ = io::stderr().lock().write_all(line);
            return;
        }
        waiting.lines.extend_from_slice(line);
        waiting.appended += line.len() as u64;
        let wake = match waiting.writer {
            Writer::Asleep => true,
            Writer::Gathering => waiting.lines.len() >= shared.pacing.write_at,
            Writer::Writing | Writer::Stopped => false,
        };
        if wake {
            // Marked here so that the loggers after this one do not wake it again.
            waiting.writer = Writer::Gathering;
            shared.for_writer.notify_one();
        }
    }

    /// Waits until every line appended before this call is written, or `within` has passed
    /// (stderr blocked); true when they are written.
    pub fn flush(&self, within: Duration) -> bool {
        let shared = &self.0;
        let until = Instant::now() + within;
        let mut waiting = shared.lock();
        let target = waiting.appended;
        if waiting.written >= target {
            return true;
        }
        waiting.hurry = true;
        shared.for_writer.notify_one();
        while waiting.written < target && waiting.writer != Writer::Stopped {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return false;
            };
            waiting.waiters += 1;
            waiting = shared
                .for_loggers
                .wait_timeout(waiting, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
            waiting.waiters -= 1;
        }
        waiting.written >= target
    }

    /// Flushes (waiting up to `within`) and stops the writer thread once the buffer is empty.
    /// Lines logged afterwards are written directly to the process's stderr.
    pub fn close(&self, within: Duration) -> bool {
        let written = self.flush(within);
        let mut waiting = self.0.lock();
        waiting.closing = true;
        self.0.for_writer.notify_one();
        written
    }
}

/// The writer thread: sleeps, gathers, writes, until closed.
fn write_batches(shared: &Shared, mut out: impl Write) {
    let mut batch = Vec::new();
    let mut waiting = shared.lock();
    loop {
        while waiting.lines.is_empty() {
            if waiting.closing {
                waiting.writer = Writer::Stopped;
                shared.for_loggers.notify_all();
                return;
            }
            waiting.writer = Writer::Asleep;
            waiting = shared
                .for_writer
                .wait(waiting)
                .unwrap_or_else(PoisonError::into_inner);
        }
        let until = Instant::now() + shared.pacing.gather;
        while !waiting.hurry && !waiting.closing && waiting.lines.len() < shared.pacing.write_at {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                break;
            };
            waiting.writer = Writer::Gathering;
            waiting = shared
                .for_writer
                .wait_timeout(waiting, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        waiting.writer = Writer::Writing;
        waiting.hurry = false;
        std::mem::swap(&mut batch, &mut waiting.lines);
        if waiting.waiters > 0 {
            // Loggers held at the mark may fill the buffer again while this batch is written.
            shared.for_loggers.notify_all();
        }
        drop(waiting);
        // A line that cannot be written is dropped, as the subscriber drops it on a direct
        // write: logging never fails a review.
        let _ = out.write_all(&batch).and_then(|()| out.flush());
        let written = batch.len() as u64;
        batch.clear();
        if batch.capacity() > shared.pacing.hold_at {
            // One burst does not keep its buffer for the life of the process.
            batch = Vec::new();
        }
        waiting = shared.lock();
        waiting.written += written;
        if waiting.waiters > 0 {
            shared.for_loggers.notify_all();
        }
    }
}

/// What the subscriber writes one event through.
#[derive(Debug)]
pub struct LogLine<'a>(&'a LogWriter);

impl Write for LogLine<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.append(buf);
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.0.append(buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for LogWriter {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// An output that records each `write` call apart.
    #[derive(Clone, Default)]
    struct Recorder(Arc<Mutex<Vec<Vec<u8>>>>);

    impl Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().expect("not poisoned").push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Recorder {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("not poisoned").concat()).expect("utf-8")
        }
        fn writes(&self) -> usize {
            self.0.lock().expect("not poisoned").len()
        }
    }

    /// An output that blocks each write until the test lets it go.
    struct Gate {
        go: mpsc::Receiver<()>,
        inner: Recorder,
    }

    impl Write for Gate {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let _ = self.go.recv();
            self.inner.write(buf)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A writer whose every write waits for a message on the returned sender, and what it
    /// wrote.
    fn gated(pacing: Pacing) -> (mpsc::Sender<()>, Recorder, LogWriter) {
        let (go, gate) = mpsc::channel();
        let out = Recorder::default();
        let writer = LogWriter::spawn(
            Gate {
                go: gate,
                inner: out.clone(),
            },
            pacing,
        )
        .expect("thread");
        (go, out, writer)
    }

    fn log(writer: &LogWriter, line: &str) {
        LogLine(writer)
            .write_all(line.as_bytes())
            .expect("appending cannot fail");
    }

    #[test]
    fn every_line_from_every_thread_is_written_whole_and_in_its_threads_order() {
        let out = Recorder::default();
        let writer = LogWriter::spawn(out.clone(), Pacing::DEFAULT).expect("thread");
        std::thread::scope(|scope| {
            for thread in 0..4 {
                let writer = writer.clone();
                scope.spawn(move || {
                    for n in 0..2_000 {
                        log(
                            &writer,
                            &format!("thread {thread} line {n} {}\n", "x".repeat(n % 97)),
                        );
                    }
                });
            }
        });
        assert!(writer.flush(Duration::from_secs(10)));
        let text = out.text();
        let mut next = [0usize; 4];
        for line in text.lines() {
            let mut words = line.split(' ');
            assert_eq!(words.next(), Some("thread"), "{line}");
            let thread: usize = words.next().and_then(|w| w.parse().ok()).expect(line);
            assert_eq!(words.next(), Some("line"), "{line}");
            let n: usize = words.next().and_then(|w| w.parse().ok()).expect(line);
            assert_eq!(n, next[thread], "thread {thread}'s lines out of order");
            assert_eq!(
                words.next(),
                Some("x".repeat(n % 97).as_str()),
                "a torn line: {line}"
            );
            next[thread] += 1;
        }
        assert_eq!(next, [2_000; 4]);
    }

    #[test]
    fn lines_logged_together_are_written_together() {
        let out = Recorder::default();
        let writer = LogWriter::spawn(out.clone(), Pacing::DEFAULT).expect("thread");
        for n in 0..1_000 {
            log(&writer, &format!("line {n}\n"));
        }
        assert!(writer.flush(Duration::from_secs(10)));
        assert_eq!(out.text().lines().count(), 1_000);
        // Appending a thousand lines takes well under the 2 ms gathering pause on any machine
        // that runs the suite; a write per line would be 1,000 writes.
        assert!(
            out.writes() <= 20,
            "{} writes for 1,000 lines",
            out.writes()
        );
    }

    #[test]
    fn a_lone_line_is_written_after_the_gathering_pause_without_a_flush() {
        let out = Recorder::default();
        let pacing = Pacing {
            gather: Duration::from_millis(20),
            ..Pacing::DEFAULT
        };
        let writer = LogWriter::spawn(out.clone(), pacing).expect("thread");
        let logged = Instant::now();
        log(&writer, "alone\n");
        while out.text().is_empty() {
            assert!(logged.elapsed() < Duration::from_secs(10), "never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            logged.elapsed() >= Duration::from_millis(20),
            "written before the pause"
        );
        assert_eq!(out.text(), "alone\n");
        // The writer went back to sleep: the next line is written as the first was.
        log(&writer, "again\n");
        assert!(writer.flush(Duration::from_secs(10)));
        assert_eq!(out.text(), "alone\nagain\n");
    }

    #[test]
    fn a_full_batch_is_written_without_waiting_for_the_pause() {
        let out = Recorder::default();
        let pacing = Pacing {
            gather: Duration::from_secs(3600),
            write_at: 100,
            hold_at: 1024 * 1024,
        };
        let writer = LogWriter::spawn(out.clone(), pacing).expect("thread");
        log(&writer, "short\n");
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            out.text(),
            "",
            "written before the batch was full or a flush"
        );
        // 6 + 94 bytes: the batch is exactly `write_at` bytes, which is full.
        log(&writer, &format!("{}\n", "y".repeat(93)));
        let logged = Instant::now();
        while out.text().is_empty() {
            assert!(
                logged.elapsed() < Duration::from_secs(10),
                "a full batch waited"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(out.text(), format!("short\n{}\n", "y".repeat(93)));
    }

    #[test]
    fn loggers_wait_for_a_blocked_output_past_the_hold_mark_and_nothing_is_lost() {
        let pacing = Pacing {
            gather: Duration::ZERO,
            write_at: 1,
            hold_at: 1_000,
        };
        let (go, out, writer) = gated(pacing);
        let line = format!("{}\n", "z".repeat(99));
        let logger = {
            let (writer, line) = (writer.clone(), line.clone());
            std::thread::spawn(move || {
                for _ in 0..50 {
                    log(&writer, &line);
                }
            })
        };
        // The output is blocked on the writer's first batch: the logger fills the buffer to
        // the mark and waits there.
        std::thread::sleep(Duration::from_millis(200));
        {
            let waiting = writer.0.lock();
            assert!(!logger.is_finished(), "the logger did not wait");
            assert!(
                waiting.lines.len() < 1_000 + line.len(),
                "{}",
                waiting.lines.len()
            );
            assert!(waiting.lines.len() >= 1_000, "{}", waiting.lines.len());
        }
        assert!(
            !writer.flush(Duration::from_millis(50)),
            "a flush of a blocked output"
        );
        for _ in 0..50 {
            let _ = go.send(());
        }
        logger.join().expect("logger");
        drop(go);
        assert!(writer.flush(Duration::from_secs(10)));
        assert_eq!(out.text(), line.repeat(50));
        // Nobody waits any more, so a batch written from now on notifies nobody.
        assert_eq!(writer.0.lock().waiters, 0);
    }

    /// A flush waiting on a batch whose write is blocked returns once the write is done: the
    /// writer wakes it after writing, not only when it takes the batch.
    #[test]
    fn a_flush_returns_once_the_blocked_batch_it_waits_for_is_written() {
        let pacing = Pacing {
            gather: Duration::ZERO,
            ..Pacing::DEFAULT
        };
        let (go, out, writer) = gated(pacing);
        log(&writer, "blocked\n");
        let flush = {
            let writer = writer.clone();
            std::thread::spawn(move || {
                let asked = Instant::now();
                (writer.flush(Duration::from_secs(20)), asked.elapsed())
            })
        };
        std::thread::sleep(Duration::from_millis(100));
        assert!(!flush.is_finished(), "the flush returned before the write");
        assert_eq!(out.text(), "");
        go.send(()).expect("writer waits");
        let (written, took) = flush.join().expect("flush");
        assert!(written, "the flush timed out");
        assert!(
            took < Duration::from_secs(10),
            "woken only by its timeout: {took:?}"
        );
        assert_eq!(out.text(), "blocked\n");
    }

    /// `write` (not only `write_all`) takes the whole line.
    #[test]
    fn a_write_takes_the_whole_line() {
        let out = Recorder::default();
        let writer = LogWriter::spawn(out.clone(), Pacing::DEFAULT).expect("thread");
        assert_eq!(LogLine(&writer).write(b"whole\n").expect("write"), 6);
        assert!(writer.flush(Duration::from_secs(10)));
        assert_eq!(out.text(), "whole\n");
    }

    /// The default pacing holds a mebibyte of lines for a blocked output, and no more.
    #[test]
    fn by_default_a_blocked_output_holds_one_mebibyte_of_lines() {
        let (go, out, writer) = gated(Pacing::DEFAULT);
        let line = format!("{}\n", "w".repeat(1023));
        let logger = {
            let (writer, line) = (writer.clone(), line.clone());
            std::thread::spawn(move || {
                for _ in 0..3 * 1024 {
                    log(&writer, &line);
                }
            })
        };
        let started = Instant::now();
        loop {
            let held = writer.0.lock().lines.len();
            if held >= 1024 * 1024 {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "{held} bytes held"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(100));
        assert!(!logger.is_finished(), "the logger did not wait");
        assert_eq!(writer.0.lock().lines.len(), 1024 * 1024, "exactly the mark");
        drop(go);
        logger.join().expect("logger");
        assert!(writer.flush(Duration::from_secs(10)));
        assert_eq!(out.text().len(), 3 * 1024 * 1024);
        assert_eq!(writer.0.lock().waiters, 0);
    }

    #[test]
    fn after_close_the_thread_stops_and_lines_are_written_directly() {
        let out = Recorder::default();
        let writer = LogWriter::spawn(out.clone(), Pacing::DEFAULT).expect("thread");
        log(&writer, "before\n");
        assert!(writer.close(Duration::from_secs(10)));
        assert_eq!(out.text(), "before\n");
        let closed = Instant::now();
        while writer.0.lock().writer != Writer::Stopped {
            assert!(
                closed.elapsed() < Duration::from_secs(10),
                "the thread did not stop"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        // Goes to the process's stderr, not to the recorder, and does not wait.
        log(&writer, "");
        assert!(writer.flush(Duration::from_secs(1)));
        assert_eq!(out.text(), "before\n");
    }
}
