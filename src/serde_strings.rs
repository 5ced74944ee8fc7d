//! With feature `serde`: [`Quota`] and [`AlgorithmKind`] (de)serialise as
//! the strings users write (`"100/m burst=20"`, `"sliding_window_counter"`),
//! through their `Display` and `FromStr`.

use crate::{AlgorithmKind, Quota};
use serde::de::{Deserialize, Deserializer, Error};
use serde::ser::{Serialize, Serializer};

impl Serialize for Quota {
    /// The canonical text (`"100/1m burst=20"`), which parses back to an
    /// equal quota.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quota {
    /// Any text [`Quota::from_str`](std::str::FromStr) accepts.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(D::Error::custom)
    }
}

impl Serialize for AlgorithmKind {
    /// The canonical name (`"token_bucket"`).
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for AlgorithmKind {
    /// Any name [`AlgorithmKind`] parses.
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        text.parse().map_err(D::Error::custom)
    }
}
