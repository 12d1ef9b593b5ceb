use std::process::ExitCode;

fn main() -> ExitCode {
    gepa_lab::cli::main()
}
