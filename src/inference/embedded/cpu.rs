//! The CPU instructions llama.cpp was compiled to use, checked against the CPU before the model
//! loads.
//!
//! ggml is compiled with the `GGML_*` options of `.cargo/config.toml` (or of the environment of
//! the build, which wins): AVX2 and AVX-512 with VNNI by default, since every machine of this
//! project has them and with AVX-512 llama.cpp evaluates prompts about 1.5 times as fast (the
//! README's batched replay, 1.33 times). A CPU without one of them would stop the process with
//! an illegal instruction the first time ggml runs; this check names what is missing and how to
//! build without it instead. The options are read when gepa-lab is compiled, from the same
//! environment cargo gives llama.cpp's build, so the check follows whatever the build used.
//! `scripts/check-cpu.sh` holds the same table in /proc/cpuinfo's names, to stop a build before
//! it starts.

/// A `GGML_*` build option, its value when gepa-lab was compiled, and the CPU features its
/// compiler flags assume (`ggml/src/ggml-cpu/CMakeLists.txt`).
#[derive(Debug, Clone, Copy)]
pub(super) struct BuildOption {
    pub variable: &'static str,
    pub value: Option<&'static str>,
    pub features: &'static [&'static str],
}

impl BuildOption {
    /// Whether the build turned this option on (cmake reads ON, TRUE, YES, Y and 1 as true).
    fn on(&self) -> bool {
        self.value.is_some_and(|v| {
            ["on", "true", "yes", "y", "1"].contains(&v.trim().to_ascii_lowercase().as_str())
        })
    }
}

/// A [`BuildOption`] for `GGML_*` variable `$variable`, with its value at compile time.
macro_rules! build_option {
    ($variable:literal, $features:expr) => {
        BuildOption {
            variable: $variable,
            value: option_env!($variable),
            features: $features,
        }
    };
}

/// The instruction-set options ggml's CPU backend reads on x86-64, as this build set them.
pub(super) const BUILD_OPTIONS: [BuildOption; 11] = [
    build_option!("GGML_SSE42", &["sse4.2"]),
    build_option!("GGML_AVX", &["avx"]),
    build_option!("GGML_AVX2", &["avx2"]),
    build_option!("GGML_AVX_VNNI", &["avxvnni"]),
    build_option!("GGML_FMA", &["fma"]),
    build_option!("GGML_F16C", &["f16c"]),
    build_option!("GGML_BMI2", &["bmi2"]),
    build_option!(
        "GGML_AVX512",
        &["avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"]
    ),
    build_option!("GGML_AVX512_VBMI", &["avx512vbmi"]),
    build_option!("GGML_AVX512_VNNI", &["avx512vnni"]),
    build_option!("GGML_AVX512_BF16", &["avx512bf16"]),
];

/// The options that are on but need a feature `has` says the CPU lacks, each with the first
/// such feature.
pub(super) fn unsupported(
    options: &[BuildOption],
    has: impl Fn(&str) -> bool,
) -> Vec<(&'static str, &'static str)> {
    options
        .iter()
        .filter(|option| option.on())
        .filter_map(|option| {
            let missing = option.features.iter().find(|feature| !has(feature))?;
            Some((option.variable, *missing))
        })
        .collect()
}

/// Whether this CPU has `feature`, one of the names in [`BUILD_OPTIONS`].
#[cfg(target_arch = "x86_64")]
fn detected(feature: &str) -> bool {
    match feature {
        "sse4.2" => std::arch::is_x86_feature_detected!("sse4.2"),
        "avx" => std::arch::is_x86_feature_detected!("avx"),
        "avx2" => std::arch::is_x86_feature_detected!("avx2"),
        "avxvnni" => std::arch::is_x86_feature_detected!("avxvnni"),
        "fma" => std::arch::is_x86_feature_detected!("fma"),
        "f16c" => std::arch::is_x86_feature_detected!("f16c"),
        "bmi2" => std::arch::is_x86_feature_detected!("bmi2"),
        "avx512f" => std::arch::is_x86_feature_detected!("avx512f"),
        "avx512cd" => std::arch::is_x86_feature_detected!("avx512cd"),
        "avx512vl" => std::arch::is_x86_feature_detected!("avx512vl"),
        "avx512dq" => std::arch::is_x86_feature_detected!("avx512dq"),
        "avx512bw" => std::arch::is_x86_feature_detected!("avx512bw"),
        "avx512vbmi" => std::arch::is_x86_feature_detected!("avx512vbmi"),
        "avx512vnni" => std::arch::is_x86_feature_detected!("avx512vnni"),
        "avx512bf16" => std::arch::is_x86_feature_detected!("avx512bf16"),
        _ => false,
    }
}

/// `Err` with the message a user needs when llama.cpp was built for instructions this CPU lacks.
/// Other architectures ignore the x86 options, so there is nothing to check there.
pub(super) fn check() -> Result<(), String> {
    #[cfg(target_arch = "x86_64")]
    {
        let missing = unsupported(&BUILD_OPTIONS, detected);
        if !missing.is_empty() {
            return Err(explain(&missing));
        }
    }
    Ok(())
}

fn explain(missing: &[(&str, &str)]) -> String {
    let named: Vec<String> = missing
        .iter()
        .map(|(variable, feature)| format!("{feature} ({variable})"))
        .collect();
    let exports: Vec<String> = missing
        .iter()
        .map(|(variable, _)| format!("{variable}=OFF"))
        .collect();
    format!(
        "llama.cpp was built for CPU instructions this CPU lacks: {}; build it without them: \
         `export {}`, then run the same cargo command again (it rebuilds llama.cpp, several minutes)",
        named.join(", "),
        exports.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn option(variable: &'static str, value: &'static str) -> BuildOption {
        let features = BUILD_OPTIONS
            .iter()
            .find(|o| o.variable == variable)
            .unwrap()
            .features;
        BuildOption {
            variable,
            value: Some(value),
            features,
        }
    }

    #[test]
    fn an_option_that_is_on_needs_every_feature_its_flags_assume() {
        let options = [option("GGML_AVX2", "ON"), option("GGML_AVX512", "ON")];
        // An AVX2 CPU without AVX-512 (most Intel laptops).
        let avx2_only = |f: &str| !f.starts_with("avx512");
        assert_eq!(
            unsupported(&options, avx2_only),
            [("GGML_AVX512", "avx512f")]
        );
        // A Skylake-X server: AVX-512 but no VNNI.
        let no_vnni = |f: &str| f != "avx512vnni";
        assert!(unsupported(&options, no_vnni).is_empty());
        let options = [option("GGML_AVX512_VNNI", "1")];
        assert_eq!(
            unsupported(&options, no_vnni),
            [("GGML_AVX512_VNNI", "avx512vnni")]
        );
    }

    #[test]
    fn an_option_that_is_off_or_unset_needs_nothing() {
        let nothing = |_: &str| false;
        let off = [option("GGML_AVX512", "OFF"), option("GGML_AVX2", "0")];
        assert!(unsupported(&off, nothing).is_empty());
        let unset = [BuildOption {
            value: None,
            ..option("GGML_AVX512", "ON")
        }];
        assert!(unsupported(&unset, nothing).is_empty());
    }

    #[test]
    fn the_message_names_each_missing_feature_and_the_variables_to_turn_off() {
        let message = explain(&[
            ("GGML_AVX512", "avx512f"),
            ("GGML_AVX512_VNNI", "avx512vnni"),
        ]);
        assert!(message.contains("avx512f (GGML_AVX512), avx512vnni (GGML_AVX512_VNNI)"));
        assert!(message.contains("`export GGML_AVX512=OFF GGML_AVX512_VNNI=OFF`"));
    }

    #[test]
    fn this_build_reads_the_options_cargo_gave_llama_cpp() {
        // .cargo/config.toml sets these for every build of this repository; an override in the
        // environment may turn one off, never unset it.
        for variable in ["GGML_AVX2", "GGML_AVX512", "GGML_AVX512_VNNI"] {
            let option = BUILD_OPTIONS.iter().find(|o| o.variable == variable);
            assert!(option.unwrap().value.is_some(), "{variable} not seen");
        }
    }
}
