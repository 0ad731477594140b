#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    handoff::cli::main()
}
