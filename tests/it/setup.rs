//! The set-up script's detection of libclang, which llama.cpp's bindgen step loads at build
//! time: run against temporary trees, so that what the machine happens to have installed does
//! not decide the result.
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

/// What `scripts/check-cpu.sh CPUINFO` said of a CPU with these flags: its exit code and
/// standard error. The `GGML_*` variables given are the environment's; the rest come from
/// `.cargo/config.toml`, as they do for cargo.
fn check_cpu(flags: &str, env: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let cpuinfo = dir.path().join("cpuinfo");
    std::fs::write(
        &cpuinfo,
        format!("processor\t: 0\nmodel name\t: test\nflags\t\t: {flags}\n\nprocessor\t: 1\n"),
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check-cpu.sh");
    let mut command = Command::new("bash");
    command.arg(script).arg(&cpuinfo);
    for (key, _) in std::env::vars() {
        if key.starts_with("GGML_") {
            command.env_remove(key);
        }
    }
    command.envs(env.iter().copied());
    let output = command.output().expect("run check-cpu.sh");
    (
        output.status.code().expect("exit code"),
        String::from_utf8(output.stderr).expect("utf-8"),
    )
}

const AVX2_CPU: &str = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2";
const ZEN4_CPU: &str = "fpu sse sse2 ssse3 fma sse4_1 sse4_2 popcnt avx f16c bmi1 avx2 bmi2 \
    avx512f avx512dq avx512ifma avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vnni";

#[test]
fn a_cpu_without_the_instructions_llama_cpp_is_built_for_is_stopped_before_the_build() {
    let (code, message) = check_cpu(AVX2_CPU, &[]);
    assert_eq!(code, 1, "{message}");
    assert!(
        message.contains(
            "lacks instructions llama.cpp would be built for: GGML_AVX512 GGML_AVX512_VNNI"
        ),
        "{message}"
    );
    assert!(
        message.contains("export GGML_AVX512=OFF GGML_AVX512_VNNI=OFF"),
        "{message}"
    );
    // Skylake-X: AVX-512 without VNNI.
    let skylake = AVX2_CPU.to_owned() + " avx512f avx512dq avx512cd avx512bw avx512vl";
    let (code, message) = check_cpu(&skylake, &[]);
    assert_eq!(code, 1, "{message}");
    assert!(
        message.contains("built for: GGML_AVX512_VNNI\n"),
        "{message}"
    );
}

#[test]
fn the_environment_turns_an_option_off_or_on_as_it_does_for_cargo() {
    let off = [("GGML_AVX512", "OFF"), ("GGML_AVX512_VNNI", "OFF")];
    assert_eq!(check_cpu(AVX2_CPU, &off), (0, String::new()));
    assert_eq!(check_cpu(ZEN4_CPU, &[]), (0, String::new()));
    let (code, message) = check_cpu(ZEN4_CPU, &[("GGML_AVX_VNNI", "1")]);
    assert_eq!(code, 1, "{message}");
    assert!(message.contains("built for: GGML_AVX_VNNI\n"), "{message}");
}
