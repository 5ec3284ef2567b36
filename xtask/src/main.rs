//! `cargo xtask <command>`: the project's own commands. Each does the setup it needs first.
//!
//! - `setup`: install the kernel toolchain if any piece is missing (idempotent): Debian's rustc-web,
//!   cargo-web, rust-web-src and LLVM 22 by apt, and ptxas, cuobjdump and nvdisasm from PyPI into `.tools/cuda`.
//! - `run`: the main job (`cargo run --release --bin megamoe`).
//! - `test`: formatting, clippy, every test, and `check-kernels`.
//! - `check-kernels`: every kernel marked spill-free has a 0-byte stack frame and no spills; every kernel marked
//!   mma has HGMMA (or QGMMA, FP8) in its SASS.
//! - `gpu-bundle DIR`: build the test binaries, the main binary and the benchmarks (`layer`, `gemm`; release)
//!   and copy them into DIR with a `run.sh` and the benchmarks' scripts (`h200.sh`, `gemm_h200.sh`), for the
//!   GPU machine (which has no Rust).
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

#[allow(dead_code)]
#[path = "../../kernels-gpu/src/manifest.rs"]
mod manifest;

const APT_PACKAGES: &[&str] = &["rustc-web", "cargo-web", "rust-web-src", "llvm-22"];
const PIP_PACKAGES: &[&str] =
    &["nvidia-cuda-nvcc==13.0.88", "nvidia-cuda-cuobjdump==13.5.37", "nvidia-cuda-nvdisasm==13.5.37"];

type Res = Result<(), String>;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

fn cuda_bin() -> PathBuf {
    root().join(".tools/cuda/nvidia/cu13/bin")
}

fn run(cmd: &mut Command) -> Res {
    eprintln!("+ {cmd:?}");
    let st = cmd.status().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if st.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed ({st})"))
    }
}

fn cargo() -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(root());
    c
}

fn setup() -> Res {
    let need_apt = [
        "/usr/bin/rustc",
        "/usr/bin/cargo",
        "/usr/lib/rustlib/src/rust/library/core",
        "/usr/lib/llvm-22/bin/llc",
        "/usr/lib/llvm-22/bin/llvm-link",
        "/usr/lib/llvm-22/bin/opt",
    ]
    .iter()
    .any(|p| !Path::new(p).exists());
    if need_apt {
        let sudo = !is_root();
        let apt = |args: &[&str]| {
            let mut c = if sudo { Command::new("sudo") } else { Command::new("apt-get") };
            if sudo {
                c.arg("apt-get");
            }
            c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            run(&mut c)
        };
        apt(&["update", "-qq"])?;
        let mut args = vec!["install", "-y", "-qq"];
        args.extend_from_slice(APT_PACKAGES);
        apt(&args)?;
    }
    if !cuda_bin().join("ptxas").exists()
        || !cuda_bin().join("cuobjdump").exists()
        || !cuda_bin().join("nvdisasm").exists()
    {
        let py = if Command::new("python3").arg("--version").output().is_ok() { "python3" } else { "python" };
        let mut c = Command::new(py);
        c.args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--disable-pip-version-check",
            "--upgrade",
            "--target",
        ])
        .arg(root().join(".tools/cuda"))
        .args(PIP_PACKAGES);
        run(&mut c)?;
    }
    eprintln!(
        "toolchain ready: Debian rustc {} + LLVM 22; ptxas at {}",
        version("/usr/bin/rustc"),
        cuda_bin().join("ptxas").display()
    );
    Ok(())
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0").unwrap_or(false)
}

fn version(bin: &str) -> String {
    Command::new(bin)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn test() -> Res {
    setup()?;
    run(cargo().args(["fmt", "--all", "--check"]))?;
    run(cargo().args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]))?;
    // the API docs build without a warning (a bracket in prose is an intra-doc link to rustdoc: escape it)
    run(cargo().args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings"))?;
    let (passed, failed, ignored) =
        run_counted(cargo().args(["test", "--workspace"]).env("MEGAMOE_REQUIRE_CUBIN", "1"))?;
    check_kernels()?;
    // one closing line over every test binary (GPU tests are the skipped ones on a machine without a GPU)
    println!("tests: {passed} passed, {failed} failed, {ignored} skipped");
    Ok(())
}

/// Run a `cargo test` command, echoing its output, and add up its `test result:` lines.
fn run_counted(cmd: &mut Command) -> Result<(u64, u64, u64), String> {
    use std::io::BufRead;
    eprintln!("+ {cmd:?}");
    let mut child =
        cmd.stdout(std::process::Stdio::piped()).spawn().map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    let out = child.stdout.take().expect("piped");
    let (mut p, mut f, mut i) = (0, 0, 0);
    for line in std::io::BufReader::new(out).lines() {
        let line = line.map_err(|e| e.to_string())?;
        println!("{line}");
        if let Some(rest) = line.strip_prefix("test result: ") {
            let num = |key: &str| {
                rest.split(';')
                    .find_map(|part| part.trim().strip_suffix(key)?.trim().rsplit(' ').next()?.parse::<u64>().ok())
            };
            p += num("passed").unwrap_or(0);
            f += num("failed").unwrap_or(0);
            i += num("ignored").unwrap_or(0);
        }
    }
    let st = child.wait().map_err(|e| e.to_string())?;
    if !st.success() {
        return Err(format!("{cmd:?} failed ({st})"));
    }
    Ok((p, f, i))
}

/// Parse ptxas -v: per function, (stack frame bytes, spill store bytes, spill load bytes).
fn ptxas_props(report: &str) -> Vec<(String, u64, u64, u64)> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for line in report.lines() {
        if let Some(rest) = line.split("Function properties for ").nth(1) {
            cur = Some(rest.trim().to_string());
        } else if let (Some(name), true) = (cur.as_ref(), line.contains("bytes stack frame")) {
            let nums: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .filter_map(|s| s.parse().ok())
                .collect();
            if nums.len() >= 3 {
                out.push((name.clone(), nums[0], nums[1], nums[2]));
            }
            cur = None;
        }
    }
    out
}

fn check_kernels() -> Res {
    // build.rs leaves the PTX, cubin and report of the last build in target/kernels
    run(cargo().args(["build", "--release", "--package", "megamoe", "--lib"]))?;
    let dir = root().join("target/kernels");
    let report = std::fs::read_to_string(dir.join("ptxas.txt")).map_err(|e| format!("no ptxas report: {e}"))?;
    let cubin = dir.join("megamoe.cubin");
    if std::fs::metadata(&cubin).map(|m| m.len()).unwrap_or(0) == 0 {
        return Err("no cubin was built (ptxas missing?): run `cargo xtask setup`".into());
    }
    let props = ptxas_props(&report);
    let mut errors = Vec::new();
    let sass = Command::new(cuda_bin().join("cuobjdump"))
        .arg("--dump-sass")
        .arg(&cubin)
        .env("PATH", format!("{}:{}", cuda_bin().display(), std::env::var("PATH").unwrap_or_default()))
        .output()
        .map_err(|e| format!("cannot run cuobjdump: {e}"))?;
    if !sass.status.success() {
        return Err(format!("cuobjdump failed: {}", String::from_utf8_lossy(&sass.stderr)));
    }
    let sass = String::from_utf8_lossy(&sass.stdout).into_owned();
    println!(
        "{:<36} {:>6} {:>7} {:>7} {:>6} {:>9} {:>8}",
        "kernel", "stack", "spill-s", "spill-l", "GMMA", "desc-R2UR", "LDG-wait"
    );
    for k in manifest::KERNELS {
        let Some((_, stack, ss, sl)) = props.iter().find(|p| p.0 == k.name) else {
            errors.push(format!("{}: not in the ptxas report", k.name));
            continue;
        };
        let body = sass_of(&sass, k.name);
        // HGMMA: bf16 / f16 wgmma; QGMMA: the FP8 form
        let hgmma = body.map(|b| b.matches("HGMMA").count() + b.matches("QGMMA").count()).unwrap_or(0);
        let r2ur = body.map(gmma_fed_by_r2ur).unwrap_or(0);
        let ldg_wait = body.map(ldg_waits_inside_gmma_runs).unwrap_or(0);
        println!("{:<36} {:>6} {:>7} {:>7} {:>6} {:>9} {:>8}", k.name, stack, ss, sl, hgmma, r2ur, ldg_wait);
        if ldg_wait != 0 && !LDG_WAIT_KNOWN.contains(&k.name) {
            errors.push(format!(
                "{}: {ldg_wait} instruction(s) inside a run of wgmma wait on a global load, so the rest of the run \
                 is issued only when the load returns (see ldg_waits_inside_gmma_runs)",
                k.name
            ));
        }
        if ldg_wait == 0 && LDG_WAIT_KNOWN.contains(&k.name) {
            println!("  ({} no longer waits on a global load inside its wgmma: drop it from LDG_WAIT_KNOWN)", k.name);
        }
        if k.spill_free && (*stack != 0 || *ss != 0 || *sl != 0) {
            errors.push(format!("{}: stack frame {stack} B, spills {ss}/{sl} B (marked spill-free)", k.name));
        }
        if body.is_none() {
            errors.push(format!("{}: no SASS found", k.name));
        } else if k.mma && hgmma == 0 {
            errors.push(format!("{}: marked mma but its SASS has no HGMMA / QGMMA", k.name));
        }
    }
    // C7508: setmaxnreg ignored; C7518: wgmma serialised (a compiler-inserted wait in a divergent path); C7514
    // (an "info", not a warning): wgmma serialised because other instructions read an accumulator in flight
    if report.contains("C7508")
        || report.contains("C7514")
        || report.contains("C7518")
        || report.contains("C7520")
        || report.to_lowercase().contains("warning")
    {
        errors.push(format!(
            "ptxas warned:\n{}",
            report
                .lines()
                .filter(|l| l.contains("arning") || l.contains("C7508") || l.contains("C7514") || l.contains("C7518"))
                .collect::<Vec<_>>()
                .join("\n")
        ));
    }
    if errors.is_empty() {
        println!("check-kernels: {} kernels ok", manifest::KERNELS.len());
        Ok(())
    } else {
        Err(format!("check-kernels:\n  {}", errors.join("\n  ")))
    }
}

/// How many of the wgmma instructions (HGMMA / QGMMA) in `sass` take a descriptor that an `R2UR` moved from a vector
/// register since the previous one (the descriptor computed on the vector units, then moved: where a warp-uniform
/// value reached ptxas as a per-lane one; see `regs::warpgroup`, `warp::uniform`). Informational: one per k-step is
/// the broadcast stage address; one per wgmma is the pattern the twenty-ninth session removed.
fn gmma_fed_by_r2ur(sass: &str) -> usize {
    let ins: Vec<&str> = sass
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            l.starts_with("/*").then(|| l.split_once("*/").map(|(_, r)| r.trim()).unwrap_or(""))
        })
        .collect();
    let is_gmma = |x: &str| x.contains("HGMMA.") || x.contains("QGMMA.");
    let ur_of = |x: &str| -> Option<u32> {
        let at = x.find("gdesc[UR")? + "gdesc[UR".len();
        x[at..].split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let mut fed = 0;
    for (i, x) in ins.iter().enumerate() {
        let Some(ur) = is_gmma(x).then(|| ur_of(x)).flatten() else { continue };
        for y in ins[..i].iter().rev().take_while(|y| !is_gmma(y)) {
            let dst = y.strip_prefix("R2UR UR").and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next());
            if dst.and_then(|d| d.parse::<u32>().ok()).is_some_and(|d| (ur..ur + 4).contains(&d)) {
                fed += 1;
                break;
            }
        }
    }
    fed
}

/// Kernels whose SASS is known to hold an instruction waiting on a global load inside a run of wgmma: the FP8
/// kernels' scale products (docs/RESULTS.md 2026-12-06i call 1; docs/wip/fp8w-late-scales.patch moves the wide
/// kernels'). In the 128-column kernels the scales are loaded a block ahead, but the next block's loads share the
/// scoreboard, so the product waits for them too. Any other kernel with such a wait fails `check-kernels`.
const LDG_WAIT_KNOWN: &[&str] = &[
    "grouped_gemm_fp8",
    "grouped_gemm_fp8_regs",
    "grouped_gemm_fp8_mc",
    "grouped_gemm_fp8_swiglu",
    "grouped_gemm_fp8_swiglu_q",
    "grouped_gemm_fp8w",
    "grouped_gemm_fp8w_nl",
    "grouped_gemm_fp8w_swiglu_q",
    "grouped_gemm_fp8w_swiglu_zt",
    "grouped_gemm_fp8w_cpx",
    "grouped_gemm_fp8w_dswiglu",
];

/// How many instructions of `sass` sit inside a run of wgmma (after a HGMMA / QGMMA that more of its commit group
/// follow, before the group's last, the one marked `gsb0`) and wait on a scoreboard that a global load (`LDG`) set
/// last. The warp issues in order, so the rest of the run waits for the load (hundreds of cycles from L2) while
/// the tensor cores may run dry: ptxas put the wide FP8 kernel's scale products there (2026-12-06i). Read from the
/// control bits of each instruction's second encoding word: write scoreboard bits 46..48 (7: none), wait mask bits
/// 52..57. A straight scan of the listing (branches not followed): a lint, not a proof.
fn ldg_waits_inside_gmma_runs(sass: &str) -> usize {
    let mut from_ldg = [false; 6];
    let (mut in_run, mut count) = (false, 0);
    let mut lines = sass.lines().peekable();
    while let Some(l) = lines.next() {
        let t = l.trim_start();
        // an instruction line: "/*addr*/ OPCODE ... ; /* 0xlo */", then a line holding "/* 0xhi */"
        let Some((_, rest)) = t.strip_prefix("/*").and_then(|r| r.split_once("*/")) else { continue };
        let Some(op) = rest.split(';').next().map(str::trim).filter(|o| !o.is_empty()) else { continue };
        let hi = lines.peek().and_then(|n| {
            let n = n.trim();
            n.strip_prefix("/* 0x").and_then(|h| h.strip_suffix("*/")).map(str::trim)
        });
        let Some(hi) = hi.and_then(|h| u64::from_str_radix(h, 16).ok()) else { continue };
        lines.next();
        // the opcode without its predicate guard
        let opcode = op.strip_prefix('@').map_or(op, |g| g.split_once(' ').map_or(g, |(_, o)| o.trim_start()));
        let gmma = opcode.starts_with("HGMMA.") || opcode.starts_with("QGMMA.");
        let wait = (hi >> 52) & 0x3f;
        if in_run && !gmma && (0..6).any(|b| wait >> b & 1 == 1 && from_ldg[b]) {
            count += 1;
        }
        let wbar = ((hi >> 46) & 7) as usize;
        if wbar < 6 {
            from_ldg[wbar] = opcode.starts_with("LDG");
        }
        if gmma {
            in_run = !op.contains("gsb0");
        }
    }
    count
}

/// The SASS of one function in a `cuobjdump --dump-sass` listing.
fn sass_of<'a>(sass: &'a str, name: &str) -> Option<&'a str> {
    let key = format!("Function : {name}\n");
    let start = sass.find(&key)? + key.len();
    let rest = &sass[start..];
    let end = rest.find("Function : ").unwrap_or(rest.len());
    Some(&rest[..end])
}

fn gpu_bundle(dir: &str) -> Res {
    setup()?;
    let dir = root().join(dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let out = cargo()
        .args(["test", "--workspace", "--no-run", "--message-format=json"])
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!("building the tests failed:\n{}", String::from_utf8_lossy(&out.stderr)));
    }
    let mut names = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        if !line.contains("\"reason\":\"compiler-artifact\"") || !line.contains("\"test\":true") {
            continue;
        }
        if let Some(exe) = json_str(line, "executable") {
            let src = PathBuf::from(&exe);
            let name = src.file_name().unwrap().to_string_lossy().into_owned();
            let base = name.rsplit_once('-').map(|(b, _)| b.to_string()).unwrap_or(name.clone());
            // only the binaries that touch the GPU travel (the device call carries at most 64 MiB)
            if !GPU_TEST_BINARIES.contains(&base.as_str()) {
                continue;
            }
            std::fs::copy(&src, dir.join(&base)).map_err(|e| e.to_string())?;
            strip(&dir.join(&base));
            names.push(base);
        }
    }
    run(cargo().args(["build", "--release", "--bin", "megamoe"]))?;
    bundle_bench(&dir)?;
    std::fs::copy(root().join("target/release/megamoe"), dir.join("megamoe")).map_err(|e| e.to_string())?;
    strip(&dir.join("megamoe"));
    std::fs::copy(root().join("target/kernels/ptxas.txt"), dir.join("ptxas.txt")).map_err(|e| e.to_string())?;
    // the C ABI's library and the PyTorch bindings with their test
    run(cargo().args(["build", "--release", "-p", "megamoe-capi"]))?;
    let so = "libmegamoe_capi.so";
    std::fs::copy(root().join("target/release").join(so), dir.join(so)).map_err(|e| e.to_string())?;
    strip(&dir.join(so));
    for f in ["megamoe_torch.py", "test_megamoe_torch.py"] {
        std::fs::copy(root().join("python").join(f), dir.join(f)).map_err(|e| e.to_string())?;
    }
    names.sort();
    let script = format!(
        "#!/usr/bin/env bash\n# Runs every test binary (GPU tests included), the PyTorch bindings' test and the main job. Built by \
         `cargo xtask gpu-bundle`.\ncd \"$(dirname \"$0\")\"\nrc=0\nfor t in {}; do echo \"== $t\"; timeout 300 ./$t --include-ignored \
         --test-threads=1 || rc=1; done\necho '== test_megamoe_torch.py'; MEGAMOE_LIB=$PWD/{so} timeout 300 python3 \
         test_megamoe_torch.py || rc=1\necho '== megamoe'; timeout 300 ./megamoe || rc=1\nexit $rc\n",
        names.join(" ")
    );
    std::fs::write(dir.join("run.sh"), script).map_err(|e| e.to_string())?;
    let bytes: u64 = std::fs::read_dir(&dir)
        .map_err(|e| e.to_string())?
        .filter_map(|f| f.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    println!(
        "bundle in {}: {} test binaries + megamoe + run.sh, benchmarks {} (h200.sh, gemm_h200.sh); {:.1} MiB of \
         the device call's 64",
        dir.display(),
        names.len(),
        BENCHES.iter().map(|b| b.1).collect::<Vec<_>>().join(", "),
        bytes as f64 / (1 << 20) as f64
    );
    Ok(())
}

/// The benchmark binaries (`layer`: the layer against PyTorch; `gemm`: each GEMM alone against cuBLAS; `ep`,
/// as `ep_bench` beside the `ep` test binary: dispatch and combine) and their PyTorch partners and scripts.
fn bundle_bench(dir: &Path) -> Res {
    for (bench, file) in BENCHES {
        let out = cargo()
            .args(["bench", "--bench", bench, "--no-run", "--message-format=json"])
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!("building the {bench} benchmark failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let key = format!("\"name\":\"{bench}\"");
        let exe = text
            .lines()
            .filter(|l| l.contains("\"reason\":\"compiler-artifact\"") && l.contains(&key))
            .find_map(|l| json_str(l, "executable"))
            .ok_or(format!("no {bench} benchmark binary"))?;
        std::fs::copy(&exe, dir.join(file)).map_err(|e| e.to_string())?;
        strip(&dir.join(file));
    }
    for f in [
        "torch_layer.py",
        "torch_rotation.py",
        "trace_step.py",
        "h200.sh",
        "torch_common.py",
        "torch_gemm.py",
        "torch_dswiglu.py",
        "torch_fp8.py",
        "gemm_h200.sh",
        "sanitize.sh",
    ] {
        std::fs::copy(root().join("benches").join(f), dir.join(f)).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Benchmarks the GPU bundle carries.
/// (benchmark, file name in the bundle).
const BENCHES: &[(&str, &str)] = &[("layer", "layer"), ("gemm", "gemm"), ("ep", "ep_bench"), ("fp8", "fp8_bench")];

/// Test binaries the GPU bundle carries.
const GPU_TEST_BINARIES: &[&str] = &[
    "gpu_primitives",
    "no_gpu",
    "layer_forward",
    "layer_backward",
    "grouped_gemm",
    "ep",
    "route",
    "graph",
    "fp8",
    "capi",
];

fn strip(p: &Path) {
    // best effort: an unstripped binary still runs, it is only larger
    let _ = Command::new("strip").arg("--strip-debug").arg(p).status();
}

fn json_str(line: &str, key: &str) -> Option<String> {
    let k = format!("\"{key}\":\"");
    let start = line.find(&k)? + k.len();
    let end = line[start..].find('"')?;
    Some(line[start..start + end].to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("setup") => setup(),
        Some("test") => test(),
        Some("run") => setup().and_then(|_| run(cargo().args(["run", "--release", "--bin", "megamoe"]))),
        Some("check-kernels") => setup().and_then(|_| check_kernels()),
        Some("gpu-bundle") => gpu_bundle(args.get(1).map(String::as_str).unwrap_or(".dev/bundle")),
        _ => Err("usage: cargo xtask <setup | run | test | check-kernels | gpu-bundle [DIR]>".into()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}
