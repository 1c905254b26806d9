//! Building Rust guests into WebAssembly components with cargo.
//!
//! Used by `zotbox ext build`, `zotbox demo` and the test suite: one code
//! path that makes sure the rustup target is installed, runs cargo, and finds
//! the `.wasm` artifacts in cargo's JSON messages (so bin names, workspace
//! membership and target folders need no guessing).

use std::collections::BTreeMap;
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target sandboxed Rust guests are built for.
pub const GUEST_TARGET: &str = "wasm32-wasip2";

/// A guest build failed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
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
}

/// Makes sure `rustup` has `target` installed, adding it when missing.
///
/// # Errors
///
/// [`BuildError::Target`] when it is missing and cannot be added.
pub fn ensure_target(target: &str) -> Result<(), BuildError> {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
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
                .map_err(|error| BuildError::Run {
                    tool: "rustup".to_owned(),
                    error,
                })?;
            if status.success() {
                Ok(())
            } else {
                Err(BuildError::Target {
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
    /// [`BuildError`] when the target, cargo or the artifacts are missing.
    pub fn run(&self) -> Result<BTreeMap<String, PathBuf>, BuildError> {
        if let Some(target) = &self.target {
            ensure_target(target)?;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(&cargo);
        command
            .arg("build")
            .arg("--manifest-path")
            .arg(&self.manifest_path)
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
            command.arg("--target-dir").arg(dir);
        }
        let mut child = command.spawn().map_err(|error| BuildError::Run {
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
        let status = child.wait().map_err(|error| BuildError::Run {
            tool: "cargo".to_owned(),
            error,
        })?;
        if !status.success() {
            return Err(BuildError::Cargo { what: self.what() });
        }
        if artifacts.is_empty() {
            return Err(BuildError::NoArtifact { what: self.what() });
        }
        Ok(artifacts)
    }
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
mod tests {
    use super::*;

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
}
