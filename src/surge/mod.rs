//! Surge on blocked evictions and cordons (behaviour.md sections 5 and 6).

pub mod plan;
pub mod signals;
pub mod worker;
