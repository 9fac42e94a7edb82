//! `ptlrun`: start a portals-rs job. See `ptlrun --help`.

fn main() -> std::process::ExitCode {
    portals_runtime::cli::main()
}
