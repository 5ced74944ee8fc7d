//! `Quota::from_str` on arbitrary text: never panics, and every accepted
//! quota prints in a canonical form that parses back to an equal quota
//! (and prints the same again).

#![no_main]

use libfuzzer_sys::fuzz_target;
use rategate::Quota;
use std::time::Duration;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let quota = match text.parse::<Quota>() {
        Ok(quota) => quota,
        Err(e) => {
            // Errors display without panicking.
            let _ = e.to_string();
            return;
        }
    };
    assert!(quota.limit() >= 1, "{text:?}: {quota:?}");
    assert!(
        u64::from(quota.limit()) <= quota.period_nanos(),
        "{text:?}: {quota:?}"
    );
    assert_ne!(quota.explicit_burst(), Some(0), "{text:?}");

    // The same quota through the builder API.
    let built = Quota::with_period(quota.limit(), Duration::from_nanos(quota.period_nanos()))
        .expect("a parsed quota is valid");
    let built = match quota.explicit_burst() {
        Some(b) => built.burst(b).expect("a parsed burst is valid"),
        None => built,
    };
    assert_eq!(built.delay(quota.delay_mode()), quota, "{text:?}");

    let canonical = quota.to_string();
    let back: Quota = canonical
        .parse()
        .unwrap_or_else(|e| panic!("{text:?} -> {quota:?} -> {canonical:?}: {e}"));
    assert_eq!(back, quota, "{text:?} -> {canonical:?}");
    assert_eq!(back.to_string(), canonical, "{text:?}");
});
