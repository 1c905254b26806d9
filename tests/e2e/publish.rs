//! Publishing through the real binary: `keygen`, `ext pack`, `ext sign`
//! and `registry index`, checked with the library's own verifier.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;
use zotbox::policy::PublisherRules;
use zotbox::store::registry::{self, RegistryError};
use zotbox::store::signature::PublicKey;

use crate::guests::{Form, guests};
use crate::support::Lab;

/// The `hello` example as its author has it: its own manifest (with a
/// `version`) and its built component.
fn hello_example(parent: &Path) -> PathBuf {
    let dir = parent.join("hello");
    std::fs::create_dir_all(&dir).unwrap();
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    std::fs::copy(examples.join("extension.json"), dir.join("extension.json")).unwrap();
    std::fs::copy(
        guests().artifact("hello", Form::Wasm),
        dir.join("hello.wasm"),
    )
    .unwrap();
    // Not part of the extension: never packed.
    std::fs::write(dir.join("NOTES.txt"), "private notes").unwrap();
    dir
}

fn json(run: &crate::support::Run) -> Value {
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {run:#?}"))
}

fn keygen(lab: &Lab, path: &Path) -> PublicKey {
    let run = lab.zotbox(&["--json", "keygen", "--out", path.to_str().unwrap()]);
    run.expect_code(0);
    let out = json(&run);
    let key = PublicKey::parse(out["public_key"].as_str().unwrap()).unwrap();
    assert_eq!(out["key_id"], key.id().to_string());
    key
}

/// `zotbox ext sign ARCHIVE --key KEY`.
fn sign(lab: &Lab, archive: &Path, key: &Path) -> crate::support::Run {
    lab.zotbox(&[
        "ext",
        "sign",
        archive.to_str().unwrap(),
        "--key",
        key.to_str().unwrap(),
    ])
}

/// The README's publishing commands as written, run where only the
/// extension's folder exists: `--out keys/…` and `--out site/` make the
/// folders they name (a trailing `/` says "a folder" before it exists).
#[test]
fn the_readmes_publishing_commands_make_the_folders_they_name() {
    let lab = Lab::new();
    hello_example(&lab.workspace);
    let steps: [&[&str]; 5] = [
        &["keygen", "--out", "keys/"],
        &["keygen", "--out", "keys/registry.key"],
        &["ext", "pack", "./hello", "--out", "site/"],
        &[
            "ext",
            "sign",
            "site/hello-1.0.0.tar.gz",
            "--key",
            "keys/zotbox.key",
        ],
        &[
            "registry",
            "index",
            "site/",
            "--key",
            "keys/registry.key",
            "--url",
            "https://ext.corp.example/index.json",
        ],
    ];
    for step in steps {
        let run = lab.zotbox(step);
        assert_eq!(run.code, Some(0), "zotbox {}: {run:#?}", step.join(" "));
    }
    for made in [
        "keys/zotbox.key",
        "keys/zotbox.pub",
        "keys/registry.pub",
        "site/hello-1.0.0.tar.gz",
        "site/hello-1.0.0.tar.gz.minisig",
        "site/index.json",
        "site/index.json.minisig",
    ] {
        assert!(lab.workspace.join(made).is_file(), "{made} is missing");
    }
    // Without the slash a missing path is the archive's own name, as before.
    let run = lab.zotbox(&["ext", "pack", "./hello", "--out", "plain"]);
    run.expect_code(0);
    assert!(lab.workspace.join("plain").is_file(), "{run:#?}");
}

#[test]
fn a_packed_signed_and_indexed_extension_verifies_with_the_library() {
    let lab = Lab::new();
    let keys = lab.dev.join("keys");
    let publisher_key = keys.join("publisher.key");
    let registry_key = keys.join("registry.key");
    let publisher = keygen(&lab, &publisher_key);
    let registry_public = keygen(&lab, &registry_key);
    // A second keygen at the same path refuses and leaves the key alone.
    let secret_before = std::fs::read(&publisher_key).unwrap();
    let run = lab.zotbox(&["keygen", "--out", publisher_key.to_str().unwrap()]);
    run.expect_code(1);
    assert!(
        run.stderr.contains(&format!(
            "key file `{}` already exists; a key is never overwritten",
            publisher_key.display()
        )),
        "{run:#?}"
    );
    assert_eq!(std::fs::read(&publisher_key).unwrap(), secret_before);

    let source = hello_example(&lab.dev);
    let site = lab.dev.join("site");
    std::fs::create_dir_all(&site).unwrap();
    let archive = site.join("hello-1.0.0.tar.gz");
    let run = lab.zotbox(&[
        "--json",
        "ext",
        "pack",
        source.to_str().unwrap(),
        "--out",
        archive.to_str().unwrap(),
    ]);
    run.expect_code(0);
    let packed = json(&run);
    assert_eq!(packed["name"], "hello");
    assert_eq!(packed["version"], "1.0.0");
    let bytes = std::fs::read(&archive).unwrap();
    assert_eq!(packed["sha256"], zotbox::store::pack::sha256_hex(&bytes));
    // Packing again gives the same bytes.
    let again = lab.dev.join("again.tar.gz");
    lab.zotbox(&[
        "ext",
        "pack",
        source.to_str().unwrap(),
        "--out",
        again.to_str().unwrap(),
    ])
    .expect_code(0);
    assert_eq!(std::fs::read(&again).unwrap(), bytes);

    sign(&lab, &archive, &publisher_key).expect_code(0);
    assert!(site.join("hello-1.0.0.tar.gz.minisig").is_file());

    let index_run = |lab: &Lab| {
        let run = lab.zotbox(&[
            "--json",
            "registry",
            "index",
            site.to_str().unwrap(),
            "--key",
            registry_key.to_str().unwrap(),
        ]);
        run.expect_code(0);
        json(&run)
    };
    let first = index_run(&lab);
    let first_text = std::fs::read(site.join("index.json")).unwrap();
    let first_signature = std::fs::read_to_string(site.join("index.json.minisig")).unwrap();
    let now = SystemTime::now();
    let index = registry::verify_index(
        &first_text,
        &first_signature,
        std::slice::from_ref(&registry_public),
        now,
        None,
    )
    .unwrap();
    assert_eq!(Some(index.version), first["version"].as_u64());
    let entry = index.find("hello", None).unwrap();
    assert_eq!(entry.kind, registry::Kind::Wasm);
    assert_eq!(entry.archive, "hello-1.0.0.tar.gz");
    assert_eq!(entry.key, Some(publisher.id()));
    let rules = PublisherRules {
        trusted: vec![publisher.to_base64()],
        listed: vec![publisher.to_base64()],
        ..PublisherRules::default()
    };
    let verified = registry::check_entry(entry, &bytes, &rules).unwrap();
    assert_eq!(verified.key, Some(publisher.id()));
    let manifest = registry::check_archive_manifest(entry, &bytes).unwrap();
    assert_eq!(manifest.name(), "hello");
    // Attack: one byte of the hosted archive changed.
    let mut tampered = bytes.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(matches!(
        registry::check_entry(entry, &tampered, &rules),
        Err(RegistryError::DigestMismatch { .. })
    ));

    // A rebuild is a newer index; the first one, replayed, is refused.
    let second = index_run(&lab);
    let (first_version, second_version) = (
        first["version"].as_u64().unwrap(),
        second["version"].as_u64().unwrap(),
    );
    assert_eq!(second_version, first_version + 1);
    let second_text = std::fs::read(site.join("index.json")).unwrap();
    let second_signature = std::fs::read_to_string(site.join("index.json.minisig")).unwrap();
    let keys = std::slice::from_ref(&registry_public);
    registry::verify_index(
        &second_text,
        &second_signature,
        keys,
        now,
        Some(first_version),
    )
    .unwrap();
    let err = registry::verify_index(
        &first_text,
        &first_signature,
        keys,
        now,
        Some(second_version),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "the registry index is version {first_version}, older than version {second_version} \
             seen before; an older index replayed is refused (a stale mirror, or an attempt to \
             bring back a revoked entry)"
        )
    );
    // Signed by the publisher's key instead of the registry's: refused.
    assert!(matches!(
        registry::verify_index(&second_text, &second_signature, &[publisher], now, None),
        Err(RegistryError::UnknownKey { key, .. }) if key == registry_public.id()
    ));
}

/// `ext sign` reads the archive it is given as the registry does: a FIFO
/// (which a plain open would block on for good) or a file over the install
/// cap is refused with a reason, not read.
#[test]
fn signing_refuses_what_is_no_archive_without_reading_it() {
    let lab = Lab::new();
    let key = lab.dev.join("publisher.key");
    keygen(&lab, &key);
    let fifo = lab.dev.join("pipe.tar.gz");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let huge = lab.dev.join("huge.tar.gz");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(zotbox::store::install::MAX_INSTALL_BYTES + 1)
        .unwrap();
    for (archive, problem) in [
        (
            &fifo,
            "is not a regular file (a link, a FIFO or a device?)".to_owned(),
        ),
        (
            &huge,
            format!(
                "is larger than {} bytes",
                zotbox::store::install::MAX_INSTALL_BYTES
            ),
        ),
    ] {
        let run = sign(&lab, archive, &key);
        run.expect_code(1);
        assert_eq!(
            run.stderr,
            format!(
                "error: archive `{}` refused: {problem}\n",
                archive.display()
            ),
            "{run:#?}"
        );
        assert!(!PathBuf::from(format!("{}.minisig", archive.display())).exists());
    }
}
