//! The `RedisAlgorithm` implementations, one file per algorithm.

mod fixed_window;
mod leaky_bucket;
mod sliding_window_counter;
mod sliding_window_log;
mod token_bucket;
