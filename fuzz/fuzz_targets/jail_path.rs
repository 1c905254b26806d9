//! Workspace path resolution: whatever relative path a guest sends, a read
//! through the jail never returns a file outside the workspace root.
//!
//! The fixture is a workspace holding files, folders and symlinks (inside,
//! outside, to `/`, to `/proc/self/root`, a loop) next to a sibling folder
//! whose files carry a marker; any read that returns the marker escaped.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use zotbox::capability::fs::{FsGrant, FsLimits, Jail};

const MARKER: &[u8] = b"OUTSIDE-THE-WORKSPACE";

struct Fixture {
    jail: Jail,
    grant: FsGrant,
    _root: PathBuf,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let base = std::env::temp_dir().join(format!("zotbox-fuzz-jail-{}", std::process::id()));
        let root = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(root.join("docs/deep")).expect("fixture");
        std::fs::create_dir_all(&outside).expect("fixture");
        std::fs::write(outside.join("secret"), MARKER).expect("fixture");
        std::fs::write(root.join("docs/a.md"), b"inside").expect("fixture");
        std::fs::write(root.join("docs/deep/b.md"), b"inside").expect("fixture");
        let links: [(&str, PathBuf); 6] = [
            ("docs/out", outside.clone()),
            ("docs/secret", outside.join("secret")),
            ("root", PathBuf::from("/")),
            ("proc", PathBuf::from("/proc/self/root")),
            ("docs/up", PathBuf::from("../../outside")),
            ("loop", PathBuf::from("loop")),
        ];
        for (link, target) in links {
            let _ = std::os::unix::fs::symlink(target, root.join(link));
        }
        let _ = std::os::unix::fs::symlink("docs/a.md", root.join("inner"));
        Fixture {
            jail: Jail::open(&root).expect("fixture"),
            grant: FsGrant::new(&["**".to_owned()], &[]).expect("grant"),
            _root: root,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let fixture = fixture();
    if let Ok(bytes) = fixture.jail.read(&fixture.grant, &FsLimits::default(), path) {
        assert_ne!(bytes, MARKER, "`{path}` read a file outside the workspace");
    }
    let _ = fixture.jail.stat(&fixture.grant, path);
    if let Ok(entries) = fixture.jail.list(&fixture.grant, path) {
        // Only the outside folder holds exactly one entry, `secret`.
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        assert_ne!(names, ["secret"], "`{path}` listed a folder outside the workspace");
    }
});
