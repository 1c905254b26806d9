//! Discovery, precedence, name ownership, parallel start, reload, and what
//! `list` says about extensions that could not load.

use std::time::{Duration, Instant};

use serde_json::json;
use zotbox::host::ExtensionState;

use crate::support::{Lab, eventually, ext, info, process_alive, tool_names, write_json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_extension_given_owns_a_shared_name() {
    let lab = Lab::new();
    let shared = ["--tool", "shared", "--command", "shared"];
    let one = ext("one").flags(&shared).write_in(&lab.dev);
    let two = ext("two").flags(&shared).write_in(&lab.dev);

    for (order, winner, loser) in [([&one, &two], "one", "two"), ([&two, &one], "two", "one")] {
        let host = lab
            .builder()
            .extension(&order[0].dir)
            .extension(&order[1].dir)
            .build()
            .await
            .expect("build");
        let tools = host.tools();
        assert_eq!(tools.len(), 1, "{tools:?}");
        assert_eq!(
            (tools[0].name.as_str(), tools[0].extension.as_str()),
            ("shared", winner)
        );
        let commands = host.commands();
        assert_eq!(commands.len(), 1, "{commands:?}");
        assert_eq!(commands[0].extension, winner);
        let result = host.call_tool("shared", json!({})).await.expect("call");
        assert_eq!(result.text(), format!("{winner} got {{}}"));

        let won = info(&host, winner);
        assert_eq!(won.tools, ["shared"]);
        assert!(won.shadowed.is_empty(), "{:?}", won.shadowed);
        let lost = info(&host, loser);
        assert_eq!(lost.state, ExtensionState::Ready);
        assert!(lost.tools.is_empty(), "{:?}", lost.tools);
        assert!(lost.commands.is_empty(), "{:?}", lost.commands);
        assert_eq!(
            lost.shadowed,
            [
                format!("command `shared` (owned by `{winner}`)"),
                format!("tool `shared` (owned by `{winner}`)"),
            ]
        );
        host.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_project_extension_shadows_a_user_one_of_the_same_name() {
    let lab = Lab::new();
    let project = ext("same")
        .flags(&["--tool", "from_project"])
        .write_in(&lab.project_dir());
    let user = ext("same")
        .flags(&["--tool", "from_user"])
        .write_in(&lab.user_dir());
    lab.trust_workspace();
    let host = lab.builder().build().await.expect("build");
    assert_eq!(tool_names(&host), ["from_project"]);
    let entries: Vec<_> = host
        .list()
        .into_iter()
        .filter(|i| i.name == "same")
        .collect();
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert_eq!(
        (entries[0].origin, entries[0].state),
        ("project", ExtensionState::Ready)
    );
    assert_eq!(
        (entries[1].origin, entries[1].state),
        ("user", ExtensionState::Shadowed)
    );
    assert_eq!(entries[1].path, user.dir.join("extension.json"));
    assert_eq!(
        entries[1].reason,
        Some(format!(
            "shadowed by `{}`",
            project.dir.join("extension.json").display()
        ))
    );
    // The shadowed one never ran.
    assert!(user.recorded().is_empty());
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extensions_start_in_parallel() {
    let lab = Lab::new();
    let exts: Vec<_> = (0..10)
        .map(|i| {
            ext(&format!("p{i}"))
                .direct()
                .flags(&["--hello-delay", "0.5"])
                .write_in(&lab.dev)
        })
        .collect();
    let mut builder = lab.builder();
    for e in &exts {
        builder = builder.extension(&e.dir);
    }
    let started = Instant::now();
    let host = builder.build().await.expect("build");
    let took = started.elapsed();
    // One after another would take at least 10 × 0.5 s.
    assert!(took < Duration::from_secs(3), "build took {took:?}");
    let list = host.list();
    assert_eq!(list.len(), 10);
    for entry in &list {
        assert_eq!(entry.state, ExtensionState::Ready, "{entry:#?}");
    }
    assert_eq!(host.tools().len(), 10);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_picks_up_changes_and_keeps_explicit_paths() {
    let lab = Lab::new();
    let morph = ext("morph").flags(&["--tool", "before"]).write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&morph.dir)
        .build()
        .await
        .expect("build");
    assert_eq!(tool_names(&host), ["before"]);
    let old_pid = morph.pid();

    morph.edit_manifest(|manifest| {
        for arg in manifest["args"].as_array_mut().into_iter().flatten() {
            if arg == "before" {
                *arg = json!("after");
            }
        }
    });
    // A project extension that appeared meanwhile is discovered too.
    let newcomer = ext("newcomer").write_in(&lab.project_dir());
    lab.trust_workspace();
    host.reload().await;

    assert_eq!(tool_names(&host), ["after", "newcomer_tool"]);
    let result = host.call_tool("after", json!({})).await.expect("call");
    assert_eq!(result.text(), "morph got {}");
    let err = host
        .call_tool("before", json!({}))
        .await
        .expect_err("the old tool is gone");
    assert_eq!(
        err.to_string(),
        "no tool `before` (known: after, newcomer_tool)"
    );
    let entry = info(&host, "morph");
    assert_eq!(
        (entry.origin, entry.state),
        ("explicit", ExtensionState::Ready)
    );
    assert_eq!(info(&host, "newcomer").origin, "project");
    assert_eq!(newcomer.recorded_of("_started").len(), 1);
    assert_ne!(morph.pid(), old_pid);
    eventually("the old process to be gone", || {
        (!process_alive(old_pid)).then_some(())
    })
    .await
    .unwrap_or_else(|| panic!("pid {old_pid} still running"));
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_a_bad_schema_is_refused_with_a_warning() {
    let lab = Lab::new();
    let bad = ext("bad").flags(&["--bad-schema"]).write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&bad.dir)
        .build()
        .await
        .expect("build");
    assert_eq!(tool_names(&host), ["bad_tool"]);
    let entry = info(&host, "bad");
    assert_eq!(entry.state, ExtensionState::Ready);
    assert_eq!(entry.tools, ["bad_tool"]);
    assert_eq!(entry.warnings.len(), 1, "{:?}", entry.warnings);
    assert!(
        entry.warnings[0].starts_with("tool `bad_bad` refused: the schema string is not JSON"),
        "{:?}",
        entry.warnings
    );
    let err = host
        .call_tool("bad_bad", json!({}))
        .await
        .expect_err("refused");
    assert_eq!(err.to_string(), "no tool `bad_bad` (known: bad_tool)");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_and_disabled_manifests_are_listed_and_the_rest_load() {
    let lab = Lab::new();
    let broken = lab.project_dir().join("x");
    std::fs::create_dir_all(&broken).expect("folder");
    std::fs::write(broken.join("extension.json"), r#"{"name": "x", "exec": "#).expect("write");
    let no_exec = lab.project_dir().join("y");
    std::fs::create_dir_all(&no_exec).expect("folder");
    write_json(&no_exec.join("extension.json"), &json!({"name": "y"}));
    let fine = ext("fine").write_in(&lab.project_dir());
    fine.edit_manifest(|m| m["colour"] = json!("blue"));
    let sleeper = ext("sleeper").disabled().write_in(&lab.user_dir());
    let homely = ext("homely").write_in(&lab.user_dir());

    lab.trust_workspace();
    let host = lab.builder().build().await.expect("build");

    let x = info(&host, "x");
    assert_eq!((x.state, x.origin), (ExtensionState::Invalid, "project"));
    assert_eq!(x.path, broken.join("extension.json"));
    let reason = x.reason.unwrap_or_default();
    assert!(
        reason.starts_with(&format!("`{}`: ", broken.join("extension.json").display())),
        "{reason}"
    );
    assert!(reason.contains("EOF while parsing"), "{reason}");
    let y = info(&host, "y");
    assert_eq!(y.state, ExtensionState::Invalid);
    assert!(
        y.reason.as_deref().unwrap_or_default().ends_with(
            "field `exec` is missing; a manifest needs `exec` (a native extension), `wasm` (a \
                 sandboxed one) or `\"kind\": \"data\"` (a data package)"
        ),
        "{y:#?}"
    );

    let fine_info = info(&host, "fine");
    assert_eq!(fine_info.state, ExtensionState::Ready);
    assert_eq!(fine_info.warnings, ["unknown key `colour` ignored"]);
    assert_eq!(info(&host, "homely").state, ExtensionState::Ready);
    assert_eq!(homely.recorded_of("_started").len(), 1);

    let sleeping = info(&host, "sleeper");
    assert_eq!(
        (sleeping.state, sleeping.origin),
        (ExtensionState::Disabled, "user")
    );
    assert!(sleeping.tools.is_empty());
    // build() waits for every start: a disabled extension was never run.
    assert!(sleeper.recorded().is_empty(), "{:?}", sleeper.recorded());
    assert_eq!(tool_names(&host), ["fine_tool", "homely_tool"]);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_manifest_error_names_no_phantom_field() {
    let lab = Lab::new();
    let cut = lab.project_dir().join("cut");
    std::fs::create_dir_all(&cut).expect("folder");
    std::fs::write(cut.join("extension.json"), "{").expect("write");
    let host = lab.builder().build().await.expect("build");
    let entry = info(&host, "cut");
    assert_eq!(entry.state, ExtensionState::Invalid);
    assert_eq!(
        entry.reason,
        Some(format!(
            "`{}`: EOF while parsing an object at line 1 column 1",
            cut.join("extension.json").display()
        ))
    );
    host.shutdown().await;
}
