#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| handoff::fuzzing::nats_server_ops(data));
