//! The envelope of a Prometheus API answer (`status`, `data`, `errorType`,
//! `error`) read with serde seeds, so that `data` is parsed by the caller's
//! seed as it streams ([`EnvelopeSeed`], [`OptionSeed`], [`ListSeed`]).

use std::cell::Cell;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// An API answer: `status`, `data` (parsed by the seed), `errorType`, `error`.
pub(super) struct Envelope<T> {
    pub(super) status: String,
    pub(super) data: Option<T>,
    pub(super) error_type: Option<String>,
    pub(super) error: Option<String>,
}

/// Parses an answer's envelope, handing `data` to its seed.
pub(super) struct EnvelopeSeed<S> {
    pub(super) data: S,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for EnvelopeSeed<S> {
    type Value = Envelope<S::Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for EnvelopeSeed<S> {
    type Value = Envelope<S::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a Prometheus API answer (an object with `status`)")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seed = Some(self.data);
        let (mut status, mut data, mut error_type, mut error) = (None, None, None, None);
        while let Some(k) = map.next_key::<String>()? {
            match k.as_str() {
                "status" => status = Some(map.next_value::<String>()?),
                "errorType" => error_type = map.next_value()?,
                "error" => error = map.next_value()?,
                "data" => match seed.take() {
                    Some(s) => data = Some(map.next_value_seed(s)?),
                    None => return Err(de::Error::duplicate_field("data")),
                },
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Envelope {
            status: status.ok_or_else(|| de::Error::missing_field("status"))?,
            data,
            error_type,
            error,
        })
    }
}

/// `null` or what `S` parses.
pub(super) struct OptionSeed<S>(pub(super) S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OptionSeed<S> {
    type Value = Option<S::Value>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OptionSeed<S> {
    type Value = Option<S::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("`data`")
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}

/// A list whose elements are taken, skipped or refused one by one as they
/// are parsed, so a huge answer stops at the first element over the budget.
pub(super) struct ListSeed<'a, T> {
    pub(super) take: &'a dyn Fn(&T) -> Take,
    /// Set when an element did not fit: the parse error that follows is that.
    pub(super) over: &'a Cell<bool>,
}

impl<'de, T: Deserialize<'de>> DeserializeSeed<'de> for ListSeed<'_, T> {
    type Value = Vec<T>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for ListSeed<'_, T> {
    type Value = Vec<T>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a list")
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::new();
        while let Some(x) = seq.next_element::<T>()? {
            match (self.take)(&x) {
                Take::Keep => out.push(x),
                Take::Skip => {}
                Take::Over => {
                    self.over.set(true);
                    return Err(de::Error::custom("over the memory budget"));
                }
            }
        }
        Ok(out)
    }
}

/// What the parse does with one element of a list as it reads it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Take {
    Keep,
    /// Not wanted (another batch's member): dropped, not charged.
    Skip,
    /// Over the memory budget: the parse stops.
    Over,
}
