//! Cluster API IPAM provider for in-cluster pools.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod cli;
pub mod ipam;
pub mod manager;
pub mod telemetry;
