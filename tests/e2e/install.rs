//! `zotbox ext install` as an attacker who wrote the extension folder would
//! try it (`THREATS.md` rule 3: what is installed is byte for byte what was
//! shown). Each test runs the real binary, asserts the exact refusal, and
//! that nothing outside the destination changed and nothing was installed.

use std::os::unix::fs::symlink;
use std::path::Path;

use serde_json::{Value, json};

use crate::support::{Lab, ext, installed_names, prober_in, tree, write_json, zotbox_bounded};

/// Adds `"files": files` to the manifest in `source`: what an install
/// copies besides the manifest and the module.
fn declare_files(source: &Path, files: &[&str]) {
    let path = source.join("extension.json");
    let mut manifest: Value =
        serde_json::from_slice(&std::fs::read(&path).expect("manifest")).expect("json");
    manifest["files"] = json!(files);
    write_json(&path, &manifest);
}

/// `zotbox ext install SOURCE --yes` (plus `more`), bounded in time.
fn install(lab: &Lab, source: &Path, more: &[&str]) -> crate::support::Run {
    let source = source.display().to_string();
    let mut args = vec!["ext", "install", source.as_str(), "--yes"];
    args.extend(more);
    zotbox_bounded(lab, &args)
}

/// The exact error line of a refused install of `source`.
fn refused(source: &Path, reason: &str) -> String {
    format!(
        "error: install of `{}` refused: {reason}\n",
        source.display()
    )
}

#[test]
fn a_symlinked_manifest_is_refused_and_the_file_it_points_to_is_untouched() {
    let lab = Lab::new();
    // The user's other extension, which the old install rewrote through the link.
    let other = ext("other").write_in(&lab.user_dir());
    let other_manifest = other.dir.join("extension.json");
    let before = tree(&lab.user_dir());
    // Attack: a wasm folder whose manifest is a link to that manifest.
    let source = prober_in(&lab.dev, &json!({}));
    std::fs::remove_file(source.join("extension.json")).expect("remove manifest");
    symlink(&other_manifest, source.join("extension.json")).expect("symlink");
    let run = install(&lab, &source, &[]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        refused(
            &source,
            &format!(
                "`extension.json` is a symlink (to `{}`); the manifest must be a regular file in \
                 the folder (copy the file it points to)",
                other_manifest.display()
            )
        )
    );
    assert_eq!(tree(&lab.user_dir()), before);
    assert_eq!(installed_names(&lab), ["other"]);
}

#[test]
fn a_link_to_a_file_inside_is_installed_as_that_files_content_and_one_leaving_is_refused() {
    let lab = Lab::new();
    let source = prober_in(&lab.dev, &json!({"read": ["docs/**"]}));
    std::fs::create_dir_all(source.join("docs")).expect("docs");
    std::fs::write(source.join("docs/readme.md"), "read me").expect("readme");
    symlink("docs/readme.md", source.join("README")).expect("symlink");
    declare_files(&source, &["README", "docs"]);
    let run = install(&lab, &source, &[]);
    run.expect_code(0);
    // The consent screen says what the link becomes.
    assert!(
        run.stdout.lines().any(|line| line.starts_with("README")
            && line.ends_with("a copy of `docs/readme.md` (a symlink in the folder)")),
        "{run:#?}"
    );
    let installed = lab.user_dir().join("prober");
    let readme = installed.join("README");
    assert!(
        !std::fs::symlink_metadata(&readme)
            .expect("README")
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&readme).expect("README"), "read me");

    // Attack: a link that leaves the folder, to copy (and show) what it reaches.
    let secret = lab.dev.join("secret.txt");
    std::fs::write(&secret, "secret").expect("secret");
    symlink("../../secret.txt", source.join("docs/leak")).expect("symlink");
    let before = tree(&installed);
    let run = install(&lab, &source, &[]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        refused(
            &source,
            "`docs/leak` is a symlink leading outside the extension's folder (to \
             `../../secret.txt`); an install copies only the folder's own files"
        )
    );
    assert_eq!(tree(&installed), before);
}

#[test]
fn a_wasm_path_leaving_the_folder_is_refused_naming_the_field() {
    let lab = Lab::new();
    let outside = lab.dev.join("outside.wasm");
    let source = prober_in(&lab.dev, &json!({}));
    std::fs::copy(source.join("prober.wasm"), &outside).expect("outside wasm");
    let manifest = source.join("extension.json");
    let absolute = outside.display().to_string();
    let cases = [
        // Attack: code outside the folder, free to change after approval.
        (
            absolute.as_str(),
            format!(
                "field `wasm` `{absolute}` is absolute; name a file inside the extension's \
                 folder, relative to it"
            ),
        ),
        (
            "../outside.wasm",
            "field `wasm` `../outside.wasm` contains `..`; name a file inside the extension's \
             folder"
                .to_owned(),
        ),
    ];
    for (wasm, problem) in cases {
        write_json(&manifest, &json!({"name": "prober", "wasm": wasm}));
        let run = install(&lab, &source, &[]);
        run.expect_code(1);
        assert_eq!(
            run.stderr,
            format!("error: `{}`: {problem}\n", manifest.display())
        );
        assert_eq!(installed_names(&lab), Vec::<String>::new());
        // Every manifest load refuses it, not only the install.
        let ext = source.display().to_string();
        let listed = lab.zotbox(&["--ext", &ext, "--json", "list"]);
        listed.expect_code(1);
        let entry: Value = serde_json::from_str(listed.stdout.lines().next().unwrap_or("{}"))
            .expect("a list line");
        assert_eq!(entry["state"], "invalid", "{}", listed.stdout);
        assert!(listed.stdout.contains(&problem), "{}", listed.stdout);
    }
}

#[test]
fn a_fifo_in_the_folder_is_refused_at_once() {
    let lab = Lab::new();
    let source = prober_in(&lab.dev, &json!({}));
    // Attack: a FIFO that the old install opened, and waited on forever.
    declare_files(&source, &["pipe"]);
    let status = std::process::Command::new("mkfifo")
        .arg(source.join("pipe"))
        .status()
        .expect("run mkfifo");
    assert!(status.success());
    let run = install(&lab, &source, &[]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        refused(
            &source,
            "`pipe` is a FIFO; an extension folder holds only files, folders and links to files \
             inside it"
        )
    );
    assert_eq!(installed_names(&lab), Vec::<String>::new());
}

#[test]
fn a_device_node_in_the_folder_is_refused() {
    let lab = Lab::new();
    let source = prober_in(&lab.dev, &json!({}));
    // Attack: `/dev/zero` under another name, which a copy would read forever.
    declare_files(&source, &["zero"]);
    let made = std::process::Command::new("mknod")
        .arg(source.join("zero"))
        .args(["c", "1", "5"])
        .status();
    if !made.is_ok_and(|status| status.success()) {
        eprintln!("note: skipping: cannot create a device node here (not root, or no CAP_MKNOD)");
        return;
    }
    let run = install(&lab, &source, &[]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        refused(
            &source,
            "`zero` is a device; an extension folder holds only files, folders and links to \
             files inside it"
        )
    );
    assert_eq!(installed_names(&lab), Vec::<String>::new());
}

#[test]
fn a_failed_install_over_an_existing_one_leaves_it_byte_identical() {
    let lab = Lab::new();
    let first = prober_in(&lab.dev.join("v1"), &json!({"read": ["docs/**"]}));
    install(&lab, &first, &[]).expect_code(0);
    let installed = lab.user_dir().join("prober");
    let before = tree(&installed);
    // A new version whose guest does not load, with a wider grant.
    let second = prober_in(&lab.dev.join("v2"), &json!({"read": ["**"]}));
    std::fs::write(second.join("prober.wasm"), "not wasm at all").expect("junk");
    let run = install(&lab, &second, &[]);
    run.expect_code(1);
    assert!(
        run.stderr.starts_with("error: the guest does not load: ")
            && run.stderr.ends_with("; nothing was installed\n"),
        "{run:#?}"
    );
    assert_eq!(tree(&installed), before);
    assert_eq!(installed_names(&lab), ["prober"]);
}

#[test]
fn a_native_manifest_that_starts_zotbox_is_refused() {
    let lab = Lab::new();
    let source = lab.dev.join("loop");
    std::fs::create_dir_all(&source).expect("folder");
    let zotbox = env!("CARGO_BIN_EXE_zotbox");
    let relay = env!("CARGO_BIN_EXE_zotbox-relay");
    // Attack: a native extension that starts `zotbox run` (or the relay) on
    // its own folder, which starts it again, and again.
    for exec in [zotbox, "zotbox", relay, "zotbox-relay"] {
        write_json(
            &source.join("extension.json"),
            &json!({"name": "loop", "exec": exec, "args": ["run"]}),
        );
        let run = install(&lab, &source, &[]);
        run.expect_code(1);
        assert_eq!(
            run.stderr,
            refused(
                &source,
                &format!(
                    "its `exec` `{exec}` is zotbox itself; a native extension that starts zotbox \
                     would start `zotbox run` on its own folder, again and again (a sandboxed \
                     extension names its `wasm` file and gets its launcher from `ext install`)"
                )
            ),
        );
        assert_eq!(installed_names(&lab), Vec::<String>::new());
    }
}

/// Attack: a native manifest whose program lies outside the folder, in a
/// folder another local user can write (`/tmp/tools/run.sh`): nothing of it
/// would be copied or locked, so it could be swapped after the user
/// accepted the install while `ext verify` said `ok`. Refused; a program
/// in the folder, run by a command found on `PATH`, is installed, and the
/// consent screen says what runs, word by word.
#[test]
fn a_native_program_others_can_replace_is_refused_and_what_runs_is_shown() {
    use std::os::unix::fs::PermissionsExt as _;
    let lab = Lab::new();
    let public = lab.dev.join("pub");
    std::fs::create_dir_all(&public).expect("folder");
    std::fs::set_permissions(&public, std::fs::Permissions::from_mode(0o1777)).expect("mode");
    std::fs::write(public.join("run.sh"), "#!/bin/sh\n").expect("script");
    let source = lab.dev.join("nat");
    std::fs::create_dir_all(&source).expect("folder");
    let outside = public.join("run.sh");
    write_json(
        &source.join("extension.json"),
        &json!({"name": "nat", "version": "1.0.0", "exec": outside}),
    );
    let run = install(&lab, &source, &[]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        refused(
            &source,
            &format!(
                "its `exec` `{}` lies outside the extension's folder, and `{}` is writable by \
                 every user: what runs could be replaced after you accept it, and an install \
                 neither copies it nor locks it, so `ext verify` would not see it change; put \
                 the file in the folder, or name a command found on `PATH`",
                outside.display(),
                public.display()
            )
        )
    );
    assert_eq!(installed_names(&lab), Vec::<String>::new());

    // Attack: the same program named by the `#!` line of a script in the
    // folder, as its interpreter, as what `env` or `sh` is handed, or by
    // the `#!` line of an interpreter in the folder.
    write_json(
        &source.join("extension.json"),
        &json!({"name": "nat", "version": "1.0.0", "exec": "./run", "files": ["interp"]}),
    );
    let shown = outside.display().to_string();
    for (run, interp, line) in [
        (format!("#!{shown} -e\n"), None, format!("{shown} -e")),
        (
            format!("#!/usr/bin/env {shown}\n"),
            None,
            format!("/usr/bin/env {shown}"),
        ),
        (
            format!("#!/bin/sh {shown}\n"),
            None,
            format!("/bin/sh {shown}"),
        ),
        (
            "#!./interp\n".to_owned(),
            Some(format!("#!{shown}\n")),
            shown.clone(),
        ),
    ] {
        std::fs::write(source.join("run"), &run).expect("script");
        std::fs::set_permissions(source.join("run"), std::fs::Permissions::from_mode(0o755))
            .expect("mode");
        if let Some(interp) = &interp {
            std::fs::write(source.join("interp"), interp).expect("interpreter");
        }
        let run_install = install(&lab, &source, &[]);
        run_install.expect_code(1);
        assert_eq!(
            run_install.stderr,
            refused(
                &source,
                &format!(
                    "its `exec` `./run` is run by `{line}` (a `#!` line), whose `{shown}` lies \
                     outside the extension's folder, and `{}` is writable by every user: what \
                     runs could be replaced after you accept it, and an install neither copies \
                     it nor locks it, so `ext verify` would not see it change; put the file in \
                     the folder, or name a command found on `PATH`",
                    public.display()
                )
            ),
            "{run}"
        );
        assert_eq!(installed_names(&lab), Vec::<String>::new());
        let _ = std::fs::remove_file(source.join("interp"));
    }
    std::fs::remove_file(source.join("run")).expect("script");

    // Arguments may be data as well as code (`--require=`): shown, with
    // who else could replace them.
    std::fs::write(source.join("run.sh"), "#!/bin/sh\n").expect("script");
    let hook = public.join("hook.js");
    let home_log = "/usr/share/nat/data.json";
    write_json(
        &source.join("extension.json"),
        &json!({"name": "nat", "version": "1.0.0", "exec": "sh",
                "args": ["-e", "run.sh", format!("--require={}", hook.display()), home_log]}),
    );
    let run = install(&lab, &source, &[]);
    run.expect_code(0);
    let expected = format!(
        "runs `sh` (a command found on `PATH` when zot starts it) with the arguments `-e` \
         `run.sh` `--require={hook}` `{log}`, natively, with all your permissions\nits \
         arguments name `{hook}`, where another user could replace it after you accept (`{}` \
         is writable by every user)\nits arguments name `{log}` outside the extension's \
         folder: neither copied nor locked\n",
        public.display(),
        hook = hook.display(),
        log = home_log,
    );
    assert!(run.stdout.contains(&expected), "{}", run.stdout);
    assert_eq!(installed_names(&lab), ["nat"]);

    // A script in the folder says what runs it.
    std::fs::remove_dir_all(lab.user_dir().join("nat")).expect("remove");
    write_json(
        &source.join("extension.json"),
        &json!({"name": "nat", "version": "1.0.0", "exec": "./run.sh"}),
    );
    let run = install(&lab, &source, &[]);
    run.expect_code(0);
    assert!(
        run.stdout.contains(
            "runs `./run.sh` (in the extension's folder, through `/bin/sh` (its `#!` line)), \
             natively, with all your permissions\n"
        ),
        "{}",
        run.stdout
    );
}

/// A policy with `native_extensions: false` refuses a native extension
/// whatever its source (here a folder; a registry entry already was): zot
/// would start it itself, outside zotbox and its policy.
#[test]
fn a_native_extension_is_not_installed_where_the_policy_refuses_them() {
    let lab = Lab::new();
    let policy = crate::attack::user_policy(&lab, &json!({"native_extensions": false}));
    let source = ext("nat").copied().write_in(&lab.dev);
    let run = install(&lab, &source.dir, &[]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        format!(
            "error: `nat` is a native extension, refused by `native_extensions: false` in `{}`; \
             choose a wasm build\n",
            policy.display()
        )
    );
    assert_eq!(installed_names(&lab), Vec::<String>::new());
}

/// Attack: the repository the user is in holds a folder named like the
/// registry entry the user asks for. `ext install notes` is refused as
/// ambiguous rather than installing the repository's folder; `./notes`
/// names the folder.
#[test]
fn a_folder_named_like_a_registry_entry_does_not_stand_in_for_it() {
    let lab = Lab::new();
    ext("notes").copied().write_in(&lab.workspace);
    for text in ["notes", "notes@1.2.0"] {
        if text != "notes" {
            std::fs::rename(lab.workspace.join("notes"), lab.workspace.join(text)).expect("rename");
        }
        let run = zotbox_bounded(&lab, &["ext", "install", text, "--yes"]);
        run.expect_code(1);
        assert_eq!(
            run.stderr,
            format!(
                "error: source `{text}` refused: it is both a folder here and a registry \
                 entry's name; write `./{text}` to install the folder, or run this elsewhere for \
                 the registry's\n"
            )
        );
        assert_eq!(installed_names(&lab), Vec::<String>::new());
    }
    std::fs::rename(
        lab.workspace.join("notes@1.2.0"),
        lab.workspace.join("notes"),
    )
    .expect("back");
    zotbox_bounded(&lab, &["ext", "install", "./notes", "--yes"]).expect_code(0);
    assert_eq!(installed_names(&lab), ["notes"]);
}

#[test]
fn a_project_install_into_a_linked_dot_zot_is_refused() {
    let lab = Lab::new();
    let elsewhere = lab.dev.join("elsewhere");
    std::fs::create_dir_all(elsewhere.join("extensions")).expect("elsewhere");
    // Attack: the repository's `.zot` leads out of the workspace.
    symlink(&elsewhere, lab.workspace.join(".zot")).expect("symlink");
    let source = prober_in(&lab.dev, &json!({}));
    let run = install(&lab, &source, &["--project"]);
    run.expect_code(1);
    assert_eq!(
        run.stderr,
        refused(
            &lab.workspace,
            &format!(
                "`{}` is not a folder (a symlink?); a project install writes only into the \
                 workspace's own `.zot/extensions/` and `.zot/packages/` (remove it, or install \
                 for the user)",
                lab.workspace.join(".zot").display()
            )
        )
    );
    assert_eq!(tree(&elsewhere).len(), 1, "{:?}", tree(&elsewhere));
}

#[test]
fn ext_disable_replaces_a_linked_manifest_instead_of_writing_through_it() {
    let lab = Lab::new();
    let other = ext("other").write_in(&lab.dev);
    let target = other.dir.join("extension.json");
    let before = std::fs::read(&target).expect("manifest");
    // The user's install is a link to a manifest kept elsewhere.
    let installed = lab.user_dir().join("other");
    std::fs::create_dir_all(&installed).expect("folder");
    symlink(&target, installed.join("extension.json")).expect("symlink");
    lab.zotbox(&["ext", "disable", "other"]).expect_code(0);
    assert_eq!(std::fs::read(&target).expect("manifest"), before);
    let written = installed.join("extension.json");
    assert!(
        !std::fs::symlink_metadata(&written)
            .expect("manifest")
            .is_symlink()
    );
    let value: Value =
        serde_json::from_slice(&std::fs::read(&written).expect("manifest")).expect("json");
    assert_eq!(value["enabled"], false);
}

/// Attack: an untrusted clone holds a decoy extension named like one the
/// user installed. `ext disable` and `ext remove` of that name act on the
/// user's install (the one the user means: say, an extension found
/// wanting), not on the repository's folder.
#[test]
fn ext_disable_and_remove_act_on_the_users_install_before_a_workspaces_decoy() {
    let lab = Lab::new();
    let source = ext("nat").copied().write_in(&lab.dev);
    install(&lab, &source.dir, &[]).expect_code(0);
    let installed = lab.user_dir().join("nat");
    let decoy = lab.workspace.join(".zot/extensions/decoy");
    std::fs::create_dir_all(&decoy).expect("decoy");
    std::fs::copy(
        installed.join("extension.json"),
        decoy.join("extension.json"),
    )
    .expect("decoy manifest");
    let decoy_before = std::fs::read(decoy.join("extension.json")).expect("decoy");
    let run = lab.zotbox(&["ext", "disable", "nat"]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        format!(
            "disabled `nat` at {}\n",
            installed.join("extension.json").display()
        )
    );
    let value: Value =
        serde_json::from_slice(&std::fs::read(installed.join("extension.json")).expect("manifest"))
            .expect("json");
    assert_eq!(value["enabled"], false);
    let run = lab.zotbox(&["ext", "remove", "nat"]);
    run.expect_code(0);
    assert_eq!(
        run.stdout,
        format!("removed `nat` at {}\n", installed.display())
    );
    assert!(!installed.exists());
    assert_eq!(
        std::fs::read(decoy.join("extension.json")).expect("decoy"),
        decoy_before
    );
}

/// Attack: the workspace's `.zot/extensions/victim` is a link to a folder
/// of the user's holding an `extension.json` (another project's, say);
/// `ext disable victim` rewrote that manifest, outside the workspace.
#[test]
fn enabling_or_disabling_never_writes_through_a_workspace_link() {
    let lab = Lab::new();
    let elsewhere = lab.dev.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("folder");
    let manifest = json!({"name": "victim", "version": "1.0.0", "exec": "true"});
    write_json(&elsewhere.join("extension.json"), &manifest);
    let before = std::fs::read(elsewhere.join("extension.json")).expect("manifest");
    let extensions = lab.workspace.join(".zot/extensions");
    std::fs::create_dir_all(&extensions).expect("extensions");
    std::os::unix::fs::symlink(&elsewhere, extensions.join("victim")).expect("link");
    for action in ["disable", "enable"] {
        let run = zotbox_bounded(&lab, &["ext", action, "victim"]);
        run.expect_code(1);
        assert_eq!(
            run.stderr,
            format!(
                "error: `{}` is a link to a folder elsewhere, which the workspace chose; zotbox \
                 writes only into the workspace's own `.zot/extensions/`\n",
                extensions.join("victim").display()
            ),
            "{action}"
        );
        assert_eq!(
            std::fs::read(elsewhere.join("extension.json")).expect("manifest"),
            before,
            "{action}"
        );
    }
}
