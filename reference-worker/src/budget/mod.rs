//! The budgets of a request (SPEC §15.6, §15.8): the handle on the metered
//! VM's meter, the limits of a budget window, and how a stop becomes an
//! error.

pub mod meter;
pub mod stop;
pub mod window;

pub use meter::{BYTES_PER_UNIT, Meter};
pub use stop::{LimitTrip, Stop, StopSignal, stop_error};
pub use window::Limits;
