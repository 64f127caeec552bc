//! A TCP proxy on 127.0.0.1 between one manager and the API server, which a test can partition and heal.
//!
//! Two kinds of partition:
//! - [`Proxy::cut`]: every connection is closed and new ones are closed at once, the way a partition looks to a client
//!   once its connections have died and the route is gone; nothing sent during the cut ever reaches the API server.
//! - [`Proxy::hold`]: nothing moves in either direction, and what was sent meanwhile is delivered when the partition
//!   heals, even from a client that has given up and closed its connection: the way TCP retransmits through a
//!   partition that heals. A write its sender abandoned can thus reach the API server late.
//!
//! Healing forwards again.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Open,
    Cut,
    Held,
}

pub struct Proxy {
    pub port: u16,
    state: Arc<watch::Sender<State>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding 127.0.0.1:<new port> to 127.0.0.1:`upstream`.
    pub async fn start(upstream: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy listener");
        let port = listener.local_addr().expect("proxy address").port();
        let (state, _) = watch::channel(State::Open);
        let state = Arc::new(state);
        let upstream: SocketAddr = ([127, 0, 0, 1], upstream).into();
        let accept = tokio::spawn({
            let state = state.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(forward(client, upstream, state.subscribe()));
                }
            }
        });
        Proxy { port, state, accept }
    }

    /// Partitions: every connection is closed, and so is every new one.
    pub fn cut(&self) {
        self.state.send_replace(State::Cut);
    }

    /// Partitions: nothing moves, and everything sent meanwhile is delivered on `heal`.
    pub fn hold(&self) {
        self.state.send_replace(State::Held);
    }

    pub fn heal(&self) {
        self.state.send_replace(State::Open);
    }

    /// A copy of `kubeconfig` whose server is this proxy, written to `dir`.
    pub fn kubeconfig(&self, kubeconfig: &Path, api_port: u16, dir: &Path) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig");
        let from = format!("https://127.0.0.1:{api_port}");
        assert!(text.contains(&from), "the kubeconfig names {from}");
        let path = dir.join(format!("kubeconfig-proxy-{}", self.port));
        std::fs::create_dir_all(dir).expect("kubeconfig folder");
        std::fs::write(&path, text.replace(&from, &format!("https://127.0.0.1:{}", self.port)))
            .expect("writing the proxied kubeconfig");
        path
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Closes every forwarded connection.
        self.state.send_replace(State::Cut);
    }
}

async fn forward(client: TcpStream, upstream: SocketAddr, mut state: watch::Receiver<State>) {
    // A connection opened during a cut is closed at once; one opened during a hold waits for the heal.
    let now = *state.borrow_and_update();
    match now {
        State::Cut => return,
        State::Held => {
            if state.wait_for(|s| *s != State::Held).await.is_err() || *state.borrow() == State::Cut {
                return;
            }
        }
        State::Open => {}
    }
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let mut cut = state.clone();
    tokio::select! {
        _ = async {
            tokio::join!(pump(client_read, server_write, state.clone()), pump(server_read, client_write, state))
        } => {}
        // Both sockets are dropped: what the proxy has not forwarded yet is never delivered.
        _ = cut.wait_for(|s| *s == State::Cut) => {}
    }
}

/// Copies one direction, pausing (and buffering nothing itself) while the partition holds.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut state: watch::Receiver<State>,
) {
    let mut buffer = vec![0u8; 16 * 1024];
    loop {
        if state.wait_for(|s| *s == State::Open).await.is_err() {
            return;
        }
        let n = tokio::select! {
            read = from.read(&mut buffer) => match read {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            // Stop reading when a hold begins; the bytes stay in the kernel's buffers until the heal.
            _ = state.wait_for(|s| *s != State::Open) => continue,
        };
        // A hold that began while this was read delays the write until the heal.
        if state.wait_for(|s| *s == State::Open).await.is_err() || to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
    let _ = to.shutdown().await;
}
