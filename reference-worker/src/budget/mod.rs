//! The budgets of a request (SPEC §15.6, §15.8): the handle on the metered
//! VM's meter.

pub mod meter;

pub use meter::{BYTES_PER_UNIT, LimitTrip, Meter, Stop, StopSignal, stop_error};
