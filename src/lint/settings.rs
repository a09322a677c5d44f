//! A container's settings as its program reads them from the manifest: its
//! flags (in `command` and `args`, also inside a shell command line;
//! `--name=value` or `--name value`) before
//! its environment (`env`), as both etcd and the exporter take them. What
//! the manifest cannot show (a `valueFrom`, an `envFrom`) is
//! [`Setting::Unseen`], so a rule never reports a setting it could not see.

use serde_json::Value;

use super::pod_security::{list, text};

/// One setting of a container.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Setting<'a> {
    /// Neither the flag nor the variable is there.
    Absent,
    /// Set from a Secret, a ConfigMap or a field (`valueFrom`), or possibly
    /// by an `envFrom`: there, but its value cannot be read here.
    Unseen,
    /// Its value as written.
    Value(&'a str),
}

impl<'a> Setting<'a> {
    /// Whether it is there at all.
    pub(super) fn is_set(self) -> bool {
        self != Setting::Absent
    }

    /// The value, when it can be read.
    pub(super) fn value(self) -> Option<&'a str> {
        match self {
            Setting::Value(v) => Some(v),
            _ => None,
        }
    }
}

/// A container's flags and environment.
pub(super) struct Settings<'a> {
    args: Vec<&'a str>,
    env: &'a [Value],
    env_from: bool,
}

impl<'a> Settings<'a> {
    pub(super) fn of(c: &'a Value) -> Self {
        Settings {
            // Word by word: a shell-wrapped command (`sh -c "exec etcd
            // --listen-client-urls=…"`) holds its flags in one argument.
            args: list(&c["command"])
                .iter()
                .chain(list(&c["args"]))
                .flat_map(|a| text(a).split_whitespace())
                .collect(),
            env: list(&c["env"]),
            env_from: !list(&c["envFrom"]).is_empty(),
        }
    }

    /// `--flag=value`, `--flag value` or `-flag=value` (Go's flag package
    /// takes one or two dashes).
    pub(super) fn flag(&self, name: &str) -> Option<&'a str> {
        self.args.iter().enumerate().find_map(|(i, a)| {
            let bare = a.strip_prefix("--").or(a.strip_prefix('-'))?;
            match bare.strip_prefix(name)? {
                "" => self
                    .args
                    .get(i + 1)
                    .copied()
                    .filter(|next| !next.starts_with('-')),
                rest => rest.strip_prefix('='),
            }
        })
    }

    /// Whether a flag is there, with or without a value.
    pub(super) fn has_flag(&self, name: &str) -> bool {
        self.args.iter().any(|a| {
            let bare = a.strip_prefix("--").or(a.strip_prefix('-'));
            bare.and_then(|b| b.strip_prefix(name))
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('='))
        })
    }

    /// An environment variable.
    pub(super) fn env(&self, name: &str) -> Setting<'a> {
        match self.env.iter().find(|e| text(&e["name"]) == name) {
            Some(e) if !e["valueFrom"].is_null() => Setting::Unseen,
            Some(e) => Setting::Value(text(&e["value"])),
            None if self.env_from => Setting::Unseen,
            None => Setting::Absent,
        }
    }

    /// The flag `--flag`, else the variable `var`.
    pub(super) fn get(&self, flag: &str, var: &str) -> Setting<'a> {
        match self.flag(flag) {
            Some(v) => Setting::Value(v),
            None => self.env(var),
        }
    }

    /// A boolean flag (`--flag` alone is true) or its variable.
    pub(super) fn enabled(&self, flag: &str, var: &str) -> bool {
        match self.flag(flag) {
            Some(v) => v == "true",
            None if self.has_flag(flag) => true,
            None => self.env(var).value() == Some("true"),
        }
    }

    /// Whether the program is started with `flag` or `var` (e.g. a config
    /// file, which makes etcd ignore its other flags).
    pub(super) fn mentions(&self, flag: &str, var: &str) -> bool {
        self.has_flag(flag) || self.declares(var)
    }

    /// Whether `env` names the variable (with a value or a `valueFrom`);
    /// an `envFrom` that may hold it does not count.
    pub(super) fn declares(&self, var: &str) -> bool {
        self.env.iter().any(|e| text(&e["name"]) == var)
    }
}
