//! gepa-lab: run prompt-optimization (GEPA) experiments, replay the prompts they find on held-out
//! rows, and report the results. The flow and the module map, with what each module may use, are
//! in docs/architecture.md; each module's own comment says what it owns.

pub mod account;
pub mod cli;
pub mod cpu;
pub mod dataset;
pub mod engine;
pub mod env;
pub mod evolution;
pub mod experiment;
pub mod http;
pub mod inference;
pub mod input;
pub mod local;
pub mod prompt;
pub mod report;
pub mod runner;
pub mod score;
pub mod server;
pub mod store;
pub mod suggest;
pub mod tracking;
pub mod view;
pub mod wallet;
