//! gepa-lab: run prompt-optimization (GEPA) experiments, replay the prompts they find on held-out
//! rows, and report the results. The flow and the module map, with what each module may use, are
//! in docs/architecture.md; each module's own comment says what it owns.
//!
//! This package is the command line (`cli`, and `src/main.rs`); every other module is a crate of
//! its own under `crates/` (`gepa-lab-<module>`), re-exported here under its module name, so that
//! `crate::engine::...` in `cli` and `gepa_lab::engine::...` in the tests name what they named when
//! they were modules of this crate.

pub use gepa_lab_account as account;
pub use gepa_lab_cpu as cpu;
pub use gepa_lab_dataset as dataset;
pub use gepa_lab_engine as engine;
pub use gepa_lab_env as env;
pub use gepa_lab_evolution as evolution;
pub use gepa_lab_experiment as experiment;
pub use gepa_lab_http as http;
pub use gepa_lab_inference as inference;
pub use gepa_lab_input as input;
pub use gepa_lab_local as local;
pub use gepa_lab_prompt as prompt;
pub use gepa_lab_report as report;
pub use gepa_lab_runner as runner;
pub use gepa_lab_score as score;
pub use gepa_lab_server as server;
pub use gepa_lab_store as store;
pub use gepa_lab_suggest as suggest;
pub use gepa_lab_tracking as tracking;
pub use gepa_lab_view as view;
pub use gepa_lab_wallet as wallet;

pub mod cli;
