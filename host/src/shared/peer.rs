//! Who is at the other end of the socket: the same user, and the same build.

use std::os::fd::AsFd;

/// The peer of a socket is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeerError {
    /// Its credentials cannot be read.
    #[error("cannot read the peer's credentials: {0}")]
    Unknown(String),
    /// It runs as another user.
    #[error("the peer runs as uid {peer}, not as uid {own}; refused")]
    OtherUser {
        /// The peer's uid.
        peer: u32,
        /// This process's.
        own: u32,
    },
}

/// The uid and pid of the process at the other end of `socket`
/// (`SO_PEERCRED`: what the kernel recorded at connect, not what it says).
pub(crate) fn credentials(socket: impl AsFd) -> Result<(u32, i32), PeerError> {
    nix::sys::socket::getsockopt(&socket, nix::sys::socket::sockopt::PeerCredentials)
        .map(|cred| (cred.uid(), cred.pid()))
        .map_err(|errno| PeerError::Unknown(errno.to_string()))
}

/// Accepts a peer running as `peer`, this process being `own`.
pub(crate) fn check_uid(peer: u32, own: u32) -> Result<(), PeerError> {
    if peer == own {
        Ok(())
    } else {
        Err(PeerError::OtherUser { peer, own })
    }
}

/// Accepts the peer of `socket` when it runs as this process's user.
pub(crate) fn check(socket: impl AsFd) -> Result<i32, PeerError> {
    let (uid, pid) = credentials(socket)?;
    check_uid(uid, nix::unistd::getuid().as_raw())?;
    Ok(pid)
}

/// This build: the version and the identity of the running executable file
/// (device, inode, size, modification time), so a rebuilt or reinstalled
/// zotbox of the same version is another build.
pub fn build_id() -> String {
    build_id_of(std::path::Path::new("/proc/self/exe"))
}

/// The build of the zotbox executable at `exe`, as [`build_id`] names it.
pub fn build_id_of(exe: &std::path::Path) -> String {
    use std::os::unix::fs::MetadataExt as _;
    let version = env!("CARGO_PKG_VERSION");
    match std::fs::metadata(exe) {
        Ok(meta) => {
            let mut hasher = blake3::Hasher::new();
            for n in [
                meta.dev(),
                meta.ino(),
                meta.size(),
                meta.mtime().cast_unsigned(),
                meta.mtime_nsec().cast_unsigned(),
            ] {
                hasher.update(&n.to_le_bytes());
            }
            format!("{version}+{}", &hasher.finalize().to_hex()[..12])
        }
        Err(_) => version.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_peer_of_the_same_uid_is_accepted() {
        // (peer uid, own uid, accepted)
        let cases = [
            (1000, 1000, true),
            (0, 1000, false),
            (1001, 1000, false),
            (1000, 0, false),
        ];
        for (peer, own, accepted) in cases {
            let got = check_uid(peer, own);
            if accepted {
                assert_eq!(got, Ok(()));
            } else {
                assert_eq!(got, Err(PeerError::OtherUser { peer, own }));
                assert_eq!(
                    got.err().map(|e| e.to_string()),
                    Some(format!(
                        "the peer runs as uid {peer}, not as uid {own}; refused"
                    ))
                );
            }
        }
    }

    #[test]
    fn a_real_socket_pair_reports_this_process() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap_or_else(|e| panic!("{e}"));
        let (uid, pid) = credentials(&a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(uid, nix::unistd::getuid().as_raw());
        assert_eq!(pid.cast_unsigned(), std::process::id());
        assert!(check(&a).is_ok());
    }

    #[test]
    fn the_build_id_is_stable_and_names_the_version() {
        let id = build_id();
        assert_eq!(id, build_id());
        assert!(id.starts_with(env!("CARGO_PKG_VERSION")), "{id}");
    }
}
