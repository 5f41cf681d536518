//! The engine against the real local backend and the built-in plugins:
//! strategies, timeouts, resumes and the breaker. One test binary, one module
//! per concern.

mod both_paths;
mod breaker;
mod calc;
mod contract;
mod fixture;
mod grading;
mod groups;
mod hostile;
mod observed;
mod prepare;
mod pulls;
mod recording;
mod recycle;
mod reload;
mod replace;
mod reset;
mod resume;
mod strategies;
mod timeouts;
