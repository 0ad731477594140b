//! A TCP proxy of the test's own in front of a server, to move clients to another server (a
//! failover they cannot see coming), cut every connection at once, or freeze them: a silent
//! network failure (a partition, a lost NAT entry) that sends no RST and no FIN.

use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

pub struct Proxy {
    pub port: u16,
    target: Arc<AtomicU16>,
    generation: watch::Sender<u64>,
    freezes: watch::Sender<u64>,
    /// While frozen, new connections are accepted and frozen too.
    freezing: Arc<AtomicBool>,
    /// Sockets frozen open: nothing is read from or written to them until the proxy drops.
    frozen: Arc<Mutex<Vec<TcpStream>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let (generation, _) = watch::channel(0u64);
        let (freezes, _) = watch::channel(0u64);
        let frozen = Arc::new(Mutex::new(Vec::new()));
        let freezing = Arc::new(AtomicBool::new(false));
        let (to, cuts, freezes_now, held, still) =
            (target.clone(), generation.clone(), freezes.clone(), frozen.clone(), freezing.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut client, _)) = listener.accept().await else { continue };
                if still.load(Ordering::SeqCst) {
                    held.lock().unwrap().push(client);
                    continue;
                }
                let port = to.load(Ordering::SeqCst);
                let (mut cut, mut freeze, held) = (cuts.subscribe(), freezes_now.subscribe(), held.clone());
                tokio::spawn(async move {
                    let Ok(mut server) = TcpStream::connect(("127.0.0.1", port)).await else { return };
                    let _ = client.set_nodelay(true);
                    let _ = server.set_nodelay(true);
                    let frozen = tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => false,
                        _ = cut.changed() => false,
                        _ = freeze.changed() => true,
                    };
                    if frozen {
                        held.lock().unwrap().extend([client, server]);
                    }
                });
            }
        });
        Self { port, target, generation, freezes, freezing, frozen, task }
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

    /// A silent network failure: every open connection stops carrying bytes either way and
    /// stays open (what a partition or a lost NAT entry looks like to both ends), and so does
    /// every connection made until [`Proxy::heal`].
    pub fn freeze(&self) {
        self.freezing.store(true, Ordering::SeqCst);
        self.freezes.send_modify(|g| *g += 1);
    }

    /// New connections pass again; those frozen stay frozen (their NAT entries are gone): only a
    /// client that gives up on its connection and opens a new one gets through.
    pub fn heal(&self) {
        self.freezing.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
