//! A TCP proxy the chaos run owns, to cut every connection through it at will (toxiproxy is not
//! installable here): handoff talks to Postgres and Redis only through these.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tokio::io::copy_bidirectional;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    /// Bumped to cut: every connection of an older generation is closed.
    generation: Arc<AtomicU64>,
    cut: watch::Sender<u64>,
    /// Connections open through the proxy now.
    open: Arc<AtomicUsize>,
}

impl Proxy {
    pub async fn start(target_port: u16) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let generation = Arc::new(AtomicU64::new(0));
        let (cut, watcher) = watch::channel(0u64);
        let open = Arc::new(AtomicUsize::new(0));
        let counted = open.clone();
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let mut watcher = watcher.clone();
                let born = *watcher.borrow();
                let open = counted.clone();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", target_port)).await else { return };
                    open.fetch_add(1, Ordering::SeqCst);
                    // Without NODELAY, small request/response exchanges stall on delayed ACKs.
                    let _ = (client.set_nodelay(true), server.set_nodelay(true));
                    tokio::select! {
                        _ = copy_bidirectional(&mut client, &mut server) => {}
                        _ = watcher.wait_for(|g| *g != born) => {}
                    }
                    open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Ok(Self { port, generation, cut, open })
    }

    /// Closes every connection open through the proxy now (new ones are accepted again); says
    /// how many there were.
    pub fn cut(&self) -> usize {
        let open = self.open.load(Ordering::SeqCst);
        let next = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let _ = self.cut.send(next);
        open
    }
}
