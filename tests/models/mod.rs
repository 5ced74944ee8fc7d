//! Sequential reference models of the five algorithms, one module each,
//! shared by the property tests (`tests/model_*.rs`, through `mod models;`)
//! and the differential fuzz targets (`fuzz/`, through `#[path]`), so that
//! there is one copy of each model.
//!
//! Every model is written from the algorithm's definition, independently of
//! the crate's decision cores (plain lists of admissions, `u128` maths,
//! brute-force searches), and offers the same small interface, [`Model`]:
//! built from a [`Quota`], it decides one request of a cost at a time and
//! returns every field of the decision as an [`Outcome`]. Each module's docs
//! say which inputs the model covers (for example, times that never go back).

// Each test includes every model but drives one.
#![allow(dead_code)]

pub mod fixed_window;
pub mod leaky_bucket;
pub mod sliding_window_counter;
pub mod sliding_window_log;
pub mod token_bucket;

use rategate::{CheckError, Decision, Quota};
use std::collections::HashMap;

/// Every field of a decision, as a model computes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Outcome {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    pub reset_after: u64,
    pub retry_after: u64,
    pub delay: u64,
}

impl Outcome {
    /// The fields of a real decision, to compare with a model's.
    pub fn of(d: &Decision) -> Outcome {
        Outcome {
            allowed: d.is_allowed(),
            limit: d.limit(),
            remaining: d.remaining(),
            reset_after: d.reset_after_nanos(),
            retry_after: d.retry_after_nanos(),
            delay: d.delay_nanos(),
        }
    }
}

/// A reference model of one key's state under one algorithm.
pub trait Model: Clone {
    /// A key never seen, for `quota` (which the algorithm accepts).
    fn new(quota: &Quota) -> Self;

    /// Decides a request of `cost` at `now` (nanoseconds since the clock's
    /// origin) and records it if admitted, as `check_n` does.
    fn request(&mut self, now: u64, cost: u32) -> Result<Outcome, CheckError>;

    /// What [`request`](Model::request) would decide, recording nothing, as
    /// `peek_n` does.
    fn peek(&self, now: u64, cost: u32) -> Result<Outcome, CheckError> {
        self.clone().request(now, cost)
    }

    /// Gives back up to `cost` at `now` as `refund` does, written from the
    /// algorithm's documented refund semantics; returns how much was given
    /// back. Covers times that never go back.
    fn refund(&mut self, now: u64, cost: u32) -> u32;
}

/// A model whose quota can change at run time, keeping its history, as
/// `Adjustable` documents: the counting algorithms keep their counts.
pub trait Retune {
    /// From now on, decide under `quota` (for window models: the same
    /// period).
    fn set_quota(&mut self, quota: &Quota);
}

/// A model that can say when a key carries no information (a keyed
/// limiter's sweep may then drop it).
pub trait Idle {
    /// Whether the key would decide every future request as a new one.
    fn is_idle(&self, now: u64) -> bool;
}

/// One model per key, for keyed-limiter tests: a key is kept once it has
/// admitted a cost; any other key decides as `fresh` does.
#[derive(Debug)]
pub struct Keyed<M> {
    fresh: M,
    keys: HashMap<u8, M>,
    /// The latest sweep's time: a key not held decides no earlier.
    swept_at: u64,
}

impl<M: Clone + Idle> Keyed<M> {
    /// Keys that all start as `fresh`.
    pub fn new(fresh: M) -> Keyed<M> {
        Keyed {
            fresh,
            keys: HashMap::new(),
            swept_at: 0,
        }
    }

    /// The time a request for `key` at `now` is decided at: a key not held
    /// counts a reading earlier than the latest sweep as the sweep's time.
    pub fn time_for(&self, key: u8, now: u64) -> u64 {
        if self.keys.contains_key(&key) {
            now
        } else {
            now.max(self.swept_at)
        }
    }

    /// Decides for `key` with `decide` on its model (a copy of `fresh` for a
    /// new key), keeping the key if `record` and a cost was admitted.
    pub fn decide_with(
        &mut self,
        key: u8,
        cost: u32,
        record: bool,
        decide: impl FnOnce(&mut M) -> Result<Outcome, CheckError>,
    ) -> Result<Outcome, CheckError> {
        let mut model = self
            .keys
            .get(&key)
            .cloned()
            .unwrap_or_else(|| self.fresh.clone());
        let got = decide(&mut model);
        if record && cost > 0 && got.is_ok_and(|o| o.allowed) {
            self.keys.insert(key, model);
        }
        got
    }

    /// The model every new key starts from.
    pub fn fresh(&self) -> &M {
        &self.fresh
    }

    /// Whether `key` has admitted a cost (and was not forgotten).
    pub fn holds(&self, key: u8) -> bool {
        self.keys.contains_key(&key)
    }

    /// Drops these keys, as a sweep at `now` does.
    pub fn sweep(&mut self, now: u64, keys: &[u8]) {
        self.swept_at = self.swept_at.max(now);
        self.forget(keys);
    }

    /// Drops these keys.
    pub fn forget(&mut self, keys: &[u8]) {
        self.keys.retain(|k, _| !keys.contains(k));
    }

    /// Keys whose models are idle at `now`, sorted.
    pub fn idle_keys(&self, now: u64) -> Vec<u8> {
        let mut idle: Vec<u8> = self
            .keys
            .iter()
            .filter(|(_, k)| k.is_idle(now))
            .map(|(&key, _)| key)
            .collect();
        idle.sort_unstable();
        idle
    }
}
