//! Logging: to stderr (env_logger, `RUST_LOG`), and once a `--daemon` mount has detached,
//! to syslog (journald reads the same socket). The syslog client is the few lines of
//! RFC 3164 over the `/dev/log` datagram socket rather than a crate: it must switch over
//! mid-run, after the fork, and tests point it at their own socket
//! (`SQUEEZEFS_SYSLOG_SOCKET`) to see what a detached daemon logs.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::sync::{Mutex, OnceLock};

use log::{Level, Log, Metadata, Record};

struct Logger {
    stderr: env_logger::Logger,
    syslog: Mutex<Option<UnixDatagram>>,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Logs to stderr from now on, at `RUST_LOG`'s level (default `default`: `info` for the
/// command line, `warn` when mount(8) runs us as its helper, which like every mount helper
/// says nothing when all goes well).
pub fn init(default: &str) {
    let stderr = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or(default)).build();
    let level = stderr.filter();
    let logger = LOGGER.get_or_init(|| Logger {
        stderr,
        syslog: Mutex::new(None),
    });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(level);
    }
}

/// Sends every later log line to syslog (`daemon` facility, tagged `squeezefs[PID]`).
/// Fails when no syslog socket is there (no syslog daemon, no journald).
pub fn to_syslog() -> std::io::Result<()> {
    let path = std::env::var_os("SQUEEZEFS_SYSLOG_SOCKET").unwrap_or_else(|| "/dev/log".into());
    let sock = UnixDatagram::unbound()?;
    sock.connect(&path)?;
    if let Some(l) = LOGGER.get() {
        *l.syslog.lock().unwrap() = Some(sock);
    }
    Ok(())
}

fn severity(l: Level) -> u8 {
    match l {
        Level::Error => 3,
        Level::Warn => 4,
        Level::Info => 6,
        Level::Debug | Level::Trace => 7,
    }
}

impl Log for Logger {
    fn enabled(&self, m: &Metadata) -> bool {
        self.stderr.enabled(m)
    }

    fn log(&self, r: &Record) {
        if !self.enabled(r.metadata()) {
            return;
        }
        let sys = self.syslog.lock().unwrap();
        match sys.as_ref() {
            Some(sock) => {
                // <facility daemon (3) * 8 + severity>tag[pid]: message
                let mut msg = Vec::new();
                let _ = write!(
                    msg,
                    "<{}>squeezefs[{}]: {}",
                    3 * 8 + severity(r.level()),
                    std::process::id(),
                    r.args()
                );
                let _ = sock.send(&msg);
            }
            None => self.stderr.log(r),
        }
    }

    fn flush(&self) {}
}
