//! The CPU instructions this binary was compiled for, checked against the CPU it runs on.
//!
//! gepa-lab is compiled for the CPU of the machine that builds it (`target-cpu=native` in
//! `.cargo/config.toml`), and so is llama.cpp's ggml (GGML_NATIVE, which llama-cpp-sys-2 turns on
//! when it sees that flag). A binary copied to a CPU that lacks one of those instructions would
//! stop with an illegal instruction the first time it met one; `main` calls [`check`] first, and
//! the embedded model again before llama.cpp starts, so it stops with a message naming them.
//! The Rust compiler and the C++ compiler read the same CPU, so the features the Rust code was
//! compiled with stand for ggml's too.

/// Each instruction-set feature the compiler may have assumed: whether it did (`cfg!`) and
/// whether this CPU has it.
macro_rules! features {
    ($detect:ident; $($name:tt),* $(,)?) => {
        [$(($name, cfg!(target_feature = $name), $detect!($name))),*]
    };
}

/// (feature, compiled for it, this CPU has it) for the features rustc and ggml use.
#[cfg(target_arch = "x86_64")]
fn features() -> Vec<(&'static str, bool, bool)> {
    use std::arch::is_x86_feature_detected;
    // build.rs's table, which its C guard checks too.
    include!(concat!(env!("OUT_DIR"), "/x86_features.rs")).to_vec()
}

#[cfg(target_arch = "aarch64")]
fn features() -> Vec<(&'static str, bool, bool)> {
    use std::arch::is_aarch64_feature_detected;
    features![is_aarch64_feature_detected;
        "neon", "fp16", "dotprod", "i8mm", "sve", "sve2",
    ]
    .to_vec()
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn features() -> Vec<(&'static str, bool, bool)> {
    Vec::new()
}

/// The features compiled for that this CPU lacks.
fn missing(features: &[(&'static str, bool, bool)]) -> Vec<&'static str> {
    features
        .iter()
        .filter(|(_, compiled, present)| *compiled && !*present)
        .map(|(name, _, _)| *name)
        .collect()
}

/// `Err` with the message a user needs when this binary was built for instructions this CPU
/// lacks.
pub fn check() -> Result<(), String> {
    let missing = missing(&features());
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "this gepa-lab was compiled for a CPU with {} and this CPU lacks them; build it on this \
         machine (`cargo build --release` compiles for the CPU it runs on)",
        missing.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_machine_has_every_feature_it_was_compiled_for() {
        assert_eq!(check(), Ok(()));
    }

    #[test]
    fn a_feature_compiled_for_and_absent_is_named_and_nothing_else() {
        let table = [
            ("avx2", true, true),
            ("avx512f", true, false),
            ("avx512vnni", true, false),
            ("avxvnni", false, false),
        ];
        assert_eq!(missing(&table), ["avx512f", "avx512vnni"]);
        assert!(missing(&table[..1]).is_empty());
    }
}
