//! Cluster API IPAM provider for in-cluster pools.
#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

pub mod api;
pub mod apiserver;
pub mod capi;
pub mod cli;
pub mod compact;
pub mod controllers;
pub mod error;
pub mod index;
pub mod ipam;
pub mod leader;
pub mod manager;
pub mod metrics;
pub mod runtime;
pub mod server;
#[cfg(test)]
mod sim;
pub mod telemetry;
pub mod webhooks;
