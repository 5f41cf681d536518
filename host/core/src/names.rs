//! Names made from arbitrary strings (task ids, image and template names):
//! safe as file names, and never the same for two different strings.

use sha2::{Digest, Sha256};

/// A file name for `name`: safe characters are kept (at most 64), and a
/// name that needed changes gets the first 8 hex digits of its sha256, so
/// `col/a` and `col_a` never share a file. No leading dot: no hidden files,
/// no `.` or `..`.
pub fn file_stem(name: &str) -> String {
    let safe: String = name
        .chars()
        .take(64)
        .enumerate()
        .map(|(i, c)| {
            let allowed = c.is_ascii_alphanumeric() || c == '-' || c == '_' || (c == '.' && i > 0);
            if allowed { c } else { '_' }
        })
        .collect();
    if safe == name {
        safe
    } else {
        let digest = format!("{:x}", Sha256::digest(name.as_bytes()));
        format!("{safe}-{}", &digest[..8])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_stems_keep_safe_names_and_separate_the_rest() {
        assert_eq!(file_stem("django-4.2_x"), "django-4.2_x");
        let slash = file_stem("col/a");
        let underscore = file_stem("col_a");
        assert!(slash.starts_with("col_a-"), "{slash}");
        assert_ne!(slash, underscore);
        assert!(file_stem("..").starts_with("_.-"), "{}", file_stem(".."));
        assert!(file_stem(&"x".repeat(200)).len() < 80);
        assert_ne!(file_stem(&"x".repeat(200)), file_stem(&"x".repeat(201)));
        // The hash is sha256's, stable across builds and toolchains.
        assert_eq!(file_stem("a b"), "a_b-c8687a08");
    }
}
