//! The tests of `LocalWheel`: against a reference model (`model.rs`), and case by case
//! (`cases.rs`; with remote handles, `remote.rs`).

mod cases;
mod model;
mod remote;
