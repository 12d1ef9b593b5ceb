use std::process::ExitCode;

fn main() -> ExitCode {
    // First, before any code that may use an instruction this CPU lacks (crates/cpu).
    if let Err(message) = gepa_lab::cpu::check() {
        eprintln!("error: {message}");
        return gepa_lab::cli::ExitStatus::Failure.into();
    }
    gepa_lab::cli::main()
}
