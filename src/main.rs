#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    robots_proxy::cli::main()
}
