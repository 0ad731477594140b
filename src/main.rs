#![forbid(unsafe_code)]

#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    return_memory_promptly();
    handoff::cli::main()
}

/// Purge freed memory within a second, in the background, so a process that handled large
/// entries returns to its idle size instead of keeping its peak (jemalloc's default waits ten
/// seconds and only purges when the process allocates again).
fn return_memory_promptly() {
    use tikv_jemalloc_ctl::{Access, AsName};
    let _ = tikv_jemalloc_ctl::background_thread::write(true);
    let _ = b"arenas.dirty_decay_ms\0".name().write(1000isize);
    let _ = b"arenas.muzzy_decay_ms\0".name().write(0isize);
    for arena in 0..tikv_jemalloc_ctl::arenas::narenas::read().unwrap_or(0) {
        let _ = format!("arena.{arena}.dirty_decay_ms\0").as_bytes().name().write(1000isize);
        let _ = format!("arena.{arena}.muzzy_decay_ms\0").as_bytes().name().write(0isize);
    }
}
