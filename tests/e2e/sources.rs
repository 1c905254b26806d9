//! `zotbox ext install SOURCE` from an `https://` archive and from git, and
//! the lockfile's check at every start, as an attacker would try them: a
//! wrong digest, a hostile archive, `http://`, a force-pushed branch, an
//! installed file changed after the install. Each test runs the real
//! binary (and the host), asserts the exact refusal, and that nothing was
//! installed or changed.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};
use zotbox::host::{ExtensionState, RestartPolicy};

use crate::https::TestServer;
use crate::support::{
    Lab, ext, host_over, info, installed_names, prober_in, read_json, write_json, zotbox_bounded,
};

/// The lock entry of the user extension `name`, if any.
fn lock_entry(lab: &Lab, name: &str) -> Option<Value> {
    let path = lab.home.join("zotbox.lock");
    if !path.exists() {
        return None;
    }
    let key = lab.user_dir().join(name).display().to_string();
    read_json(&path)["extensions"].get(&key).cloned()
}

/// `tar czf` of `folder` (as `NAME/…`), built with the `tar` crate.
fn tar_gz(folder: &Path) -> Vec<u8> {
    let name = folder.file_name().expect("a folder name");
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    builder
        .append_dir_all(name, folder)
        .expect("archive the folder");
    builder
        .into_inner()
        .expect("finish the archive")
        .finish()
        .expect("finish the gzip stream")
}

/// A policy trusting the test server's certificate, in the lab's home.
fn trusting(lab: &Lab, server: &TestServer) {
    let ca = server.write_ca(&lab.home);
    write_json(
        &lab.home.join("policy.json"),
        &json!({ "extra_root_certificates": [ca] }),
    );
}

fn sha256(bytes: &[u8]) -> String {
    zotbox::store::source::sha256_hex(bytes)
}

/// The `error:` line of a failed run (a fetch says what it fetches first).
fn error_line(run: &crate::support::Run) -> String {
    run.stderr
        .lines()
        .find(|line| line.starts_with("error:"))
        .map(|line| format!("{line}\n"))
        .unwrap_or_else(|| panic!("no error line: {run:#?}"))
}

fn install(lab: &Lab, source: &str) -> crate::support::Run {
    zotbox_bounded(lab, &["ext", "install", source, "--yes"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_archive_over_https_installs_only_with_the_pinned_digest() {
    let lab = Lab::new();
    let server = TestServer::start().await;
    trusting(&lab, &server);
    let served = lab.dev.join("served");
    std::fs::create_dir_all(&served).unwrap();
    let source = ext("arch").copied().write_in(&lab.dev.join("src"));
    let archive = tar_gz(&source.dir);
    std::fs::write(served.join("arch.tar.gz"), &archive).unwrap();
    server.serve_dir(&served);
    let url = server.url("/files/arch.tar.gz");
    let digest = sha256(&archive);

    // A wrong digest: refused before anything is unpacked or installed.
    let wrong = "0".repeat(64);
    let run = install(&lab, &format!("{url}#sha256={wrong}"));
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        format!(
            "error: archive `{url}` refused: its sha256 is {digest}, not the {wrong} pinned by \
             `#sha256=`; nothing was unpacked\n"
        )
    );
    assert!(installed_names(&lab).is_empty());
    assert_eq!(lock_entry(&lab, "arch"), None);

    // The right digest: installed, and the lock records it.
    let pinned = format!("{url}#sha256={digest}");
    install(&lab, &pinned).expect_code(0);
    assert_eq!(installed_names(&lab), ["arch"]);
    let entry = lock_entry(&lab, "arch").expect("a lock entry");
    assert_eq!(entry["source"], pinned);
    assert_eq!(entry["sha256"], digest);
    assert_eq!(entry["version"], "1.0.0");
    assert!(entry["files"]["ext.py"]["executable"] == true, "{entry}");
    let installed = lab.user_dir().join("arch");
    assert_eq!(
        std::fs::read(installed.join("ext.py")).unwrap(),
        std::fs::read(source.dir.join("ext.py")).unwrap()
    );

    // Without a pin, the digest is recorded all the same.
    install(&lab, &url).expect_code(0);
    assert_eq!(lock_entry(&lab, "arch").unwrap()["sha256"], digest);
    let run = zotbox_bounded(&lab, &["ext", "verify"]);
    run.expect_code(0);
    assert!(run.stdout.contains("arch  ok"), "{}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_archive_or_http_is_refused_and_nothing_is_installed() {
    let lab = Lab::new();
    let server = TestServer::start().await;
    trusting(&lab, &server);
    let served = lab.dev.join("served");
    std::fs::create_dir_all(&served).unwrap();
    // An extension folder plus an entry climbing out, written with a raw
    // header (the `tar` crate's setters refuse `..`).
    let mut tar = Vec::new();
    let mut entry = |name: &str, data: &[u8], kind: tar::EntryType| {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        tar.extend_from_slice(header.as_bytes());
        tar.extend_from_slice(data);
        tar.extend(std::iter::repeat_n(0u8, (512 - data.len() % 512) % 512));
    };
    entry("evil/", b"", tar::EntryType::Directory);
    entry(
        "evil/extension.json",
        br#"{"name":"evil","exec":"true"}"#,
        tar::EntryType::Regular,
    );
    entry("evil/../../../escaped", b"pwned", tar::EntryType::Regular);
    tar.extend(std::iter::repeat_n(0u8, 1024));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&tar).unwrap();
    std::fs::write(served.join("evil.tar.gz"), gz.finish().unwrap()).unwrap();
    server.serve_dir(&served);

    let run = install(&lab, &server.url("/files/evil.tar.gz"));
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        "error: archive refused: entry `evil/../../../escaped` climbs out with `..`; an archive \
         unpacks only inside its own folder\n"
    );
    assert!(installed_names(&lab).is_empty());
    assert_eq!(lock_entry(&lab, "evil"), None);
    // Where `../../../escaped` would have landed from a private folder in
    // the temp dir, or from the lab.
    let lab_root = lab.home.parent().unwrap().to_owned();
    for folder in [Path::new("/"), &std::env::temp_dir(), &lab_root] {
        assert!(!folder.join("escaped").exists(), "{}", folder.display());
    }

    // `http://` never reaches the server.
    let before = server.received().len();
    let http = format!("http://127.0.0.1:{}/files/evil.tar.gz", server.port);
    let run = install(&lab, &http);
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        format!(
            "error: source `{http}` refused: `http://` is not encrypted; only `https://` URLs \
             are fetched\n"
        )
    );
    assert_eq!(server.received().len(), before);
    assert!(installed_names(&lab).is_empty());
}

/// `git` in `dir` with a fixed identity and branch name; its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t.invalid",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A repository holding one extension at its top; returns it and its commit.
fn repository(lab: &Lab) -> (PathBuf, String) {
    let source = ext("gitext").copied().write_in(&lab.dev);
    git(&source.dir, &["init", "-q"]);
    git(&source.dir, &["add", "."]);
    git(&source.dir, &["commit", "-qm", "first"]);
    let commit = git(&source.dir, &["rev-parse", "HEAD"]);
    (source.dir, commit)
}

#[test]
fn a_git_source_records_its_commit_and_a_force_push_is_observable_and_refused() {
    let lab = Lab::new();
    let (repo, first) = repository(&lab);
    let url = format!("git+{}", repo.display());
    let file_url = format!("file://{}", repo.display());

    for source in [
        url.clone(),
        file_url,
        format!("{url}#{first}"),
        format!("{url}#main"),
    ] {
        install(&lab, &source).expect_code(0);
        let entry = lock_entry(&lab, "gitext").expect("a lock entry");
        assert_eq!(entry["commit"], first, "{source}");
        assert_eq!(entry["source"], source);
    }
    // The working tree's `.git` stays behind.
    assert!(!lab.user_dir().join("gitext/.git").exists());

    // Force-push: `main` is rewritten; the locked commit is unreachable.
    std::fs::write(repo.join("README"), "rewritten").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-q", "--amend", "-m", "rewritten"]);
    let second = git(&repo, &["rev-parse", "HEAD"]);
    assert_ne!(first, second);
    // As a server that dropped the old commit after the force-push.
    git(&repo, &["reflog", "expire", "--expire=now", "--all"]);
    git(&repo, &["gc", "-q", "--prune=now"]);
    // Reinstalling pinned by the lock's commit is refused, nothing changed.
    let locked = std::fs::read(lab.home.join("zotbox.lock")).unwrap();
    let run = install(&lab, &format!("{url}#{first}"));
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        format!(
            "error: git source `{}`: `#{first}` names no commit, tag or branch of the \
             repository\n",
            repo.display()
        )
    );
    assert_eq!(std::fs::read(lab.home.join("zotbox.lock")).unwrap(), locked);
    // The branch now resolves to the new commit, and the lock says so.
    install(&lab, &format!("{url}#main")).expect_code(0);
    assert_eq!(lock_entry(&lab, "gitext").unwrap()["commit"], second);
}

/// Attack: the repository names a branch after the commit the user pinned
/// (and a tag after its short hash), pointing at another commit. A full
/// hash is that commit; a short one that is also a branch or tag name is
/// refused as ambiguous.
#[test]
fn a_commit_pin_is_that_commit_whatever_the_repository_names_its_branches() {
    let lab = Lab::new();
    let (repo, good) = repository(&lab);
    std::fs::write(repo.join("README"), "evil").unwrap();
    git(&repo, &["add", "README"]);
    git(&repo, &["commit", "-qm", "evil"]);
    let evil = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["update-ref", &format!("refs/heads/{good}"), &evil]);
    let short = &good[..9];
    git(&repo, &["tag", short, &evil]);
    let url = format!("git+{}", repo.display());
    install(&lab, &format!("{url}#{good}")).expect_code(0);
    assert_eq!(lock_entry(&lab, "gitext").expect("locked")["commit"], good);
    assert!(!lab.user_dir().join("gitext/README").exists());
    let run = install(&lab, &format!("{url}#{short}"));
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        format!(
            "error: git source `{}`: `#{short}` is both a branch or tag of the repository and \
             the start of a commit hash; pin the full commit hash\n",
            repo.display()
        )
    );
    assert_eq!(lock_entry(&lab, "gitext").expect("locked")["commit"], good);
}

/// Commits to `repo` a tree naming the blob of `content` at each of
/// `paths` (written with git's plumbing: no file is checked out here).
fn commit_blob_at(repo: &Path, content: &[u8], paths: impl Iterator<Item = String>) {
    let blob_file = repo.with_extension("blob");
    std::fs::write(&blob_file, content).expect("blob");
    let blob = git(
        repo,
        &["hash-object", "-w", &blob_file.display().to_string()],
    );
    let index: String = paths
        .map(|path| format!("100644 {blob}\t{path}\n"))
        .collect();
    let mut child = Command::new("git")
        .args(["update-index", "--index-info"])
        .current_dir(repo)
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("git update-index");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(index.as_bytes())
        .expect("index info");
    assert!(child.wait().expect("git").success());
    git(repo, &["commit", "-qm", "planted"]);
}

/// Attack: a repository of a few hundred KiB that checks out to any size,
/// one blob named many times (stored once in the pack, written each
/// time); or to more files than an archive may hold. Refused from its
/// tree's listing, before checkout writes a byte of it.
#[test]
fn a_git_tree_past_the_install_caps_is_refused_before_checkout() {
    let lab = Lab::new();
    let (repo, _) = repository(&lab);
    let url = format!("git+{}", repo.display());
    commit_blob_at(
        &repo,
        &vec![b'A'; 11 << 20],
        (0..10).map(|i| format!("copy{i}.bin")),
    );
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let run = install(&lab, &url);
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        format!(
            "error: git source `{}`: commit {commit} holds more than 104857600 bytes of files; \
             nothing was checked out\n",
            repo.display()
        )
    );
    git(&repo, &["rm", "-q", "--cached", "copy*.bin"]);
    commit_blob_at(&repo, b"x", (0..10_001).map(|i| format!("many/{i}")));
    let commit = git(&repo, &["rev-parse", "HEAD"]);
    let run = install(&lab, &url);
    run.expect_code(1);
    assert_eq!(
        error_line(&run),
        format!(
            "error: git source `{}`: commit {commit} holds more than 10000 files; nothing was \
             checked out\n",
            repo.display()
        )
    );
    assert!(installed_names(&lab).is_empty());
}

/// Attack: the repository's `.gitattributes` names a filter the user's
/// own git config defines (as git-lfs's is), to have it run at checkout.
/// The checkout reads attributes from the empty tree: no filter runs.
#[test]
fn a_filter_the_repository_names_does_not_run_at_checkout() {
    let lab = Lab::new();
    let (repo, _) = repository(&lab);
    std::fs::write(repo.join(".gitattributes"), "*.txt filter=smudger\n").unwrap();
    std::fs::write(repo.join("notes.txt"), "as committed\n").unwrap();
    git(&repo, &["add", ".gitattributes", "notes.txt"]);
    git(&repo, &["commit", "-qm", "attributes"]);
    let ran = lab.dev.join("filter-ran");
    let config = lab.dev.join("user.gitconfig");
    std::fs::write(
        &config,
        format!(
            "[filter \"smudger\"]\n\tsmudge = \"touch '{}'; cat\"\n",
            ran.display()
        ),
    )
    .unwrap();
    // Control: the user's git runs it at a checkout of its own.
    let own = lab.dev.join("own-clone");
    let out = Command::new("git")
        .args(["clone", "-q"])
        .arg(&repo)
        .arg(&own)
        .env("GIT_CONFIG_GLOBAL", &config)
        .output()
        .expect("git clone");
    assert!(out.status.success() && ran.exists(), "{out:?}");
    std::fs::remove_file(&ran).unwrap();
    let run = lab.zotbox_env(
        &[
            "ext",
            "install",
            &format!("git+{}", repo.display()),
            "--yes",
        ],
        &[("GIT_CONFIG_GLOBAL", config.as_os_str())],
    );
    run.expect_code(0);
    assert!(!ran.exists(), "the filter ran: {run:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_lock_pin_refuses_the_force_pushed_commit_at_start() {
    let lab = Lab::new();
    let (repo, first) = repository(&lab);
    git(&repo, &["commit", "-q", "--amend", "-m", "force-pushed"]);
    let second = git(&repo, &["rev-parse", "HEAD"]);
    install(&lab, &format!("git+{}#main", repo.display())).expect_code(0);
    // The team pinned the first commit.
    std::fs::create_dir_all(lab.workspace.join(".zot")).unwrap();
    write_json(
        &lab.workspace.join(".zot/zotbox.lock"),
        &json!({ "extensions": { "gitext": { "commit": first } } }),
    );
    // Untrusted: the project lock is not read, and the extension starts.
    let host = host_over(&lab, &[], RestartPolicy::never()).await;
    assert_eq!(info(&host, "gitext").state, ExtensionState::Ready);
    host.shutdown().await;
    lab.trust_workspace();
    let host = host_over(&lab, &[], RestartPolicy::never()).await;
    let entry = info(&host, "gitext");
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(
        entry.reason.as_deref(),
        Some(
            format!(
                "extension `gitext` refused by the project lock `{}`: it was installed from \
                 commit `{second}`, not the pinned `{first}`; install the version it pins, or \
                 change the project lock",
                lab.workspace.join(".zot/zotbox.lock").display()
            )
            .as_str()
        )
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_installed_extension_is_refused_at_every_start_and_by_verify() {
    let lab = Lab::new();
    let source = prober_in(&lab.dev, &json!({}));
    install(&lab, &source.display().to_string()).expect_code(0);
    let installed = lab.user_dir().join("prober");
    let native = ext("native").copied().write_in(&lab.dev);
    install(&lab, &native.dir.display().to_string()).expect_code(0);
    let verify = zotbox_bounded(&lab, &["ext", "verify"]);
    verify.expect_code(0);

    // One byte appended to the installed component.
    let mut wasm = std::fs::OpenOptions::new()
        .append(true)
        .open(installed.join("prober.wasm"))
        .unwrap();
    wasm.write_all(b"\0").unwrap();
    drop(wasm);
    let refusal = "extension `prober` changed since it was installed (`prober.wasm` differs from \
                   the lock); reinstall it or run `zotbox ext verify`";

    // `zotbox run`, as zot starts it.
    let dir = installed.display().to_string();
    let run = zotbox_bounded(&lab, &["run", "--standalone", &dir]);
    run.expect_code(1);
    assert!(run.stderr.contains(refusal), "{}", run.stderr);

    // The host.
    let host = host_over(&lab, &[], RestartPolicy::never()).await;
    let entry = info(&host, "prober");
    assert_eq!(entry.state, ExtensionState::Failed);
    assert_eq!(entry.reason.as_deref(), Some(refusal));
    assert_eq!(info(&host, "native").state, ExtensionState::Ready);
    host.shutdown().await;

    // The installed manifest, too.
    let manifest = lab.user_dir().join("native/extension.json");
    let mut text = std::fs::read_to_string(&manifest).unwrap();
    text.push(' ');
    std::fs::write(&manifest, text).unwrap();

    let verify = zotbox_bounded(&lab, &["ext", "verify", "--json"]);
    verify.expect_code(1);
    let lines: Vec<Value> = verify
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({"name": "native", "path": lab.user_dir().join("native"), "status": "changed", "file": "extension.json"}),
            json!({"name": "prober", "path": installed, "status": "changed", "file": "prober.wasm"}),
        ]
    );
    // Removing drops the lock entry.
    zotbox_bounded(&lab, &["ext", "remove", "prober"]).expect_code(0);
    assert_eq!(lock_entry(&lab, "prober"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_rechecks_every_redirect_and_stops_at_its_caps() {
    use zotbox::capability::http::HttpConfig;
    use zotbox::store::fetch::{Limits, download};
    let server = TestServer::start().await;
    let trusted = HttpConfig {
        extra_roots: vec![server.ca_pem.clone().into_bytes()],
        ..HttpConfig::default()
    };
    let port = server.port;
    let limits = Limits::default();
    let err = |result: Result<Vec<u8>, zotbox::store::fetch::FetchError>| {
        result.expect_err("refused").to_string()
    };
    // Control: a same-origin redirect is followed.
    assert_eq!(
        download(&server.url("/redirect-ok"), &limits, &trusted)
            .await
            .unwrap(),
        b"hello"
    );
    let cases = [
        (
            server.url("/redirect-http"),
            limits.clone(),
            format!(
                "download of `{0}` refused: only https URLs are allowed; a redirect may not \
                 downgrade https to http (redirected from `{0}`)",
                server.url("/redirect-http")
            ),
        ),
        (
            server.url("/redirect-other"),
            limits.clone(),
            format!(
                "download of `{0}` refused: host `localhost` is not granted (granted: \
                 127.0.0.1:{port}) (redirected from `{0}`)",
                server.url("/redirect-other")
            ),
        ),
        (
            server.url("/big"),
            Limits {
                max_bytes: 1024,
                ..Limits::default()
            },
            format!(
                "download of `{}` stopped: it is larger than 1024 bytes",
                server.url("/big")
            ),
        ),
        (
            server.url("/files/none.tar.gz"),
            limits.clone(),
            format!(
                "download of `{}` failed: the server answered 404",
                server.url("/files/none.tar.gz")
            ),
        ),
    ];
    for (url, limits, expected) in cases {
        assert_eq!(
            err(download(&url, &limits, &trusted).await),
            expected,
            "{url}"
        );
    }
    // Without the policy's extra root, the certificate is not trusted.
    let untrusted = err(download(&server.url("/ok"), &limits, &HttpConfig::default()).await);
    assert!(untrusted.starts_with(&format!("download of `{}` failed: ", server.url("/ok"))));
}

#[test]
fn a_git_source_cannot_become_a_command_or_an_option() {
    let lab = Lab::new();
    let marker = lab.dev.join("ran");
    let touch = format!("touch% {}", marker.display());
    let cases = [
        (
            format!("git+ext::sh -c {touch}"),
            "a git URL must be `https://…`, `file://…` or a local path (no `http://`, `ssh`, \
             `git://` or `ext::`)",
        ),
        (
            format!("ext::sh -c {touch}"),
            "only `https://` and `file://` URLs and local folders are fetched (no `ssh`, \
             `git://` or `ext::` transports)",
        ),
        (
            format!("--upload-pack=touch {}", marker.display()),
            "it starts with `-`; a source is never an option (write `./` before a folder)",
        ),
        (
            format!("git+/srv/x#--upload-pack=touch {}", marker.display()),
            "is not a commit, tag or branch name",
        ),
    ];
    for (source, reason) in cases {
        let run = zotbox_bounded(&lab, &["ext", "install", "--yes", "--", &source]);
        run.expect_code(1);
        let line = error_line(&run);
        assert!(
            line.starts_with(&format!("error: source `{source}` refused: "))
                && line.contains(reason),
            "{source}: {line}"
        );
        assert!(!marker.exists(), "{source} ran a command");
        assert!(installed_names(&lab).is_empty());
    }
}
