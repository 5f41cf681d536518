//! Content digests (`sha256:<64 hex>`) and the reader that computes one
//! while bytes stream through it.

use std::fmt;
use std::io::{self, Read};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A `sha256:` content digest, the only algorithm registries use for
/// images in practice (sha512 digests are refused when parsed).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

impl Digest {
    /// The digest of `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Digest::from_hasher(Sha256::new_with_prefix(bytes))
    }

    pub(crate) fn from_hasher(hasher: Sha256) -> Self {
        Digest {
            hex: format!("{:x}", hasher.finalize()),
        }
    }

    /// The 64 lowercase hex digits, without the algorithm: what the store
    /// names files and directories by.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The first 12 hex digits, as `docker pull` shows layers.
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }

    /// A digest from its 64 hex digits alone (a store file name).
    pub(crate) fn from_hex(hex: &str) -> Option<Self> {
        (hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
        .then(|| Digest {
            hex: hex.to_string(),
        })
    }
}

impl FromStr for Digest {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let Some((algorithm, hex)) = text.split_once(':') else {
            return Err(format!(
                "{text:?} is not a digest (want sha256:<64 hex digits>)"
            ));
        };
        if algorithm != "sha256" {
            return Err(format!(
                "digest {text:?} uses {algorithm}; only sha256 is supported"
            ));
        }
        Digest::from_hex(hex)
            .ok_or_else(|| format!("{text:?} is not a digest (want sha256:<64 hex digits>)"))
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// Hashes and counts what is read through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Sha256::new(),
            count: 0,
        }
    }

    /// Reads what is left to the end, so the digest covers every byte.
    pub(crate) fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((Digest::from_hasher(self.hasher), self.count))
    }

    pub(crate) fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_sha256_only() {
        let text = format!("sha256:{}", "ab".repeat(32));
        let digest: Digest = text.parse().unwrap();
        assert_eq!(digest.to_string(), text);
        assert_eq!(digest.short(), "abababababab");
        assert!(
            "sha512:00"
                .parse::<Digest>()
                .unwrap_err()
                .contains("only sha256")
        );
        assert!("sha256:ABAB".parse::<Digest>().is_err());
        assert!(
            format!("sha256:{}", "AB".repeat(32))
                .parse::<Digest>()
                .is_err()
        );
    }

    #[test]
    fn the_reader_hashes_everything_read_through_it() {
        let mut reader = HashingReader::new(&b"hello world"[..]);
        let mut first = [0u8; 5];
        reader.read_exact(&mut first).unwrap();
        let (digest, count) = reader.finish().unwrap();
        assert_eq!(digest, Digest::of(b"hello world"));
        assert_eq!(count, 11);
    }
}
