//! The `blis-sweep` binary: everything lives in the library; this only
//! dispatches to the CLI.

fn main() -> std::process::ExitCode {
    blis_sweep::cli::main()
}
