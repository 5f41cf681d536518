//! The swebench component through the test kit, one test binary: the
//! golden data of both harness versions, the parity and differential
//! cases, real transcripts, and the contract's refusals. (One binary, not
//! one per file: each links the test kit's wasmtime.)

mod api;
mod common;
mod differential;
mod golden_eval_scripts;
mod golden_grading;
mod golden_parsers;
mod parity;
mod real_logs;
