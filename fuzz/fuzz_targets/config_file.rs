#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| handoff::fuzzing::config_file(data));
