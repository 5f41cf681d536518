//! Kubernetes resource quantities (`8`, `7500m`, `32Gi`, `100G`, `1e3`) as
//! numbers, for the capacity probe.

/// `text` in thousandths of its unit (CPU in millicores), when it parses.
pub(crate) fn milli(text: &str) -> Option<u64> {
    scaled(text, 1000.0)
}

/// `text` in mebibytes, when it parses.
pub(crate) fn mebibytes(text: &str) -> Option<u64> {
    scaled(text, 1.0 / f64::from(1u32 << 20))
}

/// `text` as a plain count.
pub(crate) fn count(text: &str) -> Option<u64> {
    scaled(text, 1.0)
}

fn scaled(text: &str, factor: f64) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let multiplier = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0_f64.powi(3),
        "Ti" => 1024.0_f64.powi(4),
        "Pi" => 1024.0_f64.powi(5),
        exponent if exponent.starts_with(['e', 'E']) => 10f64.powi(exponent[1..].parse().ok()?),
        _ => return None,
    };
    let value = number * multiplier * factor;
    (value.is_finite() && value >= 0.0).then_some(value.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_in_every_suffix() {
        assert_eq!(milli("8"), Some(8000));
        assert_eq!(milli("7500m"), Some(7500));
        assert_eq!(milli("0.5"), Some(500));
        assert_eq!(mebibytes("32Gi"), Some(32 * 1024));
        assert_eq!(mebibytes("1048576"), Some(1));
        assert_eq!(mebibytes("100G"), Some(95367));
        assert_eq!(count("110"), Some(110));
        assert_eq!(count("1e3"), Some(1000));
        assert_eq!(count("12Q"), None);
        assert_eq!(count("-1"), None);
    }
}
