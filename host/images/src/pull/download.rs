//! One layer blob from a registry, unpacked while it downloads: the body
//! streams through a bounded channel to a blocking thread that
//! decompresses, hashes and writes, so the async side never blocks on the
//! disk and the blob is never held whole.

use std::io::{self, Read};
use std::path::PathBuf;

use bytes::Bytes;
use futures_util::StreamExt as _;
use tokio::sync::mpsc;

use crate::digest::Digest;
use crate::error::Error;
use crate::layer::{self, Checked, Expected};
use crate::registry::Session;
use crate::spec::Compression;
use crate::store::joined;
use crate::unpack::Job;

use super::{Progress, ProgressEvent};

/// Downloads a layer blob and unpacks it as it arrives: the body streams
/// through a channel to a blocking thread that decompresses, hashes and
/// writes.
#[allow(
    clippy::too_many_arguments,
    reason = "one call site; the pieces of one layer"
)]
pub(super) async fn download(
    session: &Session<'_>,
    digest: &Digest,
    size: u64,
    compression: Option<Compression>,
    diff_id: &Digest,
    root: PathBuf,
    job: Job,
    progress: Progress<'_>,
) -> Result<Checked, Error> {
    let response = session.blob(digest).await?;
    let (tx, rx) = mpsc::channel::<io::Result<Bytes>>(32);
    let expected_digest = digest.clone();
    let expected_diff_id = diff_id.clone();
    let shown = session.shown().to_string();
    let unpacker = tokio::task::spawn_blocking(move || {
        let expected = Expected {
            blob: Some((&expected_digest, size)),
            diff_id: &expected_diff_id,
            compression,
        };
        layer::unpack_blob(ChannelReader::new(rx), &root, &job, &expected)
    });
    let mut body = response.bytes_stream();
    let mut done = 0u64;
    let mut broke = None;
    progress(ProgressEvent::LayerProgress {
        layer: digest.clone(),
        done,
        total: size,
    });
    while let Some(chunk) = body.next().await {
        match chunk {
            Ok(chunk) => {
                done += chunk.len() as u64;
                if tx.send(Ok(chunk)).await.is_err() {
                    // The unpacker stopped; its error says why.
                    break;
                }
                progress(ProgressEvent::LayerProgress {
                    layer: digest.clone(),
                    done,
                    total: size,
                });
                if done > size {
                    break;
                }
            }
            Err(error) => {
                let _ = tx.send(Err(io::Error::other(error.to_string()))).await;
                broke = Some(session.lost(&error));
                break;
            }
        }
    }
    drop(tx);
    let unpacked = unpacker.await.map_err(|e| joined(&shown, e))?;
    // A broken download explains whatever the unpacker made of it, and
    // is worth another attempt.
    match broke {
        Some(error) => Err(error),
        None => unpacked,
    }
}

/// The blocking side of the download channel.
struct ChannelReader {
    rx: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    fn new(rx: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        ChannelReader {
            rx,
            current: Bytes::new(),
        }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(error)) => return Err(error),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        bytes::Buf::advance(&mut self.current, n);
        Ok(n)
    }
}
