//! The catalogue of signals: every value a policy may name, with its type,
//! the source that produces it, its unit and its meaning. This is the one place
//! where signals are defined; the checker, `signals` command, metrics and docs
//! all read it from here.

use std::fmt;

/// The type of a signal (and of a policy expression).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SignalType {
    /// true / false.
    Bool,
    /// A plain number (f64); the unit is part of the signal's name (`_ms`, `_bytes`).
    Number,
    /// A length of time, written `250ms`, `1s`, `2m`, `1h` in policies; stored in seconds.
    Duration,
}

impl fmt::Display for SignalType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SignalType::Bool => "bool",
            SignalType::Number => "number",
            SignalType::Duration => "duration",
        })
    }
}

/// Which part of the exporter samples a signal.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// This etcd member, over gRPC (`--etcd.endpoint`).
    Etcd,
    /// The etcd-backup-restore sidecar (`--backup.url`).
    Backup,
    /// The DNS owner check (`--owner.name`, `--owner.id`).
    Owner,
    /// This etcd member's own Prometheus metrics (`--etcd.metrics-url`).
    EtcdMetrics,
    /// A generic Prometheus scrape source from `--config`, by its name.
    Scrape(String),
}

impl Source {
    /// The label value used in metrics and JSON (`etcd`, `backup`, `owner`, `scrape:<name>`).
    pub fn label(&self) -> String {
        match self {
            Source::Etcd => "etcd".to_string(),
            Source::Backup => "backup".to_string(),
            Source::Owner => "owner".to_string(),
            Source::EtcdMetrics => "etcd_metrics".to_string(),
            Source::Scrape(name) => format!("scrape:{name}"),
        }
    }

    /// What an operator sets to turn this source on, for "not configured" diagnostics.
    pub fn enabled_by(&self) -> String {
        match self {
            Source::Etcd => "--etcd.endpoint".to_string(),
            Source::Backup => "--backup.url".to_string(),
            Source::Owner => "--owner.name and --owner.id".to_string(),
            Source::EtcdMetrics => "--etcd.metrics-url".to_string(),
            Source::Scrape(name) => format!("the scrape source `{name}` in --config"),
        }
    }
}

/// Index of a signal in the catalogue (and in every per-signal array).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SignalId(pub u16);

impl SignalId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The unit of a signal's value, as shown to users.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Unit {
    /// A count, a ratio, an index or a bool: no unit.
    None,
    Milliseconds,
    Seconds,
    Bytes,
}

impl Unit {
    /// As the catalogue spells it (`ms`, `s`, `bytes`; empty for none).
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::None => "",
            Unit::Milliseconds => "ms",
            Unit::Seconds => "s",
            Unit::Bytes => "bytes",
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// JSON (`/signals`) shows the unit as the catalogue spells it.
impl serde::Serialize for Unit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One signal's definition.
#[derive(Clone, Debug, PartialEq)]
pub struct SignalDef {
    pub name: String,
    pub ty: SignalType,
    pub source: Source,
    pub unit: Unit,
    pub help: String,
}

/// The full set of signals known to one exporter configuration, and which of
/// their sources are configured.
#[derive(Clone, Debug)]
pub struct Catalogue {
    defs: Vec<SignalDef>,
    enabled: Vec<bool>,
}

/// Defines [`Builtin`] and its table from one list, so that the variants,
/// their order (= their ids) and their definitions cannot drift apart.
macro_rules! builtins {
    ($($variant:ident = $name:literal, $ty:ident, $source:ident, $unit:ident, $help:literal;)*) => {
        /// The built-in signals, in catalogue order. Every catalogue starts
        /// with them ([`Catalogue::builtin`] is the only constructor and
        /// [`Catalogue::add`] appends), so [`Builtin::id`] is a signal's id
        /// in every catalogue, known at compile time: the sources name their
        /// signals by variant, never by a string looked up at run time.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Builtin {
            $($variant,)*
        }

        impl Builtin {
            /// Every built-in signal, in catalogue order.
            pub const ALL: &'static [Builtin] = &[$(Builtin::$variant,)*];

            fn spec(self) -> (&'static str, SignalType, BuiltinSource, Unit, &'static str) {
                match self {
                    $(Builtin::$variant => (
                        $name,
                        SignalType::$ty,
                        BuiltinSource::$source,
                        Unit::$unit,
                        $help,
                    ),)*
                }
            }
        }
    };
}

builtins! {
    EtcdUp = "etcd_up", Bool, Etcd, None,
        "The member answered Maintenance.Status in the last round.";
    Leader = "leader", Bool, Etcd, None,
        "The member knows a leader (Status.leader != 0).";
    IsLeader = "is_leader", Bool, Etcd, None,
        "This member is the leader (Status.leader == member id).";
    Learner = "learner", Bool, Etcd, None,
        "This member is a raft learner (it rejects linearizable reads).";
    QgetMs = "qget_ms", Number, Etcd, Milliseconds,
        "Latency of a linearizable (quorum) single-key read, in milliseconds; unknown when it fails or times out.";
    SgetMs = "sget_ms", Number, Etcd, Milliseconds,
        "Latency of a serializable (local) single-key read, in milliseconds.";
    Revision = "revision", Number, Etcd, None,
        "The store revision reported by this member.";
    RaftTerm = "raft_term", Number, Etcd, None,
        "The raft term seen by this member.";
    RaftIndex = "raft_index", Number, Etcd, None,
        "The raft index of this member.";
    AppliedIndex = "applied_index", Number, Etcd, None,
        "The raft applied index of this member.";
    ApplyLag = "apply_lag", Number, Etcd, None,
        "raft_index - applied_index: entries committed but not yet applied.";
    DbSizeBytes = "db_size_bytes", Number, Etcd, Bytes,
        "Size of the backend database file.";
    DbInUseBytes = "db_in_use_bytes", Number, Etcd, Bytes,
        "Bytes of the backend database in use (the rest is free pages).";
    AlarmNospace = "alarm_nospace", Bool, Etcd, None,
        "A NOSPACE alarm is raised in the cluster (writes are refused).";
    AlarmCorrupt = "alarm_corrupt", Bool, Etcd, None,
        "A CORRUPT alarm is raised in the cluster.";
    LeaderChanges = "leader_changes", Number, Etcd, None,
        "Leader changes seen by this exporter since it started.";
    Leaderless = "leaderless", Duration, Etcd, Seconds,
        "How long this member's Status has shown no leader (an election in progress), 0 while it has one.";
    BackupUp = "backup_up", Bool, Backup, None,
        "The backup sidecar's /metrics (or /snapshot/latest) answered in the last round.";
    BackupHealthy = "backup_healthy", Bool, Backup, None,
        "The backup sidecar's /healthz answered 200.";
    SnapshotRevision = "snapshot_revision", Number, Backup, None,
        "Last revision in the newest snapshot (full or incremental).";
    FullSnapshotRevision = "full_snapshot_revision", Number, Backup, None,
        "Last revision in the newest full snapshot.";
    SnapshotAge = "snapshot_age", Duration, Backup, Seconds,
        "Time since the newest snapshot (full or incremental) was taken.";
    FullSnapshotAge = "full_snapshot_age", Duration, Backup, Seconds,
        "Time since the newest full snapshot was taken.";
    RevLag = "rev_lag", Number, Backup, None,
        "revision - snapshot_revision: revisions not yet in any backup; unknown when either side is unknown.";
    OwnerOk = "owner_ok", Bool, Owner, None,
        "The DNS owner check: the first TXT string of --owner.name equals --owner.id; unknown on lookup errors.";
    OwnerLookupMs = "owner_lookup_ms", Number, Owner, Milliseconds,
        "Latency of the last owner TXT lookup, in milliseconds.";
    DefragInflight = "defrag_inflight", Bool, EtcdMetrics, None,
        "The member is defragmenting its backend (etcd_disk_defrag_inflight == 1; unknown where etcd does not export it).";
    DbQuotaRatio = "db_quota_ratio", Number, EtcdMetrics, None,
        "etcd_mvcc_db_total_size_in_bytes / etcd_server_quota_backend_bytes: how full the backend is (NOSPACE at 1).";
    ActivePeers = "active_peers", Number, EtcdMetrics, None,
        "Peer connections this member has open (etcd_network_active_peers summed; 0 alone or cut off).";
}

impl Builtin {
    /// This signal's id in every catalogue.
    pub const fn id(self) -> SignalId {
        SignalId(self as u16)
    }

    pub fn name(self) -> &'static str {
        self.spec().0
    }

    pub fn source(self) -> Source {
        self.spec().2.source()
    }

    /// The built-in signals `source` samples, in catalogue order.
    pub fn of(source: Source) -> impl Iterator<Item = Builtin> {
        Builtin::ALL
            .iter()
            .copied()
            .filter(move |b| b.source() == source)
    }
}

#[derive(Clone, Copy)]
enum BuiltinSource {
    Etcd,
    Backup,
    Owner,
    EtcdMetrics,
}

impl BuiltinSource {
    fn source(self) -> Source {
        match self {
            BuiltinSource::Etcd => Source::Etcd,
            BuiltinSource::Backup => Source::Backup,
            BuiltinSource::Owner => Source::Owner,
            BuiltinSource::EtcdMetrics => Source::EtcdMetrics,
        }
    }
}

/// Why [`Catalogue::add`] refused a signal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    #[error("signal `{0}` is already defined")]
    Taken(String),
    #[error("too many signals")]
    Full,
}

impl Catalogue {
    /// Every built-in signal, with every source enabled. This is what `check`
    /// and `signals` use when no configuration is given.
    pub fn builtin() -> Self {
        let defs: Vec<SignalDef> = Builtin::ALL
            .iter()
            .map(|b| {
                let (name, ty, source, unit, help) = b.spec();
                SignalDef {
                    name: name.to_string(),
                    ty,
                    source: source.source(),
                    unit,
                    help: help.to_string(),
                }
            })
            .collect();
        let enabled = vec![true; defs.len()];
        Catalogue { defs, enabled }
    }

    /// Add a signal (e.g. from a scrape source). Errors if the name is taken.
    pub fn add(&mut self, def: SignalDef) -> Result<SignalId, AddError> {
        if self.lookup(&def.name).is_some() {
            return Err(AddError::Taken(def.name));
        }
        if self.defs.len() >= u16::MAX as usize {
            return Err(AddError::Full);
        }
        self.defs.push(def);
        self.enabled.push(true);
        Ok(SignalId((self.defs.len() - 1) as u16))
    }

    /// Mark which sources are configured; signals of the others stay in the
    /// catalogue (so the checker can say which flag enables them) but are disabled.
    pub fn set_source_enabled(&mut self, source: &Source, on: bool) {
        for (def, en) in self.defs.iter().zip(self.enabled.iter_mut()) {
            if &def.source == source {
                *en = on;
            }
        }
    }

    pub fn is_enabled(&self, id: SignalId) -> bool {
        self.enabled[id.index()]
    }

    pub fn lookup(&self, name: &str) -> Option<SignalId> {
        self.defs
            .iter()
            .position(|d| d.name == name)
            .map(|i| SignalId(i as u16))
    }

    /// For tests: the id of `name`, which must be in the catalogue (else a
    /// panic). The exporter names built-in signals by [`Builtin`] and looks
    /// names from outside up with [`lookup`](Self::lookup).
    pub fn id(&self, name: &str) -> SignalId {
        self.lookup(name)
            .unwrap_or_else(|| panic!("signal `{name}` is not in the catalogue"))
    }

    pub fn get(&self, id: SignalId) -> &SignalDef {
        &self.defs[id.index()]
    }

    pub fn len(&self) -> usize {
        self.defs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (SignalId, &SignalDef)> {
        self.defs
            .iter()
            .enumerate()
            .map(|(i, d)| (SignalId(i as u16), d))
    }

    /// All names, for "did you mean" suggestions.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.defs.iter().map(|d| d.name.as_str())
    }

    /// The table printed by `etcd-readiness-exporter signals`.
    pub fn render_table(&self) -> String {
        let ty_of = |d: &SignalDef| {
            if d.unit == Unit::None || d.ty == SignalType::Duration {
                d.ty.to_string()
            } else {
                format!("{} ({})", d.ty, d.unit)
            }
        };
        // Every column as wide as its widest cell (a type with a unit,
        // `number (bytes)`, is wider than its heading).
        let w = self
            .defs
            .iter()
            .map(|d| d.name.len())
            .max()
            .unwrap_or(4)
            .max(6);
        let tw = self
            .defs
            .iter()
            .map(|d| ty_of(d).chars().count())
            .max()
            .unwrap_or(4)
            .max(4);
        let sw = self
            .defs
            .iter()
            .map(|d| d.source.label().len())
            .max()
            .unwrap_or(6)
            .max(6);
        let mut out = format!(
            "{:<w$}  {:<tw$}  {:<sw$}  MEANING\n",
            "SIGNAL", "TYPE", "SOURCE"
        );
        for d in &self.defs {
            out.push_str(&format!(
                "{:<w$}  {:<tw$}  {:<sw$}  {}\n",
                d.name,
                ty_of(d),
                d.source.label(),
                d.help
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signals_table_aligns_every_column() {
        let table = Catalogue::builtin().render_table();
        let header = table.lines().next().unwrap();
        let meaning = header.find("MEANING").unwrap();
        let source = header.find("SOURCE").unwrap();
        for line in table.lines().skip(1) {
            let chars: Vec<char> = line.chars().collect();
            // The column before MEANING and before SOURCE is a blank on every row.
            assert_eq!(chars[meaning - 1], ' ', "{line}");
            assert_ne!(chars[meaning], ' ', "MEANING misaligned: {line}");
            assert_ne!(chars[source], ' ', "SOURCE misaligned: {line}");
        }
    }

    #[test]
    fn builtin_names_are_unique_and_lowercase_identifiers() {
        let c = Catalogue::builtin();
        let mut names: Vec<&str> = c.names().collect();
        for n in &names {
            assert!(
                n.chars()
                    .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_'),
                "{n}"
            );
        }
        names.sort();
        names.dedup();
        assert_eq!(names.len(), c.len());
    }

    #[test]
    fn card_policy_signals_exist() {
        let c = Catalogue::builtin();
        for n in ["leader", "qget_ms", "owner_ok", "rev_lag"] {
            assert!(c.lookup(n).is_some(), "{n}");
        }
    }

    #[test]
    fn a_builtin_id_is_its_position_in_every_catalogue() {
        let mut c = Catalogue::builtin();
        assert_eq!(Builtin::ALL.len(), c.len());
        for (i, b) in Builtin::ALL.iter().enumerate() {
            assert_eq!(b.id(), SignalId(i as u16), "{b:?}");
            assert_eq!(c.lookup(b.name()), Some(b.id()), "{b:?}");
            assert_eq!(c.get(b.id()).source, b.source(), "{b:?}");
        }
        let added = c
            .add(SignalDef {
                name: "fsync_count".to_string(),
                ty: SignalType::Number,
                source: Source::Scrape("etcd".to_string()),
                unit: Unit::None,
                help: String::new(),
            })
            .unwrap();
        assert_eq!(
            added.index(),
            Builtin::ALL.len(),
            "added after the built-ins"
        );
        assert_eq!(c.get(Builtin::QgetMs.id()).unit, Unit::Milliseconds);
        let of_owner: Vec<&str> = Builtin::of(Source::Owner).map(Builtin::name).collect();
        assert_eq!(of_owner, ["owner_ok", "owner_lookup_ms"]);
    }

    #[test]
    fn disabling_a_source_keeps_the_definitions() {
        let mut c = Catalogue::builtin();
        c.set_source_enabled(&Source::Owner, false);
        let id = c.id("owner_ok");
        assert!(!c.is_enabled(id));
        assert!(c.is_enabled(c.id("leader")));
    }
}
