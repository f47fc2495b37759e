//! Shared by the fuzz targets: the handlers over a fixed snapshot.
pub mod harness;

use std::sync::OnceLock;

/// One runtime for every input: building a runtime per input would be
/// most of the time spent.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a Tokio runtime")
    })
}
