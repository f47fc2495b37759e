//! Surge on blocked evictions and cordons (behaviour.md sections 5 and 6).

pub mod apply;
pub mod clock;
#[cfg(test)]
mod model;
pub mod plan;
pub mod signals;
pub mod step;
pub mod view;
pub mod worker;
pub mod writer;
