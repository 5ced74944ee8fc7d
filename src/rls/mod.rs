//! An Envoy rate-limit service (RLS v3) for rategate's limiters (feature
//! `rls`): [`config`], its configuration in envoyproxy/ratelimit's YAML
//! format.

pub mod config;
