//! A TCP proxy the tests control. Two uses: a Service-like round robin in
//! front of several replicas (each new connection goes to the next backend
//! that accepts it), and a link between the product and the apiserver that
//! can be paused (`Mode::Hold`: no byte moves, new connections wait) or cut
//! (`Mode::Drop`: open connections are closed, new ones closed at once).
//!
//! It runs on a runtime and thread of its own: the tests block their own
//! threads (curl, kubectl, sleeps), and a proxy task stuck behind them would
//! look like a slow network to the product.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Forward,
    Hold,
    Drop,
}

struct Inner {
    backends: Mutex<Vec<SocketAddr>>,
    next: AtomicUsize,
    mode: watch::Sender<Mode>,
}

pub struct TcpProxy {
    pub port: u16,
    inner: Arc<Inner>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        let _ = self.inner.mode.send(Mode::Drop);
        if let Some(s) = self.shutdown.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl TcpProxy {
    pub fn start(backends: Vec<SocketAddr>) -> TcpProxy {
        let (mode, _) = watch::channel(Mode::Forward);
        let inner = Arc::new(Inner {
            backends: Mutex::new(backends),
            next: AtomicUsize::new(0),
            mode,
        });
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("proxy bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("proxy addr").port();
        let (shutdown, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let i = inner.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("proxy runtime");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("proxy listener");
                loop {
                    tokio::select! {
                        _ = &mut stopped => break,
                        a = listener.accept() => if let Ok((client, _)) = a {
                            tokio::spawn(serve(i.clone(), client));
                        },
                    }
                }
            });
            // Dropping the runtime ends every connection task.
        });
        TcpProxy {
            port,
            inner,
            shutdown: Some(shutdown),
            thread: Some(thread),
        }
    }

    pub fn set_mode(&self, m: Mode) {
        let _ = self.inner.mode.send(m);
    }
}

/// The next backend that accepts a connection, round robin.
async fn connect(i: &Inner) -> Option<TcpStream> {
    let backends = i.backends.lock().expect("backends").clone();
    for _ in 0..backends.len() {
        let n = i.next.fetch_add(1, Ordering::Relaxed) % backends.len();
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(backends[n])).await
        {
            return Some(s);
        }
    }
    None
}

/// Waits while held; false when the link is cut.
async fn forwarding(mode: &mut watch::Receiver<Mode>) -> bool {
    match mode.wait_for(|m| *m != Mode::Hold).await {
        Ok(m) => *m == Mode::Forward,
        Err(_) => false,
    }
}

async fn serve(i: Arc<Inner>, client: TcpStream) {
    let mut mode = i.mode.subscribe();
    if !forwarding(&mut mode).await {
        return;
    }
    let Some(backend) = connect(&i).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = backend.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (br, bw) = backend.into_split();
    // Either direction ending closes both (no half-close is needed here).
    tokio::select! {
        _ = pump(cr, bw, i.mode.subscribe()) => {}
        _ = pump(br, cw, i.mode.subscribe()) => {}
    }
}

async fn pump(
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<Mode>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !forwarding(&mut mode).await {
            return;
        }
        let n = tokio::select! {
            r = rd.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // Paused or cut while waiting for bytes: re-check (read is cancel-safe).
            _ = async { mode.wait_for(|m| *m != Mode::Forward).await.map(|_| ()) } => continue,
        };
        // Bytes read just before a pause are held until it ends.
        if !forwarding(&mut mode).await {
            return;
        }
        if wr.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
