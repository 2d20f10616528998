//! Resilience: load with faulty origins, hostile clients and origins,
//! floods of wrong passwords and of `100 Continue`, running out of file
//! descriptors, robots.txt outages, the robots.txt fetch budget and a
//! fleet's shared Redis coming and going, and a fleet on a Redis Cluster.
//!
//! `load_fault` checks this process's resident memory after its run: keep
//! tests that hold much memory for long out of this binary.

#[path = "../support/mod.rs"]
mod support;

mod auth_flood;
mod descriptor_budget;
mod fetch_share;
mod fleet;
mod fleet_cluster;
mod fleet_flow;
mod fleet_forged;
mod fleet_heartbeat;
mod fleet_key;
mod fleet_lost_slots;
mod fleet_memory;
mod fleet_rate;
mod fleet_shared;
mod fleet_tdmrep;
mod fleet_witness;
mod hostile_clients;
mod informational_flood;
mod load_fault;
mod origin_signals;
mod queue_moves_up;
mod recovery;
mod robots_fetch_budget;
