#![forbid(unsafe_code)]

// jemalloc returns freed memory to the system promptly; its settings are compiled in from
// .cargo/config.toml (why: see there).
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    handoff::main()
}
