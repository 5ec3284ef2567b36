//! Builds `kernels-gpu` for nvptx64 (sm_90a) with Debian's rustc and the project's link step, adds the launch
//! bounds from the kernel manifest, assembles a cubin with ptxas when it is present, and embeds PTX, cubin and
//! the ptxas report into the `megamoe` crate. `cargo xtask setup` installs everything this needs.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

#[allow(dead_code)]
#[path = "kernels-gpu/src/manifest.rs"]
mod manifest;

const SETUP_HINT: &str = "run `cargo xtask setup` (README, Quick start): it installs Debian's rustc-web, \
                          cargo-web, rust-web-src and LLVM 22, and ptxas from PyPI";

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for p in ["kernels-gpu/src", "kernels-gpu/Cargo.toml", "tools/llbc-link", "build.rs"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    for v in ["MEGAMOE_RUSTC", "MEGAMOE_CARGO", "MEGAMOE_LLVM_BIN", "MEGAMOE_PTXAS"] {
        println!("cargo:rerun-if-env-changed={v}");
    }

    let rustc = tool("MEGAMOE_RUSTC", "/usr/bin/rustc");
    let cargo = tool("MEGAMOE_CARGO", "/usr/bin/cargo");
    let llvm = PathBuf::from(env::var("MEGAMOE_LLVM_BIN").unwrap_or_else(|_| "/usr/lib/llvm-22/bin".into()));
    let core_src = Path::new("/usr/lib/rustlib/src/rust/library/core");
    let mut missing = Vec::new();
    for (what, p) in [
        ("Debian's rustc", rustc.clone()),
        ("Debian's cargo", cargo.clone()),
        ("LLVM 22 (llc)", llvm.join("llc")),
        ("LLVM 22 (llvm-link)", llvm.join("llvm-link")),
        ("core's source (rust-web-src)", core_src.to_path_buf()),
    ] {
        if !p.exists() {
            missing.push(format!("{what} at {}", p.display()));
        }
    }
    if !missing.is_empty() {
        panic!("megamoe: the kernel toolchain is missing ({}); {SETUP_HINT}", missing.join(", "));
    }

    // nvptx build of a copy of kernels-gpu as a workspace of its own, in a clean environment (the outer
    // cargo's variables would leak in)
    let target_dir = root.join("target/nvptx");
    let crate_dir = target_dir.join("crate");
    let _ = fs::remove_dir_all(crate_dir.join("src"));
    copy_dir(&root.join("kernels-gpu/src"), &crate_dir.join("src"));
    let manifest_text = fs::read_to_string(root.join("kernels-gpu/Cargo.toml")).unwrap();
    fs::write(crate_dir.join("Cargo.toml"), format!("{manifest_text}\n{NVPTX_MANIFEST_TAIL}")).unwrap();
    let rustflags = format!(
        "-Clinker={} -Ctarget-cpu=sm_90a -Zmir-enable-passes=-JumpThreading -Zunstable-options -Cpanic=immediate-abort",
        root.join("tools/llbc-link").display()
    );
    let mut cmd = Command::new(&cargo);
    cmd.env_clear()
        .envs(env::vars().filter(|(k, _)| matches!(k.as_str(), "PATH" | "HOME" | "CARGO_HOME" | "TMPDIR")))
        .env("RUSTC", &rustc)
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", rustflags)
        .env("MEGAMOE_LLVM_BIN", &llvm)
        .current_dir(&crate_dir)
        .args(["rustc", "--release", "--target", "nvptx64-nvidia-cuda", "-Zbuild-std=core"])
        .args(["--crate-type", "cdylib", "--target-dir"])
        .arg(&target_dir);
    let status = cmd.status().unwrap_or_else(|e| panic!("megamoe: cannot run {}: {e}; {SETUP_HINT}", cargo.display()));
    if !status.success() {
        panic!("megamoe: building kernels-gpu for nvptx64 failed (see the errors above)");
    }
    let raw = fs::read_to_string(target_dir.join("nvptx64-nvidia-cuda/release/megamoe_kernels.ptx"))
        .expect("megamoe: the nvptx build wrote no PTX");
    let ptx = apply_manifest(&raw);

    let ptx_path = out.join("megamoe.ptx");
    fs::write(&ptx_path, &ptx).unwrap();
    let cubin_path = out.join("megamoe.cubin");
    let report_path = out.join("ptxas.txt");
    match find_ptxas(&root) {
        Some(ptxas) => {
            let o = reproducible(&ptxas, &out)
                .args(["-arch=sm_90a", "-v", "-o", "megamoe.cubin", "megamoe.ptx"])
                .output()
                .unwrap_or_else(|e| panic!("megamoe: cannot run {}: {e}", ptxas.display()));
            let report = String::from_utf8_lossy(&o.stderr).into_owned();
            if !o.status.success() && report.starts_with("setarch:") {
                panic!("megamoe: setarch could not run ptxas ({}):\n{report}", ptxas.display());
            }
            if !o.status.success() {
                panic!("megamoe: ptxas rejected the kernels:\n{report}");
            }
            fs::write(&report_path, &report).unwrap();
        }
        None => {
            println!("cargo:warning=megamoe: ptxas not found; only PTX is embedded (the driver JIT-compiles it). {SETUP_HINT}");
            fs::write(&cubin_path, b"").unwrap();
            fs::write(&report_path, "ptxas was not found at build time\n").unwrap();
        }
    }
    // a stable copy for tooling (`cargo xtask check-kernels`, MEGAMOE_DEBUG dumps)
    let stable = root.join("target/kernels");
    fs::create_dir_all(&stable).unwrap();
    for f in ["megamoe.ptx", "megamoe.cubin", "ptxas.txt"] {
        fs::copy(out.join(f), stable.join(f)).unwrap();
    }
}

/// Appended to the copied manifest: a workspace of its own and the device build's profile.
const NVPTX_MANIFEST_TAIL: &str =
    "[workspace]\n\n[profile.release]\nopt-level = 3\npanic = \"abort\"\ncodegen-units = 1\ndebug = false\n";

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let p = e.path();
        if p.is_dir() {
            copy_dir(&p, &to.join(e.file_name()));
        } else {
            fs::copy(&p, to.join(e.file_name())).unwrap();
        }
    }
}

fn tool(var: &str, default: &str) -> PathBuf {
    PathBuf::from(env::var(var).unwrap_or_else(|_| default.into()))
}

/// ptxas at `ptxas`, run in `dir`, set up so that the same PTX gives the same cubin on every build: its code
/// depends on where its heap lies (measured: the same PTX assembled twice gave other register numbers and
/// instruction orders in 8-10 kernels; with address randomisation off, still others whenever the lengths of the
/// paths it was given changed). So: address randomisation off (`setarch <arch> -R`), ptxas run as `ptxas` through
/// a link in `dir/bin` first in PATH (whatever its own name and place), file names relative to `dir`. Where
/// setarch does not work, plain ptxas with a warning (a working cubin, not reproducible).
fn reproducible(ptxas: &Path, dir: &Path) -> Command {
    // a relative path meant from the crate root (the build script's directory), not from `dir`
    let ptxas = std::path::absolute(ptxas).unwrap_or_else(|_| ptxas.to_path_buf());
    let arch = env::consts::ARCH;
    let norand = Command::new("setarch").args([arch, "-R", "true"]).status().is_ok_and(|s| s.success());
    let bin = dir.join("bin");
    let linked = norand && {
        let _ = fs::remove_dir_all(&bin);
        fs::create_dir_all(&bin).is_ok() && link(&ptxas, &bin.join("ptxas"))
    };
    let old_path = env::var_os("PATH").unwrap_or_default();
    let path = env::join_paths(std::iter::once(bin).chain(env::split_paths(&old_path))).ok();
    let mut cmd = match path {
        Some(path) if linked => {
            let mut c = Command::new("setarch");
            c.args([arch, "-R", "ptxas"]).env("PATH", path);
            c
        }
        _ => {
            println!(
                "cargo:warning=megamoe: ptxas runs without `setarch {arch} -R`: the cubin may differ from build to \
                 build (ptxas's code depends on its heap addresses)"
            );
            Command::new(&ptxas)
        }
    };
    cmd.current_dir(dir);
    cmd
}

/// `at` a symbolic link to `target` (false where that cannot be made).
fn link(target: &Path, at: &Path) -> bool {
    #[cfg(unix)]
    return std::os::unix::fs::symlink(target, at).is_ok();
    #[cfg(not(unix))]
    return false;
}

fn find_ptxas(root: &Path) -> Option<PathBuf> {
    if let Ok(p) = env::var("MEGAMOE_PTXAS") {
        return Some(PathBuf::from(p));
    }
    let local = root.join(".tools/cuda/nvidia/cu13/bin/ptxas");
    if local.exists() {
        return Some(local);
    }
    let cuda = Path::new("/usr/local/cuda/bin/ptxas");
    if cuda.exists() {
        return Some(cuda.to_path_buf());
    }
    env::var_os("PATH").and_then(|paths| env::split_paths(&paths).map(|d| d.join("ptxas")).find(|p| p.exists()))
}

/// Check that the PTX exports exactly the manifest's kernels, and give each with `max_threads > 0` its
/// `.maxntid` and `.minnctapersm` (`min_blocks`, 1 unless the manifest asks for more; together the register cap
/// at entry that `setmaxnreg` needs; ptxas ignores setmaxnreg with `.maxntid` alone, warning C7508), and
/// `.reqnctapercluster` when its cluster is above 1.
fn apply_manifest(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 1024);
    let mut entries = Vec::new();
    let mut pending: Option<(u32, u32, u32)> = None;
    for line in ptx.lines() {
        out.push_str(line);
        out.push('\n');
        if let Some(rest) = line.trim_start().strip_prefix(".visible .entry ") {
            let name = rest.split('(').next().unwrap_or("").trim().to_string();
            let spec = manifest::KERNELS.iter().find(|k| k.name == name).unwrap_or_else(|| {
                panic!("megamoe: kernel `{name}` is exported but not listed in kernels-gpu/src/manifest.rs")
            });
            pending = (spec.max_threads > 0).then_some((spec.max_threads, spec.cluster, spec.min_blocks.max(1)));
            entries.push(name);
        } else if line.trim_start().starts_with(')') {
            if let Some((n, c, b)) = pending.take() {
                out.push_str(&format!(".maxntid {n}, 1, 1\n.minnctapersm {b}\n"));
                if c > 1 {
                    out.push_str(&format!(".reqnctapercluster {c}, 1, 1\n"));
                }
            }
        }
    }
    for k in manifest::KERNELS {
        if !entries.iter().any(|e| e == k.name) {
            panic!("megamoe: kernel `{}` is listed in the manifest but the PTX does not export it", k.name);
        }
    }
    out
}
