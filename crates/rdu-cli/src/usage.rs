//! Usage errors in one line: clap's own rendering spans 3 to 7 lines (usage, tips, "try
//! --help") and words a bad number in Rust's terms. Each error here names the flag and what it
//! accepts, and points at the command's `--help`.

use crate::Cli;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::CommandFactory;
use std::any::TypeId;

/// The one-line message (without the `error: ` prefix) for a usage error of `argv`.
pub fn one_line(e: &clap::Error, argv: &[String]) -> String {
    let command = Cli::command();
    let sub = argv.get(1).and_then(|name| command.find_subcommand(name));
    let help = match sub {
        Some(s) => format!("see `rdu {} --help`", s.get_name()),
        None => "see `rdu --help`".to_string(),
    };
    let string = |kind| string(e, kind);
    let strings = |kind| strings(e, kind);
    let flag = string(ContextKind::InvalidArg).map(|a| flag_of(&a));
    let value = string(ContextKind::InvalidValue).unwrap_or_default();
    match e.kind() {
        ErrorKind::ValueValidation => {
            let flag = flag.unwrap_or_else(|| "a flag".into());
            let accepts = sub.and_then(|s| accepts(s, &flag)).unwrap_or_else(|| {
                use std::error::Error;
                e.source().map(|s| s.to_string()).unwrap_or_else(|| "another value".into())
            });
            format!("{flag} takes {accepts}, not `{value}`")
        }
        ErrorKind::InvalidValue if value.is_empty() => {
            format!("{} needs a value; {help}", flag.unwrap_or_else(|| "a flag".into()))
        }
        ErrorKind::InvalidValue => {
            let valid = strings(ContextKind::ValidValue);
            format!("{} takes {}, not `{value}`", flag.unwrap_or_else(|| "a flag".into()), one_of(&valid))
        }
        ErrorKind::UnknownArgument => unknown(&flag.unwrap_or_default(), &strings(ContextKind::SuggestedArg), &help),
        ErrorKind::InvalidSubcommand => {
            let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_string()).collect();
            let given = string(ContextKind::InvalidSubcommand).or(flag).unwrap_or_default();
            format!("unknown command `{given}`: the commands are {}", names.join(", "))
        }
        ErrorKind::MissingSubcommand | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_string()).collect();
            format!("give a command: {}; {help}", names.join(", "))
        }
        ErrorKind::MissingRequiredArgument => {
            let missing: Vec<String> = strings(ContextKind::InvalidArg).iter().map(|a| flag_of(a)).collect();
            format!("missing {}; {help}", missing.join(" and "))
        }
        ErrorKind::ArgumentConflict => conflict(flag, &strings(ContextKind::PriorArg), &help),
        ErrorKind::TooManyValues | ErrorKind::WrongNumberOfValues | ErrorKind::TooFewValues => {
            format!("{} takes one value; {help}", flag.unwrap_or_else(|| "a flag".into()))
        }
        ErrorKind::NoEquals => format!("{} takes its value after `=`; {help}", flag.unwrap_or_default()),
        ErrorKind::InvalidUtf8 => "an argument is not valid UTF-8".to_string(),
        _ => {
            // Anything else clap reports: its first line, which states the fault.
            let text = e.kind().as_str().map(str::to_string).unwrap_or_else(|| e.to_string());
            let first = text.lines().next().unwrap_or("invalid arguments").trim_start_matches("error: ").to_string();
            format!("{first}; {help}")
        }
    }
}

/// The string a usage error holds under `kind`.
fn string(e: &clap::Error, kind: ContextKind) -> Option<String> {
    match e.get(kind) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        Some(ContextValue::StyledStr(s)) => Some(s.to_string()),
        _ => None,
    }
}

/// The strings a usage error holds under `kind`.
fn strings(e: &clap::Error, kind: ContextKind) -> Vec<String> {
    match e.get(kind) {
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::StyledStrs(v)) => v.iter().map(ToString::to_string).collect(),
        Some(ContextValue::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    }
}

/// An unknown flag `arg` (or a stray argument), with clap's suggestion when it has one.
fn unknown(arg: &str, suggested: &[String], help: &str) -> String {
    match suggested.first() {
        Some(s) => format!("unknown flag `{arg}` (did you mean `{}`?); {help}", flag_of(s)),
        None if !arg.starts_with('-') => format!("unexpected argument `{arg}`; {help}"),
        None => format!("unknown flag `{arg}`; {help}"),
    }
}

/// `flag` given with a flag it excludes (`prior`), or given twice.
fn conflict(flag: Option<String>, prior: &[String], help: &str) -> String {
    match (flag, prior.first()) {
        (Some(a), Some(b)) if a == flag_of(b) => format!("{a} is given twice; give it once"),
        (Some(a), Some(b)) => format!("{a} and {} cannot be used together", flag_of(b)),
        (Some(a), None) => format!("{a} cannot be used with the other flags given; {help}"),
        _ => format!("conflicting flags; {help}"),
    }
}

/// `--ctx <CTX>` → `--ctx`; `<MODEL>` → `MODEL`.
fn flag_of(arg: &str) -> String {
    let head = arg.split([' ', '=']).next().unwrap_or(arg);
    if head.starts_with('-') {
        head.to_string()
    } else {
        arg.trim_start_matches('<').trim_end_matches('>').trim_end_matches("...").trim_end_matches('>').to_string()
    }
}

/// What the flag's value parser accepts, in words.
fn accepts(sub: &clap::Command, flag: &str) -> Option<String> {
    let arg = sub.get_arguments().find(|a| {
        a.get_long().is_some_and(|l| format!("--{l}") == flag) || a.get_short().is_some_and(|s| format!("-{s}") == flag)
    })?;
    let id = arg.get_value_parser().type_id();
    let whole = |max: u64| format!("a whole number from 0 to {max}");
    Some(if id == TypeId::of::<usize>() {
        whole(usize::MAX as u64)
    } else if id == TypeId::of::<u64>() {
        whole(u64::MAX)
    } else if id == TypeId::of::<u32>() {
        // --tokens: comma-separated.
        format!("token ids ({}), comma-separated", whole(u32::MAX as u64))
    } else if id == TypeId::of::<f32>() || id == TypeId::of::<f64>() {
        "a number such as 0.7".to_string()
    } else {
        return None;
    })
}

/// `a, b or c`.
fn one_of(values: &[String]) -> String {
    match values {
        [] => "another value".to_string(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}
