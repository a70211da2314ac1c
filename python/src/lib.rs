//! `sluice._sluice`: the Rust half of the `sluice` Python package (PyO3). The Python
//! half (`python/sluice/`) gives it its shape: `Sender` and `Receiver` turn arrays and
//! their meta into the messages [`frame`] lays out, and `copy` takes keyword options.
//!
//! * [`sender`] and [`receiver`]: a stream of messages over the engine's stream API;
//! * [`pinned`]: payloads sent without a copy, their buffers held until acknowledged;
//! * [`view`]: a received payload lent in its slot, for arrays without a copy;
//! * [`copy`]: files and trees through `sluice_engine::client::copy`, with progress;
//! * [`options`]: plans, secrets and TLS from the caller's options;
//! * [`errors`]: the exceptions, by the CLI's error classes.

pub mod copy;
pub mod errors;
pub mod frame;
pub mod options;
pub mod pinned;
pub mod receiver;
pub mod sender;
pub mod view;

use pyo3::prelude::*;

/// The extension module.
#[pymodule]
fn _sluice(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<sender::RawSender>()?;
    m.add_class::<receiver::RawReceiver>()?;
    m.add_class::<view::SlotView>()?;
    m.add_function(wrap_pyfunction!(copy::copy, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
