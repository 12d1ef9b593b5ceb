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
