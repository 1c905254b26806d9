//! The audit log: every capability use and guard decision, one JSON line each.
//!
//! Lines go to `$ZOT_HOME/logs/audit.jsonl` from a writer thread, so the call
//! path pays for encoding one line, a short lock and a channel send, never
//! for the disk. [`AuditLog::flush`] waits until every line sent so far is
//! on disk; the host calls it at shutdown (the shared host on `SIGTERM`
//! too), and dropping the log flushes as well, so no line is lost on a
//! normal exit.
//!
//! # Rules
//!
//! A guest decides how often it calls, and what it passes: a refused call
//! costs it nothing, so the log must not grow with its call rate, and one
//! extension must not crowd out the others (the shared host keeps one log
//! for every instance).
//!
//! 1. **Fields are cut.** A subject or reason longer than
//!    [`AuditConfig::max_field`] (default 1 KiB) is cut at a character
//!    boundary and ends in `…`; the record then says how long it was
//!    (`subject_len`, `reason_len`, in bytes). The extension name is cut the
//!    same way.
//! 2. **The queue is bounded, and shared.** At most [`AuditConfig::queue`]
//!    records (default 4096) wait for the writer, at most a quarter of them
//!    from one extension (counted, not preallocated: an idle log holds no
//!    queue memory). A record that finds no place is dropped, never waited
//!    for (the call path never blocks on disk), and counted per extension;
//!    the writer then records each count as a line of its own:
//!    `{"extension":"x","capability":"audit","subject":"12 records
//!    dropped","decision":"deny",…}`.
//! 3. **The file rotates.** A line that would take the file past
//!    [`AuditConfig::max_file_bytes`] (default 64 MiB) first renames it to
//!    `audit.jsonl.1` (the older ones moving to `.2` …, up to
//!    [`AuditConfig::keep`], default 2) and starts a new file. The log never
//!    takes more than `(keep + 1) × max_file_bytes` on disk. Other processes
//!    appending to the same file (`zotbox run` beside a host) are allowed
//!    for: the size is re-read before every batch, and a file someone else
//!    already rotated is reopened rather than rotated again.
//! 4. **No extension fills it alone.** Without a limit, one guest making
//!    refused calls in a loop would rotate every other extension's records
//!    (and its own earlier ones) away within seconds. Much as journald
//!    limits a service, each extension's lines may take at most
//!    [`AuditConfig::burst_bytes`] (default 2 MiB, as written: a character
//!    escaped six times over counts six times) in each
//!    [`AuditConfig::interval`] (default 30 s). Past that its records are
//!    counted, not queued, and once the interval ends (or at a flush, or
//!    when the log closes) one line says how many of which kind were
//!    suppressed: `{"extension":"x","capability":"audit","subject":"5000
//!    records suppressed","decision":"deny","reason":"… fs-read deny 4998,
//!    http allow 2"}`.
//! 5. **A flood of one kind hides no other.** Refused calls cost a guest
//!    nothing, so a flood of them would otherwise spend the window and
//!    leave the requests that went ahead, the trail a team reads, counted
//!    but unnamed. Each kind of record (capability and decision: `fs-read
//!    deny`, `http allow`) has [`AuditConfig::reserved_bytes`] of each
//!    window (default 128 KiB, some 500 lines) that the other kinds cannot
//!    take, before it shares the burst. One extension flooding every kind
//!    a guest can cause (ten or so) writes some 3.25 MiB per window, so
//!    filling the kept files takes it at least 29 minutes rather than
//!    seconds, and the suppression lines name it.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

/// What was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The use went ahead.
    Allow,
    /// The use was refused.
    Deny,
    /// The use went ahead with changed arguments.
    Rewrite,
}

impl Decision {
    /// How the log writes it: `allow`, `deny` or `rewrite`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
            Self::Rewrite => "rewrite",
        }
    }
}

impl Serialize for Decision {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// One line of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditRecord {
    /// When, as RFC 3339 UTC with milliseconds.
    pub time: String,
    /// The extension (or `data:<tool>` for a data tool, `guard` for the chain itself).
    pub extension: String,
    /// The extension's folder, for a record its sandbox made: two
    /// extensions may share a name (the shared host keeps one log for all),
    /// and each has a share of the log of its own (rule 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub folder: Option<String>,
    /// `fs-read`, `fs-write`, `http`, `shell`, `env`, `net`, `guard`, `rewrite`
    /// (an intercept's change its grant does not allow) or `host` (a request
    /// to the shared host without its token).
    pub capability: String,
    /// The path, URL or command line (cut to [`AuditConfig::max_field`]).
    pub subject: String,
    /// The subject's length in bytes, when it was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject_len: Option<usize>,
    /// What was decided.
    pub decision: Decision,
    /// Why; for a refusal, the rule that refused (cut like the subject).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The reason's length in bytes, when it was cut.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason_len: Option<usize>,
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
            folder: None,
            capability: capability.into(),
            subject: subject.into(),
            subject_len: None,
            decision,
            reason: reason.into(),
            reason_len: None,
        }
    }

    /// The record as made by the sandbox of the extension in `folder`.
    pub fn in_folder(mut self, folder: impl Into<String>) -> Self {
        self.folder = Some(folder.into());
        self
    }

    /// What the log's shares (rules 2 and 4) are kept by: the extension,
    /// and its folder when known. A NUL, which neither holds, joins them.
    fn share_key(&self) -> std::borrow::Cow<'_, str> {
        match &self.folder {
            Some(folder) => format!("{}\0{folder}", self.extension).into(),
            None => self.extension.as_str().into(),
        }
    }

    /// A line of the log's own about the share `key` names.
    fn own_line(key: &str, subject: String, reason: String) -> Self {
        let (extension, folder) = match key.split_once('\0') {
            Some((extension, folder)) => (extension, Some(folder.to_owned())),
            None => (key, None),
        };
        Self {
            folder,
            ..Self::now(extension, OWN_LINES, subject, Decision::Deny, reason)
        }
    }

    /// Cuts the fields to `max` bytes each, noting the lengths cut from.
    fn bounded(mut self, max: usize) -> Self {
        cut(&mut self.extension, max);
        if let Some(folder) = &mut self.folder {
            cut(folder, max);
        }
        if let Some(len) = cut(&mut self.subject, max) {
            self.subject_len.get_or_insert(len);
        }
        if let Some(len) = cut(&mut self.reason, max) {
            self.reason_len.get_or_insert(len);
        }
        self
    }
}

/// Cuts `text` to at most `max` bytes at a character boundary, marking the
/// cut with `…`; the original length when it was cut.
fn cut(text: &mut String, max: usize) -> Option<usize> {
    if text.len() <= max {
        return None;
    }
    let len = text.len();
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push('…');
    Some(len)
}

/// The bounds of an audit log. The defaults keep a guest calling at any
/// rate within a few MiB of memory and `(keep + 1) × max_file_bytes` of disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditConfig {
    /// Records waiting for the writer; past this, records are dropped and
    /// counted. Default 4096.
    pub queue: usize,
    /// The longest subject, reason or extension name kept, bytes. Default 1024.
    pub max_field: usize,
    /// The file is rotated before a line would take it past this, bytes.
    /// Default 64 MiB.
    pub max_file_bytes: u64,
    /// Rotated files kept (`audit.jsonl.1` … `audit.jsonl.<keep>`); 0 keeps
    /// none. Default 2.
    pub keep: usize,
    /// Bytes of lines one extension may write in one
    /// [`AuditConfig::interval`]; past this its records are counted and
    /// suppressed. Default 2 MiB.
    pub burst_bytes: u64,
    /// The window [`AuditConfig::burst_bytes`] counts over. Default 30 s.
    pub interval: Duration,
    /// Bytes of lines of each kind (capability and decision: `http allow`)
    /// one extension may write in one interval whatever its other kinds
    /// took, beyond [`AuditConfig::burst_bytes`]: a flood of refusals does
    /// not hide the uses that went ahead. Default 128 KiB.
    pub reserved_bytes: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            queue: 4096,
            max_field: 1024,
            max_file_bytes: 64 * 1024 * 1024,
            keep: 2,
            burst_bytes: 2 * 1024 * 1024,
            interval: Duration::from_secs(30),
            reserved_bytes: 128 * 1024,
        }
    }
}

/// Extensions counted apart (drops, queue shares, windows); the rest share
/// one count, one share and one window.
const DROP_KEYS: usize = 64;
/// The name the shared count of drops is recorded under.
const OTHERS: &str = "(other extensions)";
/// The capability of the log's own lines (drops, suppressions): never
/// rate-limited, and at most a few per extension per interval.
const OWN_LINES: &str = "audit";

/// Kinds of record (capability and decision) given a reserve apiece in an
/// extension's window; the host writes a dozen or so, an embedder's own
/// capabilities beyond this share the window's bytes alone.
const RESERVED_KINDS: usize = 32;

/// The bytes one kind of record (rule 5) took of its reserve in a window.
#[derive(Debug)]
struct Reserve {
    capability: String,
    decision: Decision,
    taken: u64,
}

/// One extension's records in its current window (rule 4).
#[derive(Debug)]
struct Window {
    started: Instant,
    /// Bytes of its lines queued in this window past each kind's reserve.
    bytes: u64,
    /// Bytes of each kind's reserve taken in this window.
    reserved: Vec<Reserve>,
    /// Records suppressed in this window, by `capability decision`.
    suppressed: BTreeMap<String, u64>,
}

/// What the log (on the callers' threads) and its writer share about each
/// extension: rules 2 and 4 are decided before a record takes a place in
/// the queue, so one extension's flood neither fills the queue for the
/// others nor the file.
#[derive(Debug, Default)]
struct Shares {
    /// Records waiting for the writer, in all.
    queued: usize,
    /// Records waiting for the writer, by extension.
    queued_by: HashMap<String, usize>,
    /// Drops since the writer last recorded them, by extension.
    dropped: HashMap<String, u64>,
    /// Each extension's current window.
    windows: HashMap<String, Window>,
}

/// `name`, or [`OTHERS`] once `map` counts [`DROP_KEYS`] others.
fn key_in<V>(map: &HashMap<String, V>, name: &str) -> String {
    if map.len() < DROP_KEYS || map.contains_key(name) {
        name.to_owned()
    } else {
        OTHERS.to_owned()
    }
}

impl Shares {
    /// Whether a line of `size` bytes from `record`, whose share is
    /// `share`, fits its window (rule 4); when not, it is counted as
    /// suppressed.
    fn admit(
        &mut self,
        share: &str,
        record: &AuditRecord,
        size: u64,
        config: &AuditConfig,
    ) -> Admitted {
        let now = Instant::now();
        let key = key_in(&self.windows, share);
        let window = self.windows.entry(key).or_insert_with(|| Window {
            started: now,
            bytes: 0,
            reserved: Vec::new(),
            suppressed: BTreeMap::new(),
        });
        if now.saturating_duration_since(window.started) >= config.interval
            && window.suppressed.is_empty()
        {
            // Its window ended with nothing to report: a new one.
            window.started = now;
            window.bytes = 0;
            window.reserved.clear();
        }
        // Its kind's reserve first, so that what other kinds took leaves it.
        // A few kinds, scanned: nothing is allocated for a record admitted.
        let found = window.reserved.iter().position(|reserve| {
            reserve.decision == record.decision && reserve.capability == record.capability
        });
        let reserve = match found {
            Some(at) => window.reserved.get_mut(at),
            None if window.reserved.len() < RESERVED_KINDS => {
                window.reserved.push(Reserve {
                    capability: record.capability.clone(),
                    decision: record.decision,
                    taken: 0,
                });
                window.reserved.last_mut()
            }
            None => None,
        };
        if let Some(reserve) = reserve
            && reserve.taken.saturating_add(size) <= config.reserved_bytes
        {
            reserve.taken += size;
            return Admitted::Yes;
        }
        if window.bytes.saturating_add(size) <= config.burst_bytes {
            window.bytes += size;
            return Admitted::Yes;
        }
        let first = window.suppressed.is_empty();
        let kind = format!("{} {}", record.capability, record.decision.as_str());
        *window.suppressed.entry(kind).or_default() += 1;
        if first {
            Admitted::FirstSuppressed
        } else {
            Admitted::Suppressed
        }
    }

    /// Takes a place in the queue for `extension` (rule 2): none when the
    /// queue is full or the extension holds its share of it (a quarter).
    fn enqueue(&mut self, extension: &str, config: &AuditConfig) -> Option<String> {
        let capacity = config.queue.max(1);
        let key = key_in(&self.queued_by, extension);
        let mine = self.queued_by.get(&key).copied().unwrap_or(0);
        if self.queued >= capacity || mine >= (capacity / 4).max(1) {
            *self
                .dropped
                .entry(key_in(&self.dropped, extension))
                .or_default() += 1;
            return None;
        }
        self.queued += 1;
        *self.queued_by.entry(key.clone()).or_default() += 1;
        Some(key)
    }

    /// The writer took a record queued under `key`.
    fn dequeue(&mut self, key: &str) {
        self.queued = self.queued.saturating_sub(1);
        if let Some(count) = self.queued_by.get_mut(key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.queued_by.remove(key);
            }
        }
    }
}

/// What became of a record at its extension's window (rule 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admitted {
    Yes,
    /// Suppressed, the window's first: the writer must learn when to say so.
    FirstSuppressed,
    Suppressed,
}

enum Message {
    /// A record's line, queued under its extension's key.
    Line {
        key: String,
        line: Vec<u8>,
    },
    /// A window began suppressing: the writer waits for its end (a
    /// suppressed record sends nothing else, so an idle writer would not).
    Wake,
    Flush(mpsc::Sender<()>),
}

/// An append-only audit log fed from any thread.
#[derive(Debug)]
pub struct AuditLog {
    path: Option<PathBuf>,
    config: AuditConfig,
    sender: Mutex<Option<mpsc::Sender<Message>>>,
    shares: Arc<Mutex<Shares>>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl AuditLog {
    /// A log appending to `path` with the default [`AuditConfig`]. When the
    /// file cannot be opened, the log says so once (a warning) and records
    /// are dropped: auditing never stops an extension from working.
    pub fn open(path: &Path) -> Self {
        Self::open_with(path, AuditConfig::default())
    }

    /// A log appending to `path` within `config`'s bounds.
    pub fn open_with(path: &Path, config: AuditConfig) -> Self {
        let file = match crate::home::open_append(path) {
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
        let shares = Arc::new(Mutex::new(Shares::default()));
        let writer = Writer {
            shares: shares.clone(),
            path: path.to_owned(),
            out: std::io::BufWriter::new(file),
            len: 0,
            config: config.clone(),
            rotation_failed: false,
        };
        let spawned = std::thread::Builder::new()
            .name("zotbox-audit".to_owned())
            .spawn(move || writer.run(receiver));
        match spawned {
            Ok(handle) => Self {
                path: Some(path.to_owned()),
                config,
                sender: Mutex::new(Some(sender)),
                shares,
                writer: Mutex::new(Some(handle)),
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
            config: AuditConfig::default(),
            sender: Mutex::new(None),
            shares: Arc::default(),
            writer: Mutex::new(None),
        }
    }

    /// Where the log is written, if anywhere.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Queues a record, its fields cut to the configured size; never
    /// blocks. A record past its extension's rate is counted as suppressed
    /// (rule 4), one that finds no place in the queue as dropped (rule 2).
    pub fn record(&self, record: AuditRecord) {
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(sender) = sender.as_ref() else {
            return;
        };
        let record = record.bounded(self.config.max_field);
        let Some(line) = line_of(&record) else {
            return;
        };
        let share = record.share_key();
        let key = {
            let mut shares = self.shares.lock().unwrap_or_else(PoisonError::into_inner);
            if record.capability != OWN_LINES {
                match shares.admit(&share, &record, line.len() as u64, &self.config) {
                    Admitted::Yes => {}
                    Admitted::FirstSuppressed => {
                        let _ = sender.send(Message::Wake);
                        return;
                    }
                    Admitted::Suppressed => return,
                }
            }
            match shares.enqueue(&share, &self.config) {
                Some(key) => key,
                None => return,
            }
        };
        if let Err(mpsc::SendError(Message::Line { key, .. })) =
            sender.send(Message::Line { key, line })
        {
            // The writer is gone (it could not start): nothing to count for.
            self.shares
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .dequeue(&key);
        }
    }

    /// Waits (up to 5 s) until every record queued so far is written, and
    /// what was suppressed so far is said.
    pub fn flush(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        let Some(sender) = self
            .sender
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
        else {
            return;
        };
        let (done, wait) = mpsc::channel();
        // A flush is never dropped: it does not count against the queue.
        if sender.send(Message::Flush(done)).is_err() {
            return;
        }
        let _ = wait.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// A record as one line of the log, newline included, with no character
/// a terminal or a line splitter acts on ([`crate::text::json`]).
fn line_of(record: &AuditRecord) -> Option<Vec<u8>> {
    let mut line = crate::text::json(record).ok()?.into_bytes();
    line.push(b'\n');
    Some(line)
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

/// The writer thread's state: the open file and how big it is.
struct Writer {
    /// Shared with the log (see [`Shares`]).
    shares: Arc<Mutex<Shares>>,
    path: PathBuf,
    out: std::io::BufWriter<std::fs::File>,
    len: u64,
    config: AuditConfig,
    rotation_failed: bool,
}

/// Which windows [`Writer::report`] ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    /// Those whose interval is over.
    Ended,
    /// Every one with something suppressed (a flush, the end of the log);
    /// a window still running goes on, its count said.
    All,
}

impl Writer {
    fn shares(&self) -> std::sync::MutexGuard<'_, Shares> {
        self.shares.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn run(mut self, receiver: mpsc::Receiver<Message>) {
        loop {
            // While a suppression is pending, wake when its window ends
            // to say so even if no record comes.
            let message = match self.next_window_end() {
                None => receiver.recv().map_err(|_| ()),
                Some(end) => {
                    match receiver.recv_timeout(end.saturating_duration_since(Instant::now())) {
                        Ok(message) => Ok(message),
                        Err(mpsc::RecvTimeoutError::Timeout) => {
                            self.report(Report::Ended);
                            let _ = self.out.flush();
                            continue;
                        }
                        Err(mpsc::RecvTimeoutError::Disconnected) => Err(()),
                    }
                }
            };
            let Ok(message) = message else {
                break;
            };
            self.follow_path();
            self.refresh_len();
            let mut acks = Vec::new();
            let mut next = Some(message);
            // Write everything already queued, then flush once.
            while let Some(message) = next {
                match message {
                    Message::Line { key, line } => {
                        self.shares().dequeue(&key);
                        self.write_line(&line);
                    }
                    Message::Wake => {}
                    Message::Flush(ack) => acks.push(ack),
                }
                next = receiver.try_recv().ok();
            }
            self.record_drops();
            self.report(if acks.is_empty() {
                Report::Ended
            } else {
                Report::All
            });
            let _ = self.out.flush();
            for ack in acks {
                let _ = ack.send(());
            }
        }
        self.record_drops();
        self.report(Report::All);
        let _ = self.out.flush();
    }

    /// When the first window with suppressed records ends.
    fn next_window_end(&self) -> Option<Instant> {
        self.shares()
            .windows
            .values()
            .filter(|window| !window.suppressed.is_empty())
            .map(|window| window.started + self.config.interval)
            .min()
    }

    /// Writes one line for each window `which` names that suppressed
    /// records; drops the windows whose interval is over.
    fn report(&mut self, which: Report) {
        let interval = self.config.interval;
        let now = Instant::now();
        let mut lines = Vec::new();
        self.shares().windows.retain(|extension, window| {
            let over = now.saturating_duration_since(window.started) >= interval;
            if (over || which == Report::All) && !window.suppressed.is_empty() {
                let counts = std::mem::take(&mut window.suppressed);
                lines.push((extension.clone(), counts));
            }
            !over
        });
        for (extension, counts) in lines {
            let total: u64 = counts.values().sum();
            let kinds: Vec<String> = counts
                .iter()
                .map(|(kind, count)| format!("{kind} {count}"))
                .collect();
            let record = AuditRecord::own_line(
                &extension,
                format!("{total} records suppressed"),
                format!(
                    "more than {} bytes of records in {} s from this extension (and {} of each \
                     kind): {}",
                    self.config.burst_bytes,
                    interval.as_secs_f64(),
                    self.config.reserved_bytes,
                    kinds.join(", ")
                ),
            );
            self.write_record(&record.bounded(self.config.max_field));
        }
    }

    /// The file's size as it is now: other processes may append too.
    fn refresh_len(&mut self) {
        let _ = self.out.flush();
        if let Ok(meta) = self.out.get_ref().metadata() {
            self.len = meta.len();
        }
    }

    fn write_record(&mut self, record: &AuditRecord) {
        if let Some(line) = line_of(record) {
            self.write_line(&line);
        }
    }

    fn write_line(&mut self, line: &[u8]) {
        let size = line.len() as u64;
        if self.len > 0 && self.len.saturating_add(size) > self.config.max_file_bytes {
            self.rotate();
        }
        if self.out.write_all(line).is_ok() {
            self.len = self.len.saturating_add(size);
        }
    }

    /// One `deny` line per extension whose records were dropped.
    fn record_drops(&mut self) {
        let mut dropped: Vec<(String, u64)> = std::mem::take(&mut self.shares().dropped)
            .into_iter()
            .collect();
        dropped.sort_unstable();
        for (extension, count) in dropped {
            let record = AuditRecord::own_line(
                &extension,
                format!("{count} records dropped"),
                format!(
                    "the audit queue was full ({} records waiting for the disk, a quarter of \
                     them at most from one extension)",
                    self.config.queue
                ),
            );
            self.write_record(&record.bounded(self.config.max_field));
        }
    }

    /// Moves the full file aside (`.1`, older ones shifting up to `keep`)
    /// and starts a new one. If another process already did (the path now
    /// names another file), only reopens. When the file cannot be moved,
    /// it is appended to rather than records lost, and a warning says so.
    fn rotate(&mut self) {
        let _ = self.out.flush();
        if self.still_ours()
            && let Err(err) = self.shift()
        {
            self.rotation_failed(&err);
        }
        match crate::home::open_append(&self.path) {
            Ok(file) => {
                self.out = std::io::BufWriter::new(file);
                self.refresh_len();
            }
            Err(err) => self.rotation_failed(&err),
        }
    }

    /// Reopens the path when it no longer names the open file (the user
    /// deleted or moved the log, or a rotation by another tool): a
    /// long-lived host would otherwise write its records where nobody
    /// reads them.
    fn follow_path(&mut self) {
        if self.still_ours() {
            return;
        }
        let _ = self.out.flush();
        if let Ok(file) = crate::home::open_append(&self.path) {
            self.out = std::io::BufWriter::new(file);
        }
    }

    /// Whether the path still names the file this writer has open.
    fn still_ours(&self) -> bool {
        use std::os::unix::fs::MetadataExt;
        match (self.out.get_ref().metadata(), std::fs::metadata(&self.path)) {
            (Ok(open), Ok(named)) => open.dev() == named.dev() && open.ino() == named.ino(),
            _ => false,
        }
    }

    fn shift(&self) -> std::io::Result<()> {
        let numbered = |n: usize| {
            let mut name = self.path.clone().into_os_string();
            name.push(format!(".{n}"));
            PathBuf::from(name)
        };
        if self.config.keep == 0 {
            return std::fs::remove_file(&self.path);
        }
        for n in (1..self.config.keep).rev() {
            let from = numbered(n);
            if from.exists() {
                std::fs::rename(&from, numbered(n + 1))?;
            }
        }
        std::fs::rename(&self.path, numbered(1))
    }

    fn rotation_failed(&mut self, err: &std::io::Error) {
        if !self.rotation_failed {
            self.rotation_failed = true;
            tracing::warn!(
                "cannot rotate the audit log `{}`: {err}; it grows past {} bytes",
                self.path.display(),
                self.config.max_file_bytes
            );
        }
    }
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
    fn a_line_holds_no_character_a_terminal_or_a_line_splitter_acts_on() {
        // Attack: a path a guest chose, with a line separator and a forged
        // record after it, a C1 CSI and a bidi override.
        let subject = "a\u{2028}{\"decision\":\"allow\"}\u{85}\u{9b}31m\u{202e}\u{7f}\u{E0041}";
        let record = AuditRecord::now("x", "fs-read", subject, Decision::Deny, "r".to_owned());
        let line = line_of(&record).unwrap_or_default();
        let line = String::from_utf8_lossy(&line);
        let line = line.trim_end_matches('\n');
        assert!(line.is_ascii(), "{line}");
        assert!(!line.chars().any(char::is_control), "{line}");
        // The same values for a JSON reader.
        let back: serde_json::Value = serde_json::from_str(line).unwrap_or_default();
        assert_eq!(back["subject"], subject, "{line}");
        assert!(line.contains("\\u2028"), "{line}");
        assert!(line.contains("\\udb40\\udc41"), "{line}");
    }

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

    #[test]
    fn a_log_deleted_under_a_long_lived_writer_is_made_again() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("logs/audit.jsonl");
        let log = AuditLog::open(&path);
        let deny =
            |n: usize| AuditRecord::now("x", "fs-read", format!("p{n}"), Decision::Deny, "r");
        log.record(deny(1));
        log.flush();
        // The user deletes it (or a tool rotates it away) while the host runs.
        std::fs::remove_file(&path).unwrap_or_else(|e| panic!("{e}"));
        log.record(deny(2));
        log.flush();
        let lines = std::fs::read_to_string(&path).unwrap_or_default();
        assert_eq!(lines.lines().count(), 1, "{lines}");
        assert!(lines.contains("\"p2\""), "{lines}");
        // Paths, URLs and commands: the user's alone.
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path)
                .unwrap_or_else(|e| panic!("{e}"))
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
    }

    fn lines_of(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
            .collect()
    }

    #[test]
    fn long_subjects_and_reasons_are_cut_with_their_length_noted() {
        // (subject, reason, subject kept, subject_len, reason_len)
        let mib = "a".repeat(1024 * 1024);
        let wide = "é".repeat(600); // 1200 bytes; 1024 falls inside a character
        let cases = [
            ("short", "why", "short".to_owned(), None, None),
            (
                mib.as_str(),
                mib.as_str(),
                format!("{}…", "a".repeat(1024)),
                Some(1024 * 1024),
                Some(1024 * 1024),
            ),
            (
                wide.as_str(),
                "",
                format!("{}…", "é".repeat(512)),
                Some(1200),
                None,
            ),
        ];
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("audit.jsonl");
        let log = AuditLog::open(&path);
        for (subject, reason, ..) in &cases {
            log.record(AuditRecord::now(
                "prober",
                "fs-read",
                *subject,
                Decision::Deny,
                *reason,
            ));
        }
        drop(log);
        let lines = lines_of(&path);
        assert_eq!(lines.len(), cases.len());
        for (line, (_, _, kept, subject_len, reason_len)) in lines.iter().zip(&cases) {
            assert_eq!(line["subject"], kept.as_str());
            assert_eq!(line["subject_len"].as_u64(), subject_len.map(|n| n as u64));
            assert_eq!(line["reason_len"].as_u64(), reason_len.map(|n| n as u64));
            assert!(line.to_string().len() < 3 * 1024, "{line}");
        }
    }

    /// `audit.jsonl` in `dir` as a FIFO that nobody reads until `start`
    /// says so: the writer blocks on it as on a hung disk. The reader
    /// returns all that was written.
    fn hung_disk(
        dir: &Path,
        start: mpsc::Receiver<()>,
    ) -> (PathBuf, std::thread::JoinHandle<String>) {
        let fifo = dir.join("audit.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap_or_else(|e| panic!("mkfifo: {e}"));
        assert!(made.success());
        let reader = std::thread::spawn({
            let fifo = fifo.clone();
            move || {
                let mut file = std::fs::File::open(&fifo).unwrap_or_else(|e| panic!("{e}"));
                let _ = start.recv();
                let mut text = String::new();
                std::io::Read::read_to_string(&mut file, &mut text)
                    .unwrap_or_else(|e| panic!("{e}"));
                text
            }
        });
        (fifo, reader)
    }

    #[test]
    fn a_full_queue_drops_records_without_blocking_and_the_count_is_recorded() {
        const SENT: usize = 1000;
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (start_reading, reading) = mpsc::channel::<()>();
        let (fifo, reader) = hung_disk(tmp.path(), reading);
        let config = AuditConfig {
            queue: 8,
            ..AuditConfig::default()
        };
        let log = Arc::new(AuditLog::open_with(&fifo, config));
        // Every record call returns although nothing is written.
        let (done, finished) = mpsc::channel();
        std::thread::spawn({
            let log = log.clone();
            move || {
                for i in 0..SENT {
                    log.record(AuditRecord::now(
                        "hostile",
                        "fs-read",
                        format!("{i} {}", "x".repeat(1000)),
                        Decision::Deny,
                        "not granted",
                    ));
                }
                let _ = done.send(());
            }
        });
        assert!(
            finished.recv_timeout(Duration::from_secs(30)).is_ok(),
            "recording blocked on a writer that cannot write"
        );
        let _ = start_reading.send(());
        drop(Arc::into_inner(log));
        let text = reader.join().unwrap_or_else(|_| panic!("the reader"));
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let (drops, written): (Vec<_>, Vec<_>) =
            lines.iter().partition(|line| line["capability"] == "audit");
        // One line per batch that found drops: usually one, all of them.
        let mut dropped = 0;
        for line in &drops {
            assert_eq!(line["extension"], "hostile");
            assert_eq!(line["decision"], "deny");
            assert_eq!(
                line["reason"],
                "the audit queue was full (8 records waiting for the disk, a quarter of them at \
                 most from one extension)"
            );
            let subject = line["subject"].as_str().unwrap_or_default();
            let count = subject.strip_suffix(" records dropped").unwrap_or_default();
            dropped += count
                .parse::<usize>()
                .unwrap_or_else(|_| panic!("{subject}"));
        }
        assert!(dropped > 0, "nothing was dropped");
        assert_eq!(written.len() + dropped, SENT);
    }

    /// The lines of `extension` other than the log's own.
    fn of<'a>(lines: &'a [serde_json::Value], extension: &str) -> Vec<&'a serde_json::Value> {
        lines
            .iter()
            .filter(|line| line["extension"] == extension && line["capability"] != "audit")
            .collect()
    }

    /// The log's own lines: `(extension, subject, reason)`.
    fn own(lines: &[serde_json::Value]) -> Vec<(String, String, String)> {
        lines
            .iter()
            .filter(|line| line["capability"] == "audit")
            .map(|line| {
                let field = |name: &str| line[name].as_str().unwrap_or_default().to_owned();
                (field("extension"), field("subject"), field("reason"))
            })
            .collect()
    }

    /// Rule 4 in the shared host, whose one log serves every instance: an
    /// extension named like another, in another folder, spends its own
    /// share, not the other's, and its lines and the log's own say which
    /// folder they are of.
    #[test]
    fn a_namesake_in_another_folder_spends_a_share_of_its_own() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("audit.jsonl");
        let config = AuditConfig {
            burst_bytes: 16 * 1024,
            interval: Duration::from_secs(3600),
            reserved_bytes: 4 * 1024,
            ..AuditConfig::default()
        };
        let log = AuditLog::open_with(&path, config);
        let record = |folder: &str, subject: String| {
            AuditRecord::now("prober", "fs-read", subject, Decision::Deny, "r").in_folder(folder)
        };
        // Attack: another author's `prober` floods refusals.
        for i in 0..2000 {
            log.record(record("/evil/prober", format!("{i:>200}")));
        }
        for i in 0..3 {
            log.record(record("/home/u/prober", format!("../victim-{i}")));
        }
        drop(log);
        let lines = lines_of(&path);
        let victims: Vec<&str> = lines
            .iter()
            .filter(|line| line["folder"] == "/home/u/prober")
            .filter_map(|line| line["subject"].as_str())
            .collect();
        assert_eq!(victims, ["../victim-0", "../victim-1", "../victim-2"]);
        let own: Vec<(&str, &str)> = lines
            .iter()
            .filter(|line| line["capability"] == "audit")
            .map(|line| {
                (
                    line["extension"].as_str().unwrap_or_default(),
                    line["folder"].as_str().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(own, [("prober", "/evil/prober")]);
    }

    /// Rule 4: a guest refused in a loop, with a path of control characters
    /// that its line writes six times over (1 000 records of 6 KiB lines,
    /// with a burst of 32 KiB), neither rotates the file nor pushes out
    /// another extension's records; what it lost is counted, by kind, in
    /// one line. Rule 5: its 30 requests that went ahead after the flood
    /// are all named.
    #[test]
    fn one_extension_flooding_the_log_is_suppressed_past_its_burst_and_counted() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("audit.jsonl");
        let config = AuditConfig {
            max_file_bytes: 64 * 1024,
            burst_bytes: 32 * 1024,
            interval: Duration::from_secs(3600),
            reserved_bytes: 8 * 1024,
            ..AuditConfig::default()
        };
        let log = AuditLog::open_with(&path, config);
        let record = |extension: &str, capability: &str, subject: String, decision| {
            AuditRecord::now(extension, capability, subject, decision, "r")
        };
        log.record(record("quiet", "http", "before".into(), Decision::Allow));
        for _ in 0..1000 {
            log.record(record(
                "flood",
                "fs-read",
                "\u{1}".repeat(1024),
                Decision::Deny,
            ));
        }
        // Attack: the flood spent the window, to leave these unnamed.
        for i in 0..30 {
            log.record(record(
                "flood",
                "http",
                format!("https://evil/{i}"),
                Decision::Allow,
            ));
        }
        log.record(record("quiet", "http", "after".into(), Decision::Allow));
        drop(log);
        assert!(
            !tmp.path().join("audit.jsonl.1").exists(),
            "the flood rotated the file"
        );
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines = lines_of(&path);
        let flood_bytes: usize = text
            .lines()
            .filter(|line| line.contains(r#""extension":"flood","capability":"fs-read""#))
            .map(|line| line.len() + 1)
            .sum();
        let written = lines
            .iter()
            .filter(|line| line["extension"] == "flood" && line["capability"] == "fs-read")
            .count();
        assert!(
            written > 0 && flood_bytes <= (32 + 8) * 1024,
            "{written} lines, {flood_bytes} bytes"
        );
        let quiet: Vec<&str> = of(&lines, "quiet")
            .iter()
            .filter_map(|line| line["subject"].as_str())
            .collect();
        assert_eq!(quiet, ["before", "after"]);
        // Rule 5: its requests that went ahead are named, in their reserve.
        let requests: Vec<&str> = of(&lines, "flood")
            .iter()
            .filter(|line| line["capability"] == "http")
            .filter_map(|line| line["subject"].as_str())
            .collect();
        let expected: Vec<String> = (0..30).map(|i| format!("https://evil/{i}")).collect();
        assert_eq!(requests, expected);
        let suppressed = 1000 - written;
        assert_eq!(
            own(&lines),
            [(
                "flood".to_owned(),
                format!("{suppressed} records suppressed"),
                format!(
                    "more than 32768 bytes of records in 3600 s from this extension (and 8192 \
                     of each kind): fs-read deny {suppressed}"
                )
            )]
        );
    }

    /// Rule 4: the limit is per window; a new window writes again, and the
    /// line for the old one comes when it ends, records or not.
    #[test]
    fn a_suppression_is_reported_when_its_window_ends_and_the_next_window_writes() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("audit.jsonl");
        let deny =
            |n: usize| AuditRecord::now("flood", "fs-read", format!("p{n}"), Decision::Deny, "r");
        // Lines of one length: p10 … p60.
        let line = line_of(&deny(10)).map_or(0, |line| line.len() as u64);
        let config = AuditConfig {
            burst_bytes: 10 * line,
            interval: Duration::from_millis(500),
            reserved_bytes: 0,
            ..AuditConfig::default()
        };
        let log = AuditLog::open_with(&path, config);
        for n in 10..60 {
            log.record(deny(n));
        }
        // The log stays open and idle: the writer reports on its own.
        let reported = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            own(&lines_of(&path)).len() == 1
        });
        assert!(reported, "no suppression line while the log stayed open");
        log.record(deny(60));
        drop(log);
        let subjects: Vec<String> = lines_of(&path)
            .iter()
            .map(|line| line["subject"].as_str().unwrap_or_default().to_owned())
            .collect();
        let mut expected: Vec<String> = (10..20).map(|n| format!("p{n}")).collect();
        expected.push("40 records suppressed".to_owned());
        expected.push("p60".to_owned());
        assert_eq!(subjects, expected);
    }

    /// Rule 2: one extension's flood takes at most a quarter of the queue,
    /// so the others' records still find a place; and a flush says what
    /// was suppressed so far, while the window runs on.
    #[test]
    fn one_extension_holds_a_quarter_of_the_queue_and_a_flush_reports_suppressions() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (start_reading, reading) = mpsc::channel::<()>();
        let (fifo, reader) = hung_disk(tmp.path(), reading);
        let config = AuditConfig {
            queue: 16,
            ..AuditConfig::default()
        };
        let log = AuditLog::open_with(&fifo, config);
        // 1 MiB: past what the FIFO holds, so the writer hangs and the
        // queue fills (within the flood's rate: only the share is tested).
        for i in 0..1000 {
            log.record(AuditRecord::now(
                "flood",
                "fs-read",
                format!("{i} {}", "x".repeat(1000)),
                Decision::Deny,
                "r",
            ));
        }
        for i in 0..4 {
            log.record(AuditRecord::now(
                "quiet",
                "http",
                format!("q{i}"),
                Decision::Allow,
                "",
            ));
        }
        let _ = start_reading.send(());
        drop(log);
        let text = reader.join().unwrap_or_else(|_| panic!("the reader"));
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}")))
            .collect();
        let quiet: Vec<&str> = of(&lines, "quiet")
            .iter()
            .filter_map(|line| line["subject"].as_str())
            .collect();
        assert_eq!(quiet, ["q0", "q1", "q2", "q3"]);
        assert!(of(&lines, "flood").len() < 1000);

        // A flush reports what was suppressed so far.
        let path = tmp.path().join("flushed.jsonl");
        let config = AuditConfig {
            burst_bytes: 1,
            interval: Duration::from_secs(3600),
            reserved_bytes: 0,
            ..AuditConfig::default()
        };
        let log = AuditLog::open_with(&path, config);
        for i in 0..5 {
            log.record(AuditRecord::now(
                "flood",
                "fs-read",
                format!("{i}"),
                Decision::Deny,
                "r",
            ));
        }
        log.flush();
        let subjects: Vec<String> = own(&lines_of(&path)).into_iter().map(|o| o.1).collect();
        assert_eq!(subjects, ["5 records suppressed"]);
        // The window runs on: still suppressed, said at the end.
        log.record(AuditRecord::now(
            "flood",
            "fs-read",
            "6",
            Decision::Deny,
            "r",
        ));
        drop(log);
        let subjects: Vec<String> = own(&lines_of(&path)).into_iter().map(|o| o.1).collect();
        assert_eq!(subjects, ["5 records suppressed", "1 records suppressed"]);
    }

    #[test]
    fn the_file_rotates_at_its_cap_and_keeps_two_old_files() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("audit.jsonl");
        let config = AuditConfig {
            max_file_bytes: 4096,
            ..AuditConfig::default()
        };
        let log = AuditLog::open_with(&path, config);
        for i in 0..200 {
            log.record(AuditRecord::now(
                "prober",
                "fs-read",
                format!("file-{i:03}"),
                Decision::Deny,
                "not granted",
            ));
            // Batches of one or many: rotation holds either way.
            if i % 50 == 0 {
                log.flush();
            }
        }
        drop(log);
        let file = |suffix: &str| tmp.path().join(format!("audit.jsonl{suffix}"));
        assert!(!file(".3").exists(), "a third old file was kept");
        let mut subjects = Vec::new();
        for suffix in [".2", ".1", ""] {
            let size = std::fs::metadata(file(suffix)).map_or(0, |m| m.len());
            assert!(
                size > 0 && size <= 4096,
                "audit.jsonl{suffix}: {size} bytes"
            );
            subjects.extend(
                lines_of(&file(suffix))
                    .iter()
                    .map(|line| line["subject"].as_str().unwrap_or_default().to_owned()),
            );
        }
        // What is kept is the most recent records, in order, without a gap.
        let last = subjects.last().cloned().unwrap_or_default();
        assert_eq!(last, "file-199");
        let first: usize = subjects[0]["file-".len()..].parse().unwrap_or(0);
        let expected: Vec<String> = (first..200).map(|i| format!("file-{i:03}")).collect();
        assert_eq!(subjects, expected);
    }
}
