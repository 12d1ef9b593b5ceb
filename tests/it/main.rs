//! Integration tests: the real `gepa-lab` binary, run as a user would. One test crate with a
//! module per feature, because every test binary links the whole dependency tree.
mod common;
mod dataset_files;
mod plan;
mod report;
mod validate;
