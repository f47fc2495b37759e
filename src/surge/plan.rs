//! The surge planner (pure).
