//! Kubernetes resource quantities (`500m`, `2`, `1.5`, `512Mi`, `1G`, `1e3`) as numbers:
//! CPU in millicores, everything else in bytes (or units).

/// A quantity scaled by 1000 (millis): `cpu: 500m` is 500, `memory: 1Ki` is 1_024_000.
pub(crate) fn milli(text: &str) -> Option<u128> {
    let text = text.trim();
    let suffixes: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    let (number, scale) = suffixes
        .iter()
        .find_map(|(s, f)| text.strip_suffix(s).map(|n| (n, *f)))
        .unwrap_or((text, 1.0));
    let value: f64 = number.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    Some((value * scale * 1000.0).round() as u128)
}

/// A quantity in whole units (bytes, pods), rounded up.
pub(crate) fn units(text: &str) -> Option<u128> {
    milli(text).map(|m| m.div_ceil(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_and_memory_quantities_parse() {
        assert_eq!(milli("500m"), Some(500));
        assert_eq!(milli("2"), Some(2000));
        assert_eq!(milli("1.5"), Some(1500));
        assert_eq!(units("512Mi"), Some(512 * 1024 * 1024));
        assert_eq!(units("1G"), Some(1_000_000_000));
        assert_eq!(units("1e3"), Some(1000));
        assert_eq!(milli("lots"), None);
        assert_eq!(milli("-1"), None);
    }
}
