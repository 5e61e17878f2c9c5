//! The names a query accepts for its method, operator and temporal mode, decided once here:
//! the Python package reads these tables from `turbdb._core`, so the two cannot drift apart.

use crate::error::Error;

/// Every spatial method, by its JHTDB name.
pub const METHOD_NAMES: &[&str] = &[
    "none", "lag4", "lag6", "lag8", "fd4noint", "fd6noint", "fd8noint", "fd4lag4", "m1q4", "m2q8",
];

/// Other spellings of a method and the name each stands for.
pub const METHOD_ALIASES: &[(&str, &str)] = &[("nearest", "none")];

/// Every operator.
pub const OPERATOR_NAMES: &[&str] = &["field", "gradient", "hessian", "laplacian"];

/// Other spellings of an operator.
pub const OPERATOR_ALIASES: &[(&str, &str)] = &[("value", "field")];

/// Every temporal mode.
pub const TEMPORAL_NAMES: &[&str] = &["none", "pchip"];

/// Other spellings of a temporal mode (`pchipint` is JHTDB's enum name).
pub const TEMPORAL_ALIASES: &[(&str, &str)] = &[("nearest", "none"), ("pchipint", "pchip")];

/// The canonical name `name` stands for (case-insensitive), if it is one of `names` or an
/// alias of one.
pub fn canonical(
    name: &str,
    names: &[&'static str],
    aliases: &[(&str, &'static str)],
) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    names
        .iter()
        .copied()
        .find(|n| *n == lower)
        .or_else(|| aliases.iter().find(|(a, _)| *a == lower).map(|(_, n)| *n))
}

/// The error for a name that is none of `names`, listing them.
pub fn unknown(kind: &str, name: &str, names: &[&str]) -> Error {
    Error::UnknownName(format!(
        "unknown {kind} {name:?}; valid {kind}s: {}",
        names.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_alias_stands_for_a_listed_name() {
        for (aliases, names) in [
            (METHOD_ALIASES, METHOD_NAMES),
            (OPERATOR_ALIASES, OPERATOR_NAMES),
            (TEMPORAL_ALIASES, TEMPORAL_NAMES),
        ] {
            for (alias, target) in aliases {
                assert!(names.contains(target), "{alias} -> {target}");
                assert!(!names.contains(alias), "{alias} is also a name");
            }
        }
    }

    #[test]
    fn names_are_found_whatever_their_case() {
        assert_eq!(
            canonical("LAG6", METHOD_NAMES, METHOD_ALIASES),
            Some("lag6")
        );
        assert_eq!(
            canonical("PchipInt", TEMPORAL_NAMES, TEMPORAL_ALIASES),
            Some("pchip")
        );
        assert_eq!(canonical("lag5", METHOD_NAMES, METHOD_ALIASES), None);
    }
}
