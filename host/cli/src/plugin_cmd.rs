//! `sandfleet plugin …`: check a component, run table-driven cases against
//! it, list what a plugin directory would serve, start a plugin project and
//! write the contract's WIT.

mod scaffold;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Subcommand;
use sandfleet_plugin::{Compiled, DynamicPlugin, HostConfig, PluginHost, Registry, Source};
use sandfleet_testkit::cases;

#[derive(Subcommand)]
pub(crate) enum PluginCommand {
    /// Show the world, contract version, exports, size and compile time of a component.
    Check {
        /// The component (`.wasm`).
        file: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Run the cases of a TOML case table against a component; exits non-zero
    /// when any case fails.
    Test {
        /// The component (`.wasm`).
        file: PathBuf,
        /// The case table (see `sandfleet-testkit`'s `cases` module).
        cases: PathBuf,
    },
    /// List the built-in plugins and those in a plugin directory, with their
    /// status.
    List {
        /// A plugin directory whose `<name>.wasm` files override the built-ins.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Write a ready-to-build plugin project: its source, the contract it
    /// needs, a case table and a README with the build, check and test
    /// commands.
    New {
        /// The world: placement-policy, sizing-policy, reset-check or
        /// task-adapter.
        world: String,
        /// The plugin's name (lowercase letters, digits, `-`, `_`); it names
        /// the crate or package and the `.wasm` file.
        name: String,
        /// rust, python (componentize-py) or js (jco componentize).
        #[arg(long, default_value = "rust")]
        lang: String,
        /// The project directory to create (default: ./NAME).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Write the contract's `.wit` files, for tools that build components
    /// from them (componentize-py, jco, wit-bindgen).
    Wit {
        /// The contract version (default: the newest).
        #[arg(long)]
        version: Option<String>,
        /// The directory to write them into (created if missing).
        #[arg(long)]
        out: PathBuf,
    },
}

pub(crate) fn run(command: PluginCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginCommand::Check { file, json } => check(&file, json),
        PluginCommand::Test { file, cases } => test(&file, &cases),
        PluginCommand::List { dir } => list(dir.as_deref()),
        PluginCommand::New {
            world,
            name,
            lang,
            dir,
        } => {
            let dir = scaffold::new_project(&world, &name, &lang, dir.as_deref())?;
            println!(
                "wrote {}: a {world} plugin in {lang}; its README.md has the build, check and test commands",
                dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        PluginCommand::Wit { version, out } => {
            let contract = scaffold::write_wit(version.as_deref(), &out)?;
            println!(
                "wrote {} files of sandfleet:plugin@{} to {}",
                contract.files.len(),
                contract.version,
                out.display()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn host() -> anyhow::Result<PluginHost> {
    Ok(PluginHost::new(HostConfig {
        cache_dir: sandfleet_fleet::default_cache_dir(),
        ..HostConfig::default()
    })?)
}

/// Compiles `file`: from the cache, or `fresh` (compiled whatever the
/// cache holds, then stored in it).
fn compile(host: &PluginHost, file: &Path, fresh: bool) -> anyhow::Result<Compiled> {
    let bytes = std::fs::read(file).with_context(|| format!("{}: cannot read", file.display()))?;
    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let source = Source::File(file.to_path_buf());
    Ok(if fresh {
        host.compile_fresh(&name, &bytes, source)?
    } else {
        host.compile(&name, &bytes, source)?
    })
}

fn check(file: &Path, json: bool) -> anyhow::Result<ExitCode> {
    // Compiled fresh, so the compile time shown is the real one; stored,
    // so the `plugin test` or run that usually follows loads it at once.
    let host = host()?;
    let compiled = compile(&host, file, true)?;
    let contract = compiled.contract.clone();
    let (size, compile_ms) = (compiled.size, compiled.compile_time.as_secs_f64() * 1e3);
    let reuse = compiled.functions;
    let sha256 = compiled.sha256.clone();
    let plugin = DynamicPlugin::new(&host, compiled)?;
    let functions: Vec<&str> = plugin.functions().iter().map(|f| f.name).collect();
    if json {
        let report = serde_json::json!({
            "file": file,
            "world": contract.kind.world(),
            "contract": contract.version,
            "exports": contract.exports,
            "functions": functions,
            "size_bytes": size,
            "compile_ms": compile_ms,
            "functions_compiled": reuse.map(|f| f.compiled),
            "functions_reused": reuse.map(|f| f.reused),
            "sha256": sha256,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!("file       {}", file.display());
        println!(
            "world      {} (sandfleet:plugin@{})",
            contract.kind.world(),
            contract.version
        );
        println!(
            "exports    {} {{ {} }}",
            contract.export_name(),
            functions.join(", ")
        );
        for other in contract
            .exports
            .iter()
            .filter(|e| **e != contract.export_name())
        {
            println!("           {other}");
        }
        println!("size       {:.1} KiB ({size} bytes)", size as f64 / 1024.0);
        match reuse {
            Some(f) => println!(
                "compile    {compile_ms:.1} ms ({} functions compiled, {} reused from the cache)",
                f.compiled, f.reused
            ),
            None => println!("compile    {compile_ms:.1} ms"),
        }
        println!("sha256     {sha256}");
    }
    Ok(ExitCode::SUCCESS)
}

fn test(file: &Path, cases_path: &Path) -> anyhow::Result<ExitCode> {
    let host = host()?;
    let compiled = compile(&host, file, false)?;
    let plugin = DynamicPlugin::new(&host, compiled)?;
    let report = cases::run(&plugin, cases_path)?;
    print!("{}", report.render());
    Ok(if report.failed() == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn list(dir: Option<&Path>) -> anyhow::Result<ExitCode> {
    let registry = Registry::new(host()?);
    let mut problems = 0;
    if let Err(errors) =
        registry.add_builtins(sandfleet_guests::BUILTINS.iter().map(|b| (b.name, b.wasm)))
    {
        problems += errors.len();
    }
    if let Some(dir) = dir
        && let Err(errors) = registry.load_dir(dir)
    {
        problems += errors.len();
    }
    println!(
        "{:<20} {:<17} {:<20} {:<21} SOURCE",
        "NAME", "WORLD", "VERSION", "LOADED"
    );
    for status in registry.statuses() {
        match &status.serving {
            Some(info) => {
                let loaded = humantime::format_rfc3339_seconds(info.loaded_at);
                println!(
                    "{:<20} {:<17} {:<20} {:<21} {}",
                    status.name,
                    info.kind.world(),
                    info.plugin.version,
                    loaded,
                    info.source
                );
            }
            None => println!("{:<20} {:<17} {:<20} {:<21} -", status.name, "-", "-", "-"),
        }
        if let Some(error) = &status.last_error {
            println!("  error: {error}");
        }
    }
    if problems > 0 {
        eprintln!("{problems} plugin(s) failed to load");
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}
