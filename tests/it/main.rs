//! Integration tests: the real `gepa-lab` binary and the real HTTP clients, against
//! `gepa-lab serve` on 127.0.0.1 where a service is needed. One test crate with a module per
//! feature, because every test binary links the whole dependency tree.
mod account;
mod checkpoint;
mod cli;
mod common;
mod compare_prompts;
mod dataset_files;
mod docs;
#[cfg(feature = "embedded")]
mod embedded;
mod evolution;
mod faults;
mod fuzz;
mod inference;
mod init;
mod layering;
#[cfg(feature = "embedded")]
mod llama_server;
mod objectives;
mod plan;
mod prompt_parts;
mod providers;
mod report;
mod run;
mod setup;
mod structure;
mod tracking;
mod validate;
mod view;
