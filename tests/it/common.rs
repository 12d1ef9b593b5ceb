//! Helpers shared by the integration tests.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root; tests run the binary from here, as the README does.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `gepa-lab ARGS` from the repository root.
pub fn gepa_lab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gepa-lab"))
        .args(args)
        .current_dir(root())
        .env_remove("GEPA_LAB_MODEL_WORD")
        .env_remove("GEPA_LAB_CREDITS_PER_CALL")
        .output()
        .expect("the gepa-lab binary runs")
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `validate --json` of one file: the diagnostics array and the exit code.
pub fn validate_json(file: &Path) -> (serde_json::Value, i32) {
    let output = gepa_lab(&["validate", "--json", file.to_str().expect("UTF-8 path")]);
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|err| panic!("validate --json printed JSON ({err}): {}", stdout(&output)));
    (report[0].clone(), output.status.code().expect("exited"))
}
