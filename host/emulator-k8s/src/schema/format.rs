//! The string `format`s a CRD schema may name and the API server checks
//! (kube-openapi's `strfmt` registry, as apiextensions-apiserver configures
//! it). A format the API server does not check for strings — `int32`,
//! `int64`, `double` and any name it does not know — passes, as it does
//! there.

use std::net::{Ipv4Addr, Ipv6Addr};

use base64::Engine as _;

/// Whether `value` is a valid `format`; `None` where the format is not one
/// the API server checks.
pub(super) fn conforms(format: &str, value: &str) -> Option<bool> {
    Some(match format {
        "date-time" | "datetime" => is_date_time(value),
        "date" => is_date(value),
        "uuid" => is_uuid(value),
        "byte" => base64::engine::general_purpose::STANDARD
            .decode(value)
            .is_ok(),
        "ipv4" => value.parse::<Ipv4Addr>().is_ok(),
        "ipv6" => value.parse::<Ipv6Addr>().is_ok(),
        _ => return None,
    })
}

/// RFC 3339 `full-date`: a real day of a real month.
fn is_date(value: &str) -> bool {
    let bytes = value.as_bytes();
    bytes.len() == 10
        && bytes[4] == b'-'
        && bytes[7] == b'-'
        && value.parse::<jiff::civil::Date>().is_ok()
}

/// RFC 3339 `date-time` as strfmt's `IsDateTime` reads it: a date, `T`, a
/// time with optional fraction, and `Z` or a numeric offset.
fn is_date_time(value: &str) -> bool {
    let Some((date, time)) = value.split_once(['T', 't']) else {
        return false;
    };
    if !is_date(date) {
        return false;
    }
    let (clock, zone) = match time.find(['Z', 'z', '+', '-']) {
        Some(at) => time.split_at(at),
        None => return false,
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, "0"));
    let numbers: Vec<&str> = hms.split(':').collect();
    let two_digits = |s: &&str, max: u32| s.len() == 2 && s.parse::<u32>().is_ok_and(|n| n <= max);
    let clock_ok = numbers.len() == 3
        && two_digits(&numbers[0], 23)
        && two_digits(&numbers[1], 59)
        && two_digits(&numbers[2], 60)
        && !fraction.is_empty()
        && fraction.bytes().all(|b| b.is_ascii_digit());
    let zone_ok = match zone {
        "Z" | "z" => true,
        offset => {
            let parts: Vec<&str> = offset[1..].split(':').collect();
            parts.len() == 2 && two_digits(&parts[0], 23) && two_digits(&parts[1], 59)
        }
    };
    clock_ok && zone_ok
}

fn is_uuid(value: &str) -> bool {
    let groups: Vec<&str> = value.split('-').collect();
    groups.len() == 5
        && groups
            .iter()
            .zip([8, 4, 4, 4, 12])
            .all(|(g, len)| g.len() == len && g.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::conforms;

    #[test]
    fn date_times_are_rfc_3339_with_a_zone() {
        for good in [
            "2026-12-05T23:49:44Z",
            "2026-12-05t23:49:44.123456z",
            "2024-02-29T00:00:00+05:30",
            "2026-06-30T23:59:60-00:00",
        ] {
            assert_eq!(conforms("date-time", good), Some(true), "{good}");
        }
        for bad in [
            "tomorrow",
            "2026-12-05",
            "2026-12-05T23:49:44",
            "2026-02-30T00:00:00Z",
            "2026-12-05T24:00:00Z",
            "2026-12-05T23:49:44.Z",
            "2026-12-05 23:49:44Z",
            "2026-12-05T23:49:44+0530",
        ] {
            assert_eq!(conforms("date-time", bad), Some(false), "{bad}");
        }
    }

    #[test]
    fn other_checked_formats_and_unchecked_ones() {
        assert_eq!(
            conforms("uuid", "9f1c6a3e-0b7d-4c55-8a8e-3f2d1c0b9a87"),
            Some(true)
        );
        assert_eq!(
            conforms("uuid", "9f1c6a3e0b7d4c558a8e3f2d1c0b9a87"),
            Some(false)
        );
        assert_eq!(conforms("byte", "c2FuZGZsZWV0"), Some(true));
        assert_eq!(conforms("byte", "not base64!"), Some(false));
        assert_eq!(conforms("ipv4", "127.0.0.1"), Some(true));
        assert_eq!(conforms("ipv6", "127.0.0.1"), Some(false));
        assert_eq!(conforms("date", "2026-12-05"), Some(true));
        assert_eq!(conforms("int32", "anything"), None);
    }
}
