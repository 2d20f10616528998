#![forbid(unsafe_code)]

/// mimalloc: a request's allocations (header maps, hyper's read buffers,
/// futures boxed out of the plain path) come from thread-local free
/// lists, cheaper than glibc's malloc for the 8 KiB buffers (docs/design.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    robots_proxy::cli::main()
}
