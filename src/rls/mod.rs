//! An Envoy rate-limit service (RLS v3) on rategate's limiters (feature
//! `rls`): [`config`], its configuration in envoyproxy/ratelimit's YAML
//! format; [`service`], the decisions; [`server`], the gRPC server and
//! the configuration's hot reload. The binary `rategate-rls` serves it.

pub mod config;
pub mod server;
pub mod service;
