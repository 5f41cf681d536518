//! One layer blob, from its compressed bytes to an unpacked directory,
//! with both of its digests checked on the way: the compressed digest (what
//! the manifest names) over every byte read, and the uncompressed digest
//! (the config's `diff_id`) over every byte decompressed, the tar's
//! trailing blocks included.

use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use crate::digest::{Digest, HashingReader};
use crate::error::Error;
use crate::spec::Compression;
use crate::unpack::{Job, Unpacked, unpack};

/// What a layer blob is promised to be.
pub(crate) struct Expected<'a> {
    /// Its compressed digest and size, when known (not for a `docker
    /// save` layer, which only has its uncompressed digest).
    pub(crate) blob: Option<(&'a Digest, u64)>,
    /// Its uncompressed digest (the config's `diff_id`).
    pub(crate) diff_id: &'a Digest,
    /// How it is compressed; `None` to tell by its first bytes.
    pub(crate) compression: Option<Compression>,
}

/// What an unpacked layer turned out to be.
#[derive(Debug)]
pub(crate) struct Checked {
    pub(crate) blob: Digest,
    pub(crate) blob_size: u64,
    pub(crate) unpacked: Unpacked,
}

/// Unpacks the blob read from `source` into the empty directory `root`
/// and checks its digests.
pub(crate) fn unpack_blob(
    source: impl Read,
    root: &Path,
    job: &Job,
    expected: &Expected<'_>,
) -> Result<Checked, Error> {
    let corrupt = |e: io::Error| Error::CorruptLayer {
        reference: job.reference.clone(),
        layer: job.layer.clone(),
        detail: crate::error::one_line(&e.to_string()),
    };
    // One byte past the promised size is enough to tell "too long"
    // without reading an endless blob.
    let limit = expected
        .blob
        .map_or(u64::MAX, |(_, size)| size.saturating_add(1));
    let mut blob = HashingReader::new(BufReader::with_capacity(256 * 1024, source.take(limit)));
    let compression = match expected.compression {
        Some(compression) => compression,
        None => Compression::sniff(blob.get_mut().fill_buf().map_err(corrupt)?),
    };
    let unpacked = {
        let decoded: Box<dyn Read + '_> = match compression {
            Compression::None => Box::new(&mut blob),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut blob)),
            Compression::Zstd => Box::new(ZstdFrames::new(BufReader::with_capacity(
                128 * 1024,
                &mut blob,
            ))),
        };
        unpack(HashingReader::new(decoded), root, job)
            .and_then(|(unpacked, plain)| Ok((plain.finish().map_err(corrupt)?.0, unpacked)))
    };
    // The blob's own digest is checked even when unpacking failed: a
    // blob that is not what the manifest names explains any failure to
    // read it.
    let (digest, size) = blob.finish().map_err(corrupt)?;
    if let Some((want, want_size)) = expected.blob {
        if size != want_size {
            return Err(corrupt(io::Error::other(format!(
                "{size} bytes where the manifest says {want_size}"
            ))));
        }
        if &digest != want {
            return Err(Error::DigestMismatch {
                reference: job.reference.clone(),
                what: format!("layer {want} (compressed)"),
                expected: want.clone(),
                actual: digest,
            });
        }
    }
    let (diff_id, unpacked) = unpacked?;
    if &diff_id != expected.diff_id {
        return Err(Error::DigestMismatch {
            reference: job.reference.clone(),
            what: format!("layer {} uncompressed (the config's diff_id)", job.layer),
            expected: expected.diff_id.clone(),
            actual: diff_id,
        });
    }
    Ok(Checked {
        blob: digest,
        blob_size: size,
        unpacked,
    })
}

/// A zstd stream of any number of frames, skippable frames skipped
/// (`zstd:chunked` layers carry their table of contents in one).
struct ZstdFrames<R> {
    source: R,
    frame: FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        ZstdFrames {
            source,
            frame: FrameDecoder::new(),
            in_frame: false,
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if !self.in_frame {
                if self.source.fill_buf()?.is_empty() {
                    return Ok(0);
                }
                match self.frame.reset(&mut self.source) {
                    Ok(()) => self.in_frame = true,
                    Err(FrameDecoderError::ReadFrameHeaderError(
                        ReadFrameHeaderError::SkipFrame { length, .. },
                    )) => {
                        let skipped = io::copy(
                            &mut (&mut self.source).take(u64::from(length)),
                            &mut io::sink(),
                        )?;
                        if skipped != u64::from(length) {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "truncated skippable zstd frame",
                            ));
                        }
                    }
                    Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
                }
                continue;
            }
            while self.frame.can_collect() == 0 && !self.frame.is_finished() {
                self.frame
                    .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBlocks(1))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            }
            let n = self.frame.read(buf)?;
            if n > 0 {
                return Ok(n);
            }
            if self.frame.is_finished() {
                self.in_frame = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zstd_streams_of_several_frames_and_skippable_frames_decode_whole() {
        let one = ruzstd::encoding::compress_to_vec(
            &b"hello "[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        let two = ruzstd::encoding::compress_to_vec(
            &b"world"[..],
            ruzstd::encoding::CompressionLevel::Fastest,
        );
        let mut stream = one;
        // A skippable frame: magic 0x184D2A50, little-endian length, bytes.
        stream.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
        stream.extend_from_slice(&3u32.to_le_bytes());
        stream.extend_from_slice(b"toc");
        stream.extend_from_slice(&two);
        let mut out = String::new();
        ZstdFrames::new(&stream[..])
            .read_to_string(&mut out)
            .unwrap();
        assert_eq!(out, "hello world");
        let mut truncated = Vec::new();
        let result = ZstdFrames::new(&stream[..stream.len() - 3]).read_to_end(&mut truncated);
        assert!(result.is_err());
    }
}
