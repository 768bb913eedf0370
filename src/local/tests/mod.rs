//! The tests of `LocalWheel`: against a reference model (`model.rs`), and case by case
//! (`cases.rs`).

mod cases;
mod model;
