//! A TCP proxy of the test's own in front of a server, to move clients to another server (a
//! failover they cannot see coming) or cut every connection at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicU16, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let (generation, _) = watch::channel(0u64);
        let (to, cuts) = (target.clone(), generation.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                let port = to.load(Ordering::SeqCst);
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Self { port, target, generation, task }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// New connections go to `target`; existing ones are cut (clients reconnect through it).
    pub fn switch(&self, target: u16) {
        self.target.store(target, Ordering::SeqCst);
        self.cut();
    }

    pub fn cut(&self) {
        self.generation.send_modify(|g| *g += 1);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
