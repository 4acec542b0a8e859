//! A bond listed in a `particles` body: `[i, j]` (rest length the initial distance) or
//! `[i, j, L0]` with an explicit rest length (MODEL §13: seed 004's springs are not at rest at
//! t = 0). Written back as it was given, so a scenario without rest lengths serialises as before.

use serde::de::{self, Deserializer, IgnoredAny, SeqAccess, Visitor};
use serde::ser::{SerializeSeq, Serializer};
use serde::{Deserialize, Serialize};
use std::fmt;

/// One explicit bond: particle indices within the body and an optional rest length.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BondSpec {
    pub i: u32,
    pub j: u32,
    /// The axial law's rest length `L0` (length units); `None`: the initial distance.
    pub rest_length: Option<f64>,
}

impl Serialize for BondSpec {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(2 + self.rest_length.is_some() as usize))?;
        seq.serialize_element(&self.i)?;
        seq.serialize_element(&self.j)?;
        if let Some(l) = self.rest_length {
            seq.serialize_element(&l)?;
        }
        seq.end()
    }
}

impl<'de> Deserialize<'de> for BondSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<BondSpec, D::Error> {
        struct Spec;
        impl<'de> Visitor<'de> for Spec {
            type Value = BondSpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a bond `[i, j]` or `[i, j, rest_length]` (particle indices from 0)")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<BondSpec, A::Error> {
                let i: u32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(0, &self))?;
                let j: u32 = seq.next_element()?.ok_or_else(|| de::Error::invalid_length(1, &self))?;
                let rest_length: Option<f64> = seq.next_element()?;
                if seq.next_element::<IgnoredAny>()?.is_some() {
                    return Err(de::Error::invalid_length(4, &self));
                }
                Ok(BondSpec { i, j, rest_length })
            }
        }
        d.deserialize_seq(Spec)
    }
}

/// The problem with a given rest length, if any: it must be a finite number > 0.
pub(crate) fn rest_length_fault(l0: f64) -> Option<String> {
    (!(l0.is_finite() && l0 > 0.0)).then(|| format!("rest length L0 = {l0} must be a finite number > 0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both forms read and write back unchanged; a fourth value, a fractional index and a
    /// missing index are refused.
    #[test]
    fn bond_forms() {
        let b: Vec<BondSpec> = serde_json::from_str("[[0, 1], [2, 3, 1.5]]").unwrap();
        assert_eq!(b[0], BondSpec { i: 0, j: 1, rest_length: None });
        assert_eq!(b[1], BondSpec { i: 2, j: 3, rest_length: Some(1.5) });
        assert_eq!(serde_json::to_string(&b).unwrap(), "[[0,1],[2,3,1.5]]");
        for bad in ["[[0, 1, 2, 3]]", "[[0.5, 1]]", "[[0]]", "[[0, 1, \"x\"]]"] {
            assert!(serde_json::from_str::<Vec<BondSpec>>(bad).is_err(), "{bad}");
        }
        assert!(rest_length_fault(0.0).is_some() && rest_length_fault(-1.0).is_some());
        assert!(rest_length_fault(1e-3).is_none());
    }
}
