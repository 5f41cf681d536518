//! TOML → component values by the function's types, and component values →
//! JSON for comparison and display. Names are the WIT names (kebab-case).
//!
//! Record fields left out take their zero value (0, false, "", [], none, the
//! first enum case), so a case states only what matters to it. Variants and
//! results are written `{ case = payload }` (e.g. `{ ok = 1 }`), or just
//! `"case"` without a payload. A `list<u8>` also takes a string (its UTF-8
//! bytes).

use sandfleet_plugin::placement::{ClusterState, Clusters};
use sandfleet_plugin::{Type, Val};
use serde_json::{Map, Value as Json};
use toml::Value as Toml;

/// Builds a value of type `ty` from `toml`; errors name the path within the case.
pub(crate) fn to_val(ty: &Type, toml: &Toml, path: &str) -> Result<Val, String> {
    let mismatch = |want: &str| Err(format!("{path}: expected {want}, found {}", describe(toml)));
    macro_rules! int {
        ($variant:ident, $rust:ty) => {
            match toml.as_integer().and_then(|n| <$rust>::try_from(n).ok()) {
                Some(n) => Ok(Val::$variant(n)),
                None => mismatch(concat!("an integer that fits ", stringify!($rust))),
            }
        };
    }
    match ty {
        Type::Bool => toml
            .as_bool()
            .map(Val::Bool)
            .map_or_else(|| mismatch("true or false"), Ok),
        Type::U8 => int!(U8, u8),
        Type::U16 => int!(U16, u16),
        Type::U32 => int!(U32, u32),
        Type::U64 => int!(U64, u64),
        Type::S8 => int!(S8, i8),
        Type::S16 => int!(S16, i16),
        Type::S32 => int!(S32, i32),
        Type::S64 => int!(S64, i64),
        Type::Float32 | Type::Float64 => {
            let number = toml
                .as_float()
                .or_else(|| toml.as_integer().map(|n| n as f64));
            match (number, ty) {
                (Some(x), Type::Float32) => Ok(Val::Float32(x as f32)),
                (Some(x), _) => Ok(Val::Float64(x)),
                (None, _) => mismatch("a number"),
            }
        }
        Type::Char => match toml.as_str().map(|s| s.chars().collect::<Vec<_>>()) {
            Some(chars) if chars.len() == 1 => Ok(Val::Char(chars[0])),
            _ => mismatch("a one-character string"),
        },
        Type::String => toml
            .as_str()
            .map(|s| Val::String(s.to_string()))
            .map_or_else(|| mismatch("a string"), Ok),
        Type::List(list) => {
            let element = list.ty();
            if let (Type::U8, Some(text)) = (&element, toml.as_str()) {
                return Ok(Val::List(text.bytes().map(Val::U8).collect()));
            }
            let Some(items) = toml.as_array() else {
                return mismatch("an array");
            };
            items
                .iter()
                .enumerate()
                .map(|(i, item)| to_val(&element, item, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()
                .map(Val::List)
        }
        Type::Record(record) => {
            let Some(table) = toml.as_table() else {
                return mismatch("a table");
            };
            let fields: Vec<_> = record.fields().collect();
            if let Some(unknown) = table
                .keys()
                .find(|k| fields.iter().all(|f| f.name != k.as_str()))
            {
                return Err(format!(
                    "{path}: unknown field `{unknown}` (fields: {})",
                    fields.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
                ));
            }
            fields
                .iter()
                .map(|field| {
                    let value = match table.get(field.name) {
                        Some(value) => to_val(&field.ty, value, &format!("{path}.{}", field.name))?,
                        None => zero(&field.ty),
                    };
                    Ok((field.name.to_string(), value))
                })
                .collect::<Result<_, String>>()
                .map(Val::Record)
        }
        Type::Tuple(tuple) => {
            let Some(items) = toml.as_array() else {
                return mismatch("an array");
            };
            let types: Vec<_> = tuple.types().collect();
            if items.len() != types.len() {
                return mismatch(&format!("an array of {}", types.len()));
            }
            types
                .iter()
                .zip(items)
                .enumerate()
                .map(|(i, (ty, item))| to_val(ty, item, &format!("{path}[{i}]")))
                .collect::<Result<_, _>>()
                .map(Val::Tuple)
        }
        Type::Enum(enumeration) => match toml.as_str() {
            Some(name) if enumeration.names().any(|n| n == name) => Ok(Val::Enum(name.to_string())),
            _ => mismatch(&format!(
                "one of {}",
                enumeration.names().collect::<Vec<_>>().join(", ")
            )),
        },
        Type::Variant(variant) => {
            let cases: Vec<(String, Option<Type>)> = variant
                .cases()
                .map(|case| (case.name.to_string(), case.ty))
                .collect();
            let (name, payload) = case_of(toml, path)?;
            let Some((_, payload_ty)) = cases.iter().find(|(n, _)| *n == name) else {
                return mismatch(&format!(
                    "one of {}",
                    cases
                        .iter()
                        .map(|(n, _)| n.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            let payload = payload_of(payload_ty.as_ref(), payload, &format!("{path}.{name}"))?;
            Ok(Val::Variant(name, payload))
        }
        Type::Option(option) => Ok(Val::Option(Some(Box::new(to_val(
            &option.ty(),
            toml,
            path,
        )?)))),
        Type::Result(result) => {
            let (name, payload) = case_of(toml, path)?;
            match name.as_str() {
                "ok" => Ok(Val::Result(Ok(payload_of(
                    result.ok().as_ref(),
                    payload,
                    &format!("{path}.ok"),
                )?))),
                "err" => Ok(Val::Result(Err(payload_of(
                    result.err().as_ref(),
                    payload,
                    &format!("{path}.err"),
                )?))),
                _ => mismatch("`ok` or `err`"),
            }
        }
        Type::Flags(flags) => {
            let names: Vec<&str> = flags.names().collect();
            let Some(items) = toml.as_array() else {
                return mismatch("an array of flag names");
            };
            items
                .iter()
                .map(|item| match item.as_str() {
                    Some(flag) if names.contains(&flag) => Ok(flag.to_string()),
                    _ => Err(format!(
                        "{path}: `{item}` is not one of {}",
                        names.join(", ")
                    )),
                })
                .collect::<Result<_, _>>()
                .map(Val::Flags)
        }
        other => Err(format!(
            "{path}: values of type {other:?} cannot be written in a case"
        )),
    }
}

/// The placement table from one row per cluster.
pub(crate) fn cluster_rows(ty: &Type, rows: &[Toml], path: &str) -> Result<Val, String> {
    let states = rows
        .iter()
        .enumerate()
        .map(|(i, row)| cluster_state(row, &format!("{path}[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let table = Clusters::from_states(&states);
    let Type::Record(record) = ty else {
        return Err(format!("{path}: the clusters argument is not a record"));
    };
    let numbers = |values: &[u32]| Val::List(values.iter().copied().map(Val::U32).collect());
    record
        .fields()
        .map(|field| {
            let column = match field.name {
                "free-slots" => &table.free_slots,
                "live" => &table.live,
                "warm-ready" => &table.warm_ready,
                "weight" => &table.weight,
                "cpu-free-milli" => &table.cpu_free_milli,
                "memory-free-mib" => &table.memory_free_mib,
                "unhealthy" => &table.unhealthy,
                "with-image" => &table.with_image,
                other => return Err(format!("{path}: unexpected clusters column `{other}`")),
            };
            Ok((field.name.to_string(), numbers(column)))
        })
        .collect::<Result<_, _>>()
        .map(Val::Record)
}

fn cluster_state(row: &Toml, path: &str) -> Result<ClusterState, String> {
    let Some(table) = row.as_table() else {
        return Err(format!("{path}: expected a table, found {}", describe(row)));
    };
    let mut state = ClusterState {
        healthy: true,
        has_image: false,
        free_slots: 0,
        live: 0,
        warm_ready: 0,
        weight: 1,
        cpu_free_milli: 0,
        memory_free_mib: 0,
    };
    for (key, value) in table {
        let at = format!("{path}.{key}");
        let number = || {
            value
                .as_integer()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| {
                    format!(
                        "{at}: expected an integer that fits u32, found {}",
                        describe(value)
                    )
                })
        };
        let flag = || {
            value
                .as_bool()
                .ok_or_else(|| format!("{at}: expected true or false, found {}", describe(value)))
        };
        match key.as_str() {
            "healthy" => state.healthy = flag()?,
            "has-image" => state.has_image = flag()?,
            "free-slots" => state.free_slots = number()?,
            "live" => state.live = number()?,
            "warm-ready" => state.warm_ready = number()?,
            "weight" => state.weight = number()?,
            "cpu-free-milli" => state.cpu_free_milli = number()?,
            "memory-free-mib" => state.memory_free_mib = number()?,
            other => {
                return Err(format!(
                    "{path}: unknown field `{other}` (fields: healthy, has-image, free-slots, live, warm-ready, weight, cpu-free-milli, memory-free-mib)"
                ));
            }
        }
    }
    Ok(state)
}

/// `"name"` or `{ name = payload }`.
fn case_of<'a>(toml: &'a Toml, path: &str) -> Result<(String, Option<&'a Toml>), String> {
    if let Some(name) = toml.as_str() {
        return Ok((name.to_string(), None));
    }
    match toml.as_table() {
        Some(table) if table.len() == 1 => {
            let (name, payload) = table.iter().next().expect("one entry");
            Ok((name.clone(), Some(payload)))
        }
        _ => Err(format!(
            "{path}: expected a case name or a table with one key, found {}",
            describe(toml)
        )),
    }
}

fn payload_of(
    ty: Option<&Type>,
    payload: Option<&Toml>,
    path: &str,
) -> Result<Option<Box<Val>>, String> {
    match (ty, payload) {
        (None, None) => Ok(None),
        (Some(ty), Some(value)) => Ok(Some(Box::new(to_val(ty, value, path)?))),
        (Some(_), None) => Err(format!("{path}: this case needs a payload")),
        (None, Some(_)) => Err(format!("{path}: this case takes no payload")),
    }
}

/// The value a field takes when a case leaves it out.
pub(crate) fn zero(ty: &Type) -> Val {
    match ty {
        Type::Bool => Val::Bool(false),
        Type::U8 => Val::U8(0),
        Type::U16 => Val::U16(0),
        Type::U32 => Val::U32(0),
        Type::U64 => Val::U64(0),
        Type::S8 => Val::S8(0),
        Type::S16 => Val::S16(0),
        Type::S32 => Val::S32(0),
        Type::S64 => Val::S64(0),
        Type::Float32 => Val::Float32(0.0),
        Type::Float64 => Val::Float64(0.0),
        Type::Char => Val::Char('\0'),
        Type::String => Val::String(String::new()),
        Type::List(_) => Val::List(Vec::new()),
        Type::Record(record) => Val::Record(
            record
                .fields()
                .map(|field| (field.name.to_string(), zero(&field.ty)))
                .collect(),
        ),
        Type::Tuple(tuple) => Val::Tuple(tuple.types().map(|ty| zero(&ty)).collect()),
        Type::Enum(enumeration) => {
            Val::Enum(enumeration.names().next().unwrap_or_default().to_string())
        }
        Type::Variant(variant) => {
            let first = variant.cases().next().expect("variants have cases");
            Val::Variant(
                first.name.to_string(),
                first.ty.map(|ty| Box::new(zero(&ty))),
            )
        }
        Type::Option(_) => Val::Option(None),
        Type::Result(result) => Val::Result(Ok(result.ok().map(|ty| Box::new(zero(&ty))))),
        Type::Flags(_) => Val::Flags(Vec::new()),
        _ => Val::Bool(false),
    }
}

/// A component value as JSON: records are objects, enums and payload-less
/// cases strings, cases with payloads `{case: payload}`, options `null` or
/// the value.
pub(crate) fn to_json(val: &Val) -> Json {
    match val {
        Val::Bool(b) => Json::Bool(*b),
        Val::U8(n) => Json::from(*n),
        Val::U16(n) => Json::from(*n),
        Val::U32(n) => Json::from(*n),
        Val::U64(n) => Json::from(*n),
        Val::S8(n) => Json::from(*n),
        Val::S16(n) => Json::from(*n),
        Val::S32(n) => Json::from(*n),
        Val::S64(n) => Json::from(*n),
        Val::Float32(x) => Json::from(f64::from(*x)),
        Val::Float64(x) => Json::from(*x),
        Val::Char(c) => Json::String(c.to_string()),
        Val::String(s) => Json::String(s.clone()),
        Val::List(items) | Val::Tuple(items) | Val::FixedLengthList(items) => {
            Json::Array(items.iter().map(to_json).collect())
        }
        Val::Record(fields) => Json::Object(
            fields
                .iter()
                .map(|(name, value)| (name.clone(), to_json(value)))
                .collect(),
        ),
        Val::Enum(name) => Json::String(name.clone()),
        Val::Variant(name, payload) => case_json(name, payload.as_deref()),
        Val::Option(value) => value.as_deref().map_or(Json::Null, to_json),
        Val::Result(Ok(payload)) => case_json("ok", payload.as_deref()),
        Val::Result(Err(payload)) => case_json("err", payload.as_deref()),
        Val::Flags(names) => Json::Array(names.iter().cloned().map(Json::String).collect()),
        other => Json::String(format!("{other:?}")),
    }
}

fn case_json(name: &str, payload: Option<&Val>) -> Json {
    match payload {
        None => Json::String(name.to_string()),
        Some(value) => Json::Object(Map::from_iter([(name.to_string(), to_json(value))])),
    }
}

/// TOML → JSON, for comparing an expectation with an answer.
pub(crate) fn toml_to_json(toml: &Toml) -> Json {
    match toml {
        Toml::String(s) => Json::String(s.clone()),
        Toml::Integer(n) => Json::from(*n),
        Toml::Float(x) => Json::from(*x),
        Toml::Boolean(b) => Json::Bool(*b),
        Toml::Datetime(d) => Json::String(d.to_string()),
        Toml::Array(items) => Json::Array(items.iter().map(toml_to_json).collect()),
        Toml::Table(table) => Json::Object(
            table
                .iter()
                .map(|(k, v)| (k.clone(), toml_to_json(v)))
                .collect(),
        ),
    }
}

/// Where `actual` differs from `expected`. Objects in `expected` are
/// partial: only their keys are compared. Numbers compare by value.
pub(crate) fn differences(expected: &Json, actual: &Json, path: &str, out: &mut Vec<String>) {
    match (expected, actual) {
        (Json::Object(want), Json::Object(got)) => {
            for (key, want) in want {
                let at = format!("{path}.{key}");
                match got.get(key) {
                    Some(got) => differences(want, got, &at, out),
                    None => out.push(format!("{at}: expected {want}, but there is no such field")),
                }
            }
        }
        (Json::Array(want), Json::Array(got)) if want.len() == got.len() => {
            for (i, (want, got)) in want.iter().zip(got).enumerate() {
                differences(want, got, &format!("{path}[{i}]"), out);
            }
        }
        (Json::Number(want), Json::Number(got))
            if want
                .as_f64()
                .zip(got.as_f64())
                .is_some_and(|(a, b)| (a - b).abs() <= 1e-9 * a.abs().max(1.0)) => {}
        (want, got) if want == got => {}
        (want, got) => out.push(format!(
            "{}: expected {want}, got {got}",
            if path.is_empty() { "value" } else { path }
        )),
    }
}

fn describe(toml: &Toml) -> String {
    match toml {
        Toml::Table(_) => "a table".to_string(),
        Toml::Array(_) => "an array".to_string(),
        other => format!("`{other}`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diff(expected: Json, actual: Json) -> Vec<String> {
        let mut out = Vec::new();
        differences(&expected, &actual, "", &mut out);
        out
    }

    #[test]
    fn objects_compare_partially_and_arrays_exactly() {
        use serde_json::json;
        assert!(diff(json!({"a": 1}), json!({"a": 1, "b": 2})).is_empty());
        assert_eq!(
            diff(json!({"a": [1, 2]}), json!({"a": [1, 3]})),
            vec![".a[1]: expected 2, got 3"]
        );
        assert_eq!(
            diff(json!({"a": [1, 2]}), json!({"a": [1]})),
            vec![".a: expected [1,2], got [1]"]
        );
        assert_eq!(
            diff(json!({"c": 1}), json!({"a": 1})),
            vec![".c: expected 1, but there is no such field"]
        );
        assert!(diff(json!(1), json!(1.0)).is_empty());
        assert_eq!(
            diff(json!("x"), json!("y")),
            vec!["value: expected \"x\", got \"y\""]
        );
    }
}
