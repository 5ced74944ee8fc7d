//! Models of the window and leaky-bucket state machines (filled in as the
//! algorithms land).
