//! Threads that share one queue of jobs: the in-file read-ahead's (`readahead.rs`) and the
//! read-ahead across files (`siblings.rs`). Each takes a job, holding the queue's lock only
//! to take it, and runs it; a panic (a decoder's) ends that job, not the thread. They end
//! when every sender of the queue is gone, or when a job says so.

use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

/// Starts `n` threads named `NAME-I` taking jobs from `rx` and handing each to `run`; a
/// thread ends once `rx` has no sender left, or after a job for which `run` returns false.
pub fn spawn<T: Send + 'static>(
    name: &str,
    n: usize,
    rx: Receiver<T>,
    run: impl Fn(T) -> bool + Send + Sync + 'static,
) -> std::io::Result<()> {
    let rx = Arc::new(Mutex::new(rx));
    let run = Arc::new(run);
    for i in 0..n {
        let (rx, run) = (rx.clone(), run.clone());
        std::thread::Builder::new()
            .name(format!("{name}-{i}"))
            .spawn(move || loop {
                let Ok(job) = rx.lock().unwrap_or_else(|e| e.into_inner()).recv() else {
                    return;
                };
                let go_on = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(job)));
                if matches!(go_on, Ok(false)) {
                    return;
                }
            })?;
    }
    Ok(())
}
