//! The example and test guests, built once per test run and reused.
//!
//! The first test that needs a guest builds all of them: the Rust examples
//! and test guests for `wasm32-wasip2` in one cargo run, the examples and
//! `hostile`/`netprobe` natively in a second, and the C example with clang
//! (wasm32-wasip1) and `cc`, and the Go example with `go` (wasip1 and
//! native). Cargo writes to `target/wasm-guests`, a target
//! folder of its own, so it never waits on the lock of the cargo that runs
//! these tests. Every test then writes extension folders of its own that
//! point at (or hold a copy of) these artifacts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Instant;

use serde_json::{Value, json};
use zotbox::build::{
    CargoBuild, GO_INSTALL, GUEST_TARGET, GoBuild, JS_INSTALL, JsBuild, MakeBuild, PYTHON_INSTALL,
    PyBuild, find_program,
};

use crate::support::write_json;

/// The Rust examples, `examples/<name>` holding package `zotbox-example-<name>`.
pub const EXAMPLES: &[&str] = &["hello", "weather", "guard", "scratchpad"];

/// The test guests, `tests/guests/<name>` holding package `zotbox-test-<name>`.
const TEST_GUESTS: &[&str] = &["hostile", "netprobe"];

/// Test guests built for wasm only (`prober` exercises the sandbox, which a
/// native build does not have; `httpprobe` imports `wasi:http`).
const WASM_ONLY_GUESTS: &[&str] = &["prober", "httpprobe"];

/// The C example's name (its manifest name and its `hello` name).
pub const C_SHOUT: &str = "c-shout";

/// The Go example's name (its folder, manifest name and `hello` name).
pub const GO_NOTES: &str = "go-notes";

/// The Python example's name.
pub const PY_HELLO: &str = "py-hello";

/// The JavaScript example's name (its folder, manifest name and `hello` name).
pub const JS_NOTES: &str = "js-notes";

/// The Debian packages that give clang a wasm32-wasi sysroot.
const CLANG_PACKAGES: &str = "clang lld wasi-libc libclang-rt-14-dev-wasm32";

/// How an extension is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// A wasm guest in the sandbox.
    Wasm,
    /// A native subprocess.
    Native,
}

impl Form {
    /// What `list()` reports as the extension's kind.
    pub fn kind(self) -> &'static str {
        match self {
            Self::Wasm => "wasm",
            Self::Native => "native",
        }
    }
}

/// Every built artifact.
#[derive(Debug)]
pub struct Guests {
    /// `.wasm` components by bin name.
    wasm: BTreeMap<String, PathBuf>,
    /// Native executables by bin name.
    native: BTreeMap<String, PathBuf>,
    /// The C example, or why it could not be built.
    c_shout: Result<CShout, String>,
    /// The Go example, or why it could not be built.
    go_notes: Result<GoNotes, String>,
}

/// The Go example built both ways.
#[derive(Debug)]
pub struct GoNotes {
    /// The wasip1 core module.
    pub wasm: PathBuf,
    /// The native executable.
    pub native: PathBuf,
}

/// The C example built both ways.
#[derive(Debug)]
pub struct CShout {
    /// The wasm32-wasip1 core module.
    pub wasm: PathBuf,
    /// The native executable.
    pub native: PathBuf,
}

impl Guests {
    /// The artifact of guest `name` in `form`; panics when it was not built.
    pub fn artifact(&self, name: &str, form: Form) -> &Path {
        let built = match form {
            Form::Wasm => &self.wasm,
            Form::Native => &self.native,
        };
        built.get(name).unwrap_or_else(|| {
            panic!(
                "no {form:?} build of `{name}`; built: {:?}",
                built.keys().collect::<Vec<_>>()
            )
        })
    }
}

/// The workspace root.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .expect("the workspace folder")
}

/// Where the guests are built: a target folder of their own.
fn target_dir() -> PathBuf {
    workspace().join("target/wasm-guests")
}

/// The guests, built on first use. A failed build fails every test that
/// needs a guest with the same message, without building again.
pub fn guests() -> &'static Guests {
    static GUESTS: OnceLock<Result<Guests, String>> = OnceLock::new();
    match GUESTS.get_or_init(build_all) {
        Ok(guests) => guests,
        Err(why) => panic!("{why}"),
    }
}

fn build_all() -> Result<Guests, String> {
    let started = Instant::now();
    let packages = |names: &[&str]| -> Vec<String> {
        let examples = EXAMPLES.iter().map(|n| format!("zotbox-example-{n}"));
        let tests = names.iter().map(|n| format!("zotbox-test-{n}"));
        examples.chain(tests).collect()
    };
    let cargo = |target: Option<&str>, packages: Vec<String>| {
        let build = CargoBuild {
            manifest_path: workspace().join("Cargo.toml"),
            packages,
            target: target.map(str::to_owned),
            target_dir: Some(target_dir()),
            verbose: false,
        };
        // cargo's own errors went to stderr, which the test harness does not
        // capture: they are printed right above this message.
        build.run().map_err(|err| {
            format!(
                "building the test guests ({}) failed: {err}",
                target.unwrap_or("native")
            )
        })
    };
    let wasm_guests: Vec<&str> = TEST_GUESTS
        .iter()
        .chain(WASM_ONLY_GUESTS)
        .copied()
        .collect();
    let wasm = cargo(Some(GUEST_TARGET), packages(&wasm_guests))?;
    // `netprobe` natively too: it shows that only the sandbox keeps it off the network.
    let native = cargo(None, packages(TEST_GUESTS))?;
    let c_shout = build_c_shout();
    let go_notes = build_go_notes();
    eprintln!(
        "built the test guests in {:.1}s",
        started.elapsed().as_secs_f64()
    );
    Ok(Guests {
        wasm,
        native,
        c_shout,
        go_notes,
    })
}

/// Builds `examples/go-notes` with `go` for wasip1 and natively, through
/// the library's own [`GoBuild`] (what `zotbox ext build` runs).
fn build_go_notes() -> Result<GoNotes, String> {
    let dir = workspace().join("examples").join(GO_NOTES);
    let out = target_dir().join(GO_NOTES);
    let notes = GoNotes {
        wasm: out.join(format!("{GO_NOTES}.wasm")),
        native: out.join(GO_NOTES),
    };
    for (output, wasm) in [(&notes.wasm, true), (&notes.native, false)] {
        let mut build = GoBuild::guest(&dir, GO_NOTES);
        build.output = output.clone();
        build.wasm = wasm;
        build.run().map_err(|err| err.to_string())?;
    }
    Ok(notes)
}

/// The Go example, or `None` (after a note) when Go is missing. With
/// `ZOTBOX_REQUIRE_GO=1` a missing Go fails the test.
pub fn go_notes() -> Option<&'static GoNotes> {
    built_or_skipped(
        guests().go_notes.as_ref().map_err(String::as_str),
        "Go",
        "ZOTBOX_REQUIRE_GO",
        &format!("install Go: {GO_INSTALL}"),
    )
}

/// `built`, or `None` after a note saying why the `language` guest's tests
/// are skipped and what `install`s its toolchain; with `require` (a variable)
/// set to `1`, as CI sets it, a missing toolchain fails the test instead.
pub fn built_or_skipped<T>(
    built: Result<T, &str>,
    language: &str,
    require: &str,
    install: &str,
) -> Option<T> {
    match built {
        Ok(built) => Some(built),
        Err(why) if std::env::var(require).as_deref() == Ok("1") => {
            panic!("{require}=1 but the {language} guest cannot be built: {why}\n{install}")
        }
        Err(why) => {
            eprintln!(
                "note: skipping the {language} guest's test: {why}\n\
                 ({install}; set {require}=1 to fail instead)"
            );
            None
        }
    }
}

/// Builds `examples/c-shout` for wasm32-wasip1 with its Makefile's `wasm`
/// target (through the library's own [`MakeBuild`], what `zotbox ext build`
/// runs) and natively with `cc`; the error says what is missing.
fn build_c_shout() -> Result<CShout, String> {
    let source = workspace().join("examples/c-shout/shout.c");
    let out = target_dir().join(C_SHOUT);
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create `{}`: {e}", out.display()))?;
    let shout = CShout {
        wasm: out.join("shout.wasm"),
        native: out.join("shout"),
    };
    let mut make = MakeBuild::guest(&workspace().join("examples").join(C_SHOUT), C_SHOUT);
    make.output = shout.wasm.clone();
    make.run().map_err(|err| err.to_string())?;
    let compile = |tool: &str, flags: &[&str], output: &Path| -> Result<(), String> {
        let result = Command::new(tool)
            .args(flags)
            .args(["-O2", "-o"])
            .arg(output)
            .arg(&source)
            .output()
            .map_err(|e| format!("cannot run `{tool}`: {e}"))?;
        if result.status.success() {
            Ok(())
        } else {
            Err(format!(
                "`{tool}` failed to compile `{}`:\n{}",
                source.display(),
                String::from_utf8_lossy(&result.stderr).trim_end()
            ))
        }
    };
    compile("cc", &[], &shout.native)?;
    Ok(shout)
}

/// The C example, or `None` (after a note) when clang or wasi-libc is
/// missing. With `ZOTBOX_REQUIRE_CLANG=1` a missing clang fails the test.
pub fn c_shout() -> Option<&'static CShout> {
    built_or_skipped(
        guests().c_shout.as_ref().map_err(String::as_str),
        "C",
        "ZOTBOX_REQUIRE_CLANG",
        &format!(
            "install clang and a wasm32-wasi sysroot (Debian: apt-get install {CLANG_PACKAGES})"
        ),
    )
}

/// `source` built natively into `bin` under AddressSanitizer and UBSan (a
/// report stops the process), for C that authors also build natively,
/// where a slip is a memory error in a process with the user's rights.
/// `None` after a note when clang or its sanitizer runtimes are missing
/// (a failure with `ZOTBOX_REQUIRE_CLANG=1`).
pub fn sanitized_c(source: &Path, bin: &Path, what: &str) -> Option<()> {
    c_shout()?;
    let built = Command::new("clang")
        .args(["-O1", "-g", "-fsanitize=address,undefined"])
        .args(["-fno-sanitize-recover=all", "-o"])
        .arg(bin)
        .arg(source)
        .output()
        .expect("clang runs");
    let why = String::from_utf8_lossy(&built.stderr);
    let sanitized = if built.status.success() {
        Ok(())
    } else {
        Err(&*why)
    };
    built_or_skipped(
        sanitized,
        &format!("{what}'s sanitized"),
        "ZOTBOX_REQUIRE_CLANG",
        "Debian: apt-get install libclang-rt-14-dev",
    )
}

/// Runs a [`sanitized_c`] build over `input` and returns what it wrote,
/// once it ended well, read all of the input, and no sanitizer spoke.
pub fn run_sanitized(bin: &Path, input: String) -> String {
    let mut child = Command::new(bin)
        .env("ASAN_OPTIONS", "detect_leaks=0")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the sanitized build starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let writer =
        std::thread::spawn(move || std::io::Write::write_all(&mut stdin, input.as_bytes()));
    let out = child.wait_with_output().expect("it ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A sanitizer's report first: the process it stops leaves input unread.
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    writer
        .join()
        .expect("the writer")
        .expect("all of the input was read");
    assert!(
        !stderr.contains("Sanitizer") && !stderr.contains("runtime error"),
        "{stderr}"
    );
    String::from_utf8(out.stdout).expect("what it writes is UTF-8")
}

/// A core module whose one function squares its argument `squares` times in
/// a row: a few bytes of wasm per step, and the compiler holds all of them
/// at once (400 000 steps, 2.8 MB, took 716 MiB to compile when measured).
fn squaring_module(squares: usize) -> Vec<u8> {
    let mut types = wasm_encoder::TypeSection::new();
    types
        .ty()
        .function([wasm_encoder::ValType::I32], [wasm_encoder::ValType::I32]);
    let mut functions = wasm_encoder::FunctionSection::new();
    functions.function(0);
    let mut body = wasm_encoder::Function::new([]);
    for _ in 0..squares {
        body.instruction(&wasm_encoder::Instruction::LocalGet(0))
            .instruction(&wasm_encoder::Instruction::LocalGet(0))
            .instruction(&wasm_encoder::Instruction::I32Mul)
            .instruction(&wasm_encoder::Instruction::LocalSet(0));
    }
    body.instruction(&wasm_encoder::Instruction::LocalGet(0))
        .instruction(&wasm_encoder::Instruction::End);
    let mut code = wasm_encoder::CodeSection::new();
    code.function(&body);
    let mut module = wasm_encoder::Module::new();
    module.section(&types).section(&functions).section(&code);
    module.finish()
}

/// `<parent>/squares/`: [`squaring_module`] of 600 000 steps, half as many
/// again as the 716 MiB measured: no compile of it fits in 512 MiB.
pub fn squares_folder(parent: &Path) -> PathBuf {
    let built = parent.join("squares.built.wasm");
    std::fs::write(&built, squaring_module(600_000)).expect("write the module");
    wasm_folder(parent, "squares", &built, None)
}

/// Writes `<parent>/<name>/` for a wasm guest: a copy of `wasm` as
/// `<name>.wasm` and a manifest naming it, with `limits` when given. An
/// example's guest asks for what its own manifest declares (the guard's
/// events, say); a test guest for nothing.
pub fn wasm_folder(parent: &Path, name: &str, wasm: &Path, limits: Option<Value>) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).expect("extension folder");
    let file = format!("{name}.wasm");
    std::fs::copy(wasm, dir.join(&file))
        .unwrap_or_else(|e| panic!("cannot copy `{}`: {e}", wasm.display()));
    let mut manifest = json!({"name": name, "wasm": format!("./{file}")});
    let example = workspace()
        .join("examples")
        .join(name)
        .join("extension.json");
    if let Ok(text) = std::fs::read(&example) {
        let declared: Value = serde_json::from_slice(&text).expect("an example's manifest");
        if let Some(capabilities) = declared.get("capabilities") {
            manifest["capabilities"] = capabilities.clone();
        }
    }
    if let Some(limits) = limits {
        manifest["limits"] = limits;
    }
    write_json(&dir.join("extension.json"), &manifest);
    dir
}

/// Writes `<parent>/<name>/` for a native extension: a manifest whose
/// `exec` is the absolute path of `exec`, with `limits` when given.
pub fn native_folder(parent: &Path, name: &str, exec: &Path, limits: Option<Value>) -> PathBuf {
    let dir = parent.join(name);
    std::fs::create_dir_all(&dir).expect("extension folder");
    let mut manifest = json!({"name": name, "exec": exec});
    if let Some(limits) = limits {
        manifest["limits"] = limits;
    }
    write_json(&dir.join("extension.json"), &manifest);
    dir
}

/// Writes the folder of Rust guest `name` (an example or a test guest) in `form`.
pub fn folder(parent: &Path, name: &str, form: Form, limits: Option<Value>) -> PathBuf {
    let artifact = guests().artifact(name, form);
    match form {
        Form::Wasm => wasm_folder(parent, name, artifact, limits),
        Form::Native => native_folder(parent, name, artifact, limits),
    }
}

/// The Python example's component, built on first use with componentize-py
/// (apart from the other guests: it takes tens of seconds), or `None` (after
/// a note) when componentize-py is missing. With `ZOTBOX_REQUIRE_PYTHON=1` a
/// missing componentize-py fails the test.
pub fn py_hello() -> Option<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let mut build = PyBuild::guest(&workspace().join("examples").join(PY_HELLO), PY_HELLO);
        build.output = target_dir().join(PY_HELLO).join(format!("{PY_HELLO}.wasm"));
        build.run().map_err(|err| err.to_string())
    });
    built_or_skipped(
        built.as_deref().map_err(String::as_str),
        "Python",
        "ZOTBOX_REQUIRE_PYTHON",
        &format!("install componentize-py: {PYTHON_INSTALL}"),
    )
}

/// The `componentize-js` to build with: the one on `PATH`, else the one CI
/// installs into `target/js-toolchain` (`npm install --prefix
/// target/js-toolchain @bytecodealliance/componentize-js@0.23.0`).
pub fn componentize_js() -> Result<PathBuf, String> {
    if let Some(found) = find_program(Path::new("componentize-js")) {
        return Ok(found);
    }
    let local = workspace().join("target/js-toolchain/node_modules/.bin/componentize-js");
    if local.is_file() {
        return Ok(local);
    }
    Err(format!(
        "`componentize-js` is neither on PATH nor in `{}`",
        local.display()
    ))
}

/// Returns the JS toolchain, or `None` (after a note) when it is missing.
/// With `ZOTBOX_REQUIRE_JS=1` a missing toolchain fails the test.
pub fn js_toolchain() -> Option<PathBuf> {
    let found = componentize_js().and_then(|tool| match find_program(Path::new("node")) {
        Some(_) => Ok(tool),
        None => Err("`node` is not on PATH".to_owned()),
    });
    built_or_skipped(
        found.as_ref().map_err(String::as_str).cloned(),
        "JavaScript",
        "ZOTBOX_REQUIRE_JS",
        &format!("install componentize-js: {JS_INSTALL}"),
    )
}

/// The JavaScript example's component, built on first use with
/// componentize-js (apart from the other guests: it takes tens of
/// seconds), or `None` (after a note) when the toolchain is missing.
pub fn js_notes() -> Option<&'static Path> {
    static BUILT: OnceLock<Option<PathBuf>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let tool = js_toolchain()?;
            let mut build = JsBuild::guest(&workspace().join("examples").join(JS_NOTES), JS_NOTES);
            build.tool = tool;
            build.output = target_dir().join(JS_NOTES).join(format!("{JS_NOTES}.wasm"));
            match build.run() {
                Ok(wasm) => Some(wasm),
                Err(err) => panic!("building the JavaScript example failed: {err}"),
            }
        })
        .as_deref()
}
