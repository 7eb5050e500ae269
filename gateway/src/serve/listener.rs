//! The listening socket: bound by Tether before anything else starts and handed to Pingora
//! as it is, so that a port in use is one line naming the address (Pingora 0.9 retries a
//! taken port for 30 s and then panics on a service thread, leaving the process alive and
//! serving nothing), port 0 works (the bound port is logged and written to `ready_file`),
//! and no other process can take the port between the check and Pingora's accept loop.
//!
//! Pingora takes an already-bound socket only through the file-descriptor table it fills
//! during a graceful upgrade: [`Prebound`] wraps the listening service and puts the socket
//! in that table, under the address the service listens on, just before the service
//! builds its listeners; Pingora then listens on that descriptor instead of binding.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::IntoRawFd;
use std::path::PathBuf;

use async_trait::async_trait;
use pingora::server::{ListenFds, RuntimeOpts, ShutdownWatch};
use pingora::services::Service;

/// A bound TCP socket waiting to be served.
pub struct Bound {
    /// The address bound (the real port when the configuration said 0).
    pub addr: SocketAddr,
    socket: TcpListener,
}

/// Binds `addr` now; the error names the address.
pub fn bind(addr: SocketAddr) -> Result<Bound, String> {
    let socket = TcpListener::bind(addr).map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let bound = socket
        .local_addr()
        .and_then(|a| socket.set_nonblocking(true).map(|()| a))
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    Ok(Bound {
        addr: bound,
        socket,
    })
}

/// A Pingora service listening on a socket Tether bound itself (see the module doc).
pub struct Prebound<S> {
    inner: S,
    /// The service's listener address, exactly as given to `ListenerConfig::tcp`.
    key: String,
    /// Until it is handed over (then Pingora owns its descriptor).
    socket: Option<TcpListener>,
    ready_file: Option<PathBuf>,
}

impl<S> Prebound<S> {
    /// `inner` must listen on `bound.addr.to_string()` and nothing else.
    pub fn new(inner: S, bound: Bound, ready_file: Option<PathBuf>) -> Self {
        Prebound {
            inner,
            key: bound.addr.to_string(),
            socket: Some(bound.socket),
            ready_file,
        }
    }
}

/// Writes `addr` to `path` whole (through a rename), so a reader never sees half of it.
fn write_ready_file(path: &PathBuf, addr: &str) -> std::io::Result<()> {
    let mut partial = path.clone().into_os_string();
    partial.push(".partial");
    std::fs::write(&partial, format!("{addr}\n"))?;
    std::fs::rename(&partial, path)
}

#[async_trait]
impl<S: Service> Service for Prebound<S> {
    async fn start_service(
        &mut self,
        fds: Option<ListenFds>,
        shutdown: ShutdownWatch,
        listeners_per_fd: usize,
    ) {
        // Without a table (never on Unix) the socket is closed and Pingora binds itself.
        if let (Some(fds), Some(socket)) = (fds.as_ref(), self.socket.take()) {
            fds.lock().add(self.key.clone(), socket.into_raw_fd());
        }
        // The socket already queues connections: from here a client is answered as soon
        // as the accept loop below runs.
        if let Some(path) = &self.ready_file {
            if let Err(e) = write_ready_file(path, &self.key) {
                tracing::error!(path = %path.display(), error = %e, "cannot write the ready file");
            }
        }
        self.inner
            .start_service(fds, shutdown, listeners_per_fd)
            .await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }

    fn threads(&self) -> Option<usize> {
        self.inner.threads()
    }

    fn runtime_opts_override(&self, global: &RuntimeOpts) -> Option<RuntimeOpts> {
        self.inner.runtime_opts_override(global)
    }

    fn listen_addresses(&self) -> Option<Vec<String>> {
        self.inner.listen_addresses()
    }
}
