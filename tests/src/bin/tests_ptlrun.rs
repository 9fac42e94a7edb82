//! The `ptlrun` launcher, built inside this package so that its tests can
//! run it (inside network namespaces, for instance).

fn main() -> std::process::ExitCode {
    portals_runtime::cli::main()
}
