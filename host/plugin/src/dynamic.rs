//! Calling any function of any world with dynamically typed values, for
//! table-driven plugin tests (`sandfleet plugin test`) and tooling. Calls run
//! under the same limits, and answers pass the same contract checks, as the
//! typed wrappers'.

use wasmtime::Store;
use wasmtime::component::types::{ComponentItem, Type};
use wasmtime::component::{ComponentExportIndex, Instance, InstancePre, Val};

use crate::contract::{Contract, Kind};
use crate::error::{CallError, CallErrorKind, LoadError};
use crate::host::{Compiled, PluginHost};
use crate::loaded::{Loaded, VersionInfo, World};
use crate::store::StoreState;
use crate::worlds::adapter::{check_reward, check_script, check_task};
use crate::worlds::check_commands;
use crate::worlds::placement::{check_columns, check_index};
use crate::worlds::sizing::{FleetPlan, Window, check_plan};

/// One exported function's signature.
#[derive(Debug, Clone)]
pub struct FunctionType {
    /// The WIT name, e.g. `place`.
    pub name: &'static str,
    /// Parameter names and types, in order.
    pub params: Vec<(String, Type)>,
    /// The result type, if the function returns one.
    pub result: Option<Type>,
}

struct DynamicWorld;

struct DynamicPre {
    pre: InstancePre<StoreState>,
    interface: String,
}

struct DynamicInstance {
    instance: Instance,
    interface: ComponentExportIndex,
}

impl World for DynamicWorld {
    const KIND: Option<Kind> = None;
    type Pre = DynamicPre;
    type Instance = DynamicInstance;

    fn pre(pre: InstancePre<StoreState>, contract: &Contract) -> wasmtime::Result<Self::Pre> {
        Ok(DynamicPre {
            pre,
            interface: contract.export_name(),
        })
    }

    fn instantiate(
        pre: &DynamicPre,
        store: &mut Store<StoreState>,
    ) -> wasmtime::Result<DynamicInstance> {
        let instance = pre.pre.instantiate(&mut *store)?;
        let interface = instance
            .get_export_index(&mut *store, None, &pre.interface)
            .ok_or_else(|| wasmtime::format_err!("no export `{}`", pre.interface))?;
        Ok(DynamicInstance {
            instance,
            interface,
        })
    }
}

/// A plugin called by function name with [`Val`]s.
pub struct DynamicPlugin {
    loaded: Loaded<DynamicWorld>,
    functions: Vec<FunctionType>,
}

impl DynamicPlugin {
    /// Prepares `compiled` for dynamic calls.
    ///
    /// # Errors
    ///
    /// When the component does not link against this host.
    pub fn new(host: &PluginHost, compiled: Compiled) -> Result<Self, LoadError> {
        let engine = host.inner.engine(compiled.tier);
        let kind = compiled.contract.kind;
        let mut functions = Vec::new();
        if let Some(export) = compiled
            .component
            .component_type()
            .get_export(engine, &compiled.contract.export_name())
            && let ComponentItem::ComponentInstance(interface) = export.ty
        {
            for (name, item) in interface.exports(engine) {
                let (Some(name), ComponentItem::ComponentFunc(func)) =
                    (kind.functions().iter().find(|f| **f == name), item.ty)
                else {
                    continue;
                };
                functions.push(FunctionType {
                    name,
                    params: func.params().map(|(n, t)| (n.to_string(), t)).collect(),
                    result: func.results().next(),
                });
            }
        }
        // Not a registry's: nobody reads its counts.
        let loaded = Loaded::new(host.inner.clone(), compiled, std::sync::Arc::default())?;
        Ok(DynamicPlugin { loaded, functions })
    }

    /// Name, version, world and source.
    pub fn info(&self) -> &VersionInfo {
        &self.loaded.info
    }

    /// The functions of the plugin's world, in export order.
    pub fn functions(&self) -> &[FunctionType] {
        &self.functions
    }

    /// Calls `function` (one of [`DynamicPlugin::functions`]) with `args`,
    /// which must match its parameter types, and returns its result after
    /// the contract checks.
    ///
    /// # Errors
    ///
    /// When the arguments do not match, or the plugin traps, overruns a
    /// limit, or breaks the contract.
    pub fn call(&self, signature: &FunctionType, args: &[Val]) -> Result<Option<Val>, CallError> {
        let name = signature.name;
        check_arguments(name, args).map_err(|detail| {
            self.loaded
                .error(name, CallErrorKind::InvalidArguments(detail))
        })?;
        let mut results = vec![Val::Bool(false); usize::from(signature.result.is_some())];
        self.loaded.call(name, |live, store| {
            let index = live
                .instance
                .get_export_index(&mut *store, Some(&live.interface), name)
                .ok_or_else(|| wasmtime::format_err!("no function `{name}`"))?;
            let func = live
                .instance
                .get_func(&mut *store, index)
                .ok_or_else(|| wasmtime::format_err!("`{name}` is not a function"))?;
            func.call(&mut *store, args, &mut results)
        })?;
        let result = results.pop();
        if let Some(Val::Result(Ok(Some(value)))) = &result {
            check(name, args, value)
                .map_err(|detail| self.loaded.error(name, CallErrorKind::Contract(detail)))?;
        }
        Ok(result)
    }
}

impl Kind {
    /// The functions the world exports, in WIT order.
    pub fn functions(self) -> &'static [&'static str] {
        match self {
            Kind::Placement => &["place"],
            Kind::Sizing => &["plan"],
            Kind::Reset => &["baseline", "reset", "verify"],
            Kind::Adapter => &[
                "describe",
                "load",
                "prepare",
                "grade",
                "parse-log",
                "summarize",
            ],
        }
    }
}

/// The typed wrappers' checks of their arguments, applied to dynamic values.
fn check_arguments(function: &str, args: &[Val]) -> Result<(), String> {
    match (function, args.get(1)) {
        ("place", Some(clusters)) => {
            const COLUMNS: [&str; 6] = [
                "free-slots",
                "live",
                "warm-ready",
                "weight",
                "cpu-free-milli",
                "memory-free-mib",
            ];
            let indices: Vec<(&'static str, Vec<u32>)> = ["unhealthy", "with-image"]
                .into_iter()
                .map(|name| {
                    (
                        name,
                        list(field(clusters, name)).iter().map(u32_of).collect(),
                    )
                })
                .collect();
            check_columns(
                COLUMNS.map(|name| (name, list(field(clusters, name)).len())),
                indices.iter().map(|(name, list)| (*name, list.as_slice())),
            )
        }
        _ => Ok(()),
    }
}

/// The typed wrappers' contract checks, applied to dynamic values.
fn check(function: &str, args: &[Val], ok: &Val) -> Result<(), String> {
    match function {
        "place" => {
            let clusters = args
                .get(1)
                .map_or(0, |v| list(field(v, "free-slots")).len());
            check_index(u32_of(ok), clusters)
        }
        "plan" => {
            let tasks: Vec<u32> = args
                .first()
                .map(|v| list(v).iter().map(u32_of).collect())
                .unwrap_or_default();
            let plan = FleetPlan {
                replicas: list(field(ok, "replicas")).iter().map(u32_of).collect(),
                windows: list(field(ok, "windows"))
                    .iter()
                    .map(|w| Window {
                        images: list(field(w, "images")).iter().map(u32_of).collect(),
                    })
                    .collect(),
                peak_warm: u32_of(field(ok, "peak-warm")),
            };
            check_plan(&plan, &tasks)
        }
        "baseline" | "reset" => {
            let argvs = commands(ok);
            check_commands(argvs.iter().map(Vec::as_slice), function)
        }
        "load" => check_task(
            str_of(field(ok, "id")),
            str_of(field(ok, "image")),
            str_of(field(ok, "workdir")),
        ),
        "prepare" => {
            let (setup, evaluate) = (
                commands(field(ok, "setup")),
                commands(field(ok, "evaluate")),
            );
            check_script(
                list(field(ok, "files"))
                    .iter()
                    .map(|f| str_of(field(f, "path"))),
                str_of(field(ok, "workdir")),
                setup.iter().map(Vec::as_slice),
                evaluate.iter().map(Vec::as_slice),
            )
        }
        "grade" => match field(ok, "reward") {
            Val::Float64(reward) => check_reward(*reward),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

// Accessors for values whose shape the component's types already guarantee;
// a mismatch reads as empty and fails the check that follows.
const NOTHING: Val = Val::Bool(false);

fn field<'a>(record: &'a Val, name: &str) -> &'a Val {
    match record {
        Val::Record(fields) => fields
            .iter()
            .find(|(n, _)| n == name)
            .map_or(&NOTHING, |(_, v)| v),
        _ => &NOTHING,
    }
}

fn list(value: &Val) -> &[Val] {
    match value {
        Val::List(items) => items,
        _ => &[],
    }
}

fn u32_of(value: &Val) -> u32 {
    match value {
        Val::U32(n) => *n,
        _ => u32::MAX,
    }
}

fn str_of(value: &Val) -> &str {
    match value {
        Val::String(s) => s,
        _ => "",
    }
}

fn commands(value: &Val) -> Vec<Vec<String>> {
    list(value)
        .iter()
        .map(|command| {
            list(field(command, "argv"))
                .iter()
                .map(|a| str_of(a).to_string())
                .collect()
        })
        .collect()
}
