//! Names made from arbitrary strings (task ids, image and template names):
//! safe as file names or as Kubernetes object names, and never the same for
//! two different strings. Hashes are sha256, stable across builds and
//! toolchains, so a rerun finds what an earlier run made.

use sha2::{Digest, Sha256};

use crate::run::RunId;

/// Hex digits of sha256 in a template name.
const TEMPLATE_HASH_DIGITS: usize = 10;

/// The name of run `run_id`'s template for `image` on every backend: `sf-`,
/// the image in lowercase letters, digits and `-` (at most 40), and 10 hex
/// digits of sha256 over the run and the image — a DNS-1123 label (at most
/// 63 characters), distinct per run and image.
pub fn template_name(run_id: &RunId, image: &str) -> String {
    let stem: String = image
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let stem: String = stem
        .split('-')
        .filter(|part| !part.is_empty())
        .collect::<Vec<_>>()
        .join("-")
        .chars()
        .take(40)
        .collect();
    let stem = stem.trim_end_matches('-');
    let mut hasher = Sha256::new();
    hasher.update(run_id.as_str().as_bytes());
    hasher.update([0]);
    hasher.update(image.as_bytes());
    let digest = format!("{:x}", hasher.finalize());
    let hash = &digest[..TEMPLATE_HASH_DIGITS];
    if stem.is_empty() {
        format!("sf-{hash}")
    } else {
        format!("sf-{stem}-{hash}")
    }
}

/// Hex digits of the sha256 a changed name carries: 64 bits, so no two of
/// millions of names share a file by chance.
const STEM_HASH_DIGITS: usize = 16;

/// A file name for `name`, distinct for distinct names: a name of safe
/// characters (at most 64) is kept as it is, and any other is made safe and
/// gets `~` and the start of its sha256. A kept name has no `~`, so no name
/// can be given the file of a changed one (`a b` becomes `a_b~c8687a08…`,
/// which the name `a_b-c8687a08` cannot reach). No leading dot: no hidden
/// files, no `.` or `..`.
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
        format!("{safe}~{}", &digest[..STEM_HASH_DIGITS])
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
        assert!(slash.starts_with("col_a~"), "{slash}");
        assert_ne!(slash, underscore);
        assert!(file_stem("..").starts_with("_.~"), "{}", file_stem(".."));
        assert!(file_stem(&"x".repeat(200)).len() < 90);
        assert_ne!(file_stem(&"x".repeat(200)), file_stem(&"x".repeat(201)));
        // The hash is sha256's, stable across builds and toolchains.
        assert_eq!(file_stem("a b"), "a_b~c8687a08aa5d6ed2");
    }

    #[test]
    fn a_safe_name_never_takes_the_file_of_a_changed_one() {
        // Each pair once shared a file: the second is what the first became.
        for (changed, safe) in [
            ("a b", "a_b-c8687a08"),
            ("a b", &file_stem("a b")),
            (&"y".repeat(65), &file_stem(&"y".repeat(65))),
        ] {
            assert_ne!(
                file_stem(changed),
                file_stem(safe),
                "{changed:?} and {safe:?}"
            );
        }
        let stems: std::collections::BTreeSet<String> =
            ["a b", "a_b", "a/b", "a\nb", "a\u{1b}b", "a~b", "a.b", ".ab"]
                .iter()
                .map(|name| file_stem(name))
                .collect();
        assert_eq!(stems.len(), 8, "{stems:?}");
    }

    #[test]
    fn template_names_are_stable_dns_labels_per_run_and_image() {
        let run = RunId::new("quickstart-1-abc").unwrap();
        // Pinned: a rerun after a toolchain update must find its templates.
        assert_eq!(template_name(&run, "calc"), "sf-calc-7de942bd30");
        let long = template_name(
            &run,
            "docker.io/swebench/sweb.eval.x86_64.django_1776_django-16255:latest",
        );
        assert_eq!(
            long,
            "sf-docker-io-swebench-sweb-eval-x86-64-djan-d6b86f8d5c"
        );
        for name in [template_name(&run, "calc"), long, template_name(&run, "__")] {
            assert!(name.len() <= 63, "{name}");
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !name.ends_with('-'),
                "{name}"
            );
        }
        let other_run = RunId::new("quickstart-2-abc").unwrap();
        assert_ne!(
            template_name(&run, "calc"),
            template_name(&other_run, "calc")
        );
        assert_ne!(template_name(&run, "calc"), template_name(&run, "Calc"));
    }
}
