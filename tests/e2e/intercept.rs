//! The intercept chain: ordering, first block wins, rewrites chain, and what a
//! missed deadline means.

use std::time::{Duration, Instant};

use serde_json::json;
use zotbox::{FailMode, Verdict};

use crate::support::{Lab, ext};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_interceptor_fails_open_by_default() {
    let lab = Lab::new();
    let slow = ext("slow")
        .flags(&["--intercept", "block", "--slow-intercept", "3"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .intercept_timeout(Duration::from_millis(300))
        .extension(&slow.dir)
        .build()
        .await
        .expect("build");

    let started = Instant::now();
    let decision = host
        .intercept_tool_call("bash", json!({"command": "rm -rf /"}))
        .await;
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(decision.decided_by.is_empty());
    // Decided at the deadline, not when the (blocking) answer came.
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // A real call goes through too.
    let result = host
        .call_tool("slow_tool", json!({}))
        .await
        .expect("allowed after the deadline");
    assert_eq!(result.text(), "slow got {}");
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_interceptor_blocks_when_failing_closed() {
    let lab = Lab::new();
    let slow = ext("slow")
        .flags(&["--intercept", "allow", "--slow-intercept", "3"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .intercept_timeout(Duration::from_millis(300))
        .intercept_failure(FailMode::Closed)
        .extension(&slow.dir)
        .build()
        .await
        .expect("build");
    let decision = host
        .intercept_tool_call("bash", json!({"command": "ls"}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Block {
            reason: "extension `slow` 1.0.0: intercept of `tool_call` timed out after 300ms; \
                     blocking (intercepts fail closed)"
                .into()
        }
    );
    assert_eq!(decision.decided_by, ["slow"]);
    let err = host
        .call_tool("slow_tool", json!({}))
        .await
        .expect_err("blocked");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(
        err.to_string()
            .starts_with("tool `slow_tool` blocked by slow: "),
        "{err}"
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_block_wins_and_later_interceptors_are_not_asked() {
    let lab = Lab::new();
    let first = ext("first")
        .flags(&["--intercept", "block", "--pattern", "rm"])
        .write_in(&lab.dev);
    // Blocks everything it is asked about.
    let second = ext("second")
        .flags(&["--intercept", "block"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&first.dir)
        .extension(&second.dir)
        .build()
        .await
        .expect("build");

    let decision = host
        .intercept_tool_call("bash", json!({"command": "rm -rf /"}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Block {
            reason: "first blocks 'rm'".into()
        }
    );
    assert_eq!(decision.decided_by, ["first"]);
    assert_eq!(second.recorded_of("event_intercept").len(), 0);

    // The first allows; the second blocks.
    let decision = host
        .intercept_tool_call("bash", json!({"command": "ls"}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Block {
            reason: "second blocks ''".into()
        }
    );
    assert_eq!(decision.decided_by, ["second"]);
    assert_eq!(first.recorded_of("event_intercept").len(), 2);
    assert_eq!(second.recorded_of("event_intercept").len(), 1);
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrites_chain_and_decided_by_lists_every_rewriter() {
    let lab = Lab::new();
    let on = ["--intercept-on", "tool_call,assistant_message"];
    let first = ext("first")
        .flags(&["--intercept", "rewrite"])
        .flags(&on)
        .write_in(&lab.dev);
    let second = ext("second")
        .flags(&["--intercept", "rewrite"])
        .flags(&on)
        .write_in(&lab.dev);
    let third = ext("third")
        .flags(&["--intercept", "block", "--pattern", "DROP"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&first.dir)
        .extension(&second.dir)
        .extension(&third.dir)
        .build()
        .await
        .expect("build");

    let decision = host
        .intercept_tool_call("bash", json!({"command": "ls"}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Rewrite {
            args: json!({"command": "ls", "by": ["first", "second"]})
        }
    );
    assert_eq!(decision.decided_by, ["first", "second"]);
    // Each saw its predecessor's rewrite.
    assert_eq!(
        second.recorded_of("event_intercept")[0]["tool_args"],
        json!({"command": "ls", "by": ["first"]})
    );
    assert_eq!(
        third.recorded_of("event_intercept")[0]["tool_args"],
        json!({"command": "ls", "by": ["first", "second"]})
    );

    let decision = host.intercept_assistant_message("hi").await;
    assert_eq!(
        decision.verdict,
        Verdict::Replace {
            text: "hi +first +second".into()
        }
    );
    assert_eq!(decision.decided_by, ["first", "second"]);

    // Rewrites before a block do not count: the blocker decided.
    let decision = host
        .intercept_tool_call("sql", json!({"query": "DROP TABLE x"}))
        .await;
    assert_eq!(
        decision.verdict,
        Verdict::Block {
            reason: "third blocks 'DROP'".into()
        }
    );
    assert_eq!(decision.decided_by, ["third"]);

    // A real call carries the chained rewrite to the tool.
    let result = host
        .call_tool("first_tool", json!({"n": 1}))
        .await
        .expect("call");
    assert_eq!(
        result.text(),
        r#"first got {"by":["first","second"],"n":1}"#
    );
    host.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewrite_that_is_not_an_object_is_ignored() {
    let lab = Lab::new();
    let sloppy = ext("sloppy")
        .flags(&["--intercept", "bad-rewrite"])
        .write_in(&lab.dev);
    let host = lab
        .builder()
        .extension(&sloppy.dir)
        .build()
        .await
        .expect("build");
    let decision = host
        .intercept_tool_call("bash", json!({"command": "ls"}))
        .await;
    assert_eq!(decision.verdict, Verdict::Allow);
    assert!(decision.decided_by.is_empty());
    let result = host
        .call_tool("sloppy_tool", json!({"n": 1}))
        .await
        .expect("call");
    assert_eq!(result.text(), r#"sloppy got {"n":1}"#);
    host.shutdown().await;
}
