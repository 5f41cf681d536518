//! `sandfleet images pull | ls | rm | prune | import`: the local backend's
//! OCI layer store, by hand.
//!
//! The store is the one under the local backend's state directory:
//! `--state-dir`, else the first local cluster's `state_dir` in `--config`,
//! else the local backend's default. As root, layers are unpacked with
//! owners shifted to the sandboxes' id range (`sandbox_uid_base`); as
//! anyone else, owned by the caller.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Subcommand};
use sandfleet_backend_local::{LocalConfig, layer_ownership};
use sandfleet_fleet::{BackendConfig, FleetConfig};
use sandfleet_images::{Digest, ImportOptions, PullOptions, Reference, Rewrites, Store};

use crate::layer_bars::{LayerBars, Output};

/// Where the store is.
#[derive(Args)]
pub(crate) struct ImagesArgs {
    #[command(subcommand)]
    command: ImagesCommand,
    /// The local backend's state directory (the store is `images/oci`
    /// under it).
    #[arg(long, global = true, conflicts_with = "config")]
    state_dir: Option<PathBuf>,
    /// A fleet file: its first local cluster's state directory, and its
    /// `[run] image_rewrite` mirrors for pulls.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum ImagesCommand {
    /// Pull images from their registries.
    Pull {
        /// References, like `python:3.11` or `host:5000/repo@sha256:…`.
        #[arg(required = true)]
        references: Vec<String>,
        /// The platform to pull from multi-platform images (`linux/arm64`).
        #[arg(long)]
        platform: Option<String>,
        /// A registry (`host:port`) to speak plain HTTP to (loopback
        /// registries always may); repeatable.
        #[arg(long)]
        insecure: Vec<String>,
    },
    /// List the images, their sizes and the layers they share.
    Ls,
    /// Remove images (their layers go when no other image uses them).
    Rm {
        /// References to remove.
        #[arg(required = true)]
        references: Vec<String>,
    },
    /// Remove unused layers and leftovers; with a budget, also the least
    /// recently used images that are not in use, until the store and the
    /// runs' snapshots fit.
    Prune {
        /// The most the layers and the runs' snapshots may hold together,
        /// like `20G` or `500M` (snapshots are counted, never removed: a
        /// run's reap removes them).
        #[arg(long)]
        budget: Option<String>,
    },
    /// Import a `docker save` tarball or an OCI layout (directory or tar).
    Import {
        /// The archive.
        path: PathBuf,
        /// The name to give it (needed when the archive names none).
        #[arg(long)]
        name: Option<String>,
    },
}

pub(crate) fn run(args: ImagesArgs) -> anyhow::Result<ExitCode> {
    let (local, rewrites) = match &args.config {
        Some(path) => {
            let config = FleetConfig::load(path)?;
            let local = config
                .clusters
                .iter()
                .find_map(|c| match &c.backend {
                    BackendConfig::Local { local } => Some(local.clone()),
                    _ => None,
                })
                .with_context(|| format!("{} has no local cluster", path.display()))?;
            (local, Rewrites::new(config.run.image_rewrite))
        }
        None => (LocalConfig::default(), Rewrites::default()),
    };
    let state_dir = match args.state_dir {
        Some(dir) => dir,
        None => local
            .state_dir()
            .map_err(anyhow::Error::msg)
            .context("pass --state-dir or --config")?,
    };
    let store = Store::open(
        &state_dir,
        layer_ownership(local.sandbox_uid_base).map_err(anyhow::Error::msg)?,
    )?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match args.command {
        ImagesCommand::Pull {
            references,
            platform,
            insecure,
        } => {
            let mut options = PullOptions {
                rewrites,
                insecure,
                ..PullOptions::default()
            };
            if let Some(platform) = platform {
                options.platform = platform.parse().map_err(anyhow::Error::msg)?;
            }
            runtime.block_on(pull(&store, &references, &options))
        }
        ImagesCommand::Ls => list(&store),
        ImagesCommand::Rm { references } => {
            for text in references {
                let reference = Reference::parse(&text)?;
                runtime.block_on(store.remove(&reference))?;
                println!("Untagged: {reference}");
            }
            Ok(ExitCode::SUCCESS)
        }
        ImagesCommand::Prune { budget } => {
            let budget = budget.as_deref().map(parse_size).transpose()?;
            // Snapshots share the disk and only a run's reap removes them:
            // the layers get what of the budget they leave.
            let held = runtime.block_on(sandfleet_backend_local::snapshots_held(&state_dir))?;
            let for_layers = budget.map(|budget| budget.saturating_sub(held.bytes));
            let report = runtime.block_on(store.prune(for_layers))?;
            for image in &report.images {
                println!("Deleted: {image}");
            }
            println!(
                "Removed {} layer(s) ({}) and {} leftover(s); the store holds {}",
                report.layers,
                size(report.bytes),
                report.temporaries,
                size(report.remaining)
            );
            if held.snapshots > 0 {
                println!(
                    "{} snapshot(s) of runs hold {} more{} (`sandfleet reap --run-id ID` removes a run's)",
                    held.snapshots,
                    size(held.bytes),
                    if budget.is_some() {
                        ", counted in the budget"
                    } else {
                        ""
                    }
                );
            }
            if let Some(budget) = budget
                && report.remaining + held.bytes > budget
            {
                println!(
                    "the budget of {} is not met: what is left is in use",
                    size(budget)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        ImagesCommand::Import { path, name } => {
            let options = ImportOptions {
                name: name.as_deref().map(Reference::parse).transpose()?,
                ..ImportOptions::default()
            };
            let images = runtime.block_on(import(&store, &path, &options))?;
            for image in images {
                println!("Loaded image: {} ({})", image.reference, image.manifest);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Pulls each reference with a line per layer, as `docker pull` shows
/// them; a failure is reported and the others still pulled.
async fn pull(
    store: &Store,
    references: &[String],
    options: &PullOptions,
) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for text in references {
        let reference = match Reference::parse(text) {
            Ok(reference) => reference,
            Err(error) => {
                eprintln!("error: {error}");
                failed = true;
                continue;
            }
        };
        println!("Pulling {reference}");
        let display = LayerBars::new(Output::Stdout);
        let before = store.image(&reference).ok().map(|i| i.manifest);
        match store
            .pull(&reference, options, &|event| display.show(event.into()))
            .await
        {
            Ok(image) => {
                display.finish();
                println!("Digest: {}", image.manifest);
                if before.as_ref() == Some(&image.manifest) {
                    println!("Status: Image is up to date for {reference}");
                } else {
                    println!("Status: Downloaded newer image for {reference}");
                }
            }
            Err(error) => {
                display.finish();
                eprintln!("error: {error}");
                failed = true;
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

async fn import(
    store: &Store,
    path: &Path,
    options: &ImportOptions,
) -> anyhow::Result<Vec<sandfleet_images::Image>> {
    let display = LayerBars::new(Output::Stdout);
    let result = store
        .import(path, options, &|event| display.show(event.into()))
        .await;
    display.finish();
    Ok(result?)
}

/// The images with their sizes: `SIZE` is all their layers, `SHARED` the
/// part of it other images use too; the last line compares the store's
/// size with the sum of the images'.
fn list(store: &Store) -> anyhow::Result<ExitCode> {
    let images = store.list()?;
    let mut users: HashMap<&Digest, usize> = HashMap::new();
    for image in &images {
        for layer in &image.layers {
            *users.entry(&layer.diff_id).or_default() += 1;
        }
    }
    let rows: Vec<[String; 6]> = images
        .iter()
        .flat_map(|image| {
            let shared: u64 = image
                .layers
                .iter()
                .filter(|l| users[&l.diff_id] > 1)
                .filter_map(|l| l.unpacked_size)
                .sum();
            image.references.iter().map(move |reference| {
                [
                    reference.to_string(),
                    image.manifest.short().to_string(),
                    image.platform.to_string(),
                    image.layers.len().to_string(),
                    size(image.unpacked_size()),
                    size(shared),
                ]
            })
        })
        .collect();
    let header = [
        "REFERENCE",
        "MANIFEST",
        "PLATFORM",
        "LAYERS",
        "SIZE",
        "SHARED",
    ]
    .map(String::from);
    let mut widths = [0usize; 6];
    for row in std::iter::once(&header).chain(&rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(&rows) {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("{}", line.join("  ").trim_end());
    }
    let mut seen = HashSet::new();
    let store_bytes: u64 = images
        .iter()
        .flat_map(|i| &i.layers)
        .filter(|l| seen.insert(&l.diff_id))
        .filter_map(|l| l.unpacked_size)
        .sum();
    let sum: u64 = images.iter().map(|i| i.unpacked_size()).sum();
    println!(
        "{} image(s), {} layer(s): {} on disk for {} of images",
        images.len(),
        seen.len(),
        size(store_bytes),
        size(sum)
    );
    Ok(ExitCode::SUCCESS)
}

/// `1.5G`, `500M`, `20GiB`, `4096` (bytes); units are powers of 1024.
fn parse_size(text: &str) -> anyhow::Result<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .with_context(|| format!("{text:?} is not a size like 20G or 500M"))?;
    let scale: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => anyhow::bail!("{text:?} is not a size like 20G or 500M"),
    };
    Ok((number * scale as f64) as u64)
}

fn size(bytes: u64) -> String {
    indicatif::HumanBytes(bytes).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("500M").unwrap(), 500 << 20);
        assert_eq!(parse_size("20GiB").unwrap(), 20 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("2kb").unwrap(), 2048);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("5X").is_err());
    }
}
