//! gepa-lab: run prompt-optimization (GEPA) experiments, replay the prompts they find on held-out
//! rows, and report the results. See `DESIGN.md` in the README for the flow; each module's own
//! comment says what it owns.

pub mod cli;
pub mod http;
pub mod inference;
pub mod server;
