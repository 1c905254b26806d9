//! What relay and host say to each other: one JSON object per line. The
//! relay's first line carries zot's stdin and stdout as `SCM_RIGHTS`.

use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd as _, OwnedFd, RawFd};
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::runtime::Exit;

/// The longest request line a host reads (the relay's environment rides in it).
pub(crate) const MAX_REQUEST: usize = 1 << 20;

/// Relay (or `zotbox host status|stop`) → host: the first and only line.
/// Each carries the host's token ([`super::Place::new_token`]), which
/// shows the sender can read the host's folder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Request {
    /// Host the extension in `dir`, speaking to zot on the descriptors that
    /// come with this line: zot's stdin and stdout, and the relay's stderr
    /// (zot's log of the extension).
    Open {
        /// The host's token.
        token: String,
        /// The relay's build.
        build: String,
        /// The extension's folder, absolute.
        dir: PathBuf,
        /// The relay's environment (granted variables come from it).
        env: Vec<(String, String)>,
        /// How the relay was started: what, beside `dir`, tells whether
        /// the extension is a workspace's.
        #[serde(default)]
        started: crate::store::trust::Started,
        /// After a restart: zot's `hello_ack`, for the new guest.
        #[serde(default)]
        resume: Option<String>,
        /// The relay's stdout and stderr are the same file (`2>&1`): the
        /// host must not make it non-blocking.
        #[serde(default)]
        shared_stdout: bool,
    },
    /// Say how the host is doing.
    Status {
        /// The host's token.
        token: String,
    },
    /// Accept no one from now on; exit when the instances have ended.
    Stop {
        /// The host's token.
        token: String,
    },
}

impl Request {
    /// The token it carries.
    pub(crate) fn token(&self) -> &str {
        match self {
            Self::Open { token, .. } | Self::Status { token } | Self::Stop { token } => token,
        }
    }
}

/// Host → relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Reply {
    /// The host is of the relay's build and takes the extension.
    Welcome {
        /// The host's process id.
        pid: u32,
    },
    /// The host is of another build: it retired, and a new one is needed.
    Retired {
        /// The host's build.
        build: String,
    },
    /// The extension cannot run (manifest, trust, policy, start).
    Failed {
        /// The error, as `zotbox run --standalone` would print it.
        error: String,
    },
    /// zot's `hello_ack` passed.
    HelloAck {
        /// The line, without its newline.
        line: String,
    },
    /// The requests in flight changed: all of them, `(id, type)`.
    InFlight {
        /// Every request not yet answered.
        requests: Vec<(String, String)>,
    },
    /// zot's stdout now stands inside a line the host is writing (`true`),
    /// or back at a line's end (`false`); see `line_end`.
    Cut {
        /// Inside a line.
        inside: bool,
    },
    /// The extension ended; nothing follows.
    Exit {
        /// How.
        exit: ExitWire,
    },
    /// The host's state.
    Status {
        /// It.
        status: HostStatus,
    },
    /// The host accepts no one now.
    Stopping,
}

/// [`Exit`] on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum ExitWire {
    /// [`Exit::Code`].
    Code {
        /// The status.
        code: i32,
    },
    /// [`Exit::Signal`].
    Signal {
        /// The signal.
        signal: i32,
    },
    /// [`Exit::Trap`].
    Trap {
        /// Why.
        reason: String,
    },
    /// [`Exit::OutOfMemory`].
    OutOfMemory {
        /// The limit.
        limit_mb: u64,
    },
    /// [`Exit::Killed`].
    Killed {
        /// Why.
        why: String,
    },
    /// [`Exit::OverCompute`].
    OverCompute {
        /// The budget, in milliseconds.
        limit_ms: u64,
    },
}

impl From<Exit> for ExitWire {
    fn from(exit: Exit) -> Self {
        match exit {
            Exit::Code(code) => Self::Code { code },
            Exit::Signal(signal) => Self::Signal { signal },
            Exit::Trap(reason) => Self::Trap { reason },
            Exit::OutOfMemory { limit_mb } => Self::OutOfMemory { limit_mb },
            Exit::Killed(why) => Self::Killed { why },
            Exit::OverCompute { limit } => Self::OverCompute {
                limit_ms: u64::try_from(limit.as_millis()).unwrap_or(u64::MAX),
            },
        }
    }
}

impl From<ExitWire> for Exit {
    fn from(exit: ExitWire) -> Self {
        match exit {
            ExitWire::Code { code } => Self::Code(code),
            ExitWire::Signal { signal } => Self::Signal(signal),
            ExitWire::Trap { reason } => Self::Trap(reason),
            ExitWire::OutOfMemory { limit_mb } => Self::OutOfMemory { limit_mb },
            ExitWire::Killed { why } => Self::Killed(why),
            ExitWire::OverCompute { limit_ms } => Self::OverCompute {
                limit: Duration::from_millis(limit_ms),
            },
        }
    }
}

/// What `zotbox host status` and `zotbox doctor` show of a running host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostStatus {
    /// Its process id.
    pub pid: u32,
    /// Its build.
    pub build: String,
    /// Seconds since it started.
    pub uptime_secs: u64,
    /// Whether it has retired (accepts no one; exits when its instances end).
    pub retired: bool,
    /// The extensions it runs.
    pub instances: Vec<InstanceStatus>,
}

/// One extension a host runs for one relay.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceStatus {
    /// The extension's name.
    pub name: String,
    /// Its folder.
    pub dir: PathBuf,
    /// The workspace its zot named, once named.
    pub workspace: Option<PathBuf>,
    /// The relay's process id.
    pub relay_pid: i32,
    /// Seconds since it started.
    pub uptime_secs: u64,
}

/// `value` as one line.
pub(crate) fn line(value: &impl Serialize) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_else(|_| b"{}".to_vec());
    bytes.push(b'\n');
    bytes
}

/// Sends `request` on `socket` with `fds` attached to its first byte.
pub(crate) fn send_request(
    socket: &std::os::unix::net::UnixStream,
    request: &Request,
    fds: &[BorrowedFd<'_>],
) -> std::io::Result<()> {
    use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};
    let bytes = line(request);
    let raw: Vec<RawFd> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    let control = [ControlMessage::ScmRights(&raw)];
    let control: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &control };
    let sent = loop {
        match sendmsg::<()>(
            socket.as_fd().as_raw_fd(),
            &[std::io::IoSlice::new(&bytes)],
            control,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(sent) => break sent,
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    };
    // The descriptors went with the first bytes; the rest is plain.
    let mut rest = socket;
    rest.write_all(&bytes[sent..])
}

/// Reads the request line from `socket` and the descriptors that came with
/// it (at most three, made close-on-exec).
pub(crate) async fn recv_request(
    socket: &tokio::net::UnixStream,
) -> std::io::Result<(Request, Vec<OwnedFd>)> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    let mut buffer = Vec::new();
    let mut fds = Vec::new();
    // A request is a line of a few hundred bytes (more with a large
    // environment): start small, grow while reads fill the chunk.
    let mut chunk = crate::session::reader::ReadChunk::default();
    loop {
        socket.readable().await?;
        let got = socket.try_io(tokio::io::Interest::READABLE, || {
            let mut space = nix::cmsg_space!([RawFd; 3]);
            let mut iov = [std::io::IoSliceMut::new(chunk.room())];
            let message = recvmsg::<()>(
                socket.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_CMSG_CLOEXEC,
            )
            .map_err(std::io::Error::from)?;
            let mut received = Vec::new();
            for cmsg in message.cmsgs().map_err(std::io::Error::from)? {
                if let ControlMessageOwned::ScmRights(raw) = cmsg {
                    received.extend(raw);
                }
            }
            Ok((message.bytes, received))
        });
        let (n, received) = match got {
            Ok(got) => got,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(err) => return Err(err),
        };
        for raw in received {
            // SAFETY: the kernel just installed `raw` in this process for
            // this message; nothing else owns it.
            #[allow(unsafe_code)]
            fds.push(unsafe { OwnedFd::from_raw_fd(raw) });
        }
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buffer.extend_from_slice(chunk.got(n));
        if let Some(end) = buffer.iter().position(|&b| b == b'\n') {
            if end + 1 != buffer.len() {
                return Err(invalid("bytes after the request line"));
            }
            let request = serde_json::from_slice(&buffer[..end])
                .map_err(|err| invalid(&format!("not a request: {err}")))?;
            return Ok((request, fds));
        }
        if buffer.len() > MAX_REQUEST {
            return Err(invalid("a request line over 1 MiB"));
        }
    }
}

fn invalid(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exit_survives_the_wire() {
        let exits = [
            Exit::Code(3),
            Exit::Signal(9),
            Exit::Trap("unreachable".to_owned()),
            Exit::OutOfMemory { limit_mb: 64 },
            Exit::Killed("missed its deadline".to_owned()),
            Exit::OverCompute {
                limit: Duration::from_millis(1500),
            },
        ];
        for exit in exits {
            let wire = serde_json::to_string(&ExitWire::from(exit.clone()))
                .unwrap_or_else(|e| panic!("{e}"));
            let back: ExitWire = serde_json::from_str(&wire).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(Exit::from(back), exit);
        }
    }

    #[tokio::test]
    async fn a_request_arrives_with_its_descriptors() {
        let (relay, host) =
            std::os::unix::net::UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
        let (read, write) = nix::unistd::pipe().unwrap_or_else(|e| panic!("{e}"));
        let request = Request::Open {
            token: "t".to_owned(),
            build: "b".to_owned(),
            dir: PathBuf::from("/x"),
            env: vec![("A".to_owned(), "1".repeat(200_000))],
            started: crate::store::trust::Started::default(),
            resume: None,
            shared_stdout: false,
        };
        let sent = send_request(&relay, &request, &[read.as_fd(), write.as_fd()]);
        assert!(sent.is_ok(), "{sent:?}");
        host.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
        let host = tokio::net::UnixStream::from_std(host).unwrap_or_else(|e| panic!("{e}"));
        let (got, fds) = recv_request(&host).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, request);
        assert_eq!(fds.len(), 2);
        // The received write end feeds the original read end.
        nix::unistd::write(&fds[1], b"x").unwrap_or_else(|e| panic!("{e}"));
        let mut byte = [0u8; 1];
        assert_eq!(nix::unistd::read(&read, &mut byte).ok(), Some(1));
        drop(relay);
    }

    #[tokio::test]
    async fn a_line_that_is_no_request_is_refused() {
        for bytes in [
            &b"{\"op\":\"open\"}\n"[..],
            b"nonsense\n",
            b"{\"op\":\"status\"}\nmore",
        ] {
            let (mut relay, host) =
                std::os::unix::net::UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
            relay.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
            host.set_nonblocking(true).unwrap_or_else(|e| panic!("{e}"));
            let host = tokio::net::UnixStream::from_std(host).unwrap_or_else(|e| panic!("{e}"));
            let got = recv_request(&host).await;
            assert!(
                matches!(&got, Err(e) if e.kind() == std::io::ErrorKind::InvalidData),
                "{:?}: {got:?}",
                String::from_utf8_lossy(bytes)
            );
        }
    }
}
