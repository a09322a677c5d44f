//! Signals: the catalogue of what can be observed, and the store where sources
//! put their samples and from which the evaluator reads them.

pub mod catalogue;
pub mod store;

pub use catalogue::{AddError, Builtin, Catalogue, SignalDef, SignalId, SignalType, Source, Unit};
pub use store::{Reading, SignalStore, SlotInfo, Trust, Unknown, Value};
