//! A TCP proxy in front of a private `redis-server` (its unix socket) that fails on
//! demand, as a network does:
//! - [`FlakyProxy::drop_next_reply`]: the next reply the server sends is swallowed and
//!   that connection closed (a cut after the server did the work), so the client sees its
//!   connection drop after the script ran; [`FlakyProxy::drop_next_reply_then_cut`] also
//!   keeps the proxy cut from then on, so a test can look at what the script did before
//!   any retry gets through;
//! - [`FlakyProxy::cut`] / [`FlakyProxy::restore`]: every connection is closed and new
//!   ones are refused until restored (Redis unreachable while it keeps its data).
//!
//! Listens on 127.0.0.1 only. Counts what it did, so tests wait on events, not on time.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::watch;

struct State {
    drop_next: AtomicBool,
    cut_on_drop: AtomicBool,
    cut: AtomicBool,
    /// Bumped by a cut: every open connection closes.
    cuts: watch::Sender<u64>,
    dropped: AtomicU64,
    script_replies: AtomicU64,
}

impl State {
    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.cuts.send_modify(|n| *n += 1);
    }
}

pub struct FlakyProxy {
    port: u16,
    state: Arc<State>,
    accept: tokio::task::JoinHandle<()>,
}

impl FlakyProxy {
    /// A proxy to the server listening on `socket`.
    pub async fn start(socket: PathBuf) -> FlakyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(State {
            drop_next: AtomicBool::new(false),
            cut_on_drop: AtomicBool::new(false),
            cut: AtomicBool::new(false),
            cuts: watch::channel(0u64).0,
            dropped: AtomicU64::new(0),
            script_replies: AtomicU64::new(0),
        });
        let accept = {
            let state = state.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((client, _)) = listener.accept().await else {
                        return;
                    };
                    if state.cut.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let Ok(server) = UnixStream::connect(&socket).await else {
                        continue;
                    };
                    let (cut, state) = (state.cuts.subscribe(), state.clone());
                    tokio::spawn(pipe(client, server, state, cut));
                }
            })
        };
        FlakyProxy {
            port,
            state,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Swallows the next reply from the server and closes its connection.
    pub fn drop_next_reply(&self) {
        self.state.drop_next.store(true, Ordering::SeqCst);
    }

    /// As [`Self::drop_next_reply`], and the proxy stays cut from then on until
    /// [`Self::restore`].
    pub fn drop_next_reply_then_cut(&self) {
        self.state.cut_on_drop.store(true, Ordering::SeqCst);
        self.state.drop_next.store(true, Ordering::SeqCst);
    }

    /// Replies swallowed so far.
    pub fn dropped(&self) -> u64 {
        self.state.dropped.load(Ordering::SeqCst)
    }

    /// Replies to script calls (`EVAL`, `EVALSHA`) passed on to the client so far.
    pub fn script_replies(&self) -> u64 {
        self.state.script_replies.load(Ordering::SeqCst)
    }

    /// Closes every connection and refuses new ones until [`Self::restore`].
    pub fn cut(&self) {
        self.state.cut();
    }

    pub fn restore(&self) {
        self.state.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for FlakyProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.cut();
    }
}

/// One client connection, both ways, until either side closes, the proxy cuts it, or it
/// swallows a reply. Returning drops both sockets.
async fn pipe(
    client: TcpStream,
    server: UnixStream,
    st: Arc<State>,
    mut cut: watch::Receiver<u64>,
) {
    let _ = client.set_nodelay(true);
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    // A script call was sent and its reply has not come back yet.
    let mut script_pending = false;
    loop {
        tokio::select! {
            n = cr.read(&mut up) => {
                let n = match n { Ok(0) | Err(_) => return, Ok(n) => n };
                script_pending |= up[..n].windows(4).any(|w| w == b"EVAL");
                if sw.write_all(&up[..n]).await.is_err() {
                    return;
                }
            }
            n = sr.read(&mut down) => {
                let n = match n { Ok(0) | Err(_) => return, Ok(n) => n };
                if st.drop_next.swap(false, Ordering::SeqCst) {
                    if st.cut_on_drop.swap(false, Ordering::SeqCst) {
                        st.cut();
                    }
                    st.dropped.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                if cw.write_all(&down[..n]).await.is_err() {
                    return;
                }
                if std::mem::take(&mut script_pending) {
                    st.script_replies.fetch_add(1, Ordering::SeqCst);
                }
            }
            _ = cut.changed() => return,
        }
    }
}
