//! `sandfleet plugin …`: check a component, run table-driven cases against
//! it, list what a plugin directory would serve, start a plugin project,
//! write the contract's WIT, and show or empty the compiled-plugin cache.

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
    /// Show what the compiled-plugin cache holds, or empty it with
    /// `--clear`. Every entry only makes a later load faster, so clearing
    /// is safe at any time, even while `sandfleet serve` runs.
    Cache {
        /// The cache directory (default: `$XDG_CACHE_HOME/sandfleet/plugins`,
        /// or `~/.cache/sandfleet/plugins`; a fleet file's `[plugins]
        /// cache_dir` names another).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Remove the compiled components and the function cache.
        #[arg(long)]
        clear: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
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
        PluginCommand::Cache { dir, clear, json } => cache(dir, clear, json),
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

fn cache(dir: Option<PathBuf>, clear: bool, json: bool) -> anyhow::Result<ExitCode> {
    let dir = match dir {
        Some(dir) => dir,
        None => sandfleet_fleet::default_cache_dir()
            .context("no cache directory: set XDG_CACHE_HOME or HOME, or pass --dir")?,
    };
    let contents = if clear {
        sandfleet_plugin::clear_cache(&dir)
    } else {
        sandfleet_plugin::cache_contents(&dir)
    }
    .with_context(|| format!("{}: cannot read the plugin cache", dir.display()))?;
    if json {
        let report = serde_json::json!({
            "dir": dir,
            "cleared": clear,
            "components": contents.components,
            "component_bytes": contents.component_bytes,
            "function_bytes": contents.function_bytes,
            "abandoned_files": contents.abandoned,
            "abandoned_bytes": contents.abandoned_bytes,
            "files_being_written": contents.being_written,
            "bytes": contents.bytes(),
            "last_used": contents.last_used.map(|t| humantime::format_rfc3339_seconds(t).to_string()),
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if clear {
        println!("{}: removed {}", dir.display(), describe(&contents));
        if contents.being_written > 0 {
            println!(
                "left {} file(s) a running sandfleet is writing",
                contents.being_written
            );
        }
    } else {
        println!("directory   {}", dir.display());
        if dir.exists() {
            println!("holds       {}", describe(&contents));
        } else {
            println!("holds       nothing yet (no such directory)");
        }
        if let Some(used) = contents.last_used {
            println!("last used   {}", humantime::format_rfc3339_seconds(used));
        }
        println!(
            "budget      {} unless a fleet file's `[plugins] cache_budget_mib` says otherwise",
            mib(sandfleet_plugin::DEFAULT_CACHE_BUDGET)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What `contents` holds, in one line.
fn describe(contents: &sandfleet_plugin::CacheContents) -> String {
    let mut parts = vec![format!(
        "{} compiled component(s) ({})",
        contents.components,
        mib(contents.component_bytes)
    )];
    if let Some(bytes) = contents.function_bytes {
        parts.push(format!("the function cache ({})", mib(bytes)));
    }
    if contents.abandoned > 0 {
        parts.push(format!(
            "{} file(s) crashed writers left ({})",
            contents.abandoned,
            mib(contents.abandoned_bytes)
        ));
    }
    if parts.len() > 1 {
        parts.push(format!("{} in all", mib(contents.bytes())));
    }
    parts.join(", ")
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1 << 20) as f64)
}
