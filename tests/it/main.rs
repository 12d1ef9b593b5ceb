//! Integration tests: the real binary and the real HTTP clients against `gepa-lab serve` on
//! 127.0.0.1. One test crate, so everything is linked once.
mod cli;
mod common;
mod inference;
