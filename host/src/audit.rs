//! The audit log: every capability use and guard decision, one JSON line each.
//!
//! Lines go to `$ZOT_HOME/logs/audit.jsonl` from a writer thread, so the call
//! path only pays for a channel send. [`AuditLog::flush`] waits until every
//! line sent so far is on disk; the host calls it at shutdown, and dropping
//! the log flushes too, so no line is lost on a normal exit.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// What was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The use went ahead.
    Allow,
    /// The use was refused.
    Deny,
    /// The use went ahead with changed arguments.
    Rewrite,
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// When, as RFC 3339 UTC with milliseconds.
    pub time: String,
    /// The extension (or `data:<tool>` for a data tool, `guard` for the chain itself).
    pub extension: String,
    /// `fs-read`, `fs-write`, `http`, `shell`, `env` or `guard`.
    pub capability: String,
    /// The path, URL or command line.
    pub subject: String,
    /// What was decided.
    pub decision: Decision,
    /// Why; for a refusal, the rule that refused.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
}

impl AuditRecord {
    /// A record stamped with the current time.
    pub fn now(
        extension: impl Into<String>,
        capability: impl Into<String>,
        subject: impl Into<String>,
        decision: Decision,
        reason: impl Into<String>,
    ) -> Self {
        Self {
            time: rfc3339(SystemTime::now()),
            extension: extension.into(),
            capability: capability.into(),
            subject: subject.into(),
            decision,
            reason: reason.into(),
        }
    }
}

enum Message {
    Record(AuditRecord),
    Flush(mpsc::Sender<()>),
}

/// An append-only audit log fed from any thread.
#[derive(Debug)]
pub struct AuditLog {
    path: Option<PathBuf>,
    sender: Mutex<Option<mpsc::Sender<Message>>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl AuditLog {
    /// A log appending to `path`. When the file cannot be opened, the log
    /// says so once (a warning) and records are dropped: auditing never
    /// stops an extension from working.
    pub fn open(path: &Path) -> Self {
        let file = crate::home::open_append(path);
        let file = match file {
            Ok(file) => file,
            Err(err) => {
                tracing::warn!(
                    "cannot open the audit log `{}`: {err}; audit records are dropped",
                    path.display()
                );
                return Self::disabled();
            }
        };
        let (sender, receiver) = mpsc::channel();
        let writer = std::thread::Builder::new()
            .name("zotbox-audit".to_owned())
            .spawn(move || write_loop(file, receiver));
        match writer {
            Ok(writer) => Self {
                path: Some(path.to_owned()),
                sender: Mutex::new(Some(sender)),
                writer: Mutex::new(Some(writer)),
            },
            Err(err) => {
                tracing::warn!("cannot start the audit writer: {err}; audit records are dropped");
                Self::disabled()
            }
        }
    }

    /// A log that records nothing.
    pub fn disabled() -> Self {
        Self {
            path: None,
            sender: Mutex::new(None),
            writer: Mutex::new(None),
        }
    }

    /// Where the log is written, if anywhere.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Queues a record; never blocks on disk.
    pub fn record(&self, record: AuditRecord) {
        if let Some(sender) = &*self.sender.lock().unwrap_or_else(PoisonError::into_inner) {
            let _ = sender.send(Message::Record(record));
        }
    }

    /// Waits (up to 5 s) until every record queued so far is written.
    pub fn flush(&self) {
        let (done, wait) = mpsc::channel();
        if let Some(sender) = &*self.sender.lock().unwrap_or_else(PoisonError::into_inner)
            && sender.send(Message::Flush(done)).is_ok()
        {
            let _ = wait.recv_timeout(Duration::from_secs(5));
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // Closing the channel ends the writer after it drained the queue.
        self.sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = writer.join();
        }
    }
}

fn write_loop(file: std::fs::File, receiver: mpsc::Receiver<Message>) {
    let mut out = std::io::BufWriter::new(file);
    let write = |out: &mut std::io::BufWriter<std::fs::File>, record: &AuditRecord| {
        if serde_json::to_writer(&mut *out, record).is_ok() {
            let _ = out.write_all(b"\n");
        }
    };
    while let Ok(message) = receiver.recv() {
        let mut acks = Vec::new();
        let mut handle =
            |message: Message, out: &mut std::io::BufWriter<std::fs::File>| match message {
                Message::Record(record) => write(out, &record),
                Message::Flush(ack) => acks.push(ack),
            };
        handle(message, &mut out);
        // Write everything already queued, then flush once.
        while let Ok(message) = receiver.try_recv() {
            handle(message, &mut out);
        }
        let _ = out.flush();
        for ack in acks {
            let _ = ack.send(());
        }
    }
    let _ = out.flush();
}

/// Formats a time as RFC 3339 UTC with milliseconds, e.g. `2026-11-30T03:04:05.678Z`.
pub fn rfc3339(time: SystemTime) -> String {
    let since = time.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(i64::try_from(days).unwrap_or(0));
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60,
        since.subsec_millis()
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_rfc3339() {
        let cases = [
            (0, "1970-01-01T00:00:00.000Z"),
            (951_782_400_123, "2000-02-29T00:00:00.123Z"),
            (1_796_007_845_678, "2026-11-30T03:04:05.678Z"),
        ];
        for (millis, expected) in cases {
            let time = UNIX_EPOCH + Duration::from_millis(millis);
            assert_eq!(rfc3339(time), expected);
        }
    }

    #[test]
    fn records_are_written_as_json_lines_and_none_is_lost() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("logs/audit.jsonl");
        let log = AuditLog::open(&path);
        for i in 0..1000 {
            log.record(AuditRecord::now(
                "weather",
                "http",
                format!("https://x/{i}"),
                Decision::Allow,
                "",
            ));
        }
        log.flush();
        let lines = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(lines.lines().count(), 1000);
        log.record(AuditRecord::now(
            "weather",
            "fs-read",
            "../x",
            Decision::Deny,
            "`..` may not leave",
        ));
        drop(log);
        let lines = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(lines.lines().count(), 1001);
        let last: serde_json::Value =
            serde_json::from_str(lines.lines().last().unwrap_or("{}")).unwrap_or_default();
        assert_eq!(last["decision"], "deny");
        assert_eq!(last["capability"], "fs-read");
        assert_eq!(last["reason"], "`..` may not leave");
    }
}
