//! Link flags for the binaries.
//!
//! `zotbox run` is what zot starts for every sandboxed extension, so the
//! binaries' start-up is on zot's path. As a position-independent executable,
//! `zotbox` carries ~60 000 relative relocations (1.5 MB of `.rela.dyn`)
//! that the loader reads on every start. Packed relative relocations
//! (`DT_RELR`, glibc 2.36 and binutils 2.38 or later) keep the same
//! relocations in about 17 KB; the executables stay position-independent.
//! `ZOTBOX_NO_RELR=1` turns it off for an older toolchain.

fn main() {
    println!("cargo::rerun-if-env-changed=ZOTBOX_NO_RELR");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").is_ok_and(|env| env == "gnu");
    let opted_out = std::env::var_os("ZOTBOX_NO_RELR").is_some_and(|v| !v.is_empty() && v != "0");
    if linux_gnu && !opted_out {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
